"""The V builders' shortcuts against the plain computation they stand for: polish's
bounded trials (``timed`` with ``cap``, ``rest``, ``tails`` and ``same_from``, and the
same-rank deadlock skip) against a polish that times every trial in full, and the
blocks' shared first pass against building each variant alone. (``same_from`` alone:
tests/test_autoschedule.py's retiming test.)"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Placement
from pipesim.autoschedule.blocks import block_orders, block_variants, v_half_blocks, v_min_block, zb_v_block
from pipesim.autoschedule.evaluate import Index, asap, orders_of
from pipesim.autoschedule.greedy import POLICIES, list_schedule
from pipesim.autoschedule.polish import _moved_fits, _room, fits, makespan_key, polish, span_key, span_makespan_key
from pipesim.autoschedule.problem import Problem

cost = st.sampled_from([0.3, 0.5, 1.0, 1.7, 2.5])


def plain_polish(index, plan, key, window, shift=6, budget=4000):
    """The local search as polish's docstring says, every trial timed in full from
    scratch (``asap``): passes over each rank's first and last ``window`` places, each op
    tried up to ``shift`` places earlier, the first better order kept."""
    orders = orders_of(plan)
    best, best_key, evals = plan, key(plan), 0
    while True:
        improved = False
        for r in range(len(orders)):
            n = len(orders[r])
            for p in sorted({*range(1, min(window, n)), *range(max(1, n - window), n)}):
                for q in reversed(range(max(0, p - shift), p)):
                    seq = orders[r]
                    if seq[q][:2] == seq[p][:2] or evals >= budget:
                        break
                    trial = [*seq[:q], seq[p], *seq[q:p], *seq[p + 1 :]]
                    if fits(index, trial):
                        evals += 1
                        got = asap(index, [trial if k == r else o for k, o in enumerate(orders)])
                        if got is not None and key(got) < best_key:
                            orders[r], best, best_key, improved = trial, got, key(got), True
                            break
        if not improved or evals >= budget:
            return best


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["v", "flat"]),
    st.integers(2, 5),
    st.integers(1, 8),
    st.tuples(cost, cost, cost),
    st.sampled_from([0.0, 0.2]),
    st.sampled_from([None, 3, 6]),
    st.sampled_from([makespan_key, span_key, span_makespan_key]),
    st.sampled_from(range(len(POLICIES))),
    st.sampled_from([20, 200]),
)
def test_polish_equals_timing_every_trial_in_full(kind, pp, M, fbw, c, limit, key, pol, budget):
    """Same orders, op for op and time for time, as the search that times every trial in
    full: the bounds only drop trials that could not have been kept."""
    pl = Placement.v(pp, M) if kind == "v" else Placement.flat(pp, M)
    f, b, w = fbw
    prob = Problem.of(pl, Costs(f=f, b=b, w=w, comm=c), memory_limit=limit)
    start = list_schedule(prob, POLICIES[pol])
    if start is None:
        return
    index = Index(prob)
    want = plain_polish(index, start, key, window=3 * pp, budget=budget)
    got = polish(index, start, key, window=3 * pp, budget=budget)
    assert got.ranks == want.ranks


def test_polish_keeps_an_improvement_the_plain_search_finds():
    """A start the plain search improves (so the bounds are tried against a best that
    moves, not only against the start)."""
    prob = Problem.of(Placement.v(4, 6), Costs(f=1.3, b=1.1, w=0.6, comm=0.2), memory_limit=6)
    start = list_schedule(prob, POLICIES[0])
    index = Index(prob)
    want = plain_polish(index, start, makespan_key, window=12)
    assert makespan_key(want) < makespan_key(start)
    assert polish(index, start, makespan_key, window=12).ranks == want.ranks


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2]), min_size=2, max_size=40), st.sampled_from([1.0, 2.0, 3.0]), st.integers(1, 6))
def test_a_moved_ops_fit_read_off_the_counts_is_the_full_counts(kinds, w_memory, limit):
    """Whether an order still fits with one op moved up to six places earlier, read off
    the order's counts (``_moved_fits``), is what counting the moved order through says
    (``fits``), for every such move, with the whole-number changes polish reads it for."""
    prob = Problem.of(Placement.v(2, 4), Costs(), memory_limit=limit, w_memory=w_memory)
    index = Index(prob)
    seq = [(kind, 0, i) for i, kind in enumerate(kinds)]
    room = _room(index, seq)
    for p in range(1, len(seq)):
        for q in range(max(0, p - 6), p):
            trial = [*seq[:q], seq[p], *seq[q:p], *seq[p + 1 :]]
            assert _moved_fits(index, room, seq[p][0], q, p) == fits(index, trial)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 9), st.integers(1, 12), st.booleans())
def test_block_variants_equal_each_built_alone(pp, M, paired):
    """Building the plain and squeezed orders from one first pass gives each as its own
    build does."""
    for block in (zb_v_block(pp), *v_half_blocks(pp), v_min_block(pp)):
        both = block_variants(pp, M, block, paired, (False, True))
        assert both == [block_orders(pp, M, block, paired, False), block_orders(pp, M, block, paired, True)]
