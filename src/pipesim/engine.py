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
from .errors import PipesimError
from .ir import KINDS, Item, Op, Pair, RankTable, Schedule
from .validate import check_structure, execution_order, item_needs

F, B, W, BW = range(4)

#: The most ops one schedule may have: the engine (build, compile, simulate, summarize)
#: runs about 2-5 million ops per second of CPU and holds about 100 bytes per op, so
#: this is about a minute of work and a few GB; larger sizes are refused before
#: anything is allocated (``check_size``).
MAX_OPS = 200_000_000


def check_size(pp: int, microbatches: int, stages: int, what: str = "schedule") -> None:
    """Refuse, before building anything, a size whose ops exceed ``MAX_OPS``: a
    micro-batch passes ``stages`` stages, with at most three ops (F, B, W) each."""
    ops = 3 * microbatches * stages
    if ops > MAX_OPS:
        raise PipesimError(
            f"{what} too large: pp={pp}, M={microbatches}, {stages} stages is up to {ops:,} ops, above the limit of "
            f"{MAX_OPS:,} (about a minute of simulation); use fewer micro-batches or stages"
        )


@dataclass(frozen=True, eq=False)
class Step:
    """One item of a compiled program, as objects (``Program.steps``, made on demand)."""

    rank: int
    item: Item
    needs: tuple[Key, ...]
    stages: tuple[int, ...]  # of the item's ops, in order


@dataclass(frozen=True, eq=False)
class Program:
    """A checked schedule as arrays, ready to time under any costs."""

    schedule: Schedule
    rank: np.ndarray  # int32 per item
    stage: np.ndarray  # int32 per item: its (first) op's stage
    stage2: np.ndarray  # int32 per item: a pair's backward's stage, -1 for a lone op
    prev: np.ndarray  # int32 per item: the item before it on its rank, -1 for the first
    dep_ptr: np.ndarray  # int64, items + 1
    dep: np.ndarray  # int32 per edge: the item waited for
    dep_half: np.ndarray  # int8 per edge: which op of that item made what is waited for
    cross: np.ndarray  # bool per edge: the wait crosses ranks (a P2P transfer)
    order: np.ndarray  # int32: every item once, each after all it waits for
    shape: np.ndarray  # int32 per item: index into ``shapes``
    shapes: tuple[tuple[Item, tuple[int, ...]], ...]  # one (item, stages) per shape

    @property
    def table(self) -> RankTable:
        return self.schedule.table

    @property
    def items(self) -> int:
        return len(self.rank)

    @cached_property
    def steps(self) -> tuple[Step, ...]:
        """The items as objects in execution order (for callers that want them; slow)."""
        s = self.schedule
        where = self.rank.tolist()
        first = s.table.offsets.tolist()
        out = []
        for i in self.order.tolist():
            r = where[i]
            item = s.ranks[r][i - first[r]]
            stages = (int(self.stage[i]),) if self.stage2[i] < 0 else (int(self.stage[i]), int(self.stage2[i]))
            out.append(Step(r, item, item_needs(s, r, item), stages))
        return tuple(out)


