"""Checks of a schedule made by hand, as a schedule file is checked, each said in one line.

``pipesim.Schedule``, ``Placement``, ``Op`` and ``Pair`` are public: a library user builds
them directly. Without these checks a float M, a pp of True, a placement of another size,
the string "F0.0" as an item or an Op of chunk 0.5 met a TypeError, an IndexError or a
KeyError deep in the engine, or worse ran: the int32 columns cut 0.5 to 0 and wrapped
2**32 to 0. ``RankTable.of`` fills its columns on the fast path and comes here only when
that fails or its columns hold what no item can.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

from .errors import PipesimError
from .inputs import MAX_COUNT, MAX_RANKS, shorten
from .ops import KINDS, Op, Pair

#: what a rank's items may be, for the messages
ITEMS_ARE = "pipesim.Op or pipesim.Pair items (pipesim.parse_item('F0.3') makes one)"


def whole(value: object, what: str, lo: int, hi: int) -> int:
    """``value`` as an int when it is a whole number (Python's or numpy's, not a bool or a
    float) from ``lo`` to ``hi``; else the error naming it."""
    if isinstance(value, Integral) and not isinstance(value, bool) and lo <= value <= hi:
        return int(value)
    raise PipesimError(f"{what} must be a whole number from {lo:,} to {hi:,}, got {shown(value)}")


def placement_sizes(pp: object, microbatches: object, chunks: object = 1) -> None:
    """The sizes a standard placement is built at, before its tuples are: a float met a
    TypeError in range(), and Placement.flat(10**9, 1) filled memory until killed."""
    pp = whole(pp, "placement pp", 1, MAX_RANKS)
    whole(microbatches, "placement microbatches", 1, MAX_COUNT)
    # not MAX_OPS: the planner places micro-batch counts it prices without building them
    whole(pp * whole(chunks, "placement chunks", 1, MAX_COUNT), f"placement stages (pp={pp} x chunks)", 1, MAX_COUNT)


def check_placement(pl) -> None:
    """No ranks, no chunks, no route or no micro-batch left the engine an IndexError."""
    whole(pl.pp, "placement pp", 1, MAX_RANKS)
    whole(pl.chunks, "placement chunks", 1, MAX_COUNT)
    if not pl.routes or not pl.routes[0]:
        raise PipesimError("a placement needs at least one route of at least one stage")
    if not pl.route_of:
        raise PipesimError("a placement needs at least one micro-batch (its route_of lists none)")


def check_schedule(s, placement_type: type) -> None:
    """The fields of a Schedule other than its items (``RankTable.of`` checks those);
    ``placement_type`` is ir's Placement, handed down since this module sits below ir."""
    if not isinstance(s.name, str):
        raise PipesimError(f"a schedule's name must be a string, got {shown(s.name)}")
    whole(s.pp, f"{s.name} schedule pp", 1, MAX_RANKS)
    whole(s.microbatches, f"{s.name} schedule microbatches", 1, MAX_COUNT)
    if not isinstance(s.placement, placement_type):
        raise PipesimError(f"{s.name} schedule placement must be a pipesim.Placement, got {shown(s.placement)}")
    if (s.placement.pp, s.placement.microbatches) != (s.pp, s.microbatches):
        raise PipesimError(
            f"{s.name} schedule is pp={s.pp}, M={s.microbatches}, but its placement is for "
            f"pp={s.placement.pp}, M={s.placement.microbatches}: make them agree"
        )
    if isinstance(s.ranks, (str, bytes)) or not hasattr(s.ranks, "__len__"):
        raise item_problem(s.ranks)


def check_columns(ranks, *cols: list) -> list[np.ndarray]:
    """The columns (kind, chunk, mb, kind2, chunk2, mb2) as arrays, once each is known to
    hold what the fast path let through unseen: a whole number that is not (0.5, cut to 0
    by the int32 column), one past the int32 columns (2**32 wrapped to 0), a pair that is
    not a forward then a backward."""
    # the kinds are KINDS indices the fast path looked up: read straight as int8
    arrays = [
        np.asarray(c, np.int8) if j % 3 == 0 else np.asarray(c) if len(c) else np.zeros(0, np.int64) for j, c in enumerate(cols)
    ]
    for a in arrays[1:3] + arrays[4:]:
        if len(a) and (a.dtype.kind not in "iu" or a.min() < -MAX_COUNT or a.max() > MAX_COUNT):
            raise item_problem(ranks)
    kind, kind2 = arrays[0], arrays[3]
    paired = kind2 >= 0
    if len(kind2) and paired.any():
        backwards = kind2[paired]
        if (kind[paired] != KINDS.index("F")).any() or not np.isin(backwards, [KINDS.index("B"), KINDS.index("BW")]).all():
            raise item_problem(ranks)
    return arrays


def item_problem(ranks) -> PipesimError:
    """The error for the first bad item of ``ranks`` (per-rank item lists), or for
    ``ranks`` itself when it is not such lists."""
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        return PipesimError(f"a schedule's ranks must be one list of items per rank, got {shown(ranks)}")
    for r, items in enumerate(ranks):
        if isinstance(items, (str, bytes)) or not hasattr(items, "__iter__"):
            return PipesimError(f"schedule rank {r} must be a list of {ITEMS_ARE}, got {shown(items)}")
        for i, item in enumerate(items):
            at = f"schedule rank {r} item {i}"
            if isinstance(item, Pair):
                for half in (item.forward, item.backward):
                    bad = op_problem(half) if isinstance(half, Op) else f"a pair's halves must be Ops, got {shown(half)}"
                    if bad:
                        return PipesimError(f"{at}: {bad}")
                if item.forward.kind != "F" or item.backward.kind not in ("B", "BW"):
                    return PipesimError(f"{at}: pair {item} must be a forward then a backward (B or BW), like F1.6&BW0.0")
            elif not isinstance(item, Op):
                return PipesimError(f"{at}: expected {ITEMS_ARE}, got {shown(item)}")
            elif op_problem(item):
                return PipesimError(f"{at}: {op_problem(item)}")
    return PipesimError(f"a schedule's ranks must be one list of {ITEMS_ARE} per rank")


def op_problem(op) -> str | None:
    """What is wrong with one Op's fields, or None."""
    if op.kind not in KINDS:
        return f"op kind {shown(op.kind)} is not one of {', '.join(KINDS)}"
    for name in ("chunk", "mb"):
        v = getattr(op, name)
        if not (isinstance(v, Integral) and not isinstance(v, bool)) or not -MAX_COUNT <= v <= MAX_COUNT:
            return f"op {op.kind}'s {name} must be a whole number from 0 to {MAX_COUNT:,}, got {shown(v)}"
    return None


def shown(value: object, typed: bool = False) -> str:
    """``value`` as an error shows it, with its type where the text alone would hide it
    (the string '4' beside the number 4); a number's too where ``typed``, for a value
    that should have been no number (a schedule name of 1 read like the name "1")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and not typed:
        return shorten(value)
    if value is None or isinstance(value, (bool, int, float, str, bytes, list, tuple, dict)):
        return f"{shorten(value)} ({type(value).__name__})"
    return f"a {type(value).__name__}"  # an object's repr (a whole Schedule) says less than its type
