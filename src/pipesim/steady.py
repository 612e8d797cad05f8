"""When no rank idles: the stretches of a timeline where every rank runs an item.

The steady state a reader of a schedule looks for is "the first slot after which no rank
idles" and the last such slot. ``metrics.steady_state_window`` is another window (every
rank has started a backward, none has ended its forwards), used for utilization; this
one is read straight off the busy intervals, so it names the moments a hand-drawn table
shows: from ``first`` to ``last`` every rank is busy, except in the ``gaps`` listed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .timeline import Timeline


@dataclass(frozen=True)
class AllBusy:
    """The stretches where every rank runs an item, in time order."""

    intervals: tuple[tuple[float, float], ...]

    @property
    def first(self) -> float | None:
        """Start of the first moment no rank idles (None: never)."""
        return self.intervals[0][0] if self.intervals else None

    @property
    def last(self) -> float | None:
        """End of the last moment no rank idles (None: never)."""
        return self.intervals[-1][1] if self.intervals else None

    @property
    def gaps(self) -> tuple[tuple[float, float], ...]:
        """Stretches between ``first`` and ``last`` where some rank idles."""
        return tuple((a[1], b[0]) for a, b in zip(self.intervals, self.intervals[1:]))

    @property
    def longest(self) -> tuple[float, float] | None:
        """The longest unbroken stretch with no rank idle (the first of equals)."""
        return max(self.intervals, key=lambda iv: iv[1] - iv[0], default=None)

    def describe(self, t0: float = 0.0) -> str:
        """One line, in time from ``t0`` (the timeline's first start)."""
        if self.first is None:
            return "no rank idles: never (some rank is idle at every moment)"
        n = len(self.gaps)
        gaps = f", except {n} stretch{'es' if n > 1 else ''} totalling {_num(sum(b - a for a, b in self.gaps))}" if n else ""
        lo, hi = self.longest
        return (
            f"no rank idles: from t={_num(self.first - t0)} (first) to t={_num(self.last - t0)} (last){gaps}; "
            f"longest unbroken t={_num(lo - t0)} to {_num(hi - t0)}"
        )

    def to_dict(self) -> dict:
        return {
            "first_all_busy": self.first,
            "last_all_busy": self.last,
            "longest_all_busy": list(self.longest) if self.longest else None,
            "all_busy_time": sum(b - a for a, b in self.intervals),
            "gaps": [list(g) for g in self.gaps],
        }


def _num(x: float) -> str:
    return f"{x:.6g}"


def _busy(timeline: Timeline) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every rank's items as merged, disjoint intervals: (rank, start, end), by rank then
    time. Vectorised over all ranks (a schedule may have millions of ranks of one item)."""
    keep = timeline.ends > timeline.starts
    rank = timeline.table.ranks_of_items()[keep]
    a, b = timeline.starts[keep], timeline.ends[keep]
    head = np.ones(len(a), bool)  # a rank's first item (items are stored rank after rank)
    head[1:] = rank[1:] != rank[:-1]
    if not (head[1:] | (a[1:] >= a[:-1])).all():  # a rank's items out of time order
        order = np.lexsort((a, rank))
        rank, a, b = rank[order], a[order], b[order]
    if not (head[1:] | (b[1:] >= b[:-1])).all():
        # an item inside another (measured timelines may nest): running max per rank
        for lo, hi in zip(np.flatnonzero(head), [*np.flatnonzero(head)[1:], len(b)]):
            b[lo:hi] = np.maximum.accumulate(b[lo:hi])
    # a new interval starts at a rank's first item or where an item starts after the
    # items before it have ended
    new = head.copy()
    new[1:] |= a[1:] > b[:-1]
    first = np.flatnonzero(new)
    return rank[first], a[first], b[np.r_[first[1:] - 1, len(a) - 1]] if len(a) else b


def all_busy(timeline: Timeline) -> AllBusy:
    """Where every rank of ``timeline`` is busy at once (the intersection of their busy
    intervals): a sweep over every rank's merged busy intervals, counting the ranks busy
    between consecutive instants. Linear in items after one sort (the terminal and JSON
    outputs call it at the work limit)."""
    pp = timeline.pp
    rank, lo, hi = _busy(timeline)
    if pp == 0 or len(np.unique(rank)) < pp:  # some rank never busy
        return AllBusy(())
    t = np.concatenate([lo, hi])
    step = np.concatenate([np.ones(len(lo), np.int64), -np.ones(len(hi), np.int64)])
    order = np.argsort(t, kind="stable")
    t, step = t[order], step[order]
    last = np.r_[t[1:] != t[:-1], True]  # the last change at each instant
    busy = np.cumsum(step)[last]  # ranks busy from this instant to the next
    t = t[last]
    full = np.flatnonzero(busy[:-1] == pp)
    # touching stretches (one rank's item ends as another's starts) are one stretch
    joined: list[tuple[float, float]] = []
    for a, b in zip(t[full].tolist(), t[full + 1].tolist()):
        if joined and a <= joined[-1][1] + 1e-12:
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return AllBusy(tuple(joined))
