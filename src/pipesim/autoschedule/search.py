"""The automatic zero-bubble scheduler: the best of a few fast constructions, and
optionally CP-SAT to improve on it and prove optimality.

The heuristic tries the wave scheduler (``waves``: 1F1B's skeleton with Ws slotted in by
timing; a grid of warm-up depths and W policies) and the list scheduler (``greedy``) and
keeps the order with the shortest longest per-rank span. Everything runs on the fast
model of ``evaluate``; the tests check its numbers against ``pipesim.simulate``.
"""

from __future__ import annotations

import math
import time

from .evaluate import Index, Order, asap
from .greedy import Policy, list_schedule
from .polish import span_key
from .problem import Plan, Problem
from .waves import timed_warmups, warmups, wave_schedule

# The grid: on 266 random problems (pp 1..8, costs 0.5..3, latency, limits pp/2+1..2pp,
# w_memory 0..1) this smaller grid found the same best span as one 2.6 times its size;
# partial 0.75 came back when the construction's early stop made it cheap (it is the best
# of the grid at pp=8, M=24, F=7.7 B=8.6 W=4.2 under 2pp, a Zero Bubble paper-like row).
DEPTHS = (1.0, 1.5, 1.75, 2.0, 2.5)
PARTIALS = (0.0, 0.25, 0.5, 0.75, float("inf"))
# A construction stops once its span is sure to pass the best so far by more than this
# (span_key compares spans rounded to 9 digits, so a smaller excess could still tie and
# win on the sum of spans; the relative part covers the rounding of the work sums).
BOUND_SLACK = 1e-6
BOUND_SLACK_REL = 1e-9
FLAT_POLICIES = tuple(Policy(fill=fill, b_first=b_first) for fill in (float("inf"), 1.0, 0.5, 0.0) for b_first in (True, False))


def heuristic(prob: Problem, seeds: tuple[tuple[str, Order], ...] = ()) -> Plan:
    """The best of the constructions below and of ``seeds`` ((name, order) the caller
    already has, such as ZB-H1's, which the grid does not always rebuild), those within
    the memory limit.

    Two shortcuts keep the answer exactly what the whole grid gives, at a fraction of its
    time at pp=32: a construction stops as soon as one rank's span is sure to pass the best
    span so far (its span so far plus the work it has left; a longer span never wins), and a wave
    ``partial`` is skipped when an earlier run with the same warm-up took every decision
    the same way (its order would be that run's)."""
    t0 = time.perf_counter()
    plans = []
    best_span = math.inf

    def keep(plan: Plan | None) -> None:
        nonlocal best_span
        if plan is not None:
            plans.append(plan)
            best_span = min(best_span, plan.span)

    def bound() -> float:
        return best_span + BOUND_SLACK + BOUND_SLACK_REL * best_span

    index = Index(prob) if seeds else None
    for name, order in seeds:
        plan = asap(index, order)
        if plan is not None and (prob.memory_limit is None or max(plan.peak_memory(), default=0.0) <= prob.memory_limit + 1e-9):
            keep(Plan(prob, plan.ranks, name))
    seen = set()
    candidates = [warmups(prob, depth) for depth in DEPTHS] + [timed_warmups(prob, over) for over in (False, True)]
    for warm_list in candidates:
        warm = tuple(warm_list)
        if warm in seen:
            continue
        seen.add(warm)
        taken: list[tuple[float, list[float]]] = []  # (partial, the ratios its decisions split)
        for partial in PARTIALS:
            if any(all((x >= p) == (x >= partial) for x in xs) for p, xs in taken):
                continue
            ratios: list[float] = []
            keep(wave_schedule(prob, list(warm), partial, bound(), ratios))
            taken.append((partial, ratios))
    for pol in FLAT_POLICIES:
        keep(list_schedule(prob, pol, bound()))
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
