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
from .ir import Schedule
from .timeline import Timeline, Transfer

__all__ = ["Program", "compile", "simulate"]


def simulate(schedule: Schedule | Program, costs: CostModel | None = None) -> Timeline:
    """Simulate ``schedule`` (or a compiled ``Program``) under ``costs`` (default:
    F = B = W = 1, no communication)."""
    program = schedule if isinstance(schedule, Program) else compile(schedule)
    costs = costs if costs is not None else Costs()
    start, end = run(program, costs)
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
