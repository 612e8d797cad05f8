"""Combined 1F1B against Megatron-LM's own numbers and examples, its closed form against
the simulator, and its pairs priced on two streams like DualPipe's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Op, Pair, PipesimError, build, simulate, summarize, theory, validate
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import ops_of
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
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3), cost, cost, st.floats(0, 1))
def test_closed_form_and_peak(pp, k, v, f, bw, share):
    M = pp * k if v > 1 else pp * k + (k - 1)
    pair = max(f, bw) + share * min(f, bw)  # between max(F, BW) and F + BW
    costs = Costs(f=f, b=bw / 2, w=bw / 2, bw=bw, pair=pair)
    name, opts = ("interleaved-1f1b-overlap", {"chunks": v}) if v > 1 else ("1f1b-overlap", {})
    s = build(name, pp, M, **opts)
    rep = summarize(s, simulate(s, costs))
    assert rep.makespan == pytest.approx(theory.makespan(name, pp, M, costs, **opts))
    # without overlap (F&B = F + BW) the pairs are 1F1B's steps: interleaved 1F1B's time
    if share == 1 and v > 1:
        assert rep.makespan == pytest.approx((v * M + pp - 1) * (f + bw))
    # Megatron's max_outstanding_backprops = warm-up + 1, capped by the rank's passes
    assert rep.peak_activations == [min(v * M, 2 * (pp - r - 1) + (v - 1) * pp + 2) for r in range(pp)]
    assert rep.peak_activations == theory.peak_activations(name, pp, M, **opts)


def test_forms_decline_outside_their_regime():
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(comm=0.1)) is None
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(pair=0.5)) is None  # shorter than BW
    assert theory.makespan("1f1b-overlap", 4, 8, Costs(), delay_wgrad=True) is None


@pytest.mark.parametrize(
    "name,pp,M,opts,needle",
    [
        ("interleaved-1f1b-overlap", 4, 6, {}, "multiple of --pp=4"),
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
