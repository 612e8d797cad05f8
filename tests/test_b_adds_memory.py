"""The automatic schedulers with a B that adds memory (``w_memory`` above 1: under tensor
and sequence parallelism the W keeps more than the activation, ``MemoryModel.w_share``).

Expected peaks are counted by hand from the rule (an F +1, a B + (w - 1), a W -w; the
Zero Bubble fork's F/B/W memory deltas), and every order a builder returns is checked
with ``pipesim.memory`` on its simulated timeline, which counts bytes on its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Placement, Schedule, build, simulate
from pipesim.autoschedule.evaluate import Index, asap
from pipesim.autoschedule.greedy import POLICIES, Policy, list_schedule
from pipesim.autoschedule.polish import polish, span_key
from pipesim.autoschedule.problem import B, F, Problem, W
from pipesim.autoschedule.vgreedy import v_greedy_orders
from pipesim.autoschedule.waves import warmups, wave_schedule
from pipesim.ir import Op
from pipesim.memory import MemoryModel, memory

# one rank, one stage: F0 F1 B0 F2 B1 W0 W1 B2 W2
ORDER = [(F, 0), (F, 1), (B, 0), (F, 2), (B, 1), (W, 0), (W, 1), (B, 2), (W, 2)]


@pytest.mark.parametrize(
    "w_memory,peak",
    [
        # live after each op: 1, 2, 2.5, 3.5, 4.0 (right after B1), 2.5, 1.0, 1.5, 0
        (1.5, 4.0),
        # 1, 2, 1.5, 2.5 (after F2), 2.0, 1.5, 1.0, 0.5, 0
        (0.5, 2.5),
        # 1, 2, 2, 3, 3, 2, 1, 1, 0
        (1.0, 3.0),
    ],
)
def test_peak_of_a_hand_counted_order(w_memory, peak):
    prob = Problem.of(Placement.flat(1, 3), Costs(), memory_limit=peak, w_memory=w_memory)
    kinds = [k for k, _ in ORDER]
    assert prob.peak_of(kinds) == pytest.approx(peak)
    assert prob.fits(kinds)
    below = Problem.of(Placement.flat(1, 3), Costs(), memory_limit=peak - 0.05, w_memory=w_memory)
    assert not below.fits(kinds)
    # pipesim.memory on the simulated timeline: the same peak, in bytes
    s = Schedule("hand", 1, 3, Placement.flat(1, 3), ([Op("FBW"[k], 0, i) for k, i in ORDER],))
    rep = memory(s, simulate(s, Costs()), MemoryModel(params=0.0, activation=100.0, w_share=w_memory))
    assert rep.activation_peak[0] == pytest.approx(100 * peak)


def bytes_peak(plan, costs: Costs, w_memory: float) -> float:
    """The plan's most activations on any rank, as ``pipesim.memory`` counts the bytes of
    its simulated timeline (one activation = 1 byte)."""
    s = plan.schedule("x")
    return max(memory(s, simulate(s, costs), MemoryModel(params=0.0, activation=1.0, w_share=w_memory)).activation_peak)


W_ABOVE_ONE = st.sampled_from([1.3, 1.7, 2.5])


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 10),
    st.floats(0.5, 2.5),
    st.floats(0.5, 2.5),
    st.floats(0.25, 2.0),
    st.sampled_from([0, 0.3]),
    st.floats(0.0, 8.0),
    W_ABOVE_ONE,
)
def test_flat_builders_stay_under_the_cap(pp, M, f, b, w, c, extra, wmem):
    """The list and wave schedulers and the polish, on a flat placement: whatever they
    return holds at most the limit, in ``pipesim.memory``'s bytes."""
    costs = Costs(f=f, b=b, w=w, comm=c)
    limit = wmem + extra  # at least one micro-batch's F and B
    prob = Problem.of(Placement.flat(pp, M), costs, memory_limit=limit, w_memory=wmem)
    plans = [list_schedule(prob, pol) for pol in POLICIES[::3] + (Policy(unblock=True), Policy(w_first=True))]
    plans += [wave_schedule(prob, warmups(prob, d), p) for d in (1, 2) for p in (0, 0.5, float("inf"))]
    # a warm-up of one forward per rank runs F, B, W in turn: it always fits
    assert plans[-6] is not None
    plans.append(polish(Index(prob), plans[-6], span_key, window=6, budget=200))
    for plan in plans:
        if plan is not None:
            assert bytes_peak(plan, costs, wmem) <= limit + 1e-9


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 4), st.integers(2, 8), st.sampled_from([0, 0.1]), st.floats(0.0, 6.0), W_ABOVE_ONE)
def test_v_builders_stay_under_the_cap(pp, M, c, extra, wmem):
    """The V placement's round greedy and list scheduler (two chunks a rank)."""
    costs = Costs(f=1.0, b=1.2, w=0.7, comm=c)
    limit = 2 * wmem + extra
    prob = Problem.of(Placement.v(pp, M), costs, memory_limit=limit, w_memory=wmem)
    index = Index(prob)
    plans = [asap(index, order) for order in v_greedy_orders(prob)]
    plans += [list_schedule(prob, Policy(banker=True)), list_schedule(prob, Policy(banker=True, b_first=False))]
    for plan in plans:
        if plan is not None:
            assert bytes_peak(plan, costs, wmem) <= limit + 1e-9


@pytest.mark.parametrize("wmem", [1.3, 1.7])
@pytest.mark.parametrize("mult", [1, 2])
def test_zb_auto_stays_under_its_limit(wmem, mult):
    """The whole search (constructions, the ZB-H1 seed, its filter) on the Zero Bubble
    paper's 1.5B costs (Table 9)."""
    c = dict(f=18.522, b=18.086, w=9.337, comm=0.601)
    s = build("zb-auto", 4, 12, memory_limit=mult * 4, w_memory=wmem, **c)
    rep = memory(s, simulate(s, Costs(**c)), MemoryModel(params=0.0, activation=1.0, w_share=wmem))
    assert max(rep.activation_peak) <= mult * 4 + 1e-9


def test_a_b_that_adds_memory_waits_for_a_w():
    """One rank, limit 2.5, w 1.5, a backward as soon as it is ready (the list
    scheduler's default). By hand: F0 (1), B0 (1.5), F1 (2.5: W0 pending, so no room is
    kept for a B), then B1 would reach 3.0, so W0 runs first (1.0), B1 (1.5), F2 (2.5),
    W1 (1.0) for B2 (1.5), W2 (0)."""
    prob = Problem.of(Placement.flat(1, 3), Costs(), memory_limit=2.5, w_memory=1.5)
    plan = list_schedule(prob, Policy())
    got = [("FBW"[k], i) for k, _, i, _, _ in plan.ranks[0]]
    assert got == [("F", 0), ("B", 0), ("F", 1), ("W", 0), ("B", 1), ("F", 2), ("W", 1), ("B", 2), ("W", 2)]
    assert bytes_peak(plan, Costs(), 1.5) == pytest.approx(2.5)
