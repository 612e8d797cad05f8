"""Chimera (Li and Hoefler, SC'21): two pipelines in opposite directions over two copies
of the model. Rank r holds stage r of the down pipeline (chunk 0) and stage pp-1-r of the
up pipeline (chunk 1); the first half of the micro-batches go down, the second half up.

Chimera's basic unit is pp micro-batches (pp/2 each way); longer runs concatenate units,
so it needs an even pp and M a multiple of pp. With a fused backward as long as the
forward, its bubble is (D-2)/(2N+D-2) for D = pp stages and N = M micro-batches: every
rank idles (pp-2) forward-lengths, against 1F1B's 2(pp-1).

The order is the list scheduler's (``autoschedule.greedy``, backwards first, at F = BW =
1), which reaches that bound; the tests check it over many (pp, M). It depends on (pp, M)
alone and the scheduler is Python per op (tens of ms at the planner's sizes, a planner
run builds a dozen or more): searched once, then read from the cache (``cache``).
"""

from __future__ import annotations

from ..autoschedule.greedy import Policy, list_schedule
from ..autoschedule.problem import Problem
from ..costs import Costs
from ..ir import Placement, Schedule
from .cache import cached


@cached("chimera")
def chimera(pp: int, microbatches: int) -> Schedule:
    M = microbatches  # even pp, M a multiple of pp: the registry's check
    prob = Problem.of(Placement.dual(pp, M), Costs(f=1, b=1, w=0), split=False)
    plan = list_schedule(prob, Policy())
    assert plan is not None  # no memory limit: the list scheduler always finishes
    return plan.schedule("chimera")
