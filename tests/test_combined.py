"""Combined 1F1B against Megatron-LM's own numbers and examples, its closed form against
the simulator, and its pairs priced on two streams like DualPipe's."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Op, Pair, PipesimError, build, simulate, summarize, theory, validate
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import RankTable, ops_of
from pipesim.schedules.combined import schedule_table


def test_schedule_table_is_megatrons_example():
    # megatron/core/pipeline_parallel/schedules.py: "the tunable schedule table for PP2 N3M5
    # with VP2": micro-batch 0 1 2 0 1 2 3 4 3 4, model chunk 0 0 0 1 1 1 0 0 1 1
    table = schedule_table(5, 2, 3)
    assert [mb for mb, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_no_pipelining_is_megatrons_phases():
    # combined_1f1b_schedule_for_no_pipelining, 4 micro-batches: F of the 1st; then the
    # backward of the i-th with the forward of the (i+1)-th; then the 4th's backward
    s = build("1f1b-overlap", 1, 4)
    assert [str(i) for i in s.ranks[0]] == ["F0.0", "F0.1&BW0.0", "F0.2&BW0.1", "F0.3&BW0.2", "BW0.3"]


@pytest.mark.parametrize("pp,v", [(4, 2), (4, 3), (8, 2), (3, 1)])
def test_warmup_is_megatrons_plus_one(pp, v):
    # get_pp_rank_microbatches: (pp-r-1)*2 + (v-1)*pp warm-up forwards, +1 with the overlap
    M = 4 * pp
    s = build("interleaved-1f1b-overlap", pp, M, chunks=v) if v > 1 else build("1f1b-overlap", pp, M)
    for r, items in enumerate(s.ranks):
        lone_f = 0
        for it in items:
            if isinstance(it, Pair):
                break
            lone_f += 1
        assert lone_f == (pp - r - 1) * 2 + (v - 1) * pp + 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), st.booleans())
def test_orders_are_valid_and_pairs_independent(pp, k, v, delay):
    M = pp * k
    s = build("interleaved-1f1b-overlap", pp, M, chunks=v + 1, delay_wgrad=delay)
    validate(s)
    for _, it in s.items():
        if isinstance(it, Pair):
            assert it.forward.mb != it.backward.mb or it.forward.chunk != it.backward.chunk
    kinds = {op.kind for _, it in s.items() for op in ops_of(it)}
    assert kinds == ({"F", "B", "W"} if delay else {"F", "BW"})
    if delay:  # each W right after its B, in the same step
        for items in s.ranks:
            for a, b in zip(items, items[1:]):
                if isinstance(b, Op) and b.kind == "W":
                    back = a.backward if isinstance(a, Pair) else a
                    assert (back.kind, back.chunk, back.mb) == ("B", b.chunk, b.mb)


cost = st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), cost, cost, st.floats(0, 1), st.integers(0, 7))
def test_closed_form_and_peak(pp, k, v, f, bw, share, extra):
    M = pp * k if v > 1 else pp * k + (k - 1)
    g = min(pp + extra, M)  # a group size Megatron takes whenever M % g is 0 or >= pp
    if 0 < M % g < pp:
        g = pp
    pair = max(f, bw) + share * min(f, bw)  # between max(F, BW) and F + BW
    costs = Costs(f=f, b=bw / 2, w=bw / 2, bw=bw, pair=pair)
    name, opts = ("interleaved-1f1b-overlap", {"chunks": v, "group_size": g}) if v > 1 else ("1f1b-overlap", {})
    s = build(name, pp, M, **opts)
    rep = summarize(s, simulate(s, costs))
    assert rep.makespan == pytest.approx(theory.makespan(name, pp, M, costs, **opts))
    # without overlap (F&B = F + BW) the pairs are 1F1B's steps: interleaved 1F1B's time,
    # whatever the group size
    if share == 1 and v > 1:
        assert rep.makespan == pytest.approx((v * M + pp - 1) * (f + bw))
        plain = build("interleaved-1f1b", pp, M, **opts)
        assert summarize(plain, simulate(plain, costs)).makespan == pytest.approx(rep.makespan)
    # Megatron's max_outstanding_backprops = warm-up + 1, capped by the rank's passes
    g = g if v > 1 else pp
    assert rep.peak_activations == [min(v * M, 2 * (pp - r - 1) + (v - 1) * g + 2) for r in range(pp)]
    assert rep.peak_activations == theory.peak_activations(name, pp, M, **opts)


def test_a_larger_group_trades_pairs_for_lone_passes():
    # pp=2, M=4, v=2, F=1, BW=2, F&B=2.5. g=2: rank 1 runs (v-1)g+1 = 3 lone forwards, 5
    # pairs, 3 lone backwards, and rank 0's 2 more of each fill and drain the pipeline:
    # 4(F+BW) + 5 F&B = 24.5. g=4: 5 lone forwards and 3 pairs: 6(F+BW) + 3 F&B = 25.5.
    # g=3 leaves a last group of 1 < pp, which Megatron refuses
    costs = Costs(f=1, b=1, w=1, bw=2, pair=2.5)

    def span(g):
        s = build("interleaved-1f1b-overlap", 2, 4, group_size=g)
        return summarize(s, simulate(s, costs)).makespan

    assert (span(2), span(4)) == (24.5, 25.5)
    with pytest.raises(PipesimError, match="last group of 1 < pp=2"):
        span(3)


def megatron_loop(pp, r, M, v, g, overlap):
    """What forward_backward_pipelining_with_interleaving (Megatron-LM d98e8a6) runs on rank
    r, written from its text: virtual micro-batch k goes through (micro-batch, chunk) of
    get_schedule_table, groups of g through each chunk in turn; get_pp_rank_microbatches'
    2(pp-r-1) + (v-1)g warm-up forwards (+1 with the expert-parallel overlap); the steady
    step k runs forward warm+k and the backward of chunk v-1-chunk(k), whose micro-batch is
    the oldest input that chunk holds (input_tensors[chunk].pop(0)); then the backwards."""
    vk = []
    for lo in range(0, M, g):
        hi = M if lo + g >= M else lo + g
        vk += [(mb, c) for c in range(v) for mb in range(lo, hi)]
    warm = min(2 * (pp - r - 1) + (v - 1) * g + (1 if overlap else 0), v * M)
    inputs = [[] for _ in range(v)]

    def fwd(k):
        mb, c = vk[k]
        inputs[c].append(mb)
        return f"F{c}.{mb}"

    def bwd(k):
        c = v - 1 - vk[k][1]
        return f"BW{c}.{inputs[c].pop(0)}"

    out = [fwd(k) for k in range(warm)]
    for k in range(v * M - warm):
        f, b = fwd(warm + k), bwd(k)
        out += [f"{f}&{b}"] if overlap else [f, b]
    return out + [bwd(k) for k in range(v * M - warm, v * M)]


def test_group_sizes_give_megatrons_order():
    # every (pp, M, v, g) Megatron accepts at pp 2-5, M up to 3pp+2, v 2-3: the same
    # order op for op, combined and plain (the run of Megatron's own table and warm-up
    # functions outside the repo agreed at 3390 sizes up to pp=8)
    n = 0
    for pp in range(2, 6):
        for M in range(pp, 3 * pp + 3):
            for v in (2, 3):
                for g in range(pp, M + 1):
                    if 0 < M % g < pp:
                        continue
                    for name, overlap in (("interleaved-1f1b-overlap", True), ("interleaved-1f1b", False)):
                        s = build(name, pp, M, chunks=v, group_size=g)
                        assert [[str(i) for i in items] for items in s.ranks] == [
                            megatron_loop(pp, r, M, v, g, overlap) for r in range(pp)
                        ], (name, pp, M, v, g)
                        n += 1
    assert n == 424  # the grid is not empty by mistake


def test_group_size_examples_of_megatrons_config():
    # model_parallel_config.py, microbatch_group_size_per_vp_stage: PP=2 VP=2, g=2, M=4:
    # "rank 0 | 0 1 0 1 2 3 2 3"; g=3, M=5: "rank 0 | 0 1 2 0 1 2 3 4 3 4" (the forwards)
    for g, M, mbs in ((2, 4, [0, 1, 0, 1, 2, 3, 2, 3]), (3, 5, [0, 1, 2, 0, 1, 2, 3, 4, 3, 4])):
        for name in ("interleaved-1f1b", "interleaved-1f1b-overlap"):
            s = build(name, 2, M, group_size=g)
            assert [op.mb for op in ops_of_rank(s, 0) if op.kind == "F"] == mbs
    # the default is pp: the same order as no group size
    assert build("interleaved-1f1b-overlap", 4, 8, group_size=4).ranks == build("interleaved-1f1b-overlap", 4, 8).ranks


def ops_of_rank(s, r):
    return [op for it in s.ranks[r] for op in ops_of(it)]


def test_forms_decline_outside_their_regime():
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(comm=0.1)) is None
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(pair=0.5)) is None  # shorter than BW
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(), delay_wgrad=True) is None


@pytest.mark.parametrize(
    "name,pp,M,opts,needle",
    [
        ("interleaved-1f1b-overlap", 4, 6, {}, "multiple of --pp=4"),
        ("interleaved-1f1b-overlap", 4, 10, {"group_size": 3}, r"from --pp=4 to --microbatches=10, got 3"),
        ("interleaved-1f1b-overlap", 4, 10, {"group_size": 11}, r"from --pp=4 to --microbatches=10, got 11"),
        (
            "interleaved-1f1b-overlap",
            4,
            10,
            {"group_size": 8},
            r"M % --group-size .* 0 or >= --pp=4: groups of 8 leave a last group of 2",
        ),
        ("interleaved-1f1b", 4, 10, {"group_size": 7}, r"last group of 3 < pp=4"),
        ("1f1b-overlap", 4, 8, {"group_size": 4}, "does not take --group-size"),
        ("interleaved-1f1b-overlap", 4, 8, {"chunks": 1}, "--chunks >= 2"),
        ("1f1b", 4, 8, {"delay_wgrad": True}, "does not take --delay-wgrad"),
    ],
)
def test_constraints(name, pp, M, opts, needle):
    with pytest.raises(PipesimError, match=needle):
        build(name, pp, M, **opts)


def steady_compute(name, pp, M, costs):
    from pipesim.metrics import steady_state_utilization

    s = build(name, pp, M)
    return steady_state_utilization(simulate(s, costs), compute_only=True)


def test_pairs_hide_all_to_all_like_dualpipes():
    # the EP regime where all-to-all takes as long as compute: 1F1B exposes it all (50%
    # compute in the steady state), combined 1F1B's pairs hide it as DualPipe's do
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 2)
    plain = steady_compute("1f1b", 4, 16, costs)
    combined = steady_compute("1f1b-overlap", 4, 16, costs)
    dual = steady_compute("dualpipe", 4, 16, costs)
    assert plain == pytest.approx(0.5, abs=0.01)
    assert combined > 0.85 and combined >= dual - 0.03
    s = build("1f1b-overlap", 4, 16)
    assert s.placement.parameter_copies == 1


def test_smallest_group_is_the_one_to_search():
    # under the component costs too, a larger group never shortens the step and always
    # holds more: the planner tries the smallest g Megatron takes
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 2)
    for pp, M, v in ((4, 10, 2), (4, 18, 3)):
        rows = []
        for g in range(pp, M + 1):
            if not 0 < M % g < pp:
                s = build("interleaved-1f1b-overlap", pp, M, chunks=v, group_size=g)
                rep = summarize(s, simulate(s, costs))
                rows.append((rep.makespan, max(rep.peak_activations)))
        assert len(rows) > 2
        assert all(a[0] <= b[0] + 1e-9 and a[1] < b[1] for a, b in zip(rows, rows[1:]))


def test_why_the_steady_windows_differ():
    # One window for both (every rank has started a backward .. the first rank's last
    # forward). Combined 1F1B's window holds only pairs; DualPipe's also holds lone ops on
    # every rank but the middle two, whose all-to-all is exposed; inside, the pairs of both
    # compute the same share of their time.
    from pipesim.metrics import steady_state_window

    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 4)

    def inside(name):
        tl = simulate(build(name, 8, 32), costs)
        lo, hi = steady_state_window(tl)
        return [[e for e in evs if e.end > lo and e.start < hi] for evs in tl.events]

    assert all(isinstance(e.item, Pair) for evs in inside("1f1b-overlap") for e in evs)
    dual = inside("dualpipe")
    lone = [[e for e in evs if not isinstance(e.item, Pair)] for evs in dual]
    assert all(lone[r] for r in (0, 1, 2, 5, 6, 7)) and all(e.item.kind in ("F", "B", "W", "BW") for x in lone for e in x)
    share = {round(e.inside.compute / e.duration, 3) for evs in dual for e in evs if isinstance(e.item, Pair)}
    (combined_share,) = {round(e.inside.compute / e.duration, 3) for evs in inside("1f1b-overlap") for e in evs}
    assert combined_share in share and min(e.inside.compute / e.duration for x in lone for e in x if e.item.kind == "F") == 0.5


def object_order(pp, r, M, v, g, delay_wgrad):
    """Rank r's combined order one Op object at a time, as the builder made it before it
    built arrays (and as the module docstring states it): warm-up forwards, then forward
    warm+k paired with backward k (table entry k, chunk reversed), then the lone
    backwards; with delay_wgrad a B whose W follows it in the same step."""
    table = schedule_table(M, v, g)
    total = len(table)
    warm = min(2 * (pp - r - 1) + (v - 1) * g + 1, total)
    back = "B" if delay_wgrad else "BW"

    def fwd(k):
        mb, c = table[k]
        return Op("F", c, mb)

    def bwd(k):
        mb, c = table[k]
        return [Op(back, v - 1 - c, mb)] + ([Op("W", v - 1 - c, mb)] if delay_wgrad else [])

    items = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        b, *w = bwd(k)
        items += [Pair(fwd(warm + k), b), *w]
    for k in range(total - warm, total):
        items += bwd(k)
    return tuple(items)


def test_array_orders_are_the_object_orders():
    # a seeded sample of every (pp, v, M, g, delay_wgrad) Megatron takes at pp 2-9, v 1-4,
    # M up to 4pp+2, and a few large M (a long last group, none, one of a whole M): the
    # same items, and the same columns as RankTable.of makes from the objects
    rng = random.Random(0)
    grid = []
    for pp in range(2, 10):
        for v in range(1, 5):
            for M in range(pp, 4 * pp + 3):
                for g in [pp] if v == 1 else [g for g in range(pp, M + 1) if not 0 < M % g < pp]:
                    grid += [(pp, v, M, g, False), (pp, v, M, g, True)]
    cases = rng.sample(grid, 300)
    for pp, v, M, g in ((9, 4, 99, 10), (7, 2, 140, 7), (5, 3, 123, 123), (4, 1, 250, 4)):
        cases += [(pp, v, M, g, False), (pp, v, M, g, True)]
    assert {c[1] for c in cases} == {1, 2, 3, 4} and {c[4] for c in cases} == {False, True}
    for pp, v, M, g, delay in cases:
        if v == 1:
            s = build("1f1b-overlap", pp, M, delay_wgrad=delay)
        else:
            s = build("interleaved-1f1b-overlap", pp, M, chunks=v, group_size=g, delay_wgrad=delay)
        want = tuple(object_order(pp, r, M, v, g, delay) for r in range(pp))
        assert s.ranks == want, (pp, v, M, g, delay)
        ref = RankTable.of(want)
        for col in ("offsets", "kind", "chunk", "mb", "kind2", "chunk2", "mb2"):
            a, b = getattr(s.table, col), getattr(ref, col)
            assert a.dtype == b.dtype and np.array_equal(a, b), (pp, v, M, g, delay, col)
