"""The automatic zero-bubble scheduler: the best of a few fast constructions, and
optionally CP-SAT to improve on it and prove optimality.

The heuristic tries the wave scheduler (``waves``: 1F1B's skeleton with Ws slotted in by
timing; a grid of warm-up depths and W policies) and the list scheduler (``greedy``) and
keeps the order with the shortest longest per-rank span. Everything runs on the fast
model of ``evaluate``; the tests check its numbers against ``pipesim.simulate``.
"""

from __future__ import annotations

import time

from .evaluate import Index, Order, asap
from .greedy import Policy, list_schedule
from .polish import span_key
from .problem import Plan, Problem
from .waves import timed_warmups, warmups, wave_schedule

# The grid: on 266 random problems (pp 1..8, costs 0.5..3, latency, limits pp/2+1..2pp,
# w_memory 0..1) this smaller grid found the same best span as one 2.6 times its size.
DEPTHS = (1.0, 1.5, 1.75, 2.0, 2.5)
PARTIALS = (0.0, 0.25, 0.5, float("inf"))
FLAT_POLICIES = tuple(Policy(fill=fill, b_first=b_first) for fill in (float("inf"), 1.0, 0.5, 0.0) for b_first in (True, False))


def heuristic(prob: Problem, seeds: tuple[tuple[str, Order], ...] = ()) -> Plan:
    """The best of the constructions below and of ``seeds`` ((name, order) the caller
    already has, such as ZB-H1's, which the grid does not always rebuild), those within
    the memory limit."""
    t0 = time.perf_counter()
    plans = []
    index = Index(prob) if seeds else None
    for name, order in seeds:
        plan = asap(index, order)
        if plan is not None and (prob.memory_limit is None or max(plan.peak_memory(), default=0.0) <= prob.memory_limit + 1e-9):
            plans.append(Plan(prob, plan.ranks, name))
    seen = set()
    candidates = [warmups(prob, depth) for depth in DEPTHS] + [timed_warmups(prob, over) for over in (False, True)]
    for warm_list in candidates:
        warm = tuple(warm_list)
        if warm in seen:
            continue
        seen.add(warm)
        for partial in PARTIALS:
            plan = wave_schedule(prob, list(warm), partial)
            if plan is not None:
                plans.append(plan)
    for pol in FLAT_POLICIES:
        plan = list_schedule(prob, pol)
        if plan is not None:
            plans.append(plan)
    best = min(plans, key=span_key)
    return Plan(prob, best.ranks, best.method, optimal=None, seconds=time.perf_counter() - t0)


def auto_schedule(
    prob: Problem, exact: bool = False, time_limit: float = 10.0, seeds: tuple[tuple[str, Order], ...] = ()
) -> Plan:
    """The heuristic's plan, or with ``exact`` CP-SAT's (started from it, so never worse)."""
    plan = heuristic(prob, seeds)
    if not exact:
        return plan
    from .exact import solve

    return solve(prob, plan, time_limit)
