"""Timelines as Chrome traces (the Trace Event Format), for Perfetto and chrome://tracing.

Each rank is a process (``rank 3``; with several schedules, ``dualpipe rank 3``) with
a compute thread and a communication thread:

* compute: one complete event (``ph: "X"``) per item, named in the reference notation
  (``F0.3``, ``F1.6&BW0.0``), with kind, chunk, micro-batch and stage in ``args`` (for a
  pair, those of both halves under ``forward`` and ``backward``); an item's ``compute``
  segments nest inside it;
* comm: each P2P transfer as an event on its sender, from the moment the output leaves
  to the moment it is usable on the receiver (``F0.3 -> rank 1``), and the item's
  ``comm`` segments. Events on one thread must nest, so communication that overlaps in
  time spills onto further threads (``comm 2``, ...);
* flows (``ph: "s"`` / ``"f"``): one arrow per transfer, from the item that produced the
  data to the item on the receiver that waited for it.

Time: one cost-model unit is one ``time_unit`` (``us`` by default, or ``ns``, ``ms``,
``s``); the format counts microseconds, so ``ts = t * UNITS[time_unit]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import PipesimError

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from ..ir import Op, Schedule
    from ..timeline import Event, Timeline

# the schedule and timeline types import numpy: imported where a trace is made, so that
# draw --help, which lists UNITS, does without

# microseconds per cost-model unit
UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
COMPUTE, COMM = "compute", "comm"


def trace_events(
    schedule: Schedule, timeline: Timeline, *, time_unit: str = "us", pid_base: int = 0, label: str = ""
) -> list[dict]:
    """The trace events of one timeline: metadata, items, segments, transfers and flows.

    Ranks are processes ``pid_base + rank + 1`` (pid 0 means "no process" to some
    viewers); ``label`` prefixes the process names, for several schedules in one trace."""
    from ..deps import needs, produces
    from ..ir import Op, Pair, ops_of

    if time_unit not in UNITS:
        raise PipesimError(f"unknown --time-unit {time_unit!r}; use one of {', '.join(UNITS)}")
    scale = UNITS[time_unit]
    pl = schedule.placement
    prefix = f"{label} " if label else ""
    out: list[dict] = []

    def tid(pid: int, lane: int) -> int:
        # thread ids unique across processes: viewers key threads by tid alone
        return pid * 1000 + lane

    def op_args(rank: int, op: Op) -> dict:
        return {"kind": op.kind, "chunk": op.chunk, "microbatch": op.mb, "stage": pl.stage_of(rank, op.chunk, op.mb)}

    comm: list[list[tuple[float, float, str, dict]]] = [[] for _ in range(timeline.pp)]

    for rank, events in enumerate(timeline.events):
        pid = pid_base + rank + 1
        for e in events:
            if isinstance(e.item, Pair):
                args = {"kind": "F&" + e.item.backward.kind, "forward": op_args(rank, e.item.forward)}
                args["backward"] = op_args(rank, e.item.backward)
            else:
                args = op_args(rank, e.item)
            out.append(
                _x(str(e.item), e.item.kind if isinstance(e.item, Op) else "pair", e.start, e.end, scale, pid, tid(pid, 0), args)
            )
            for seg in e.segments:
                seg_args = {"item": str(e.item), "stream": seg.stream}
                if seg.stream == COMM:
                    comm[rank].append((seg.start, seg.end, seg.label, seg_args))
                else:
                    out.append(_x(seg.label, "segment", seg.start, seg.end, scale, pid, tid(pid, 0), seg_args))

    producer = {(r, op): e for r, evs in enumerate(timeline.events) for e in evs for op in ops_of(e.item)}
    consumer: dict[tuple, Event] = {}
    for r, evs in enumerate(timeline.events):
        for e in evs:
            for op in ops_of(e.item):
                for key in needs(pl, r, op):
                    consumer.setdefault((r, key), e)
    for n, t in enumerate(sorted(timeline.transfers, key=lambda t: (t.start, t.src, t.dst, str(t.op)))):
        comm[t.src].append((t.start, t.end, f"{t.op} -> rank {t.dst}", {"op": str(t.op), "src": t.src, "dst": t.dst}))
        src_event = producer.get((t.src, t.op))
        dst_event = next((consumer[(t.dst, k)] for k in produces(t.src, t.op) if (t.dst, k) in consumer), None)
        if src_event is None or dst_event is None:
            continue  # a transfer of data no item on these ranks produced or used: no arrow to draw
        fid = pid_base * 1_000_000 + n + 1
        src_pid, dst_pid = pid_base + t.src + 1, pid_base + t.dst + 1
        # each end sits strictly inside its item, so viewers bind the arrow to that item
        out.append(_flow("s", fid, _mid(src_event), scale, src_pid, tid(src_pid, 0), str(t.op)))
        out.append(_flow("f", fid, _mid(dst_event), scale, dst_pid, tid(dst_pid, 0), str(t.op)))

    lanes_used = [0] * timeline.pp
    for rank, items in enumerate(comm):
        pid = pid_base + rank + 1
        # events on one thread must nest: communication that overlaps goes to the first
        # thread free at its start (items in start order)
        free: list[float] = []
        for start, end, name, args in sorted(items, key=lambda x: (x[0], x[1])):
            lane = next((n for n, t in enumerate(free) if t <= start), len(free))
            if lane == len(free):
                free.append(end)
            free[lane] = end
            out.append(_x(name, "comm", start, end, scale, pid, tid(pid, 1 + lane), args))
        lanes_used[rank] = len(free)

    meta: list[dict] = []
    for rank in range(timeline.pp):
        pid = pid_base + rank + 1
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": tid(pid, 0), "args": {"name": f"{prefix}rank {rank}"}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": tid(pid, 0), "args": {"sort_index": pid}})
        lanes = [COMPUTE] + [COMM if n == 0 else f"{COMM} {n + 1}" for n in range(max(1, lanes_used[rank]))]
        for n, name in enumerate(lanes):
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid(pid, n), "args": {"name": name}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid(pid, n), "args": {"sort_index": n}})
    return meta + out


def _x(name: str, cat: str, start: float, end: float, scale: float, pid: int, tid: int, args: dict) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": start * scale,
        "dur": (end - start) * scale,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _flow(ph: str, fid: int, t: float, scale: float, pid: int, tid: int, name: str) -> dict:
    ev = {"name": name, "cat": "p2p", "ph": ph, "id": fid, "ts": t * scale, "pid": pid, "tid": tid}
    if ph == "f":
        ev["bp"] = "e"  # bind to the enclosing item, not the next one to start
    return ev


def _mid(e: Event) -> float:
    return (e.start + e.end) / 2


def trace_document(runs: Sequence[tuple[Schedule, Timeline]], *, time_unit: str = "us", settings: dict | None = None) -> dict:
    """A JSON-object trace of one or more timelines (ranks of the k-th numbered from
    ``k * 1000``), with the settings under ``otherData``."""
    events: list[dict] = []
    several = len(runs) > 1
    for k, (s, tl) in enumerate(runs):
        events += trace_events(s, tl, time_unit=time_unit, pid_base=k * 1000, label=s.name if several else "")
    other = {"generator": "pipesim", "time_unit": f"1 cost-model unit = 1 {time_unit}", **(settings or {})}
    return {"traceEvents": events, "displayTimeUnit": "ns" if time_unit == "ns" else "ms", "otherData": other}


def trace_json(runs: Sequence[tuple[Schedule, Timeline]], **options) -> str:
    from ..files import json_text

    return json_text(trace_document(runs, **options), indent=None, separators=(",", ":"))
