"""The schedulers' fast internal model and constructions, checked against simulate."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Placement, build, simulate, summarize, validate
from pipesim.autoschedule.evaluate import Index, asap, orders_of, timed
from pipesim.autoschedule.greedy import POLICIES, Policy, list_schedule
from pipesim.autoschedule.polish import fits, polish, span_key
from pipesim.autoschedule.problem import B, F, Problem
from pipesim.autoschedule.waves import warmups, wave_schedule

cost = st.sampled_from([0.3, 0.5, 1.0, 1.7, 2.5])


def orders(s):
    """A Schedule's per-rank orders in the fast model's encoding."""
    kinds = {"F": F, "B": B, "W": 2, "BW": B}
    return [[(kinds[op.kind], op.chunk, op.mb) for op in ops] for ops in s.ranks]


def assert_matches_simulate(plan, costs):
    s = validate(plan.schedule("x"))
    tl = simulate(s, costs)
    got = [[(round(e.start, 9), round(e.end, 9)) for e in evs] for evs in tl.events]
    want = [[(round(st_, 9), round(en, 9)) for *_, st_, en in ops] for ops in plan.ranks]
    assert got == want


@given(
    st.sampled_from(["1f1b", "zb-h1", "zb-h2", "zb-v", "gpipe"]),
    st.integers(1, 5),
    st.integers(1, 10),
    cost,
    cost,
    cost,
    st.sampled_from([0, 0.2]),
)
def test_fast_model_equals_simulate(name, pp, M, f, b, w, c):
    """Every op's start and end in the fast model equal the simulator's."""
    s = build(name, pp, M)
    split = any(op.kind == "W" for ops in s.ranks for op in ops)
    costs = Costs(f=f, b=b, w=w, comm=c)
    plan = asap(Index(Problem.of(s.placement, costs, split=split)), orders(s))
    assert plan is not None
    assert_matches_simulate(plan, costs)


def test_fast_model_reports_a_deadlock():
    s = build("1f1b", 2, 2)
    bad = orders(s)
    bad[1] = bad[1][1:] + bad[1][:1]  # rank 1 wants F0.1 before F0.0 ... and B before its F
    assert asap(Index(Problem.of(s.placement, Costs(), split=False)), bad) is None


@given(
    st.sampled_from(["1f1b", "zb-h1", "zb-h2", "zb-v", "interleaved-1f1b"]),
    st.integers(2, 5),
    st.integers(2, 8),
    cost,
    st.sampled_from([0.0, 0.5, 1.7]),
    st.sampled_from([0, 0.2]),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=4),
)
def test_retiming_from_a_base_equals_timing_in_full(name, pp, M, f, w, c, moves):
    """``timed`` resumed from the timing of an order that differs on one rank from a
    position on (polish's trials: one op moved earlier) gives the full pass's plan and
    ends table exactly, deadlock included, and so does a chain of such re-timings; so
    does one told where the rank holds base's ops again (``same_from``), which stops
    once what is left keeps base's times. Zero-length Ws put ops on the boundary time
    itself."""
    s = build(name, pp, M, **({"chunks": 2} if name == "interleaved-1f1b" else {}))
    split = any(op.kind == "W" for ops in s.ranks for op in ops)
    index = Index(Problem.of(s.placement, Costs(f=f, b=2 * f, w=w, comm=c), split=split))
    cur = orders(s)
    base = timed(index, cur)
    assert base is not None
    for rank, a, b in moves:
        r = rank % pp
        seq = cur[r]
        p = 1 + a % (len(seq) - 1)
        q = b % p
        trial = [list(x) for x in cur]
        trial[r] = seq[:q] + [seq[p]] + seq[q:p] + seq[p + 1 :]
        full = timed(index, trial)
        again = timed(index, trial, base, r, q)
        settled = timed(index, trial, base, r, q, same_from=p + 1)
        if full is None:
            assert again is None and settled is None
            continue
        assert again is not None
        assert again[0].ranks == full[0].ranks and again[1] == full[1]
        assert settled[0].ranks == full[0].ranks and settled[1] == full[1]
        cur, base = trial, settled


@given(
    st.integers(1, 5),
    st.integers(1, 12),
    cost,
    cost,
    cost,
    st.sampled_from([0, 0.3]),
    st.sampled_from([None, 1, 2.5, 6]),
    st.sampled_from([1.0, 0.4, 0.0, 1.6]),
)
def test_constructions_are_valid_asap_and_within_memory(pp, M, f, b, w, c, limit, wmem):
    """The list and wave schedulers' own times equal simulate's, and their orders never
    hold more than the limit (F +1, B w_memory - 1, W -w_memory, after every op)."""
    costs = Costs(f=f, b=b, w=w, comm=c)
    prob = Problem.of(Placement.flat(pp, M), costs, memory_limit=limit, w_memory=wmem)
    plans = [list_schedule(prob, pol) for pol in POLICIES[::5]]
    plans += [wave_schedule(prob, warmups(prob, d), p) for d in (1, 2) for p in (0, 1)]
    for plan in plans:
        if plan is None:
            continue
        assert_matches_simulate(plan, costs)
        if limit is not None:
            assert max(plan.peak_memory()) <= limit + 1e-9


def test_list_scheduler_on_v_and_dual_placements():
    for pl, split in ((Placement.v(3, 5), True), (Placement.dual(4, 8), False)):
        prob = Problem.of(pl, Costs(f=1, b=2, w=0.5, comm=0.1), split=split, memory_limit=None)
        assert_matches_simulate(list_schedule(prob), Costs(f=1, b=2, w=0.5, comm=0.1))


def test_polish_never_worsens_and_keeps_memory():
    costs = Costs(f=1.3, b=1.1, w=0.6, comm=0.2)
    prob = Problem.of(Placement.flat(4, 8), costs, memory_limit=4, w_memory=0.5)
    start = list_schedule(prob, POLICIES[0])
    better = polish(Index(prob), start, span_key, window=12)
    assert better.span <= start.span
    assert all(fits(Index(prob), seq) for seq in orders_of(better))
    assert_matches_simulate(better, costs)


@pytest.mark.parametrize("limit", [1, 1.5])
def test_tight_memory_still_schedules(limit):
    """A limit of one activation forces F, B, W per micro-batch in turn: it must still finish."""
    prob = Problem.of(Placement.flat(3, 4), Costs(), memory_limit=limit)
    plan = list_schedule(prob, POLICIES[0])
    assert plan is not None and max(plan.peak_memory()) <= limit
    rep = summarize(plan.schedule("x"), simulate(plan.schedule("x")))
    assert max(rep.peak_activations) == 1


@settings(max_examples=200)
@given(
    st.sampled_from(["flat", "v", "dual"]),
    st.integers(1, 6),
    st.integers(1, 16),
    st.lists(st.floats(0.25, 3.0), min_size=3, max_size=3),
    st.sampled_from([0, 0.3]),
    st.sampled_from([None, 1, 2.5, 6, 13]),
    st.sampled_from([1.0, 0.4, 0.0, 1.6]),  # 1.6: a B that adds memory
    st.sampled_from(POLICIES + (Policy(unblock=True), Policy(w_first=True), Policy(banker=True, b_first=False, unblock=True))),
    st.sampled_from([math.inf, 12.0, 30.0]),
)
def test_the_compiled_list_scheduler_equals_the_python_one(kind, pp, M, fbw, c, limit, wmem, pol, bound):
    """The list scheduler's C loop (``_engine.c``) places every op where its Python loop
    does, at the same times to the bit, and gives up (None) where it does: stuck under
    the memory limit or cut by the bound."""
    if kind == "dual":
        pp, M = 2 * ((pp + 1) // 2), 2 * ((pp + 1) // 2) * (1 + M % 3)
    pl = {"flat": Placement.flat, "v": Placement.v, "dual": Placement.dual}[kind](pp, M)
    f, b, w = fbw
    costs = Costs(f=[f * (1 + 0.1 * s) for s in range(pl.stages)], b=b, w=w, comm=c)
    prob = Problem.of(pl, costs, split=kind != "dual", memory_limit=limit, w_memory=wmem)
    fast = list_schedule(prob, pol, bound)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PIPESIM_KERNEL", "python")
        slow = list_schedule(prob, pol, bound)
    assert (fast is None) == (slow is None)
    if fast is not None:
        assert fast.ranks == slow.ranks
