"""The Timeline: when every op ran on every rank, simulated or measured.

The simulator and the executor both produce this one type, so "simulation versus reality"
is a comparison of two values of it, and metrics, charts and traces read either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PipesimError
from .inputs import MAX_RANKS
from .ir import Item, Op, Pair, RankTable
from .schedule_checks import shown, whole


@dataclass(frozen=True, slots=True)
class Segment:
    """A finer piece of an event on one stream of its rank: ``stream`` is ``"compute"`` or
    ``"comm"``; ``label`` names the part (for example ``"MLP(B) 3"`` or ``"DISPATCH(F) 7"``).
    Cost models that know an item's inside (the component model) provide these."""

    stream: str
    label: str
    start: float
    end: float


@dataclass(frozen=True)
class Inside:
    """What runs inside one item, times relative to its start. Cost models that see inside
    ops (the component model) share one ``Inside`` among all items of the same shape, so a
    timeline of many thousand pairs stays cheap; ``Event.segments`` spells it out.

    ``parts`` are (stream, part, half, layer, start, end): ``half`` 0 is the forward of a
    pair (or the op itself), 1 its backward; a non-empty ``tag`` names a half micro-batch.
    """

    parts: tuple[tuple[str, str, int, int, float, float], ...]
    compute: float  # time the compute stream is busy
    exposed: float  # time communication runs while compute is idle
    tags: tuple[str, ...] = ()  # per part: "" or the half micro-batch ("a", "b")

    @classmethod
    def of(cls, segments: tuple[Segment, ...]) -> Inside:
        """From segments relative to the item's start (for measured timelines, say)."""
        parts = tuple((g.stream, g.label, 0, -1, g.start, g.end) for g in segments)
        compute = sorted((g.start, g.end) for g in segments if g.stream == "compute")
        comm = sorted((g.start, g.end) for g in segments if g.stream != "compute")
        return cls(parts, sum(b - a for a, b in compute), exposed_time(compute, comm))


def exposed_time(compute: list[tuple[float, float]], comm: list[tuple[float, float]]) -> float:
    """Length of ``comm`` not covered by ``compute``; both sorted, each one stream (disjoint)."""
    exposed, i = 0.0, 0
    n = len(compute)  # asked of every plan a search makes: its length looked up once
    for a, b in comm:
        while i < n and compute[i][1] <= a:
            i += 1
        covered, j = 0.0, i
        while j < n and compute[j][0] < b:
            covered += min(b, compute[j][1]) - max(a, compute[j][0])
            j += 1
        exposed += (b - a) - covered
    return exposed


