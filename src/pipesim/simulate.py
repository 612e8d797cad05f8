"""The event engine: a Schedule and a cost model in, a Timeline out.

Each rank runs its items in order; an item starts when its rank is free and everything it
needs is done, plus the P2P latency for what comes from another rank. Communication
delays the receiver but occupies no rank here (the component model of ``pipesim.components``
puts it on a stream of its own). Items are visited in ``execution_order``, which
respects all dependencies, so one pass computes every start time: linear in the ops.
"""

from __future__ import annotations

from .costs import CostModel, Costs
from .deps import Key, produces
from .ir import Op, Pair, Schedule, ops_of
from .timeline import Event, Segment, Timeline, Transfer
from .validate import check_structure, execution_order


def simulate(schedule: Schedule, costs: CostModel | None = None) -> Timeline:
    """Simulate ``schedule`` under ``costs`` (default: F = B = W = 1, no communication).

    Raises PipesimError for an incomplete schedule and DeadlockError (naming the wait
    cycle) for an order that cannot run.
    """
    costs = costs if costs is not None else Costs()
    check_structure(schedule)
    pl = schedule.placement
    free = [0.0] * schedule.pp
    events: list[list[Event]] = [[] for _ in range(schedule.pp)]
    done: dict[Key, tuple[float, Op]] = {}
    transfers: list[Transfer] = []
    inside = getattr(costs, "segments", None)  # cost models that see inside an op
    for r, i, need in execution_order(schedule):
        item = schedule.ranks[r][i]
        start = free[r]
        for key in need:
            end, op = done[key]
            src = key[1]
            if src != r:
                arrive = end + costs.p2p_time(src, r)
                transfers.append(Transfer(src, r, op, end, arrive))
                end = arrive
            if end > start:
                start = end
        if isinstance(item, Pair):
            f, b = item.forward, item.backward
            dur = costs.pair_time(item, pl.stage_of(r, f.chunk, f.mb), pl.stage_of(r, b.chunk, b.mb))
        else:
            dur = costs.op_time(item, pl.stage_of(r, item.chunk, item.mb))
        finish = start + dur
        segs = ()
        if inside is not None:
            stages = tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
            segs = tuple(Segment(g.stream, g.label, start + g.start, start + g.end) for g in inside(item, stages))
        for op in ops_of(item):
            for k in produces(r, op):
                done[k] = (finish, op)
        events[r].append(Event(r, item, start, finish, segs))
        free[r] = finish
    return Timeline(schedule.pp, tuple(tuple(e) for e in events), tuple(transfers))
