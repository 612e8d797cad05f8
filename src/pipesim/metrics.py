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


def busy_and_span(timeline: Timeline) -> tuple[list[float], list[float]]:
    """Per rank, the summed durations of its items, and its last end minus first start."""
    busy, span = [], []
    for r in range(timeline.pp):  # rank by rank: temporaries of one rank's size
        st, en = timeline.rank_slice(r)
        busy.append(_running_sum(en - st))
        span.append(float(en[-1] - st[0]) if len(st) else 0.0)
    return busy, span


def summarize(schedule: Schedule, timeline: Timeline) -> Report:
    pp = timeline.pp
    t0, t1 = timeline.start, timeline.end
    makespan = t1 - t0
    busy, span = busy_and_span(timeline)
    util = [b / makespan if makespan > 0 else 0.0 for b in busy]
    bubble = 1 - sum(busy) / (pp * makespan) if makespan > 0 else 0.0
    max_span = max(span, default=0.0)
    span_bubble = (max_span - max(busy, default=0.0)) / max_span if max_span > 0 else 0.0
    peaks = peak_activations(timeline)
    per_chunk = pp / schedule.placement.stages
    streams = stream_times(timeline) if timeline.insides else None
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


def _running_sum(x: np.ndarray) -> float:
    """The sum as adding one after another gives it (numpy's sum pairs them up instead)."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def stream_times(timeline: Timeline) -> list[tuple[float, float]]:
    """Per rank, (compute busy time, communication time with compute idle) of its items."""
    compute = np.array([x.compute for x in timeline.insides] + [0.0], np.float64)  # id -1: no inside
    exposed = np.array([x.exposed for x in timeline.insides] + [0.0], np.float64)
    off = timeline.table.offsets
    out = []
    for r in range(timeline.pp):
        ids = timeline.inside_id[off[r] : off[r + 1]]
        out.append((_running_sum(compute[ids]), _running_sum(exposed[ids])))
    return out


def _holds(table, a: int, b: int, kinds: tuple[int, ...]) -> np.ndarray:
    """Per item a..b: does it hold an op of one of ``kinds`` (indices into KINDS)?"""
    return np.isin(table.kind[a:b], kinds) | np.isin(table.kind2[a:b], kinds)


def steady_state_window(timeline: Timeline) -> tuple[float, float] | None:
    """[every rank has started a backward, some rank ends its last forward], or None."""
    t, off = timeline.table, timeline.table.offsets
    lo, hi = -np.inf, np.inf
    for r in range(timeline.pp):
        a, b = int(off[r]), int(off[r + 1])
        back = np.flatnonzero(_holds(t, a, b, (B, BW)))
        fwd = np.flatnonzero(_holds(t, a, b, (F,)))
        if not len(back) or not len(fwd):
            return None
        lo = max(lo, float(timeline.starts[a + back[0]]))  # the rank's first backward starts
        hi = min(hi, float(timeline.ends[a + fwd[-1]]))  # ... its last forward ends
    return (lo, hi) if hi > lo else None


def steady_state_utilization(timeline: Timeline, compute_only: bool = False) -> float | None:
    """Mean share of the steady-state window each rank is busy: running an item, or with
    ``compute_only``, running a compute part of one."""
    window = steady_state_window(timeline)
    if window is None:
        return None
    lo, hi = window
    compute = np.array([x.compute for x in timeline.insides] + [0.0], np.float64)
    off = timeline.table.offsets
    parts = []
    for r in range(timeline.pp):
        a = int(off[r])
        st, en = timeline.rank_slice(r)
        sel = np.flatnonzero((en > lo) & (st < hi))
        if not compute_only:
            parts.append(np.minimum(en[sel], hi) - np.maximum(st[sel], lo))
            continue
        ids = timeline.inside_id[a + sel]
        part = compute[ids]
        for k in np.flatnonzero(((st[sel] < lo) | (en[sel] > hi)) & (ids >= 0)).tolist():  # at the window's edges
            s = float(st[sel[k]])
            part[k] = sum(
                max(0.0, min(s + y, hi) - max(s + x, lo))
                for stream, _, _, _, x, y in timeline.insides[ids[k]].parts
                if stream == "compute"
            )
        parts.append(part)
    return _running_sum(np.concatenate(parts)) / (timeline.pp * (hi - lo))


def peak_activations(timeline: Timeline) -> list[int]:
    """Per rank, most chunk-activations alive at once: born when an F starts, dead when
    its W or BW ends (at equal times a death comes first: a freed activation makes room)."""
    out = []
    for r in range(timeline.pp):
        kind, _, _, start, end = timeline.rank_ops(r)
        born = kind == F
        dies = (kind == W) | (kind == BW)
        when = np.concatenate([start[born], end[dies]])
        delta = np.concatenate([np.ones(int(born.sum()), np.int64), -np.ones(int(dies.sum()), np.int64)])
        out.append(int(running_peak(when, delta)))
    return out


def running_peak(when: np.ndarray, delta: np.ndarray, series: list | None = None):
    """The highest running sum of ``delta`` in time order (ties: smaller delta first),
    from 0; with ``series``, also append the (time, running sum) after each change."""
    order = np.lexsort((delta, when))
    live = np.cumsum(delta[order])  # a running sum, as one would add by hand
    if series is not None:
        series.append(list(zip(when[order].tolist(), live.tolist())))
    return max(0, live.max()) if len(live) else 0


def peak_live(events) -> int:
    """Most chunk-activations alive at once among ``events`` of one rank."""
    return peak_activations(Timeline(1, (tuple(events),)))[0]
