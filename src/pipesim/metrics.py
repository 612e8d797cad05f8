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

from .ir import Schedule, ops_of
from .timeline import Event, Timeline


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
    pp = timeline.pp
    t0, t1 = timeline.start, timeline.end
    makespan = t1 - t0
    busy = [sum(e.duration for e in evs) for evs in timeline.events]
    span = [(evs[-1].end - evs[0].start) if evs else 0.0 for evs in timeline.events]
    util = [b / makespan if makespan > 0 else 0.0 for b in busy]
    bubble = 1 - sum(busy) / (pp * makespan) if makespan > 0 else 0.0
    max_span = max(span, default=0.0)
    span_bubble = (max_span - max(busy, default=0.0)) / max_span if max_span > 0 else 0.0
    peaks = [peak_live(evs) for evs in timeline.events]
    per_chunk = pp / schedule.placement.stages
    streams = [stream_times(evs) for evs in timeline.events] if any(e.inside for e in timeline.all_events()) else None
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


def stream_times(events) -> tuple[float, float]:
    """(compute busy time, communication time with compute idle) of one rank's items."""
    busy = exposed = 0.0
    for e in events:
        if e.inside is not None:
            busy += e.inside.compute
            exposed += e.inside.exposed
    return busy, exposed


def _has(e: Event, kinds: tuple[str, ...]) -> bool:
    return any(op.kind in kinds for op in ops_of(e.item))


def steady_state_window(timeline: Timeline) -> tuple[float, float] | None:
    """[every rank has started a backward, some rank ends its last forward], or None."""
    starts, ends = [], []
    for evs in timeline.events:
        first_b = next((e.start for e in evs if _has(e, ("B", "BW"))), None)
        last_f = next((e.end for e in reversed(evs) if _has(e, ("F",))), None)
        if first_b is None or last_f is None:
            return None
        starts.append(first_b)
        ends.append(last_f)
    lo, hi = max(starts), min(ends)
    return (lo, hi) if hi > lo else None


def steady_state_utilization(timeline: Timeline, compute_only: bool = False) -> float | None:
    """Mean share of the steady-state window each rank is busy: running an item, or with
    ``compute_only``, running a compute part of one."""
    window = steady_state_window(timeline)
    if window is None:
        return None
    lo, hi = window
    total = 0.0
    for e in timeline.all_events():
        if e.end <= lo or e.start >= hi:
            continue
        if not compute_only:
            total += min(e.end, hi) - max(e.start, lo)
        elif e.inside is not None:
            if lo <= e.start and e.end <= hi:  # wholly inside: no need to look at its parts
                total += e.inside.compute
            else:
                for stream, _, _, _, a, b in e.inside.parts:
                    if stream == "compute":
                        total += max(0.0, min(e.start + b, hi) - max(e.start + a, lo))
    return total / (timeline.pp * (hi - lo))


def peak_live(events: tuple[Event, ...] | list[Event]) -> int:
    """Most chunk-activations alive at once among ``events`` of one rank."""
    marks: list[tuple[float, int]] = []
    for e in events:
        for op in ops_of(e.item):
            if op.kind == "F":
                marks.append((e.start, +1))
            elif op.kind in ("W", "BW"):
                marks.append((e.end, -1))
    marks.sort()  # at equal times -1 sorts first: a freed activation makes room
    live = peak = 0
    for _, d in marks:
        live += d
        peak = max(peak, live)
    return peak
