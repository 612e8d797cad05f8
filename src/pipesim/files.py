"""Reading and writing schedule files (JSON in the reference notation).

The format is the one of ``shared/reference``: ``schedule`` (a name), ``pp``,
``microbatches``, ``placement`` and ``ranks`` (a list of op lists, or of strings). The
placement is ``{"kind": "flat" | "interleaved" | "v" | "dual", "chunks": n}`` or explicit
``routes``; when it is missing or prose (as in the reference files), it is taken from the
registry entry of the schedule's name, or is flat when every op is on chunk 0; a
``stages`` field must then agree with it. ``format`` is the version of the document
(``FORMAT``; files without it are read as version 1). The JSON Schema of the file
ships with the package: ``pipesim/schedule.schema.json``.

Outputs are written whole or not at all: a unique temporary file in the target's
folder, flushed to disk, then renamed over a regular file (never over a device, a FIFO
or the target of a symlink made into a plain file); ``-`` is stdout.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .errors import PipesimError
from .inputs import MAX_COUNT, MAX_OPS, MAX_VALUE, known_keys, load_json, number, parse_json, read_text, shorten, work
from .ir import STANDARD_PLACEMENTS, Placement, Schedule, ops_of, parse_item, schedule_arg

#: Version of every JSON document pipesim writes (schedule files, --json output, plans,
#: traces' otherData). It changes when a key is removed or changes meaning; new keys
#: do not change it. A reader refuses a version newer than its own.
FORMAT = 1
SCHEDULE_KEYS = ("format", "schedule", "pp", "microbatches", "stages", "placement", "ranks")
#: keys of the reference files (shared/reference) that describe, not define, a schedule
NOTE_KEYS = ("source", "notes", "comment", "expected", "costs_per_chunk")


def schedule_from_dict(d: dict, where: str = "schedule", unnamed: str = "custom") -> Schedule:
    """The schedule a document describes; ``unnamed`` is its name when it gives none (a
    file's path: every line and output then names the file the user gave)."""
    if not isinstance(d, dict):
        raise PipesimError(f"{where}: expected a JSON object with pp, microbatches and ranks")
    known_keys(d, SCHEDULE_KEYS + NOTE_KEYS, where)
    check_format(d, where)
    for key in ("pp", "microbatches", "ranks"):
        if key not in d:
            # `pipesim ops --json > f.json` makes a document of ranks alone: say which command writes a file
            raise PipesimError(
                f"{where}: missing {key!r}; a schedule file needs pp, microbatches and ranks "
                "(pipesim ops -s NAME -o FILE.json writes one; ops --json prints the ranks only)"
            )
    if isinstance(d["pp"], float) or isinstance(d["microbatches"], float):
        raise PipesimError(f"{where}: pp and microbatches must be integers >= 1, got {d['pp']!r} and {d['microbatches']!r}")
    pp = number(d["pp"], "pp", 1, MAX_COUNT, integer=True, where=where)
    M = number(d["microbatches"], "microbatches", 1, MAX_COUNT, integer=True, where=where)
    stages = d.get("stages")
    # before the placement allocates a route per micro-batch
    work(pp, M, stages=max(pp, stages if isinstance(stages, int) else 0), where=f"{where}: ")
    rows = d["ranks"]
    if not isinstance(rows, list) or len(rows) != pp:
        raise PipesimError(f"{where}: 'ranks' must be a list of {pp} op lists (one per rank)")
    tokens_of = [row.split() if isinstance(row, str) else row for row in rows]
    for r, tokens in enumerate(tokens_of):
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise PipesimError(f'{where}: rank {r} must be a list of ops like "F0.1" or one string of them')
    total = sum(len(t) for t in tokens_of)
    if total > MAX_OPS:
        raise PipesimError(f"{where}: {total:,} items is beyond pipesim's limit of {MAX_OPS:,} ops")
    if 2 * total < M * pp:
        # every micro-batch passes every rank at least once, with a forward there: a file
        # with fewer ops than that claims micro-batches it does not schedule (and checking
        # it op by op would cost as much as a real schedule of that size)
        raise PipesimError(
            f"{where}: lists {total:,} items, too few for microbatches = {M:,} on {pp} ranks (each micro-batch needs "
            f"at least a forward on every rank: {M * pp:,} ops); fix microbatches or list every op"
        )
    ranks = []
    for r, tokens in enumerate(tokens_of):
        try:
            ranks.append(tuple(parse_item(t) for t in tokens))
        except PipesimError as e:
            raise PipesimError(f"{where}: rank {r}: {e}") from None
    declared = d.get("schedule", "")
    if not isinstance(declared, str):  # a number or null was printed as its repr ("None") wherever the name shows
        raise PipesimError(
            f"{where}: schedule must be the schedule's name, a string, got {'null' if declared is None else shorten(declared)}"
        )
    name = declared or unnamed
    max_chunk = max((op.chunk for row in ranks for it in row for op in ops_of(it)), default=0)
    work(pp, M, max_chunk + 1, where=f"{where}: ")
    # a registry family's placement by the name the file declares, never by its path
    placement = _placement(d.get("placement"), declared, pp, M, d, max_chunk, where)
    stages = d.get("stages")
    if stages is not None and stages != placement.stages:
        raise PipesimError(
            f"{where}: stages = {stages!r} disagrees with the {placement.kind} placement's {placement.stages} stages; "
            'fix "stages" or give "placement": {"kind": K, "chunks": n}'
        )
    return Schedule(name, pp, M, placement, tuple(ranks))


def check_format(d: dict, where: str) -> None:
    """A document's ``format``: absent (version 1) or a version this pipesim reads."""
    if "format" in d:
        v = d["format"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise PipesimError(f"{where}: format must be a whole number from 1 to {FORMAT}, got {v!r}")
        if v > FORMAT:
            raise PipesimError(f"{where}: format {v} is newer than this pipesim reads ({FORMAT}); upgrade pipesim")


def _placement(p, name: str, pp: int, M: int, d: dict, max_chunk: int, where: str) -> Placement:
    try:
        if isinstance(p, dict):
            known_keys(p, ("kind", "chunks", "routes", "route_of"), "placement")
            if "chunks" in p:
                work(pp, M, number(p["chunks"], "placement chunks", 1, MAX_COUNT, integer=True))
            return Placement.from_dict(p, pp, M)
        stages = d.get("stages")
        if stages is not None:
            stages = number(stages, "stages", 1, MAX_COUNT, integer=True)
        chunks = stages // pp if stages is not None and stages % pp == 0 else max_chunk + 1
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


def load_schedule(path: str | os.PathLike) -> Schedule:
    text = read_text(path, "schedule file")  # first: it names a path of the wrong type
    name = os.fspath(path)
    try:
        data = parse_json(text, name)
    except PipesimError as e:  # a PyTorch CSV given as -s ./dpv.csv: the way in, as for -s dpv.csv
        if (hint := csv_hint(name)) is None:
            raise
        raise PipesimError(f"{e}; {hint}") from None
    return schedule_from_dict(data, name, unnamed=name)


def csv_hint(name: str) -> str | None:
    """The way in for a PyTorch CSV (as ``export`` writes) given as a schedule, which is
    JSON or a registry name; None for a name that does not end in .csv."""
    hint = f"{name} looks like PyTorch's CSV: pipesim import --csv {name} -o s.json makes a schedule file of it"
    return hint if name.lower().endswith(".csv") else None


def json_text(data: dict, indent: int | None = 1, **options) -> str:
    """Strict JSON of a document pipesim writes: ``format`` first, and a value that is
    undefined (a NaN ratio of nothing, an infinite bound) written as null, never as
    the NaN/Infinity that strict parsers refuse. Indented text is ``json_pieces``
    joined; other options go to ``json.dumps``."""
    if indent is not None and not options:
        return "".join(json_pieces(data, indent))
    return json.dumps(_finite({"format": FORMAT, **data}), indent=indent, allow_nan=False, **options) + "\n"


class Stream:
    """A list in a document that is made and written one element at a time, never held
    whole: a schedule's ranks, each a list of op strings (at 24M ops the strings of all
    ranks took 1.5 GB and their text 0.4 GB more). ``element(i)`` is element i."""

    __slots__ = ("length", "element")

    def __init__(self, length: int, element: Callable[[int], object]) -> None:
        self.length, self.element = length, element

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[object]:
        return map(self.element, range(self.length))


def schedule_document(schedule: Schedule) -> dict:
    """``schedule.to_dict()`` with its ranks as a ``Stream``, for writing."""
    return {**schedule.to_dict(ranks=False), "ranks": Stream(schedule.pp, schedule.rank_notation)}


def json_pieces(data: dict, indent: int = 1) -> Iterator[str]:
    """``json_text(data, indent)`` in pieces (one per ``Stream`` element at most), the
    same text as ``json.dumps(indent=...)`` writes. Each list or table of plain values
    goes through the C encoder in one call (``json.dumps`` with an indent runs its
    pure-Python encoder per value, 20 s for a schedule of 10M ops)."""
    yield from _pieces({"format": FORMAT, **data}, indent, 0)
    yield "\n"


_PLAIN_VALUES = {str, int, bool, type(None), float}


def _key(k: object) -> str:
    """A table key as ``json.dumps`` writes it: a string, or a number, true, false or
    null turned into one."""
    if isinstance(k, str):
        return json.dumps(k)
    if not isinstance(k, (int, float, bool)) and k is not None:
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")
    return json.dumps(json.dumps(_finite(k), allow_nan=False))


def _pieces(x, indent: int, level: int) -> Iterator[str]:
    """``x`` as ``json.dumps(x, indent=indent)`` writes it nested ``level`` deep."""
    if not x or not isinstance(x, (dict, list, tuple, Stream)):
        yield json.dumps(_finite(x), allow_nan=False)
        return
    pad, close = "\n" + " " * (indent * (level + 1)), "\n" + " " * (indent * level)
    if isinstance(x, dict):
        if all(type(k) is str for k in x) and set(map(type, x.values())) <= _PLAIN_VALUES:
            body = json.dumps(_finite(x), separators=("," + pad, ": "), allow_nan=False)
            yield "{" + pad + body[1:-1] + close + "}"
            return
        yield "{"
        for n, (k, v) in enumerate(x.items()):
            yield ("," if n else "") + pad + _key(k) + ": "
            yield from _pieces(v, indent, level + 1)
        yield close + "}"
        return
    if not isinstance(x, Stream) and set(map(type, x)) <= _PLAIN_VALUES:
        body = json.dumps(_finite(x), separators=("," + pad, ": "), allow_nan=False)
        yield "[" + pad + body[1:-1] + close + "]"
        return
    yield "["
    for n, v in enumerate(x):
        yield ("," if n else "") + pad
        yield from _pieces(v, indent, level + 1)
    yield close + "]"


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, Stream):
        return [_finite(v) for v in x]
    if isinstance(x, (list, tuple)):
        types = set(map(type, x))
        if not types & {float, dict, list, tuple, Stream} and types <= _PLAIN_VALUES:  # nothing to change: no walk
            return x
        return [_finite(v) for v in x]
    return x


def _encoded(pieces: Iterable[str], size: int = 1 << 20) -> Iterator[bytes]:
    """UTF-8 of ``pieces`` in blocks of about ``size`` characters (a write per piece
    would be a system call per rank row; a join of all of them, the whole text)."""
    block: list[str] = []
    n = 0
    for p in pieces:
        block.append(p)
        n += len(p)
        if n >= size:
            yield "".join(block).encode("utf-8")
            block, n = [], 0
    if block:
        yield "".join(block).encode("utf-8")


def write_json(path: str | os.PathLike, data: dict) -> None:
    """``json_text(data)`` to ``path``, all or nothing, or to stdout (``-``), written
    in blocks as it is made: a ``Stream`` in ``data`` is never held whole."""
    write_chunks_atomic(path, _encoded(json_pieces(data)))


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    """``schedule`` as a schedule file at ``path`` (what ``load_schedule`` reads)."""
    write_json(path, schedule_document(schedule_arg(schedule, "pipesim.files.save_schedule")))


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write all or nothing: a failed write leaves no half-written file behind."""
    write_bytes_atomic(path, text.encode("utf-8"))


def output_extension(path: str, allowed: Sequence[str], what: str, flag: str = "-o") -> str:
    """The extension of ``path`` if it is one of ``allowed`` and it can be written (a
    regular file in a writable folder); else a one-line error naming what would be right."""
    ext = Path(path).suffix.lower()
    if ext not in allowed:
        stdout = " (- is stdout only for text: ops, import, export, plan)" if path == "-" else ""
        raise PipesimError(f"{flag} {path}: unknown extension {ext or '(none)'!r}; use {what}{stdout}")
    target = output_target(path)
    if target is not None and not os.access(target.parent, os.W_OK):
        raise PipesimError(f"cannot write {path!r}: the folder {str(target.parent)!r} is not writable")
    return ext


def output_target(path: str | os.PathLike) -> Path | None:
    """Where ``-o path`` writes: None for stdout (``-``), else the regular file it names
    (a symlink resolved to its target). Refuses an empty name, a folder, a device, a
    FIFO or a socket, and a folder that does not exist, before any work."""
    name = os.fspath(path)
    if name == "-":
        return None
    if name == "":
        raise PipesimError("-o '': the file name is empty; give a path, or - for stdout")
    if name.endswith(os.sep) and not os.path.isdir(name):  # realpath drops the /: it wrote the file
        raise PipesimError(f"cannot write {name!r}: a name ending in {os.sep} names a folder; give a file name")
    p = Path(os.path.realpath(name))
    try:
        # the name itself, followed as opening it would be: /dev/stdout on a pipe resolves
        # to /proc/N/fd/pipe:[M], no path, and was said to be a missing file
        st = os.stat(name)
    except FileNotFoundError:
        if not p.parent.is_dir():
            # through a link, the folder missing is its target's, not the link's own
            linked = os.path.islink(name)
            where = repr(str(p.parent)) + ", where the link leads" if linked else repr(os.path.dirname(name) or ".")
            raise PipesimError(f"cannot write {name!r}: there is no folder {where}") from None
        return p
    except OSError as e:
        raise PipesimError(f"cannot write {name!r}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PipesimError(f"cannot write {name!r}: it is a folder; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise PipesimError(f"cannot write {name!r}: it is not a regular file (a device, FIFO or socket); give a file path")
    return p


#: most files of an input folder (a folder of per-rank traces) compared with the outputs
MAX_FOLDER_FILES = 100_000


def _identity(path: str) -> tuple[int, int] | None:
    """The file ``path`` names, as (device, inode) after following links; None when it
    names no regular file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def input_files(values: dict[str, object], skip: tuple[str, ...] = (), positional: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(flag, file) for every file a command's flag values name: a value that is a file,
    each file directly in a value that is a folder (per-rank traces), and, only when the
    whole value names nothing, each part of a comma-separated list (``--schedules
    1f1b,my.json``): a path with a comma in it is a path, never split. ``skip`` names
    the keys that are not read (the outputs); ``positional`` those named without a flag."""
    out = []
    for key, value in values.items():
        if key in skip:  # the outputs, and what is no file name
            continue
        flag = key.upper() if key in positional else "--" + key.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str) or v in ("", "-"):
                continue
            if os.path.isdir(v):
                with os.scandir(v) as entries:
                    for i, e in enumerate(entries):
                        if i >= MAX_FOLDER_FILES:
                            break
                        out.append((flag, e.path))
            elif os.path.exists(v):
                out.append((flag, v))
            else:
                out.extend((flag, part) for part in v.split(",") if part and os.path.exists(part))
    return out


def refuse_overwrite(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """Refuse, before any work, an output that is one of the inputs. Files are compared
    by identity (device and inode, links followed), so another spelling of the same
    file, a symlink or a hard link to it is caught as well as the same name."""
    read: dict[tuple[int, int], tuple[str, str]] = {}
    for flag, path in inputs:
        ident = _identity(path)
        if ident is not None:
            read.setdefault(ident, (flag, path))
    for flag, path in outputs:
        ident = None if path == "-" else _identity(path)
        if ident in read:
            iflag, ipath = read[ident]
            raise PipesimError(f"{flag} {path} would overwrite the input {iflag} {ipath}; write to another file")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write all or nothing (``write_chunks_atomic`` of one chunk)."""
    write_chunks_atomic(path, (data,))


def write_chunks_atomic(path: str | os.PathLike, chunks: Iterable[bytes]) -> None:
    """Write all or nothing: a temporary file with a unique name in the target's folder,
    flushed to disk, then renamed into place (so two writers never share a temp file and
    a reader sees the old file or the new one, whole). ``-`` writes to stdout. ``chunks``
    are made as they are written, so a large output is never held whole."""
    target = output_target(path)
    if target is None:
        sys.stdout.flush()
        for data in chunks:
            sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "wb") as f:
            for data in chunks:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if target.exists():  # keep the permissions of the file it replaces
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
        tmp = None
    except OSError as e:
        raise PipesimError(f"cannot write {os.fspath(path)!r}: {e.strerror}") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


#: the streams a segment runs on (timeline.Segment): what Inside.of splits compute from
#: communication by; another name was read as communication, unsaid
TIMELINE_STREAMS = ("compute", "comm")


def load_timeline(path: str | os.PathLike):
    """(Schedule, Timeline) from a file ``timeline_to_dict`` wrote."""
    from .timeline import Event, Inside, Segment, Timeline

    p = Path(path)
    data = load_json(p, "timeline file")
    tl = data.get("timeline") if isinstance(data, dict) else None
    if not isinstance(tl, dict) or not isinstance(tl.get("events"), list):
        raise PipesimError(f"{p}: not a timeline file; expected a schedule with a 'timeline' (pipesim profile --timeline)")
    schedule = schedule_from_dict({k: v for k, v in data.items() if k != "timeline"}, str(p), unnamed=str(p))
    if len(tl["events"]) != schedule.pp:
        raise PipesimError(
            f"{p}: timeline has {len(tl['events'])} rank{'s' * (len(tl['events']) != 1)}, the schedule pp={schedule.pp}"
        )
    ranks = []
    try:
        for r, (row, items) in enumerate(zip(tl["events"], schedule.ranks)):
            evs = []
            for (name, start, end, segs), item in zip(row, items):
                if parse_item(name) != item:
                    raise PipesimError(f"{p}: rank {r}: timeline item {name} is not the schedule's {item}")
                # times finite and bounded before a chart sees them (1e308 made matplotlib's axis inf)
                at = f"{p}: rank {r}: {name}"
                start = number(start, "start", -MAX_VALUE, MAX_VALUE, where=at)
                end = number(end, "end", start, MAX_VALUE, where=at)
                for seg in segs:  # a malformed one is the except's below
                    if isinstance(seg, list) and seg and seg[0] not in TIMELINE_STREAMS:
                        raise PipesimError(
                            f"{at}: segment stream {shorten(seg[0])} is unknown; "
                            f"a segment runs on {' or '.join(map(repr, TIMELINE_STREAMS))}"
                        )
                parts = tuple(
                    Segment(s, label, number(a, "segment start", -MAX_VALUE, MAX_VALUE, where=at) - start,
                            number(b, "segment end", -MAX_VALUE, MAX_VALUE, where=at) - start)
                    for s, label, a, b in segs
                )  # fmt: skip
                evs.append(Event(r, item, start, end, Inside.of(parts) if parts else None))
            if len(evs) != len(items):
                raise PipesimError(
                    f"{p}: rank {r}: timeline has {len(evs)} event{'s' * (len(evs) != 1)} for {len(items)} item{'s' * (len(items) != 1)}"
                )
            ranks.append(tuple(evs))
    except PipesimError:
        raise
    except (TypeError, ValueError) as e:
        raise PipesimError(f"{p}: malformed timeline event ({e}); expected [item, start, end, segments]") from None
    return schedule, Timeline(schedule.pp, tuple(ranks), (), source=str(tl.get("source", "measured")))
