"""When no rank idles: the stretches of a timeline where every rank runs an item.

The steady state a reader of a schedule looks for is "the first slot after which no rank
idles" and the last such slot. ``metrics.steady_state_window`` is another window (every
rank has started a backward, none has ended its forwards), used for utilization; this
one is read straight off the busy intervals, so it names the moments a hand-drawn table
shows: from ``first`` to ``last`` every rank is busy, except in the ``gaps`` listed.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _busy(events) -> list[tuple[float, float]]:
    """One rank's items as merged, disjoint intervals."""
    out: list[list[float]] = []
    for e in sorted(events, key=lambda e: e.start):
        if e.end <= e.start:
            continue
        if out and e.start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e.end)
        else:
            out.append([e.start, e.end])
    return [(a, b) for a, b in out]


def all_busy(timeline: Timeline) -> AllBusy:
    """Where every rank of ``timeline`` is busy at once (the intersection of their busy
    intervals)."""
    if timeline.pp == 0:
        return AllBusy(())
    common = _busy(timeline.events[0])
    for evs in timeline.events[1:]:
        other, merged, i, j = _busy(evs), [], 0, 0
        while i < len(common) and j < len(other):
            a, b = max(common[i][0], other[j][0]), min(common[i][1], other[j][1])
            if b > a:
                merged.append((a, b))
            if common[i][1] < other[j][1]:
                i += 1
            else:
                j += 1
        common = merged
    # touching stretches (one rank's item ends as another's starts) are one stretch
    joined: list[tuple[float, float]] = []
    for a, b in common:
        if joined and a <= joined[-1][1] + 1e-12:
            joined[-1] = (joined[-1][0], b)
        else:
            joined.append((a, b))
    return AllBusy(tuple(joined))
