"""zb-auto's exact mode (CP-SAT): optimal on small cases, checked by brute force through
the simulator; never worse than the heuristic; honest when it runs out of time."""

from __future__ import annotations

import itertools
import sys

import pytest

from pipesim import Costs, DeadlockError, Op, PipesimError, Placement, Schedule, build, simulate, summarize

pytest.importorskip("ortools")


def in_order_sequences(M):
    """Every order of one rank's F, B, W that keeps each kind in micro-batch order and
    each micro-batch's F before its B before its W."""
    ops = [(k, i) for k in "FBW" for i in range(M)]
    for perm in itertools.permutations(ops):
        pos = {o: j for j, o in enumerate(perm)}
        if all(pos[k, i] < pos[k, i + 1] for k in "FBW" for i in range(M - 1)) and all(
            pos["F", i] < pos["B", i] < pos["W", i] for i in range(M)
        ):
            yield tuple(Op(k, 0, i) for k, i in perm)


def peak(seq, w_memory):
    live = top = 0.0
    for op in seq:
        live += {"F": 1.0, "B": -(1 - w_memory), "W": -w_memory}[op.kind]
        top = max(top, live)
    return top


def brute_force(pp, M, costs, limit, w_memory):
    """The shortest longest span over all in-order orders within the memory limit."""
    seqs = [s for s in in_order_sequences(M) if peak(s, w_memory) <= limit + 1e-9]
    best = float("inf")
    for ranks in itertools.product(seqs, repeat=pp):
        s = Schedule("bf", pp, M, Placement.flat(pp, M), ranks)
        try:
            best = min(best, max(summarize(s, simulate(s, costs)).span))
        except DeadlockError:
            continue
    return best


CASES = [
    (2, 2, dict(f=1.0, b=1.0, w=1.0, comm=0.0), 2, 1.0),
    (2, 3, dict(f=1.5, b=1.2, w=0.7, comm=0.1), 2, 0.4),
    (2, 3, dict(f=1.0, b=2.0, w=0.5, comm=0.25), 1.5, 0.5),
    (3, 2, dict(f=2.0, b=1.0, w=1.5, comm=0.0), 2, 1.0),
    # a B that adds memory: two forwards and a B fit (2.3), a third forward does not
    (2, 3, dict(f=1.0, b=1.2, w=0.8, comm=0.1), 2.3, 1.3),
    (3, 2, dict(f=1.0, b=2.0, w=0.5, comm=0.0), 2.6, 1.6),
]


@pytest.mark.parametrize("pp,M,c,limit,wm", CASES)
def test_proves_the_brute_force_optimum(pp, M, c, limit, wm):
    s = build("zb-auto", pp, M, memory_limit=limit, w_memory=wm, exact=True, time_limit=20, **c)
    assert s.info["proven_optimal"] is True
    costs = Costs(**c)
    span = max(summarize(s, simulate(s, costs)).span)
    assert span == pytest.approx(brute_force(pp, M, costs, limit, wm))
    assert s.info["lower_bound"] == pytest.approx(span)


@pytest.mark.parametrize(
    "pp,M,c,limit,wm",
    [(4, 8, dict(f=1.3, b=1.1, w=0.6, comm=0.2), 4, 0.5), (4, 6, dict(f=1.0, b=1.0, w=1.0, comm=0.0), 8, 1.0)],
)
def test_never_worse_than_the_heuristic(pp, M, c, limit, wm):
    heur = build("zb-auto", pp, M, memory_limit=limit, w_memory=wm, **c)
    exact = build("zb-auto", pp, M, memory_limit=limit, w_memory=wm, exact=True, time_limit=3, **c)
    costs = Costs(**c)
    h, e = (max(summarize(s, simulate(s, costs)).span) for s in (heur, exact))
    assert e <= h + 1e-9
    assert exact.info["lower_bound"] is None or exact.info["lower_bound"] <= e + 1e-9


def test_reports_when_it_could_not_prove():
    """The paper's 1.5B model at p=8, m=24 is too big to prove in a fraction of a second."""
    s = build(
        "zb-auto", 8, 24, f=18.522, b=18.086, w=9.337, comm=0.601, memory_limit=16, w_memory=0.366, exact=True, time_limit=0.5
    )
    assert s.info["proven_optimal"] is False
    assert s.info["status"] in ("FEASIBLE", "UNKNOWN")


def test_missing_ortools_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "ortools", None)
    monkeypatch.setitem(sys.modules, "ortools.sat.python", None)
    with pytest.raises(PipesimError, match=r"exact mode needs OR-Tools: pip install"):
        build("zb-auto", 2, 2, exact=True)
