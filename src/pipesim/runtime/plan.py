"""Who sends what to whom, and who holds which stage: plain data derived from a Schedule.

Nothing here imports torch, so the communication plan is tested on its own and every
rank computes the same plan from the same schedule without talking to the others.

A *data key* is a dependency key of ``deps.needs`` (``(phase, rank, chunk, mb)``) that
carries a tensor: the activation a forward hands to the next stage (phase ``"F"``) or
the input gradient a backward hands to the previous stage (phase ``"B"``). The other
dependencies of an op (a backward on its own forward, a W on its own B) stay inside one
(rank, chunk) and carry nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..deps import Key, needs, produces
from ..errors import PipesimError
from ..ir import Item, Op, Schedule, ops_of


def data_needs(schedule: Schedule, rank: int, op: Op) -> tuple[Key, ...]:
    """The keys whose tensors ``op`` consumes: those produced at another position.

    A route visits each (rank, chunk) once, so a different stage is a different
    position, and a same-position key is the op's own forward or B (no data)."""
    return tuple(k for k in needs(schedule.placement, rank, op) if (k[1], k[2]) != (rank, op.chunk))


@dataclass(frozen=True, slots=True)
class Link:
    """One tensor crossing ranks: ``key``'s output goes from ``src`` to ``dst``; ``tag`` is
    unique within the schedule so receives can be matched by tag as well as by order."""

    key: Key
    src: int
    dst: int
    tag: int


@dataclass(frozen=True)
class Plan:
    """The communication of one schedule.

    ``recvs[r]``: the links into rank r, in the order their senders produce them (a
    sender's items in order), so that transports that match by order (NCCL) and by tag
    (gloo) both pair them correctly. ``sends[key]``: the link that carries ``key`` to
    another rank. ``local``: keys consumed on the rank that produced them (the turn of a
    V, where stage pp-1 and stage pp share rank pp-1).
    """

    recvs: tuple[tuple[Link, ...], ...]
    sends: dict[Key, Link]
    local: frozenset[Key]

    @property
    def links(self) -> int:
        return len(self.sends)


def comm_plan(schedule: Schedule) -> Plan:
    consumers: dict[Key, list[int]] = {}
    for r, item in schedule.items():
        for op in ops_of(item):
            for key in data_needs(schedule, r, op):
                consumers.setdefault(key, []).append(r)
    recvs: list[list[Link]] = [[] for _ in range(schedule.pp)]
    sends: dict[Key, Link] = {}
    local: set[Key] = set()
    for r, item in schedule.items():  # ranks in order, each rank's items in order
        for op in ops_of(item):
            for key in produces(r, op):
                for dst in consumers.get(key, ()):
                    if dst == r:
                        local.add(key)
                    else:
                        link = Link(key, r, dst, len(sends))
                        sends[key] = link
                        recvs[dst].append(link)
    # recvs[dst] is now in (sender rank, sender order) order: per sender, its own order
    return Plan(tuple(tuple(x) for x in recvs), sends, frozenset(local))


# ---------------------------------------------------------------------------------------
# who holds which stage


def held_stages(schedule: Schedule, rank: int) -> dict[int, int]:
    """chunk -> model stage for the chunks ``rank`` runs ops on.

    A position may lie on several routes (never in the standard placements, but a
    hand-written placement could): it must then be the same stage on each, since it holds
    one set of parameters."""
    pl = schedule.placement
    out: dict[int, int] = {}
    for ri, route in enumerate(pl.routes):
        for stage, (r, c) in enumerate(route):
            if r != rank:
                continue
            if out.setdefault(c, stage) != stage:
                raise PipesimError(
                    f"rank {rank} chunk {c} is stage {out[c]} on one route and stage {stage} on route {ri}; "
                    "a position holds one set of parameters, so it must be the same stage on every route"
                )
    return out


def holders(schedule: Schedule) -> dict[int, tuple[tuple[int, int], ...]]:
    """model stage -> the (rank, chunk) positions holding a copy of its parameters; two or
    more for a stage held twice (dual placements), whose gradients are then summed."""
    out: dict[int, list[tuple[int, int]]] = {}
    for r in range(schedule.pp):
        for c, stage in held_stages(schedule, r).items():
            out.setdefault(stage, []).append((r, c))
    return {s: tuple(v) for s, v in sorted(out.items())}


def shared_groups(schedule: Schedule) -> list[tuple[int, ...]]:
    """The rank sets that must sum a stage's gradients, one per stage held on more than one
    rank, in stage order (every rank walks this same list, so collectives line up)."""
    out = []
    for positions in holders(schedule).values():
        ranks = tuple(sorted({r for r, _ in positions}))
        if len(ranks) > 1:
            out.append(ranks)
    return out


def item_ops(items: tuple[Item, ...]) -> Iterator[tuple[int, Op]]:
    for i, item in enumerate(items):
        for op in ops_of(item):
            yield i, op
