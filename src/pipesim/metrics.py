"""Timeline -> Report: the numbers users compare schedules by.

Names and definitions follow the design (and the CLI's JSON):

* ``makespan``: last end minus first start, over all ranks;
* ``busy[r]``: summed durations of rank r's items; ``utilization[r] = busy[r] / makespan``;
* ``bubble_ratio``: 1 - sum(busy) / (pp * makespan);
* ``span_bubble_ratio`` (the Zero Bubble paper's): (max span - max busy) / max span, with
  span[r] rank r's last end minus its first start;
* ``steady_state_utilization``: mean utilization over the window where every rank has
  started its first backward and none has ended its last forward (None if empty);
* ``peak_activations[r]``: most chunk-activations alive at once on rank r (born when an F
  starts, dead when its W or BW ends; a death and a birth at the same instant do not
  overlap);
* ``peak_activation_memory[r]``: the same in units of one micro-batch's activation of one
  1F1B stage (1/pp of the model), so schedules with smaller chunks compare fairly;
* ``parameter_copies``: parameters per rank relative to 1F1B (DualPipe 2);
* when the cost model sees inside ops (``Event.inside``): ``compute_utilization[r]``,
  the share of the makespan rank r's compute stream is busy, and ``exposed_comm[r]``, the
  time its communication runs while its compute stream is idle, and
  ``steady_state_compute_utilization``, the compute stream's share of the steady state.
  Otherwise None.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .ir import Schedule
from .timeline import Timeline

F, B, W, BW = range(4)  # indices into ir.KINDS


@dataclass(frozen=True)
class Report:
    schedule: str
    pp: int
    microbatches: int
    makespan: float
    busy: list[float]
    utilization: list[float]
    bubble_ratio: float
    span: list[float]
    span_bubble_ratio: float
    steady_state_utilization: float | None
    peak_activations: list[int]
    peak_activation_memory: list[float]
    parameter_copies: float
    compute_utilization: list[float] | None = None
    steady_state_compute_utilization: float | None = None
    exposed_comm: list[float] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(schedule: Schedule, timeline: Timeline) -> Report:
    pp, t = timeline.pp, timeline.table
    starts, ends = timeline.starts, timeline.ends
    rank = t.ranks_of_items()
    t0, t1 = timeline.start, timeline.end
    makespan = t1 - t0
    busy = np.bincount(rank, weights=ends - starts, minlength=pp).tolist()  # in item order, as a running sum
    first, last = t.offsets[:-1], t.offsets[1:] - 1
    has = first <= last
    span = (
        np.where(has, ends[np.where(has, last, 0)] - starts[np.where(has, first, 0)], 0.0).tolist() if len(ends) else [0.0] * pp
    )
    util = [b / makespan if makespan > 0 else 0.0 for b in busy]
    bubble = 1 - sum(busy) / (pp * makespan) if makespan > 0 else 0.0
    max_span = max(span, default=0.0)
    span_bubble = (max_span - max(busy, default=0.0)) / max_span if max_span > 0 else 0.0
    peaks = peak_activations(timeline)
    per_chunk = pp / schedule.placement.stages
    streams = stream_times(timeline) if (timeline.inside_id >= 0).any() else None
    return Report(
        schedule=schedule.name,
        pp=pp,
        microbatches=schedule.microbatches,
        makespan=makespan,
        busy=busy,
        utilization=util,
        bubble_ratio=bubble,
        span=span,
        span_bubble_ratio=span_bubble,
        steady_state_utilization=steady_state_utilization(timeline),
        peak_activations=peaks,
        peak_activation_memory=[p * per_chunk for p in peaks],
        parameter_copies=schedule.placement.parameter_copies,
        compute_utilization=[c / makespan if makespan > 0 else 0.0 for c, _ in streams] if streams else None,
        steady_state_compute_utilization=steady_state_utilization(timeline, compute_only=True) if streams else None,
        exposed_comm=[x for _, x in streams] if streams else None,
    )


def stream_times(timeline: Timeline) -> list[tuple[float, float]]:
    """Per rank, (compute busy time, communication time with compute idle) of its items."""
    ids = timeline.inside_id
    has = ids >= 0
    rank = timeline.rank_of_item[has]
    compute = np.array([x.compute for x in timeline.insides], np.float64)[ids[has]]
    exposed = np.array([x.exposed for x in timeline.insides], np.float64)[ids[has]]
    busy = np.bincount(rank, weights=compute, minlength=timeline.pp).tolist()
    hidden = np.bincount(rank, weights=exposed, minlength=timeline.pp).tolist()
    return list(zip(busy, hidden))


def _has(table, kinds: tuple[int, ...]) -> np.ndarray:
    """Per item: does it hold an op of one of ``kinds`` (indices into KINDS)?"""
    return np.isin(table.kind, kinds) | np.isin(table.kind2, kinds)


def steady_state_window(timeline: Timeline) -> tuple[float, float] | None:
    """[every rank has started a backward, some rank ends its last forward], or None."""
    t = timeline.table
    rank = t.ranks_of_items()
    back = np.flatnonzero(_has(t, (B, BW)))
    fwd = np.flatnonzero(_has(t, (F,)))
    if len(np.unique(rank[back])) < timeline.pp or len(np.unique(rank[fwd])) < timeline.pp:
        return None
    first_b = np.full(timeline.pp, len(rank), np.int64)
    np.minimum.at(first_b, rank[back], back)  # each rank's first item with a backward
    last_f = np.full(timeline.pp, -1, np.int64)
    np.maximum.at(last_f, rank[fwd], fwd)  # ... and its last with a forward
    lo = float(timeline.starts[first_b].max())
    hi = float(timeline.ends[last_f].min())
    return (lo, hi) if hi > lo else None


def steady_state_utilization(timeline: Timeline, compute_only: bool = False) -> float | None:
    """Mean share of the steady-state window each rank is busy: running an item, or with
    ``compute_only``, running a compute part of one."""
    window = steady_state_window(timeline)
    if window is None:
        return None
    lo, hi = window
    starts, ends = timeline.starts, timeline.ends
    sel = np.flatnonzero((ends > lo) & (starts < hi))
    if not compute_only:
        part = np.minimum(ends[sel], hi) - np.maximum(starts[sel], lo)
    else:
        ids = timeline.inside_id[sel]
        sel, ids = sel[ids >= 0], ids[ids >= 0]
        part = np.array([x.compute for x in timeline.insides], np.float64)[ids] if len(ids) else np.zeros(0)
        cut = np.flatnonzero((starts[sel] < lo) | (ends[sel] > hi))  # only the window's edges: a few items
        for k, i, x in zip(cut.tolist(), sel[cut].tolist(), ids[cut].tolist()):
            s = float(starts[i])
            part[k] = sum(
                max(0.0, min(s + b, hi) - max(s + a, lo))
                for stream, _, _, _, a, b in timeline.insides[x].parts
                if stream == "compute"
            )
    total = float(np.cumsum(part)[-1]) if len(part) else 0.0  # a running sum, in item order
    return total / (timeline.pp * (hi - lo))


def peak_activations(timeline: Timeline) -> list[int]:
    """Per rank, most chunk-activations alive at once: born when an F starts, dead when
    its W or BW ends (at equal times a death comes first: a freed activation makes room)."""
    t = timeline.table
    item, kind, _, _ = t.ops()
    born = kind == F
    dies = (kind == W) | (kind == BW)
    keep = born | dies
    item, born = item[keep], born[keep]
    when = np.where(born, timeline.starts[item], timeline.ends[item])
    return [int(x) for x in running_peaks(timeline.pp, t.ranks_of_items()[item], when, np.where(born, 1, -1))]


def running_peaks(pp: int, rank: np.ndarray, when: np.ndarray, delta: np.ndarray, series: list | None = None) -> list:
    """Per rank, the highest running sum of ``delta`` in time order (ties: smaller delta
    first), from 0; with ``series``, also each rank's (time, running sum) after each change."""
    order = np.lexsort((delta, when, rank))
    rank, when, delta = rank[order], when[order], delta[order]
    bounds = np.searchsorted(rank, np.arange(pp + 1))
    peaks = []
    for r in range(pp):
        a, b = bounds[r], bounds[r + 1]
        live = np.cumsum(delta[a:b])  # a running sum per rank, as one would add by hand
        peaks.append(max(0, live.max()) if b > a else 0)
        if series is not None:
            series.append(list(zip(when[a:b].tolist(), live.tolist())))
    return peaks


def peak_live(events) -> int:
    """Most chunk-activations alive at once among ``events`` of one rank."""
    return peak_activations(Timeline(1, (tuple(events),)))[0]
