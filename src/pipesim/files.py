"""Reading and writing schedule files (JSON in the reference notation).

The format is the one of ``shared/reference``: ``schedule`` (a name), ``pp``,
``microbatches``, ``placement`` and ``ranks`` (a list of op lists, or of strings). The
placement is ``{"kind": "flat" | "interleaved" | "v" | "dual", "chunks": n}`` or explicit
``routes``; when it is missing or prose (as in the reference files), it is taken from the
registry entry of the schedule's name, or is flat when every op is on chunk 0.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .engine import check_size
from .errors import PipesimError
from .ir import STANDARD_PLACEMENTS, Placement, Schedule, ops_of, parse_item


def schedule_from_dict(d: dict, where: str = "schedule") -> Schedule:
    if not isinstance(d, dict):
        raise PipesimError(f"{where}: expected a JSON object with pp, microbatches and ranks")
    for key in ("pp", "microbatches", "ranks"):
        if key not in d:
            raise PipesimError(f"{where}: missing {key!r}; a schedule file needs pp, microbatches and ranks")
    pp, M = d["pp"], d["microbatches"]
    if not isinstance(pp, int) or pp < 1 or not isinstance(M, int) or M < 1:
        raise PipesimError(f"{where}: pp and microbatches must be integers >= 1, got {pp!r} and {M!r}")
    stages = d.get("stages")
    check_size(pp, M, max(pp, stages if isinstance(stages, int) else 0), where)  # before anything of size M
    rows = d["ranks"]
    if not isinstance(rows, list) or len(rows) != pp:
        raise PipesimError(f"{where}: 'ranks' must be a list of {pp} op lists (one per rank)")
    ranks = []
    for r, row in enumerate(rows):
        tokens = row.split() if isinstance(row, str) else row
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise PipesimError(f'{where}: rank {r} must be a list of ops like "F0.1" or one string of them')
        try:
            ranks.append(tuple(parse_item(t) for t in tokens))
        except PipesimError as e:
            raise PipesimError(f"{where}: rank {r}: {e}") from None
    name = str(d.get("schedule", "custom"))
    max_chunk = max((op.chunk for row in ranks for it in row for op in ops_of(it)), default=0)
    placement = _placement(d.get("placement"), name, pp, M, d, max_chunk, where)
    return Schedule(name, pp, M, placement, tuple(ranks))


def _placement(p, name: str, pp: int, M: int, d: dict, max_chunk: int, where: str) -> Placement:
    try:
        if isinstance(p, dict):
            return Placement.from_dict(p, pp, M)
        stages = d.get("stages")
        chunks = stages // pp if isinstance(stages, int) and stages % pp == 0 else max_chunk + 1
        kind = p if p in STANDARD_PLACEMENTS else None
        if kind is None:
            from .schedules import REGISTRY

            fam = REGISTRY.get(name)
            if fam is not None:
                kind = fam.placement
            elif max_chunk == 0:
                kind = "flat"
            else:
                raise PipesimError(
                    f'cannot tell the placement; add "placement": {{"kind": K}} with K one of {", ".join(STANDARD_PLACEMENTS)}'
                )
        return Placement.standard(kind, pp, M, chunks)
    except PipesimError as e:
        raise PipesimError(f"{where}: {e}") from None


def read_json(path: str | os.PathLike, what: str):
    """The JSON document at ``path``, or one line saying why not (``what`` names the file's kind)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise PipesimError(f"cannot read {what} {str(p)!r}: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise PipesimError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None


def load_schedule(path: str | os.PathLike) -> Schedule:
    return schedule_from_dict(read_json(path, "schedule file"), str(path))


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    write_text_atomic(path, json.dumps(schedule.to_dict(), indent=1) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write all or nothing: a failed write leaves no half-written file behind."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write all or nothing (a temporary file renamed into place)."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise PipesimError(f"cannot write {str(p)!r}: {e.strerror}") from None


# ---------------------------------------------------------------------------------------
# timeline files: a schedule and when each of its items ran (measured, say)


def timeline_to_dict(schedule: Schedule, timeline) -> dict:
    """A schedule file plus ``timeline``: per rank, ``[item, start, end, segments]`` in
    execution order, segments being ``[stream, label, start, end]`` in absolute time."""
    events = [
        [[str(e.item), e.start, e.end, [[g.stream, g.label, g.start, g.end] for g in e.segments]] for e in evs]
        for evs in timeline.events
    ]
    return {**schedule.to_dict(), "timeline": {"source": timeline.source, "events": events}}


def load_timeline(path: str | os.PathLike):
    """(Schedule, Timeline) from a file ``timeline_to_dict`` wrote."""
    from .timeline import Event, Inside, Segment, Timeline

    p = Path(path)
    data = read_json(p, "timeline file")
    tl = data.get("timeline") if isinstance(data, dict) else None
    if not isinstance(tl, dict) or not isinstance(tl.get("events"), list):
        raise PipesimError(f"{p}: not a timeline file; expected a schedule with a 'timeline' (pipesim profile --timeline)")
    schedule = schedule_from_dict(data, str(p))
    if len(tl["events"]) != schedule.pp:
        raise PipesimError(f"{p}: timeline has {len(tl['events'])} ranks, the schedule pp={schedule.pp}")
    ranks = []
    try:
        for r, (row, items) in enumerate(zip(tl["events"], schedule.ranks)):
            evs = []
            for (name, start, end, segs), item in zip(row, items):
                if parse_item(name) != item:
                    raise PipesimError(f"{p}: rank {r}: timeline item {name} is not the schedule's {item}")
                parts = tuple(Segment(s, label, a - start, b - start) for s, label, a, b in segs)
                evs.append(Event(r, item, float(start), float(end), Inside.of(parts) if parts else None))
            if len(evs) != len(items):
                raise PipesimError(f"{p}: rank {r}: timeline has {len(evs)} events for {len(items)} items")
            ranks.append(tuple(evs))
    except PipesimError:
        raise
    except (TypeError, ValueError) as e:
        raise PipesimError(f"{p}: malformed timeline event ({e}); expected [item, start, end, segments]") from None
    return schedule, Timeline(schedule.pp, tuple(ranks), (), source=str(tl.get("source", "measured")))
