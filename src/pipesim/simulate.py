"""Simulation: a Schedule (or its compiled ``Program``) and a cost model in, a Timeline out.

Each rank runs its items in order; an item starts when its rank is free and everything it
needs is done, plus the P2P latency for what comes from another rank. Communication
delays the receiver but occupies no rank here (the component model of ``pipesim.components``
puts it on a stream of its own). The work is the array engine's (``pipesim.engine``):
``compile`` once, then one pass per cost model; the Timeline keeps the arrays and makes
Event and Transfer objects only when someone asks for them.
"""

from __future__ import annotations

import numpy as np

from .costs import CostModel, Costs
from .engine import Program, compile, edge_latency, op_of, run
from .errors import PipesimError
from .ir import Schedule, schedule_arg
from .schedule_checks import shown
from .timeline import Timeline, Transfer

__all__ = ["Program", "compile", "simulate"]


def simulate(schedule: Schedule | Program, costs: CostModel | None = None) -> Timeline:
    """Simulate ``schedule`` (or a compiled ``Program``) under ``costs`` (default:
    F = B = W = 1, no communication). Costs that are not finite numbers from 0 to
    ``MAX_VALUE``, or whose sums pass the largest float, are refused."""
    program = schedule if isinstance(schedule, Program) else compile(schedule_arg(schedule, "pipesim.simulate"))
    costs = check_costs(costs if costs is not None else Costs(), program.schedule)
    start, end = run(program, costs)
    if not (np.isfinite(end).all() and np.isfinite(start).all()):  # a cost model of this module's own making past MAX_VALUE
        raise PipesimError(
            f"simulating {program.schedule.name} under {costs.describe()} gives times past the largest float; use smaller costs"
        )
    inside = getattr(costs, "inside", None)  # cost models that see inside an op
    ids, insides = None, ()
    if inside is not None:
        insides = tuple(inside(item, stages) for item, stages in program.shapes)
        ids = program.shape
    return Timeline.of_arrays(
        program.schedule.pp,
        program.table,
        start,
        end,
        ids,
        insides,
        lambda: transfers(program, end, edge_latency(program, costs)),
    )


def check_costs(costs: CostModel, schedule: Schedule) -> CostModel:
    """``costs`` when it is a cost model whose numbers are finite, from 0 to ``MAX_VALUE``
    (the CLI's bound: MAX_OPS of them still sum to a finite float), and, per stage, one a
    stage. A NaN comm was dropped by the engine's max() (1f1b ran in 24 where comm=0
    gives 33), a NaN or an inf f made a NaN makespan and bubble, and a list of five
    per-stage costs for four stages ran with the fifth unseen."""
    if not all(callable(getattr(costs, m, None)) for m in ("op_time", "pair_time", "p2p_time")):
        raise PipesimError(
            f"pipesim.simulate's costs must be a cost model such as pipesim.Costs(f=1, b=1, w=1), got {shown(costs)}"
        )
    if isinstance(costs, Costs):  # its numbers were checked when it was made (Costs.__post_init__)
        costs.check_stages(schedule.placement.stages, schedule.name)
    stages = getattr(costs, "stages", None)  # ComponentCosts: one entry serves every stage, or one a stage
    if isinstance(stages, tuple) and len(stages) not in (1, schedule.placement.stages):
        raise PipesimError(
            f"component costs give {len(stages)} stages, but {schedule.name} has {schedule.placement.stages}: "
            "give one, or one per stage"
        )
    return costs


def transfers(program: Program, end: np.ndarray, lat: np.ndarray) -> tuple[Transfer, ...]:
    """Every wait across ranks as a Transfer, in execution order: what the producer's
    op sent, when it left and when it was usable."""
    t = program.table
    ptr, dep, half, cross = program.dep_ptr.tolist(), program.dep.tolist(), program.dep_half.tolist(), program.cross.tolist()
    rank, ends, lats = program.rank.tolist(), end.tolist(), lat.tolist()
    out = []
    for i in program.order.tolist():
        for e in range(ptr[i], ptr[i + 1]):
            if cross[e]:
                p = dep[e]
                out.append(Transfer(rank[p], rank[i], op_of(t, p, half[e]), ends[p], ends[p] + lats[e]))
    return tuple(out)
