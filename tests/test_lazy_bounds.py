"""The search prices a candidate's overlapped pairs only when its floor reaches the front
of the queue (``evaluate.Prepared.bound``, ``search._by_bound``): the same plan as pricing
every candidate first, and a floor never above the bound it stands for."""

from __future__ import annotations

import math
import random

import pytest

from pipesim.ir import Op, Pair
from pipesim.planner import bounds as bounds_mod
from pipesim.planner import candidates as candidates_mod
from pipesim.planner import evaluate as evaluate_mod
from pipesim.planner import search as search_mod
from pipesim.planner.layout import Layout
from pipesim.planner.shared import Shared
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
from pipesim.planner.stages import component_costs, stage_parts
from pipesim.schedules import REGISTRY


class Fake:
    """A prepared candidate's queue face: its floor, and its bound once priced."""

    def __init__(self, floor, bound, log):
        self.floor, self._bound, self.exact, self.log = floor, bound, True, log

    @property
    def priced(self):
        return self.exact is None

    @property
    def bound(self):
        if self.exact is not None:
            self.log.append(self)
            self.floor, self.exact = self._bound, None
        return self.floor


def test_queue_yields_a_stable_sort_by_bound_and_prices_only_what_it_must():
    log = []
    # (floor, bound): ties in bound keep the given order; a floor may equal its bound
    spec = [(1.0, 5.0), (2.0, 2.0), (0.5, 3.0), (4.0, 9.0), (3.0, 3.0), (8.0, 20.0), (9.5, 30.0)]
    items = [Fake(f, b, log) for f, b in spec]
    got = []
    for p in search_mod._by_bound(items):
        got.append(p)
        if len(got) == 4:
            break
    want = sorted(items, key=lambda p: p._bound)[:4]  # Python's sort is stable
    assert got == want
    assert [p._bound for p in got] == [2.0, 3.0, 3.0, 5.0]
    # 9.0's floor (4.0) came up before 5.0 was yielded, 20.0's and 30.0's never did
    assert {id(p) for p in log} == {id(items[i]) for i in (0, 1, 2, 3, 4)}


def test_pair_floors_stay_under_the_priced_pairs():
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    t = load_training(**model_training("deepseek-v3"))
    lay = Layout(pp=8, dp=256, tp=1, ep=256)
    held = tuple((s, 2 * 8 - 1 - s) for s in range(8))  # a V: two chunks a rank
    parts = stage_parts(m, c, t, lay, 16, "selective", held, True)
    costs = component_costs(m, c, t, lay, 16, "selective", parts)
    checked = 0
    for fs in range(16):
        for bs in range(16):
            for kind in ("B", "BW"):
                floor = bounds_mod.compute_floor(costs, "F", fs) + bounds_mod.compute_floor(costs, kind, bs)
                priced = costs.pair_time(Pair(Op("F", 0, 0), Op(kind, 0, 1)), fs, bs)
                assert 0 < floor <= priced
                checked += 1
    assert checked == 512
    # the all-to-alls take SMs from the compute beside them: the floor is below, not at, the pair
    assert floor < priced * (1 - 1e-3)


@pytest.mark.parametrize(("model", "gpus"), [("deepseek-v3", 256), ("mixtral-8x22b", 64)])
def test_lazy_pricing_finds_the_plan_pricing_everything_finds(model, gpus, monkeypatch):
    m, c = load_model(model), load_cluster("h100", gpus=gpus)
    t = load_training(**{**model_training(model), "global_batch": 512})
    families = ["dualpipev", "1f1b-overlap", "zb-h1", "interleaved-1f1b-overlap"]
    priced = []
    real = evaluate_mod.rank_work
    monkeypatch.setattr(evaluate_mod, "rank_work", lambda *a: priced.append(1) or real(*a))
    lazy = search_mod.search(m, c, t, schedules=families)
    lazy_priced = len(priced)
    monkeypatch.setattr(evaluate_mod, "work_floor", lambda *a: None)  # every bound priced in prepare
    eager = search_mod.search(m, c, t, schedules=families)
    assert lazy_priced < len(priced) - lazy_priced  # some candidates were skipped unpriced
    assert lazy.best is not None and math.isfinite(lazy.best.step_time)
    assert [(r.candidate, r.step_time, r.memory_gb) for r in lazy.results] == [
        (r.candidate, r.step_time, r.memory_gb) for r in eager.results
    ]
    assert [(r.candidate, r.reason) for r in lazy.rejected] == [(r.candidate, r.reason) for r in eager.rejected]
    assert lazy.skipped == eager.skipped


@pytest.mark.parametrize(
    ("model", "cluster", "extra"),
    [("deepseek-v3", "h800-2048", {}), ("llama3-8b", "h100", {"zero": 3})],  # ZeRO-3: FSDP's own sync terms
)
def test_a_sync_worked_out_when_priced_is_the_one_a_fresh_search_works_out(model, cluster, extra):
    """A candidate's step sync is worked out when it is first priced and kept per cost model
    (and per micro-batch count where FSDP regathers for each): priced in another order,
    after candidates of other layouts, schedules and micro-batch counts filled the store,
    each has the bound, sync and step a fresh search's state gives it, and a floor (which
    counts the sync only where its cost model's was known) under its bound."""
    m, c = load_model(model), load_cluster(cluster, gpus=None if model == "deepseek-v3" else 32)
    t = load_training(**{**model_training(model), "global_batch": 512, **extra})
    rng = random.Random(model)
    picked = rng.sample(list(candidates_mod.candidates(m, c, t)), 120)
    shared = Shared(m, c, t)
    prepared = [p for p in (evaluate_mod.prepare(m, c, t, x, shared) for x in picked) if isinstance(p, evaluate_mod.Prepared)]
    rng.shuffle(prepared)
    periodic = set()
    for p in prepared:
        floor = p.floor
        fresh = evaluate_mod.prepare(m, c, t, p.candidate, Shared(m, c, t))
        assert floor <= p.bound == fresh.bound, p.candidate
        assert p.sync == fresh.sync and p.step == fresh.step, p.candidate
        periodic.add(REGISTRY[p.candidate.schedule].periodic)
    assert len(prepared) >= 20 and periodic == {True, False}
