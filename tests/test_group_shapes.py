"""Shapes of Megatron group orders continued from shorter runs (``programs.group_points``,
``continued_shape``): a search asks for them at M up to tens of thousands of micro-batches
(DeepSeek-V3 on one GB200 NVL72 rack: pp9, M 15360, group 10), and each must be what the
order built whole at M says: the same counts in the same order, the same peaks."""

from __future__ import annotations

import random

import pytest

from pipesim import build
from pipesim.memory import MemoryModel
from pipesim.planner.programs import ProgramCache, activation_peaks, group_points, memory_peaks, shape
from pipesim.schedules import REGISTRY
from pipesim.schedules.classic import smallest_group


def _cases(seed: int, n: int) -> list[tuple]:
    """Group orders past their points, as the search builds them (``megatron_group``: M
    not a multiple of pp, its smallest group) and with a larger group, last groups full or not."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        name = rng.choice(["interleaved-1f1b", "interleaved-1f1b-overlap"])
        pp, v = rng.randint(1, 9), rng.randint(2, 4)
        M = rng.randint(3 * pp, 60 * pp)
        g = smallest_group(pp, M) if M % pp and rng.random() < 0.5 else rng.randint(pp, 3 * pp)
        options = {"chunks": v, "group_size": g}
        if name.endswith("overlap") and rng.random() < 0.3:
            options["delay_wgrad"] = True
        if g is None or REGISTRY[name].check(pp, M, **options) is not None or group_points(name, pp, M, options) is None:
            continue
        out.append((name, pp, M, options))
    return out


def _models(rng: random.Random, stages: int) -> list[MemoryModel]:
    out = []
    for trial in range(4):
        layers = tuple(tuple(rng.choice([1e4, 3e4, 7e4]) for _ in range(rng.randint(1, 3))) for _ in range(stages))
        out.append(
            MemoryModel(
                params=1.0,
                activation=tuple(sum(x) + rng.choice([0.0, 5e4]) for x in layers),
                w_share=rng.random() * (1 if trial % 2 else 3),
                layer_bytes=layers,
                grads_in_backward=bool(trial % 2),
            )
        )
    return out


@pytest.mark.parametrize("case", _cases(19, 40), ids=lambda c: f"{c[0]}-pp{c[1]}-M{c[2]}-{c[3]}")
def test_a_continued_shape_is_the_whole_orders(case):
    """Counts, key order (the order the bounds sum in) and every rank's peak under memory
    models of unequal stages, W shares below and above 1 and pairs run layer by layer:
    exactly, float for float, what the shape of the order built whole at M gives."""
    name, pp, M, options = case
    whole = shape(build(name, pp, M, **options))
    got = ProgramCache().shape(name, pp, M, options)
    assert len(got.u) < len(whole.u)  # continued, not built whole
    assert got.counts == whole.counts
    assert [list(r) for r in got.counts] == [list(r) for r in whole.counts]
    assert got.pairs == whole.pairs
    for mm in _models(random.Random(str(case)), whole.cols.max() + 1):
        assert activation_peaks(got, mm) == activation_peaks(whole, mm)
        assert memory_peaks(got, mm) == memory_peaks(whole, mm)


def test_continued_shapes_are_kept_by_their_own_micro_batch_count():
    """Orders congruent modulo the group share their three shorter runs in the cache; each
    M's shape read back after the others filled it is a fresh cache's."""
    name, pp, options = "interleaved-1f1b-overlap", 3, {"chunks": 2, "group_size": 4}
    Ms = [40, 44, 60, 43, 47]  # 40, 44, 60 share their points; 43, 47 others (a last group of 3)
    cache = ProgramCache()
    kept = [cache.shape(name, pp, M, options) for M in Ms]
    assert len({tuple(sorted(s.counts[0].values())) for s in kept}) == len(Ms)
    for M, s in zip(Ms, kept):
        fresh = ProgramCache().shape(name, pp, M, options)
        assert cache.shape(name, pp, M, options).counts == fresh.counts == s.counts


def test_short_orders_and_orders_without_groups_are_built_whole():
    """No points where M is within two groups of the first, or the order has no group."""
    assert group_points("interleaved-1f1b", 4, 16, {"chunks": 2}) is None
    assert group_points("interleaved-1f1b", 4, 4 * 4 + 2 * 5 + 1, {"chunks": 2, "group_size": 5}) is None
    assert group_points("1f1b", 4, 400, {"group_size": 5}) is None


def test_a_shape_that_does_not_continue_is_tried_once(monkeypatch):
    """Where the three shorter runs do not show the period, the order is built whole, and
    asked again the cache answers without trying the runs again: the whole order's shape."""
    from pipesim.planner import programs

    name, pp, M, options = "interleaved-1f1b-overlap", 3, 40, {"chunks": 2, "group_size": 4}
    tried = []
    monkeypatch.setattr(programs, "continued_shape", lambda shapes, n: tried.append(n))  # never continues
    cache = ProgramCache()
    first = cache.shape(name, pp, M, options)
    again = cache.shape(name, pp, M, options)
    assert len(tried) == 1
    whole = shape(build(name, pp, M, **options))
    assert first is again and first.counts == whole.counts and len(first.u) == len(whole.u)
