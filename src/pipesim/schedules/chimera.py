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

Past ``SHORT_UNITS`` units the list scheduler's order has a steady state that repeats
every unit (each rank: pp/2 micro-batches each way, 2pp slots): the order at M is the one
at ``SHORT_UNITS`` units with that steady state repeated (``autoschedule.repeat``), op for
op (tests/test_chimera.py checks every even pp up to 16; benchmarks/chimera_repeat_grid.py
up to 64), so one list schedule per pp serves every longer M.
"""

from __future__ import annotations

import functools

from ..autoschedule.greedy import Policy, list_schedule
from ..autoschedule.problem import Plan, Problem
from ..autoschedule.repeat import repeat_steady_state
from ..costs import Costs
from ..ir import Placement, Schedule
from .cache import cached

#: units of pp micro-batches of the order whose steady state longer ones repeat: from
#: 5 on every rank's steady state holds a unit either side of a common cut (4 is short
#: of that from pp = 4 on)
SHORT_UNITS = 5


@cached("chimera")
def chimera(pp: int, microbatches: int) -> Schedule:
    M = microbatches  # even pp, M a multiple of pp: the registry's check
    pl = Placement.dual(pp, M)
    if M > SHORT_UNITS * pp:
        table = repeated(pp, M)
        if table is not None:
            return Schedule("chimera", pp, M, pl, table)
    return searched(pp, M).schedule("chimera")


def searched(pp: int, M: int) -> Plan:
    """The list scheduler's order at (pp, M)."""
    prob = Problem.of(Placement.dual(pp, M), Costs(f=1, b=1, w=0), split=False)
    plan = list_schedule(prob, Policy())
    assert plan is not None  # no memory limit: the list scheduler always finishes
    return plan


def repeated(pp: int, M: int):
    """The order at M from the one at ``SHORT_UNITS`` units, its steady state repeated
    (a unit: pp/2 micro-batches each way); None where the ranks share no steady window."""
    few = SHORT_UNITS * pp
    # micro-batch numbers within each pipeline: the up pipeline's come after the down one's
    return repeat_steady_state(_short(pp), (M - few) // pp, 2 * pp, pp // 2, 1, (0, few // 2), (0, M // 2))


@functools.lru_cache(maxsize=4)
def _short(pp: int) -> Plan:
    """The order at ``SHORT_UNITS`` units, kept for the process: a planner run asks for
    several M at one pp."""
    return searched(pp, SHORT_UNITS * pp)
