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

The shares (utilizations and bubbles) are 0.0 when the makespan is 0 (every cost 0):
there is no time to share out, and the CLI prints them as n/a (``output.share``).
``summarize`` refuses a timeline that is not a run of the schedule it is given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .errors import PipesimError
from .ir import Schedule, schedule_arg
from .schedule_checks import shown
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
    off = timeline.table.offsets
    busy = rank_sums(timeline.ends - timeline.starts, off)
    n = np.diff(off) > 0
    span = np.zeros(timeline.pp)
    span[n] = timeline.ends[off[1:][n] - 1] - timeline.starts[off[:-1][n]]
    return busy, span.tolist()


def rank_sums(x: np.ndarray, off: np.ndarray) -> list[float]:
    """Per rank (items ``off[r]:off[r + 1]``), the sum of ``x`` as adding one after
    another gives it: rows padded with zeros and summed along (exact, x + 0.0 == x), or
    rank by rank when padding would be large (a few ranks much longer than the rest)."""
    pp, lens = len(off) - 1, np.diff(off)
    widest = int(lens.max()) if pp else 0
    if pp * widest > 2 * len(x) + 4096:
        return [_running_sum(x[off[r] : off[r + 1]]) for r in range(pp)]
    grid = np.zeros((pp, widest + 1))
    grid[np.repeat(np.arange(pp), lens), np.arange(len(x)) - np.repeat(off[:-1], lens)] = x
    return np.cumsum(grid, axis=1)[:, -1].tolist()


def summarize(schedule: Schedule, timeline: Timeline) -> Report:
    """The metrics of ``timeline``, a run of ``schedule`` (simulated or measured)."""
    _same_run(schedule_arg(schedule, "pipesim.summarize"), timeline)
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


def _same_run(schedule: Schedule, timeline: Timeline) -> None:
    """``timeline`` runs ``schedule``'s items: another schedule's timeline was summarized
    under this one's name, M and placement, unsaid (gpipe named beside 1f1b's makespan)."""
    if not isinstance(timeline, Timeline):
        raise PipesimError(f"pipesim.summarize takes the Timeline that pipesim.simulate returns, got {shown(timeline)}")
    if timeline.table is not schedule.table and (timeline.pp != schedule.pp or timeline.table != schedule.table):
        raise PipesimError(
            f"pipesim.summarize: the timeline is not a run of this {schedule.name} schedule (pp={schedule.pp}, "
            f"M={schedule.microbatches}): its ranks run other items; give the schedule that was simulated"
        )
    # a Timeline made by hand of events (a measured run): a NaN start made a NaN makespan,
    # an end before its start a negative one
    bad = np.flatnonzero(~(np.isfinite(timeline.starts) & np.isfinite(timeline.ends) & (timeline.ends >= timeline.starts)))
    if len(bad):
        i = int(bad[0])
        r = int(np.searchsorted(timeline.table.offsets, i, side="right")) - 1
        raise PipesimError(
            f"pipesim.summarize: rank {r}'s {timeline.table.item(i)} runs from {timeline.starts[i]} to {timeline.ends[i]}: "
            "times must be finite, each end at or after its start"
        )


def _running_sum(x: np.ndarray) -> float:
    """The sum as adding one after another gives it (numpy's sum pairs them up instead)."""
    return float(np.cumsum(x)[-1]) if len(x) else 0.0


def stream_times(timeline: Timeline) -> list[tuple[float, float]]:
    """Per rank, (compute busy time, communication time with compute idle) of its items."""
    compute = np.array([x.compute for x in timeline.insides] + [0.0], np.float64)  # id -1: no inside
    exposed = np.array([x.exposed for x in timeline.insides] + [0.0], np.float64)
    off, ids = timeline.table.offsets, timeline.inside_id
    return list(zip(rank_sums(compute[ids], off), rank_sums(exposed[ids], off)))


def _holds(table, kinds: tuple[int, ...]) -> np.ndarray:
    """Per item: does it hold an op of one of ``kinds`` (indices into KINDS)?"""
    return np.isin(table.kind, kinds) | np.isin(table.kind2, kinds)


def steady_state_window(timeline: Timeline) -> tuple[float, float] | None:
    """[every rank has started a backward, some rank ends its last forward], or None."""
    t, pp = timeline.table, timeline.pp
    rank = t.ranks_of_items()
    back, fwd = np.flatnonzero(_holds(t, (B, BW))), np.flatnonzero(_holds(t, (F,)))
    ranks_b, first_back = np.unique(rank[back], return_index=True)  # items are stored rank after rank
    ranks_f, last_fwd = np.unique(rank[fwd][::-1], return_index=True)
    if len(ranks_b) < pp or len(ranks_f) < pp or not pp:
        return None
    lo = float(timeline.starts[back[first_back]].max())  # every rank has started its first backward
    hi = float(timeline.ends[fwd[::-1][last_fwd]].min())  # ... before some rank ends its last forward
    return (lo, hi) if hi > lo else None


def steady_state_utilization(timeline: Timeline, compute_only: bool = False) -> float | None:
    """Mean share of the steady-state window each rank is busy: running an item, or with
    ``compute_only``, running a compute part of one."""
    window = steady_state_window(timeline)
    if window is None:
        return None
    lo, hi = window
    compute = np.array([x.compute for x in timeline.insides] + [0.0], np.float64)
    st, en = timeline.starts, timeline.ends
    sel = np.flatnonzero((en > lo) & (st < hi))  # rank after rank, as the sum adds them
    if not compute_only:
        return _running_sum(np.minimum(en[sel], hi) - np.maximum(st[sel], lo)) / (timeline.pp * (hi - lo))
    ids = timeline.inside_id[sel]
    part = compute[ids]
    for k in np.flatnonzero(((st[sel] < lo) | (en[sel] > hi)) & (ids >= 0)).tolist():  # at the window's edges
        s = float(st[sel[k]])
        part[k] = sum(
            max(0.0, min(s + y, hi) - max(s + x, lo))
            for stream, _, _, _, x, y in timeline.insides[ids[k]].parts
            if stream == "compute"
        )
    return _running_sum(part) / (timeline.pp * (hi - lo))


def peak_activations(timeline: Timeline) -> list[int]:
    """Per rank, most chunk-activations alive at once: born when an F starts, dead when
    its W or BW ends (at equal times a death comes first: a freed activation makes room)."""
    t = timeline.table
    item, kind, _, _ = t.ops()
    born, dies = kind == F, (kind == W) | (kind == BW)
    born_items, dying_items = item[born], item[dies]
    del item, kind, born, dies  # the summary's peak memory is here: keep one op-sized array at a time
    rank = t.ranks_of_items()
    when = np.concatenate([timeline.starts[born_items], timeline.ends[dying_items]])
    who = np.concatenate([rank[born_items], rank[dying_items]])
    delta = np.concatenate([np.ones(len(born_items), np.int8), -np.ones(len(dying_items), np.int8)])
    del rank, born_items, dying_items
    order = np.lexsort((delta, when, who))  # per rank, in time order, deaths first at a tie
    del when
    who, live = who[order], np.cumsum(delta[order], dtype=np.int64)
    del order, delta
    peak = np.zeros(timeline.pp, np.int64)
    if len(live):
        head = np.flatnonzero(np.r_[True, who[1:] != who[:-1]])
        live -= np.repeat(np.r_[0, live[head[1:] - 1]], np.diff(np.r_[head, len(live)]))  # each rank from 0
        np.maximum.at(peak, who, live)
    return peak.tolist()


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
