"""What the interactive report draws, as compact JSON: plain arrays, no SVG.

The page's script (``report.js``) draws everything from this, so a big schedule costs
its numbers once and nothing twice. Per schedule:

* ``ev``: one array per item, ``[rank, start, end, op, op2]`` where ``op`` is
  ``[kind, chunk, micro-batch, stage]`` and ``op2`` the backward of a pair (or null);
  times from the timeline's first start;
* ``dep``: per item, what it waited for, ``[[item, ready], ...]``: the item that made
  each input (``deps.needs``) and when that input was ready on this rank (its end, or
  for another rank the arrival of the transfer, ``Timeline.transfers``);
* ``ins``, ``evi``: the distinct insides of items (``Timeline.inside``: the two streams
  of a pair under component costs), ``[stream, part, half, layer, start, end, tag]``
  relative to the item's start, and per item the index of its inside or -1;
* ``mem``: per rank, the activations alive over time ``[t0, v0, t1, v1, ...]`` in
  micro-batches of one 1F1B stage (``memory.memory`` with the metrics' convention: born
  when an F starts, freed when its W or BW ends), so its peak is the table's;
* ``chunk``: what each chunk means for this schedule (``chunks.py``); ``fills``/``inks``
  the palette's colours for each ``KIND + chunk``.

Numbers are rounded to 9 significant digits and whole ones written without ``.0``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..deps import needs, produces
from ..ir import KINDS, Op, Schedule, ops_of
from ..memory import MemoryModel, memory
from ..metrics import summarize
from ..sweep import Point
from ..timeline import Timeline
from .chunks import chunk_meanings
from .palette import fill, ink


def _num(x: float) -> float | int:
    if x == int(x) and abs(x) < 2**53:
        return int(x)
    return float(f"{x:.9g}")


def timeline_data(schedule: Schedule, timeline: Timeline) -> dict:
    pl = schedule.placement
    t0 = timeline.start
    rep = summarize(schedule, timeline)
    index: dict[tuple[int, int], int] = {}  # (rank, position on the rank) -> item number
    flat = []
    for r, evs in enumerate(timeline.events):
        for i, e in enumerate(evs):
            index[(r, i)] = len(flat)
            flat.append(e)
    made = {}  # dependency key -> item number that makes it
    for r, evs in enumerate(timeline.events):
        for i, e in enumerate(evs):
            for op in ops_of(e.item):
                for key in produces(r, op):
                    made[key] = index[(r, i)]
    arrive = {(t.src, t.dst, t.op): t.end for t in timeline.transfers}

    def op_row(r: int, op: Op) -> list:
        return [op.kind, op.chunk, op.mb, pl.stage_of(r, op.chunk, op.mb)]

    ev, dep, evi, insides = [], [], [], {}
    ins: list[list] = []
    for e in flat:
        ops = ops_of(e.item)
        ev.append(
            [
                e.rank,
                _num(e.start - t0),
                _num(e.end - t0),
                op_row(e.rank, ops[0]),
                op_row(e.rank, ops[1]) if len(ops) > 1 else None,
            ]
        )
        waits = []
        for op in ops:
            for key in needs(pl, e.rank, op):
                src = made[key]
                producer = flat[src]
                pop = next(p for p in ops_of(producer.item) if key in produces(producer.rank, p))
                ready = arrive.get((producer.rank, e.rank, pop), producer.end) if producer.rank != e.rank else producer.end
                waits.append([src, _num(ready - t0)])
        dep.append(waits)
        if e.inside is None:
            evi.append(-1)
        else:
            if id(e.inside) not in insides:
                insides[id(e.inside)] = len(ins)
                tags = e.inside.tags or ("",) * len(e.inside.parts)
                ins.append(
                    [
                        [0 if st == "compute" else 1, part, half, layer, _num(a), _num(b), tag]
                        for (st, part, half, layer, a, b), tag in zip(e.inside.parts, tags)
                    ]
                )
            evi.append(insides[id(e.inside)])
    # activations in 1F1B stages: one chunk's is pp/stages of one stage's
    unit = MemoryModel(params=0.0, activation=pl.pp / pl.stages, w_share=1.0)
    mem = memory(schedule, timeline, unit)
    curves = [[_num(v) for t, live in steps for v in (t - t0, live)] for steps in mem.timeline]
    present = {(op.kind, op.chunk) for e in flat for op in ops_of(e.item)}
    return {
        "name": schedule.name,
        "pp": schedule.pp,
        "M": schedule.microbatches,
        "placement": pl.kind,
        "chunks": pl.chunks,
        "chunk": chunk_meanings(pl),
        "makespan": _num(rep.makespan),
        "bubble": _num(rep.bubble_ratio),
        "util": [_num(u) for u in rep.utilization],
        "peak": [_num(p) for p in rep.peak_activation_memory],
        "measured": timeline.source != "simulated",
        "fills": {f"{k}{c}": fill(k, c, pl.chunks) for k, c in sorted(present, key=lambda kc: (KINDS.index(kc[0]), kc[1]))},
        "inks": {f"{k}{c}": ink(k, c, pl.chunks) for k, c in present},
        "ev": ev,
        "dep": dep,
        "ins": ins,
        "evi": evi,
        "mem": curves,
    }


def sweep_data(points: Sequence[Point]) -> dict:
    """The sweep's points per schedule: M, bubble ratio, peak activation memory."""
    series: dict[str, dict] = {}
    for p in sorted(points, key=lambda p: p.microbatches):
        s = series.setdefault(p.schedule, {"name": p.schedule, "M": [], "bubble": [], "memory": []})
        s["M"].append(p.microbatches)
        s["bubble"].append(_num(p.bubble_ratio))
        s["memory"].append(_num(p.peak_activation_memory))
    return {"pp": points[0].pp if points else None, "series": list(series.values())}


def to_json(data: dict) -> str:
    """Compact JSON that can sit inside a <script> element (no ``</`` in it)."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")
