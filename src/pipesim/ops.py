"""The items a rank runs: ops (``F``, ``B``, ``W``, ``BW`` of a chunk for a micro-batch) and
overlapped forward/backward pairs. Their own module, below the IR's placements and
schedules, so that the checks ``ir`` runs on hand-made schedules (schedule_checks.py)
can know them without importing ``ir``."""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("F", "B", "W", "BW")


@dataclass(frozen=True, slots=True, order=True)
class Op:
    """One unit of work on one rank: ``kind`` of model ``chunk`` for micro-batch ``mb``.

    F is the forward, B the backward for the input (its weight gradient deferred to a W),
    W that deferred weight gradient, BW a fused backward doing both.
    """

    kind: str
    chunk: int
    mb: int

    def __str__(self) -> str:
        return f"{self.kind}{self.chunk}.{self.mb}"


@dataclass(frozen=True, slots=True)
class Pair:
    """A forward and a backward of two micro-batches run as one unit (DualPipe's F&B), so
    that each one's communication can hide behind the other's computation."""

    forward: Op
    backward: Op

    def __str__(self) -> str:
        return f"{self.forward}&{self.backward}"


Item = Op | Pair


def ops_of(item: Item) -> tuple[Op, ...]:
    """The ops inside an item: itself, or the two halves of a pair."""
    return (item.forward, item.backward) if isinstance(item, Pair) else (item,)