def compile(schedule: Schedule) -> Program:
    """Check ``schedule`` (PipesimError, or DeadlockError naming the wait cycle) and lay
    it out as arrays with an executable order."""
    pl, M = schedule.placement, schedule.microbatches
    check_size(schedule.pp, M, pl.stages, schedule.name)
    t = schedule.table
    n, S, C = t.items, pl.stages, pl.chunks
    rank = t.ranks_of_items()
    pair = np.flatnonzero(t.kind2 >= 0)
    o_item, o_kind, o_chunk, o_mb = t.ops()  # the items' (first) ops, then the pairs' backwards
    o_rank = rank[o_item]
    route_of = np.asarray(pl.route_of, np.int32)
    inside = (o_mb >= 0) & (o_mb < M) & (o_chunk >= 0) & (o_chunk < C)
    if not inside.all():
        _refuse(schedule)
    o_stage = pl.stage_grid()[route_of[o_mb], o_rank, o_chunk]
    if (o_stage < 0).any():
        _refuse(schedule)
    # each (rank, chunk, micro-batch) on a route: one F, and one BW or one B and one W
    slot = (o_rank.astype(np.int64) * C + o_chunk) * M + o_mb
    count = np.bincount(slot * 4 + o_kind, minlength=schedule.pp * C * M * 4).reshape(-1, 4)
    on_route = np.zeros(schedule.pp * C * M, bool)
    routes = np.asarray(pl.routes, np.int32).reshape(len(pl.routes), S, 2)  # [route, stage] -> (rank, chunk)
    pos = routes[route_of]  # [mb, stage] -> (rank, chunk)
    on_route[((pos[..., 0].astype(np.int64) * C + pos[..., 1]) * M + np.arange(M)[:, None]).ravel()] = True
    nf, nb, nw, nbw = count[on_route].T
    split = (nb == 1) & (nw == 1) & (nbw == 0)
    fused = (nbw == 1) & (nb == 0) & (nw == 0)
    if not ((nf == 1) & (split | fused)).all() or (
        len(pair) and ((t.mb[pair] == t.mb2[pair]) & (t.chunk[pair] == t.chunk2[pair])).any()
    ):
        _refuse(schedule)
    # who makes what: the item (and its op) ending each forward and each input gradient
    made_f = np.zeros(len(on_route), np.int32)
    made_b = np.zeros(len(on_route), np.int32)
    o_half = np.concatenate([np.zeros(n, np.int8), np.ones(len(pair), np.int8)])
    half_b = np.zeros(len(on_route), np.int8)
    isf = o_kind == F
    isb = (o_kind == B) | (o_kind == BW)
    made_f[slot[isf]] = o_item[isf]
    made_b[slot[isb]] = o_item[isb]
    half_b[slot[isb]] = o_half[isb]
    # what each op waits for (deps.needs): F the previous stage's F; B and BW their own F
    # and the next stage's input gradient; W its own B. Two columns per op.
    want = np.full((len(o_item), 2), -1, np.int64)  # slots
    want_b = np.zeros((len(o_item), 2), bool)  # the slot's input gradient, not its forward
    up = isf & (o_stage > 0)
    p = pos[o_mb[up], o_stage[up] - 1]
    want[up, 0] = (p[:, 0].astype(np.int64) * C + p[:, 1]) * M + o_mb[up]
    want[isb, 0] = slot[isb]
    down = isb & (o_stage < S - 1)
    p = pos[o_mb[down], o_stage[down] + 1]
    want[down, 1] = (p[:, 0].astype(np.int64) * C + p[:, 1]) * M + o_mb[down]
    want_b[down, 1] = True
    isw = o_kind == W
    want[isw, 0] = slot[isw]
    want_b[isw, 0] = True
    # per item: its first op's two columns, then its pair backward's (validate.item_needs)
    per_item = np.full((n, 4), -1, np.int64)
    per_b = np.zeros((n, 4), bool)
    per_item[:, :2] = want[:n]
    per_b[:, :2] = want_b[:n]
    per_item[pair, 2:] = want[n:]
    per_b[pair, 2:] = want_b[n:]
    has = per_item >= 0
    wanted, wanted_b = per_item[has], per_b[has]
    dep = np.where(wanted_b, made_b[np.maximum(wanted, 0)], made_f[np.maximum(wanted, 0)]).astype(np.int32)
    dep_half = np.where(wanted_b, half_b[np.maximum(wanted, 0)], 0).astype(np.int8)
    dep_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(has.sum(axis=1), out=dep_ptr[1:])
    cross = rank[dep] != np.repeat(rank, np.diff(dep_ptr))
    order, _, placed = kernel.walk(t.offsets, dep_ptr, dep)
    if placed != n:
        execution_order(schedule)  # raises the DeadlockError naming the cycle
        raise AssertionError("the engine's walk and validate's disagree")
    prev = np.arange(-1, n - 1, dtype=np.int32)
    prev[t.offsets[:-1][np.diff(t.offsets) > 0]] = -1
    stage = o_stage[:n]
    stage2 = np.full(n, -1, np.int32)
    stage2[pair] = o_stage[n:]
    shape, shapes = _shapes(t, stage, stage2, S)
    return Program(schedule, rank, stage, stage2, prev, dep_ptr, dep, dep_half, cross, order, shape, shapes)


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
        shape = shape.astype(np.int32)
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


def edge_latency(program: Program, costs) -> np.ndarray:
    """Every edge's latency: ``p2p_time(src, dst)`` across ranks (one call per rank pair
    that occurs), 0 on the same rank."""
    lat = np.zeros(len(program.dep), np.float64)
    if not program.cross.any():
        return lat
    pp = program.schedule.pp
    e = np.flatnonzero(program.cross)
    src = program.rank[program.dep[e]].astype(np.int64)
    dst = np.repeat(program.rank, np.diff(program.dep_ptr))[e].astype(np.int64)
    pairs, inv = np.unique(src * pp + dst, return_inverse=True)
    per = np.asarray([costs.p2p_time(int(k // pp), int(k % pp)) for k in pairs.tolist()], np.float64)
    lat[e] = per[inv]
    return lat


def run(program: Program, costs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, edge latency) of every item under ``costs``."""
    lat = edge_latency(program, costs)
    start, end = kernel.times(program.order, program.prev, program.dep_ptr, program.dep, lat, item_times(program, costs))
    return start, end, lat


def op_of(table: RankTable, i: int, half: int) -> Op:
    """Op ``half`` (0: the item or a pair's forward, 1: a pair's backward) of item i."""
    if half:
        return Op(KINDS[table.kind2[i]], int(table.chunk2[i]), int(table.mb2[i]))
    return Op(KINDS[table.kind[i]], int(table.chunk[i]), int(table.mb[i]))