@dataclass(frozen=True, slots=True)
class Event:
    """One item (op or pair) on one rank, from ``start`` to ``end``; ``inside``, when the
    cost model knows it, says what ran on which stream meanwhile."""

    rank: int
    item: Item
    start: float
    end: float
    inside: Inside | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The inside in absolute time, each part labelled like ``MLP(B) BW1.5 L0``."""
        if self.inside is None:
            return ()
        names = (str(self.item.forward), str(self.item.backward)) if isinstance(self.item, Pair) else (str(self.item),)
        tags = self.inside.tags or ("",) * len(self.inside.parts)
        out = []
        for (stream, part, half, layer, a, b), tag in zip(self.inside.parts, tags):
            label = part if layer < 0 else f"{part} {names[half]}{tag} L{layer}"
            out.append(Segment(stream, label, self.start + a, self.start + b))
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Transfer:
    """A point-to-point transfer: ``op``'s output (activation for F, gradient for B/BW)
    leaves ``src`` at ``start`` and is usable on ``dst`` at ``end``."""

    src: int
    dst: int
    op: Op
    start: float
    end: float


class Timeline:
    """When every item ran on every rank: ``events[r]`` in rank r's order.

    Stored as arrays over the items, rank after rank (``table``: what each item is;
    ``starts``, ``ends``; ``inside_id`` into ``insides``, -1 where the cost model does
    not see inside), so metrics read it without an ``Event`` per op. A simulation builds
    it from arrays and makes ``events`` and ``transfers`` only when asked for; a measured
    run or a test builds it from events, ``Timeline(pp, events, transfers, source)``.
    """

    __slots__ = ("pp", "source", "table", "starts", "ends", "inside_id", "insides", "_events", "_transfers")

    def __init__(self, pp: int, events=None, transfers=(), source: str = "simulated") -> None:
        self.pp = whole(pp, "Timeline pp", 1, MAX_RANKS)
        self.source = source  # "simulated" or "measured"
        events = _rank_events(events or ((),) * self.pp, self.pp)
        self._events = events
        self._transfers = tuple(transfers) if not callable(transfers) else transfers
        self.table = RankTable.of([[e.item for e in evs] for evs in events])
        flat = [e for evs in events for e in evs]
        self.starts = np.array([e.start for e in flat], np.float64)
        self.ends = np.array([e.end for e in flat], np.float64)
        ids: dict[int, int] = {}
        insides: list[Inside] = []
        for e in flat:
            if e.inside is not None and id(e.inside) not in ids:
                ids[id(e.inside)] = len(insides)
                insides.append(e.inside)
        self.inside_id = np.array([-1 if e.inside is None else ids[id(e.inside)] for e in flat], np.int32)
        self.insides = tuple(insides)

    @classmethod
    def of_arrays(cls, pp, table, starts, ends, inside_id=None, insides=(), transfers=(), source="simulated") -> Timeline:
        """From arrays over ``table``'s items; ``transfers`` may be a function that makes
        them when first asked for."""
        tl = cls.__new__(cls)
        tl.pp, tl.source, tl.table, tl.starts, tl.ends = pp, source, table, starts, ends
        tl.inside_id = np.broadcast_to(np.int32(-1), (len(starts),)) if inside_id is None else inside_id
        tl.insides = tuple(insides)
        tl._events = None
        tl._transfers = transfers
        return tl

    @property
    def events(self) -> tuple[tuple[Event, ...], ...]:
        """Per rank, in execution order (made from the arrays on first use)."""
        if self._events is None:
            starts, ends, ids = self.starts.tolist(), self.ends.tolist(), self.inside_id.tolist()
            insides = (*self.insides, None)  # id -1 reads the None at the end
            off = self.table.offsets.tolist()
            self._events = tuple(
                tuple(
                    Event(r, item, starts[i], ends[i], insides[ids[i]])
                    for i, item in zip(range(off[r], off[r + 1]), self.table[r])
                )
                for r in range(self.pp)
            )
        return self._events

    @property
    def transfers(self) -> tuple[Transfer, ...]:
        if callable(self._transfers):
            self._transfers = self._transfers()
        return self._transfers

    def rank_slice(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts, ends) of rank r's items (views)."""
        a, b = self.table.offsets[r], self.table.offsets[r + 1]
        return self.starts[a:b], self.ends[a:b]

    def rank_ops(self, r: int) -> tuple[np.ndarray, ...]:
        """Rank r's ops as (kind, chunk, mb, start, end): its items' own (first) ops in
        order, then its pairs' backwards."""
        t = self.table
        a, b = t.offsets[r], t.offsets[r + 1]
        st, en = self.starts[a:b], self.ends[a:b]
        pair = np.flatnonzero(t.kind2[a:b] >= 0)
        if not len(pair):
            return t.kind[a:b], t.chunk[a:b], t.mb[a:b], st, en
        cols = [(t.kind, t.kind2), (t.chunk, t.chunk2), (t.mb, t.mb2)]
        out = [np.concatenate([one[a:b], two[a:b][pair]]) for one, two in cols]
        return (*out, np.concatenate([st, st[pair]]), np.concatenate([en, en[pair]]))

    def all_events(self):
        for evs in self.events:
            yield from evs

    @property
    def start(self) -> float:
        return float(self.starts.min()) if len(self.starts) else 0.0

    @property
    def end(self) -> float:
        return float(self.ends.max()) if len(self.ends) else 0.0

    def __repr__(self) -> str:
        return f"Timeline(pp={self.pp}, {len(self.starts)} items, {self.source})"


def _rank_events(events, pp: int) -> tuple[tuple[Event, ...], ...]:
    """``events`` as per-rank tuples of Events, checked: a Timeline made by hand of one
    rank list for pp=2 was taken whole, and a None among the events met an AttributeError."""
    if isinstance(events, (str, bytes)) or not hasattr(events, "__iter__"):
        raise PipesimError(f"a Timeline's events must be one list of pipesim.Event per rank, got {shown(events)}")
    rows = list(events)
    if len(rows) != pp:
        raise PipesimError(f"a Timeline of pp={pp} needs {pp} lists of events, one per rank; got {len(rows)}")
    for r, evs in enumerate(rows):
        if isinstance(evs, (str, bytes)) or not hasattr(evs, "__iter__"):
            raise PipesimError(f"a Timeline's rank {r} must be a list of pipesim.Event, got {shown(evs)}")
        rows[r] = tuple(evs)
        for e in rows[r]:
            if not isinstance(e, Event):
                raise PipesimError(f"a Timeline's rank {r} must be a list of pipesim.Event, got {shown(e)} among them")
    return tuple(rows)
