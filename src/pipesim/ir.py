"""The schedule IR: ops, overlapped pairs, placements, schedules and their text notation.

A schedule is plain data: for each rank, the ordered list of what it executes. Everything
else in pipesim (validation, simulation, drawing, execution) reads this data and nothing
more, so a schedule written by hand or loaded from a file is as good as a generated one.

Notation (shared with ``shared/reference``): ``F{chunk}.{microbatch}`` and likewise ``B``,
``W`` and ``BW``; an overlapped forward/backward pair is ``F1.6&BW0.0``, forward first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import PipesimError
from .inputs import MAX_COUNT, integer, number, shorten, work
from .ops import KINDS, Item, Op, Pair, ops_of  # noqa: F401 (the IR's names, imported from here)
from .schedule_checks import check_columns, check_placement, check_schedule, item_problem, placement_sizes, shown

# ---------------------------------------------------------------------------------------
# Placement: which (rank, chunk) runs which stage of which route.


@dataclass(frozen=True)
class Placement:
    """Where the model's stages live and which way each micro-batch travels.

    A *route* is the sequence of (rank, chunk) positions a micro-batch visits, one per
    model stage, forward in that order and backward in reverse. Every route covers the
    whole model, so ``len(route)`` is the number of stages. Most schedules have one
    route; DualPipe and Chimera have two running in opposite directions over two copies
    of the model. ``route_of[mb]`` names the route micro-batch ``mb`` takes.
    """

    kind: str
    pp: int
    chunks: int
    routes: tuple[tuple[tuple[int, int], ...], ...]
    route_of: tuple[int, ...]
    _stage: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_placement(self)  # made by hand, as a file's is
        stage = {}
        for ri, route in enumerate(self.routes):
            if len(route) != len(self.routes[0]):
                raise PipesimError("every route of a placement must have the same number of stages")
            for s, (rank, chunk) in enumerate(route):
                if not (0 <= rank < self.pp and 0 <= chunk < self.chunks):
                    raise PipesimError(
                        f"placement position (rank {rank}, chunk {chunk}) is outside pp={self.pp}, chunks={self.chunks}"
                    )
                if (ri, rank, chunk) in stage:
                    raise PipesimError(f"route {ri} visits rank {rank} chunk {chunk} twice")
                stage[(ri, rank, chunk)] = s
        for mb, ri in enumerate(self.route_of):
            if not 0 <= ri < len(self.routes):
                raise PipesimError(
                    f"micro-batch {mb} takes route {ri}, but there {'is 1 route' if len(self.routes) == 1 else f'are {len(self.routes)} routes'}"
                )
        object.__setattr__(self, "_stage", stage)

    @property
    def stages(self) -> int:
        """Number of model stages along a route."""
        return len(self.routes[0])

    @property
    def microbatches(self) -> int:
        return len(self.route_of)

    @property
    def parameter_copies(self) -> float:
        """Parameters held per rank relative to 1F1B on the same ranks: each rank holds
        ``chunks`` stages of ``1/stages`` of the model, 1F1B one stage of ``1/pp``."""
        return self.chunks * self.pp / self.stages

    def stage_of(self, rank: int, chunk: int, mb: int) -> int | None:
        """The stage that (rank, chunk) runs for micro-batch ``mb``, or None if its route
        does not pass there."""
        return self._stage.get((self.route_of[mb], rank, chunk))

    def position(self, mb: int, stage: int) -> tuple[int, int]:
        """The (rank, chunk) that runs ``stage`` for micro-batch ``mb``."""
        return self.routes[self.route_of[mb]][stage]

    def stage_grid(self) -> np.ndarray:
        """``stage_of`` as an array: ``[route, rank, chunk]`` -> stage, -1 where the route
        does not pass."""
        grid = np.full((len(self.routes), self.pp, self.chunks), -1, np.int32)
        for ri, route in enumerate(self.routes):
            for s, (r, c) in enumerate(route):
                grid[ri, r, c] = s
        return grid

    def model_stage(self, rank: int, chunk: int) -> int:
        """The model stage whose parameters (rank, chunk) holds (any route through it)."""
        for ri in range(len(self.routes)):
            s = self._stage.get((ri, rank, chunk))
            if s is not None:
                return s
        raise PipesimError(f"rank {rank} chunk {chunk} holds no stage")

    def held(self) -> tuple[tuple[int, ...], ...]:
        """Per rank, the model stages whose parameters it holds, chunk by chunk."""
        return tuple(tuple(self.model_stage(r, ch) for ch in range(self.chunks)) for r in range(self.pp))

    # Constructors for the standard shapes -------------------------------------------

    @classmethod
    def flat(cls, pp: int, microbatches: int) -> Placement:
        """Rank r holds stage r (GPipe, 1F1B, ZB-H1/H2)."""
        placement_sizes(pp, microbatches)
        route = tuple((r, 0) for r in range(pp))
        return cls("flat", pp, 1, (route,), (0,) * microbatches)

    @classmethod
    def interleaved(cls, pp: int, microbatches: int, chunks: int) -> Placement:
        """Chunk c of rank r holds stage c*pp + r (Megatron's interleaved 1F1B)."""
        placement_sizes(pp, microbatches, chunks)
        route = tuple((r, c) for c in range(chunks) for r in range(pp))
        return cls("interleaved", pp, chunks, (route,), (0,) * microbatches)

    @classmethod
    def v(cls, pp: int, microbatches: int) -> Placement:
        """Chunk 0 of rank r holds stage r, chunk 1 holds stage 2pp-1-r (ZB-V, DualPipeV)."""
        placement_sizes(pp, microbatches, 2)
        route = tuple((r, 0) for r in range(pp)) + tuple((r, 1) for r in reversed(range(pp)))
        return cls("v", pp, 2, (route,), (0,) * microbatches)

    @classmethod
    def dual(cls, pp: int, microbatches: int) -> Placement:
        """Two copies of the model in opposite directions (DualPipe, Chimera): chunk 0 of
        rank r is stage r of the route entered at rank 0, chunk 1 is stage pp-1-r of the
        route entered at rank pp-1. The first half of the micro-batches takes route 0."""
        placement_sizes(pp, microbatches, 2)
        down = tuple((r, 0) for r in range(pp))
        up = tuple((r, 1) for r in reversed(range(pp)))
        half = microbatches // 2
        return cls("dual", pp, 2, (down, up), (0,) * half + (1,) * (microbatches - half))

    @classmethod
    def standard(cls, kind: str, pp: int, microbatches: int, chunks: int = 1) -> Placement:
        if kind == "flat":
            return cls.flat(pp, microbatches)
        if kind == "interleaved":
            return cls.interleaved(pp, microbatches, chunks)
        if kind == "v":
            return cls.v(pp, microbatches)
        if kind == "dual":
            return cls.dual(pp, microbatches)
        raise PipesimError(f"unknown placement kind {kind!r}; use flat, interleaved, v or dual")

    def to_dict(self) -> dict:
        d: dict = {"kind": self.kind, "chunks": self.chunks}
        standard = self.kind in STANDARD_PLACEMENTS and self == Placement.standard(
            self.kind, self.pp, self.microbatches, self.chunks
        )
        if not standard:
            d["routes"] = [[list(p) for p in route] for route in self.routes]
            d["route_of"] = list(self.route_of)
        return d

    @classmethod
    def from_dict(cls, d: dict, pp: int, microbatches: int) -> Placement:
        kind = d.get("kind")
        if "routes" in d:
            try:
                # indices bounded before any array is sized by them (a chunk of 2**31 asked
                # numpy for 32 GiB; 1e308 for a dimension past its maximum)
                routes = tuple(
                    tuple((number(r, "route rank", 0, MAX_COUNT, integer=True), number(c, "route chunk", 0, MAX_COUNT, integer=True)) for r, c in route)
                    for route in d["routes"]
                )  # fmt: skip
                route_of = tuple(number(x, "route_of", 0, MAX_COUNT, integer=True) for x in d.get("route_of", [0] * microbatches))
                chunks = d.get("chunks", 1 + max(c for route in routes for _, c in route))
                chunks = number(chunks, "placement chunks", 1, MAX_COUNT, integer=True)
            except (TypeError, ValueError) as e:
                raise PipesimError(f"malformed placement routes: {e}") from None
            work(pp, microbatches, chunks)
            if len(route_of) != microbatches:
                raise PipesimError(f"placement route_of has {len(route_of)} entries, expected {microbatches}")
            return cls(str(kind or "custom"), pp, chunks, routes, route_of)
        if kind not in STANDARD_PLACEMENTS:
            raise PipesimError(f"unknown placement kind {kind!r}; use one of {', '.join(STANDARD_PLACEMENTS)} or give routes")
        return cls.standard(kind, pp, microbatches, int(d.get("chunks", 1)))


STANDARD_PLACEMENTS = ("flat", "interleaved", "v", "dual")


# ---------------------------------------------------------------------------------------
# The ranks' items as flat arrays


class RankTable(Sequence):
    """The per-rank item lists of a schedule stored as flat integer arrays, one entry per
    item, rank after rank: ``offsets[r]:offsets[r + 1]`` are rank r's items. ``kind``,
    ``chunk`` and ``mb`` describe the item's op (a pair's forward); ``kind2``, ``chunk2``
    and ``mb2`` a pair's backward (``kind2`` is -1 for a lone op). Kinds are indices into
    ``KINDS``.

    It is a sequence of per-rank tuples of items, as ``Schedule.ranks`` is, so a schedule
    built as arrays (large sizes, where a Python object per op would cost more than the
    simulation) reads like any other; the Op objects of a rank are made when first asked
    for. The engine, the metrics and the builders of large schedules use the arrays.
    """

    # __weakref__: what is worked out of a table alone is kept as long as it lives (order_memo)
    __slots__ = ("offsets", "kind", "chunk", "mb", "kind2", "chunk2", "mb2", "_rows", "__weakref__")

    def __init__(self, offsets, kind, chunk, mb, kind2=None, chunk2=None, mb2=None) -> None:
        n = len(kind)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.kind = np.asarray(kind, dtype=np.int8)
        self.chunk = np.asarray(chunk, dtype=np.int32)
        self.mb = np.asarray(mb, dtype=np.int32)
        # without pairs the backward columns are read-only views of one number: no memory
        self.kind2 = np.broadcast_to(np.int8(-1), (n,)) if kind2 is None else np.asarray(kind2, dtype=np.int8)
        self.chunk2 = np.broadcast_to(np.int32(0), (n,)) if chunk2 is None else np.asarray(chunk2, dtype=np.int32)
        self.mb2 = np.broadcast_to(np.int32(0), (n,)) if mb2 is None else np.asarray(mb2, dtype=np.int32)
        if self.offsets[0] != 0 or self.offsets[-1] != n or any(len(a) != n for a in (self.chunk, self.mb, self.kind2)):
            raise PipesimError("malformed rank table: offsets and item columns disagree")
        self._rows: list = [None] * (len(self.offsets) - 1)

    @classmethod
    def of(cls, ranks: Sequence[Sequence[Item]]) -> RankTable:
        """The arrays of per-rank item lists (a few list comprehensions per rank: the
        planner converts thousands of builders' tuples)."""
        if isinstance(ranks, RankTable):
            return ranks
        code = {k: i for i, k in enumerate(KINDS)}
        kind: list[int] = []
        chunk: list[int] = []
        mb: list[int] = []
        kind2: list[int] = []
        chunk2: list[int] = []
        mb2: list[int] = []
        offsets = [0]
        paired = False
        try:
            paired = cls._columns(ranks, code, kind, chunk, mb, kind2, chunk2, mb2, offsets)
        except (AttributeError, KeyError, TypeError):  # not an item: say which, not where it broke
            raise item_problem(ranks) from None
        cols = check_columns(ranks, kind, chunk, mb, kind2, chunk2, mb2)
        return cls(offsets, *cols) if paired else cls(offsets, *cols[:3])

    @staticmethod
    def _columns(ranks, code, kind, chunk, mb, kind2, chunk2, mb2, offsets) -> bool:
        """Fill the column lists from per-rank items; whether any item is a pair."""
        paired = False
        for items in ranks:
            items = items if isinstance(items, (tuple, list)) else tuple(items)
            n = len(items)
            if any(isinstance(it, Pair) for it in items):
                paired = True
                backs = [it.backward if isinstance(it, Pair) else None for it in items]
                kind2 += [-1 if b is None else code[b.kind] for b in backs]
                chunk2 += [0 if b is None else b.chunk for b in backs]
                mb2 += [0 if b is None else b.mb for b in backs]
                items = [it.forward if isinstance(it, Pair) else it for it in items]
            else:
                kind2 += [-1] * n
                chunk2 += [0] * n
                mb2 += [0] * n
            kind += [code[op.kind] for op in items]
            chunk += [op.chunk for op in items]
            mb += [op.mb for op in items]
            offsets.append(len(kind))
        return paired

    @classmethod
    def stack(cls, rows: Sequence[tuple[np.ndarray, ...]]) -> RankTable:
        """From per-rank columns (kind, chunk, mb) or (kind, chunk, mb, kind2, chunk2, mb2),
        as the array builders make them."""
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(row[0]) for row in rows], out=offsets[1:])
        cols = [np.concatenate([row[j] for row in rows]) if rows else np.zeros(0, np.int32) for j in range(3)]
        if rows and len(rows[0]) == 6:
            cols += [np.concatenate([row[j] for row in rows]) for j in range(3, 6)]
        return cls(offsets, *cols)

    @property
    def items(self) -> int:
        return len(self.kind)

    @property
    def num_ops(self) -> int:
        return self.items + int(np.count_nonzero(self.kind2 >= 0))

    def ops(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every op once, as (item, kind, chunk, mb): the items' own (first) ops in item
        order, then the pairs' backwards."""
        pair = np.flatnonzero(self.kind2 >= 0)
        if not len(pair):  # no copies
            return np.arange(self.items, dtype=np.int32), self.kind, self.chunk, self.mb
        return (
            np.concatenate([np.arange(self.items, dtype=np.int32), pair.astype(np.int32)]),
            np.concatenate([self.kind, self.kind2[pair]]),
            np.concatenate([self.chunk, self.chunk2[pair]]),
            np.concatenate([self.mb, self.mb2[pair]]),
        )

    def ranks_of_items(self) -> np.ndarray:
        """The rank of every item."""
        return np.repeat(np.arange(len(self), dtype=np.int32), np.diff(self.offsets))

    def item(self, i: int) -> Item:
        op = Op(KINDS[self.kind[i]], int(self.chunk[i]), int(self.mb[i]))
        if self.kind2[i] < 0:
            return op
        return Pair(op, Op(KINDS[self.kind2[i]], int(self.chunk2[i]), int(self.mb2[i])))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, r):
        if isinstance(r, slice):
            return tuple(self[i] for i in range(*r.indices(len(self))))
        r = range(len(self))[r]  # ranks[-1] read offsets[-1]:offsets[0], an empty rank, unless cached
        row = self._rows[r]
        if row is None:
            a, b = int(self.offsets[r]), int(self.offsets[r + 1])
            ops = [
                Op(KINDS[k], c, m) for k, c, m in zip(self.kind[a:b].tolist(), self.chunk[a:b].tolist(), self.mb[a:b].tolist())
            ]
            for j in np.flatnonzero(self.kind2[a:b] >= 0).tolist():
                i = a + j
                ops[j] = Pair(ops[j], Op(KINDS[self.kind2[i]], int(self.chunk2[i]), int(self.mb2[i])))
            row = self._rows[r] = tuple(ops)
        return row

    def __eq__(self, other) -> bool:
        if isinstance(other, RankTable):
            cols = ("offsets", "kind", "chunk", "mb", "kind2")
            pairs = self.kind2 >= 0
            return all(np.array_equal(getattr(self, c), getattr(other, c)) for c in cols) and all(
                np.array_equal(getattr(self, c)[pairs], getattr(other, c)[pairs]) for c in ("chunk2", "mb2")
            )
        if isinstance(other, Sequence):
            return len(other) == len(self) and all(tuple(a) == b for a, b in zip(other, self))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RankTable({len(self)} ranks, {self.items} items)"


