"""The Timeline: when every op ran on every rank, simulated or measured.

The simulator and the executor both produce this one type, so "simulation versus reality"
is a comparison of two values of it, and metrics, charts and traces read either.
"""

from __future__ import annotations

from dataclasses import dataclass

from .ir import Item, Op


@dataclass(frozen=True, slots=True)
class Segment:
    """A finer piece of an event on one stream of its rank: ``stream`` is ``"compute"`` or
    ``"comm"``; ``label`` names the part (for example ``"MLP(B) 3"`` or ``"DISPATCH(F) 7"``).
    Cost models that know an item's inside (the component model) provide these."""

    stream: str
    label: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Event:
    """One item (op or pair) on one rank, from ``start`` to ``end``; ``segments`` optionally
    tell what ran inside it on which stream, in absolute time."""

    rank: int
    item: Item
    start: float
    end: float
    segments: tuple[Segment, ...] = ()

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Transfer:
    """A point-to-point transfer: ``op``'s output (activation for F, gradient for B/BW)
    leaves ``src`` at ``start`` and is usable on ``dst`` at ``end``."""

    src: int
    dst: int
    op: Op
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    pp: int
    events: tuple[tuple[Event, ...], ...]  # per rank, in execution order
    transfers: tuple[Transfer, ...] = ()
    source: str = "simulated"  # or "measured"

    def all_events(self):
        for evs in self.events:
            yield from evs

    @property
    def start(self) -> float:
        return min((e.start for e in self.all_events()), default=0.0)

    @property
    def end(self) -> float:
        return max((e.end for e in self.all_events()), default=0.0)
