"""Local search over op orders: move one op a few places earlier on its rank, keep the
move when the order still runs, still fits in memory and scores better.

Only the first and last ``window`` ops of each rank are tried: the steady state of a
pipeline is already tight, and its warm-up and cool-down are where orders differ. The
search is first-improvement hill climbing with a budget of evaluations, so it is
deterministic and bounded.
"""

from __future__ import annotations

from collections.abc import Callable

from .evaluate import Index, orders_of, timed
from .problem import Plan

Key = Callable[[Plan], tuple]


def makespan_key(plan: Plan) -> tuple:
    ends = [ops[-1][4] for ops in plan.ranks if ops]
    return (round(max(ends), 9), round(sum(plan.spans), 9))


def span_key(plan: Plan) -> tuple:
    return (round(plan.span, 9), round(sum(plan.spans), 9))


def span_makespan_key(plan: Plan) -> tuple:
    return (round(plan.span, 9),) + makespan_key(plan)


def fits(index: Index, seq: list[tuple[int, int, int]]) -> bool:
    """Does one rank's order stay within the memory limit (``Problem.fits``)?"""
    return index.prob.fits(op[0] for op in seq)


def polish(index: Index, plan: Plan, key: Key, window: int, shift: int = 6, budget: int = 4000) -> Plan:
    orders: list[list[tuple[int, int, int]]] = orders_of(plan)
    best, best_key = plan, key(plan)
    # the current orders' own times: a trial differs from them on one rank from the
    # spot it moves an op to, and only what can have changed is timed again
    base = timed(index, orders)
    evals = 0
    improved = True
    while improved and evals < budget:
        improved = False
        for r, seq in enumerate(orders):
            n = len(seq)
            spots = sorted(set(range(1, min(window, n))) | set(range(max(1, n - window), n)))
            for p in spots:
                op = seq[p]
                for q in range(p - 1, max(-1, p - 1 - shift), -1):
                    other = seq[q]
                    if other[0] == op[0] and other[1] == op[1]:
                        break  # keep each kind in micro-batch order per chunk
                    if evals >= budget:
                        break
                    trial = seq[:q] + [op] + seq[q:p] + seq[p + 1 :]
                    if not fits(index, trial):
                        continue
                    orders[r] = trial
                    evals += 1
                    got = timed(index, orders, base, r, q)
                    if got is not None:
                        k = key(got[0])
                        if k < best_key:
                            (best, _), base, best_key, seq = got, got, k, trial
                            improved = True
                            break
                    orders[r] = seq
    return Plan(best.problem, best.ranks, plan.method + "+polish", seconds=plan.seconds)
