"""The array engine: a schedule compiled once into flat integer arrays, timed in one pass.

``compile`` checks a schedule and lays it out as arrays, one entry per item (rank after
rank, as ``Schedule.table`` stores them): its rank, stages, the items it waits for (CSR:
``dep[dep_ptr[i]:dep_ptr[i + 1]]``, in the order ``validate.item_needs`` names them, each
with whether the wait crosses ranks), the item before it on its rank, an executable
order, and its *shape*: the (kinds, stages) that are all a cost model may price an item
by. ``item_times`` prices one item per shape through the ``CostModel`` protocol and
gathers, so timing one program under many cost models touches no Python object per op;
``kernel.times`` then runs the one pass. Checks are vectorised; only when one fails does
``validate`` walk the Op objects, to word the message (and name the deadlock's cycle).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import kernel
from .deps import Key
from .inputs import work
from .ir import KINDS, Item, Op, Pair, RankTable, Schedule, ops_of, schedule_arg
from .validate import check_structure, execution_order, item_needs

F, B, W, BW = range(4)


@dataclass(frozen=True, eq=False)
class Step:
    """One item of a compiled program, as objects (``Program.steps``, made on demand)."""

    rank: int
    item: Item
    needs: tuple[Key, ...]
    stages: tuple[int, ...]  # of the item's ops, in order


@dataclass(frozen=True, eq=False)
class Program:
    """A checked schedule as arrays, ready to time under any costs. Items are numbered
    as ``schedule.table`` stores them (rank after rank, each rank's in its order)."""

    schedule: Schedule
    first: np.ndarray  # uint8 per item: 1 for a rank's first item (no item before it on its rank)
    dep_ptr: np.ndarray  # int32, items + 1
    dep: np.ndarray  # int32 per edge: the item waited for
    dep_half: np.ndarray  # int8 per edge: which op of that item made what is waited for (1: a pair's backward)
    cross: np.ndarray  # bool per edge: the wait crosses ranks (a P2P transfer)
    order: np.ndarray  # int32: every item once, each after all it waits for
    shape: np.ndarray  # int16 or int32 per item: index into ``shapes``
    shapes: tuple[tuple[Item, tuple[int, ...]], ...]  # one (item, stages) per shape

    @property
    def table(self) -> RankTable:
        return self.schedule.table

    @property
    def items(self) -> int:
        return len(self.order)

    @property
    def rank(self) -> np.ndarray:
        """The rank of every item."""
        return self.table.ranks_of_items()

    @cached_property
    def rank_pairs(self) -> np.ndarray:
        """The (source rank) * pp + (destination rank) of each pair of ranks some edge
        crosses, once, in order: what ``edge_latency`` asks a cost model about, worked out
        once a program (the planner times one under many cost models: DeepSeek-V2 on
        b200, 2775 timelines of 185 orders)."""
        pp = self.schedule.pp
        cross = _edge_keys(self)[self.cross]
        return np.flatnonzero(np.bincount(cross, minlength=pp * pp)) if pp <= 4096 else np.unique(cross)

    @cached_property
    def steps(self) -> tuple[Step, ...]:
        """The items as objects in execution order (for callers that want them; slow)."""
        s = self.schedule
        pl = s.placement
        where = self.rank.tolist()
        start = s.table.offsets.tolist()
        out = []
        for i in self.order.tolist():
            r = where[i]
            item = s.ranks[r][i - start[r]]
            stages = tuple(pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
            out.append(Step(r, item, item_needs(s, r, item), stages))
        return tuple(out)


#: a (rank, chunk, micro-batch) slot is complete with one F and one BW (two ops) or one
#: F, one B and one W (three): with these weights per op, only those reach these sums
_WEIGHT = np.array([4096 + 1, 4096 + 8, 4096 + 64, 4096 + 512], np.float64)  # F, B, W, BW
_COMPLETE = (2 * 4096 + 1 + 512, 3 * 4096 + 1 + 8 + 64)


def validate(schedule: Schedule) -> Schedule:
    """Raise PipesimError (DeadlockError for an order that cannot run) or return the schedule.

    The check is compile's, on arrays, as ``pipesim validate`` runs it; validate.py's per-op
    walk only words what it refuses. Run alone, the walk took 5.7 s for 1F1B at pp=100,
    M=4000 (800,000 ops; compile 0.1 s), minutes past the MAX_OPS the CLI allows. It lives
    here, not in validate.py, because compile uses that module's wording."""
    compile(schedule_arg(schedule, "pipesim.validate"))
    return schedule


def compile(schedule: Schedule) -> Program:
    """Check ``schedule`` (PipesimError, or DeadlockError naming the wait cycle) and lay
    it out as arrays with an executable order."""
    pl, M = schedule.placement, schedule.microbatches
    work(schedule.pp, M, stages=pl.stages, what=schedule.name)
    t = schedule.table
    n, S, C, pp = t.items, pl.stages, pl.chunks, schedule.pp
    pair = np.flatnonzero(t.kind2 >= 0)
    o_item, o_kind, o_chunk, o_mb = t.ops()  # the items' (first) ops, then the pairs' backwards
    rank = t.ranks_of_items()
    o_rank = rank[o_item] if len(pair) else rank
    if not ((o_mb >= 0) & (o_mb < M) & (o_chunk >= 0) & (o_chunk < C)).all():
        _refuse(schedule)
    route_of = np.asarray(pl.route_of, np.int32)
    o_route = route_of[o_mb]
    o_stage = op_stages(pl, o_rank, o_chunk, o_mb, o_route)
    if (o_stage < 0).any():
        _refuse(schedule)
    # slot: (rank, chunk, micro-batch); what each slot makes is ``made[2 * slot + phase]``
    # (phase 0: its forward, 1: its input gradient), the op's number
    idx = np.int32 if 2 * pp * C * M < 2**31 else np.int64
    slot = (o_rank.astype(idx) * C + o_chunk) * M + o_mb
    del o_rank
    base = np.full((len(pl.routes), S + 2), -1, idx)  # [route, stage + 1] -> slot of micro-batch 0 there
    for ri, route in enumerate(pl.routes):
        base[ri, 1:-1] = [(r * C + c) * M for r, c in route]
    on_route = (base[route_of, 1:-1] + np.arange(M, dtype=idx)[:, None]).ravel()
    if not np.isin(np.bincount(slot, _WEIGHT[o_kind], pp * C * M)[on_route], _COMPLETE).all() or (
        len(pair) and ((t.mb[pair] == t.mb2[pair]) & (t.chunk[pair] == t.chunk2[pair])).any()
    ):
        _refuse(schedule)
    del on_route
    made = np.zeros(2 * pp * C * M, np.int32)
    op = np.arange(len(o_kind), dtype=np.int32)
    isf = o_kind == F
    isb = (o_kind == B) | (o_kind == BW)
    made[2 * slot[isf]] = op[isf]
    made[2 * slot[isb] + 1] = op[isb]
    # what each op waits for (deps.needs), as made-indices, two columns: F the previous
    # stage's forward; B and BW their own forward, then the next stage's input gradient;
    # W its own B
    prev_f = base[o_route, o_stage]  # the slot base one stage back (column s is stage s - 1)
    col0 = np.where(isf, np.where(prev_f >= 0, 2 * (prev_f + o_mb), -1), 2 * slot + (o_kind == W))
    del prev_f
    next_b = base[o_route, o_stage + 2]
    col1 = np.where(isb & (next_b >= 0), 2 * (next_b + o_mb) + 1, -1)
    del next_b, o_route, slot
    # per item: its first op's columns, then its pair backward's (validate.item_needs)
    if len(pair):
        want = np.full((n, 4), -1, idx)
        want[:, 0], want[:, 1] = col0[:n], col1[:n]
        want[pair, 2], want[pair, 3] = col0[n:], col1[n:]
    else:
        want = np.stack([col0, col1], axis=1)
    del col0, col1
    has = want >= 0
    dep_op = made[want[has]]
    del want, made
    dep_ptr = np.zeros(n + 1, np.int32)
    np.cumsum(has.sum(axis=1, dtype=np.int32), out=dep_ptr[1:])
    del has
    dep = o_item[dep_op] if len(pair) else dep_op
    dep_half = (dep_op >= n).astype(np.int8) if len(pair) else np.broadcast_to(np.int8(0), dep_op.shape)
    del dep_op
    cross = rank[dep] != np.repeat(rank, np.diff(dep_ptr))
    order, _, placed = kernel.walk(t.offsets, dep_ptr, dep)
    if placed != n:
        execution_order(schedule)  # raises the DeadlockError naming the cycle
        raise AssertionError("the engine's walk and validate's disagree")
    first = np.zeros(n, np.uint8)
    first[t.offsets[:-1][np.diff(t.offsets) > 0]] = 1
    stage2 = np.full(n, -1, np.int32)
    stage2[pair] = o_stage[n:]
    shape, shapes = _shapes(t, o_stage[:n], stage2, S)
    return Program(schedule, first, dep_ptr, dep, dep_half, cross, order, shape, shapes)


def op_stages(pl, rank: np.ndarray, chunk: np.ndarray, mb: np.ndarray, route: np.ndarray | None = None) -> np.ndarray:
    """``Placement.stage_of`` over arrays of ops (chunks and micro-batches in range): the
    stage each runs, -1 where its micro-batch's route does not pass that (rank, chunk)."""
    if route is None:
        route = np.asarray(pl.route_of, np.int32)[mb]
    return pl.stage_grid()[route, rank, chunk]


def _refuse(schedule: Schedule) -> None:
    check_structure(schedule)  # words the first problem as PipesimError
    raise AssertionError("the engine's structure check and validate's disagree")


def _shapes(t: RankTable, stage: np.ndarray, stage2: np.ndarray, S: int) -> tuple[np.ndarray, tuple]:
    """Number the items by (kind, stage, backward kind, backward stage); one example each."""
    key = ((t.kind.astype(np.int64) * S + stage) * 5 + (t.kind2 + 1)) * (S + 1) + (stage2 + 1)
    space = 4 * S * 5 * (S + 1)
    if space <= 4 * len(key) + 1024:  # dense: linear, no sort
        seen = np.zeros(space, bool)
        seen[key] = True
        keys = np.flatnonzero(seen)
        ids = np.zeros(space, np.int32)
        ids[keys] = np.arange(len(keys), dtype=np.int32)
        shape = ids[key]
    else:
        keys, shape = np.unique(key, return_inverse=True)
    shape = shape.astype(np.int16 if len(keys) < 2**15 else np.int32)
    first = np.full(len(keys), len(key), np.int64)
    np.minimum.at(first, shape, np.arange(len(key)))
    shapes = []
    for i in first.tolist():
        item = t.item(i)
        shapes.append((item, (int(stage[i]),) if stage2[i] < 0 else (int(stage[i]), int(stage2[i]))))
    return shape, tuple(shapes)


def item_times(program: Program, costs) -> np.ndarray:
    """Every item's duration under ``costs``: the cost model prices one item per shape
    (``op_time``/``pair_time`` see only kinds and stages), then a gather."""
    per = [
        costs.pair_time(item, *stages) if isinstance(item, Pair) else costs.op_time(item, stages[0])
        for item, stages in program.shapes
    ]
    return np.asarray(per, np.float64)[program.shape] if per else np.zeros(0)


def _edge_keys(program: Program) -> np.ndarray:
    """Every edge's (source rank) * pp + (destination rank)."""
    pp = program.schedule.pp
    rank = program.rank
    key = rank[program.dep].astype(np.int64 if pp * pp >= 2**31 else np.int32) * pp
    key += np.repeat(rank, np.diff(program.dep_ptr))
    return key


def edge_latency(program: Program, costs) -> np.ndarray:
    """Every edge's latency: ``p2p_time(src, dst)`` across ranks (one call per rank pair
    that occurs), 0 on the same rank."""
    pp = program.schedule.pp
    pairs = program.rank_pairs
    if not len(pairs):
        return np.zeros(len(program.dep), np.float64)
    per = [costs.p2p_time(int(k // pp), int(k % pp)) for k in pairs.tolist()]
    if len({float(x).hex() for x in per}) == 1:
        # one latency for every pair (as every cost model here gives): no per-edge gather
        return np.where(program.cross, float(per[0]), 0.0)
    key = _edge_keys(program)
    table = np.zeros(pp * pp if pp <= 4096 else len(pairs), np.float64)
    if pp <= 4096:
        table[pairs] = per
        lat = table[key]
    else:
        table[:] = per
        lat = table[np.searchsorted(pairs, key).clip(0, len(pairs) - 1)]
    lat[~program.cross] = 0.0
    return lat


def run(program: Program, costs) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every item under ``costs``."""
    lat = edge_latency(program, costs)
    dur = item_times(program, costs)
    return kernel.times(program.order, program.first, program.dep_ptr, program.dep, lat, dur)


def op_of(table: RankTable, i: int, half: int) -> Op:
    """Op ``half`` (0: the item or a pair's forward, 1: a pair's backward) of item i."""
    if half:
        return Op(KINDS[table.kind2[i]], int(table.chunk2[i]), int(table.mb2[i]))
    return Op(KINDS[table.kind[i]], int(table.chunk[i]), int(table.mb[i]))
