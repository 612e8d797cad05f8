"""The event engine: a Schedule and a cost model in, a Timeline out.

Each rank runs its items in order; an item starts when its rank is free and everything it
needs is done, plus the P2P latency for what comes from another rank. Communication
delays the receiver but occupies no rank here (the component model of ``pipesim.components``
puts it on a stream of its own). Items are visited in ``execution_order``, which
respects all dependencies, so one pass computes every start time: linear in the ops.

What does not depend on the costs (the checks, the walk order, what each item needs and
makes, its stages) is ``compile``d once into a ``Program``; simulating one schedule under
many cost models (the planner, sweeps) reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .costs import CostModel, Costs
from .deps import Key, produces
from .ir import Item, Op, Pair, Schedule, ops_of
from .timeline import Event, Timeline, Transfer
from .validate import check_structure, execution_order


@dataclass(frozen=True, eq=False)
class Step:
    rank: int
    item: Item
    needs: tuple[Key, ...]
    makes: tuple[tuple[Key, Op], ...]
    stages: tuple[int, ...]  # of the item's ops, in order


@dataclass(frozen=True, eq=False)
class Program:
    """A checked schedule, ready to simulate under any costs."""

    schedule: Schedule
    steps: tuple[Step, ...]


def compile(schedule: Schedule) -> Program:
    """Check ``schedule`` (PipesimError, or DeadlockError naming the wait cycle) and lay
    out its items in an executable order."""
    check_structure(schedule)
    pl = schedule.placement
    steps = []
    for r, i, need in execution_order(schedule):
        item = schedule.ranks[r][i]
        ops = ops_of(item)
        makes = tuple((k, op) for op in ops for k in produces(r, op))
        steps.append(Step(r, item, need, makes, tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops)))
    return Program(schedule, tuple(steps))


def simulate(schedule: Schedule | Program, costs: CostModel | None = None) -> Timeline:
    """Simulate ``schedule`` (or a compiled ``Program``) under ``costs`` (default:
    F = B = W = 1, no communication)."""
    program = schedule if isinstance(schedule, Program) else compile(schedule)
    costs = costs if costs is not None else Costs()
    pp = program.schedule.pp
    free = [0.0] * pp
    events: list[list[Event]] = [[] for _ in range(pp)]
    done: dict[Key, tuple[float, Op]] = {}
    transfers: list[Transfer] = []
    inside = getattr(costs, "inside", None)  # cost models that see inside an op
    for step in program.steps:
        r, item = step.rank, step.item
        start = free[r]
        for key in step.needs:
            end, op = done[key]
            src = key[1]
            if src != r:
                arrive = end + costs.p2p_time(src, r)
                transfers.append(Transfer(src, r, op, end, arrive))
                end = arrive
            if end > start:
                start = end
        if isinstance(item, Pair):
            dur = costs.pair_time(item, step.stages[0], step.stages[1])
        else:
            dur = costs.op_time(item, step.stages[0])
        finish = start + dur
        for k, op in step.makes:
            done[k] = (finish, op)
        events[r].append(Event(r, item, start, finish, inside(item, step.stages) if inside is not None else None))
        free[r] = finish
    return Timeline(pp, tuple(tuple(e) for e in events), tuple(transfers))