# ---------------------------------------------------------------------------------------
# Schedule


@dataclass(frozen=True)
class Schedule:
    """A complete pipeline schedule: for each rank, the ordered items it executes.

    ``ranks`` is a tuple of per-rank tuples of items, or the same as a ``RankTable``
    (the array form the large builders emit); ``table`` is always the array form."""

    name: str
    pp: int
    microbatches: int
    placement: Placement
    ranks: tuple[tuple[Item, ...], ...] | RankTable
    # how a searched schedule was found (method, proven optimality, bounds); empty for
    # the handcrafted ones. Not part of the schedule's identity.
    info: dict = field(default_factory=dict, compare=False, repr=False)

    _table: list = field(default_factory=list, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_schedule(self, Placement)  # made by hand, as a file's is
        if len(self.ranks) != self.pp:
            raise PipesimError(f"schedule has {len(self.ranks)} rank lists, expected pp={self.pp}")

    @property
    def table(self) -> RankTable:
        """The items as flat arrays (made once from tuples of items if built that way)."""
        if not self._table:
            self._table.append(RankTable.of(self.ranks))
        return self._table[0]

    def items(self) -> Iterator[tuple[int, Item]]:
        for r, items in enumerate(self.ranks):
            for item in items:
                yield r, item

    @property
    def num_ops(self) -> int:
        return self.table.num_ops

    def to_notation(self) -> list[list[str]]:
        """Each rank's items as ``str(item)`` writes them (``F0.3``, ``F0.3&B1.0``)."""
        return [self.rank_notation(r) for r in range(self.pp)]

    def rank_notation(self, r: int) -> list[str]:
        """Rank ``r``'s items as ``str(item)`` writes them, read off the table's columns:
        no Op object per op at millions of ops (and a writer that wants one rank at a
        time never holds the strings of all of them)."""
        t = self.table
        a, b = int(t.offsets[r]), int(t.offsets[r + 1])
        row = [f"{KINDS[k]}{c}.{m}" for k, c, m in zip(t.kind[a:b].tolist(), t.chunk[a:b].tolist(), t.mb[a:b].tolist())]
        for j in np.flatnonzero(t.kind2[a:b] >= 0).tolist():
            row[j] += f"&{KINDS[t.kind2[a + j]]}{t.chunk2[a + j]}.{t.mb2[a + j]}"
        return row

    def to_dict(self, ranks: bool = True) -> dict:
        """The schedule file's document; without its ``ranks`` when ``ranks`` is false
        (a writer that adds them one rank at a time)."""
        d = {
            "schedule": self.name,
            "pp": self.pp,
            "microbatches": self.microbatches,
            "stages": self.placement.stages,
            "placement": self.placement.to_dict(),
        }
        if ranks:
            d["ranks"] = self.to_notation()
        return d


# ---------------------------------------------------------------------------------------
# Text notation

_OP_RE = re.compile(r"^(BW|F|B|W)(\d+)\.(\d+)$")


def parse_op(text: str) -> Op:
    if not isinstance(text, str):
        raise PipesimError(f"cannot read op {shorten(text)}: expected a string such as F0.3, B1.2, W0.0 or BW1.5")
    m = _OP_RE.match(text.strip())
    if not m:
        raise PipesimError(f"cannot read op {text!r}: expected KIND CHUNK.MICROBATCH such as F0.3, B1.2, W0.0 or BW1.5")
    # bounded before int(): an index past MAX_COUNT fits no array (the engine's are int32)
    chunk = integer(m.group(2), f"op {shorten(text)}: chunk", 0, MAX_COUNT)
    return Op(m.group(1), chunk, integer(m.group(3), f"op {shorten(text)}: micro-batch", 0, MAX_COUNT))


def parse_item(text: str) -> Item:
    """Parse ``F0.3`` or a pair ``F1.6&BW0.0``."""
    if isinstance(text, str) and "&" in text:
        parts = text.split("&")
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise PipesimError(f"cannot read pair {text!r}: a pair joins exactly two ops, like F1.6&BW0.0")
        f, b = parse_op(parts[0]), parse_op(parts[1])
        if f.kind != "F" or b.kind not in ("B", "BW"):
            raise PipesimError(f"cannot read pair {text!r}: a pair is a forward then a backward, like F1.6&BW0.0")
        return Pair(f, b)
    return parse_op(text)


def parse_rank(line: str) -> tuple[Item, ...]:
    """Parse one rank's whitespace-separated items."""
    return tuple(parse_item(tok) for tok in line.split())


def format_rank(items: tuple[Item, ...]) -> str:
    return " ".join(str(it) for it in items)


def schedule_arg(value: object, who: str) -> Schedule:
    """``value`` when it is a Schedule; else the error saying what ``who`` (a public
    function) takes, instead of an AttributeError inside it."""
    if isinstance(value, Schedule):
        return value
    hint = f"; pipesim.build({value!r}, pp, microbatches) builds one" if isinstance(value, str) else ""
    raise PipesimError(f"{who} takes a pipesim.Schedule (pipesim.build or a schedule file makes one), got {shown(value)}{hint}")
