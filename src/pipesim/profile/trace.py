"""Reading a PyTorch profiler trace (Kineto's Chrome-trace JSON, plain or gzipped) in one
pass with bounded memory.

The file is read in chunks and its ``traceEvents`` decoded one event at a time, so a
trace of a gigabyte never sits in memory whole; of each event only what attribution
needs is kept, and only for the kinds it needs:

* CPU-side ranges that may name something (``cat`` user_annotation, cpu_op: the
  annotations of ``record_function`` and of PyTorch's pipelining runtime);
* kernel launches (``cat`` cuda_runtime / cuda_driver, and their ROCm names), keyed by
  ``args.correlation``;
* GPU work (``cat`` kernel, gpu_memcpy, gpu_memset) with its stream and correlation id.

Kineto also writes flow events (``ac2g``) from each launch to its kernel; their ids are
the same correlation ids, so ``args.correlation`` alone links them and the flows are
skipped. Times are microseconds, as in the file.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PipesimError
from ..inputs import MAX_TRACE_BYTES, MAX_TRACE_COST, LongInteger, check_file, json_int, long_integer_error

# categories compared in lower case: older Kineto wrote Kernel, Runtime, Memcpy, Memset
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver", "runtime", "driver"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RANGE_CATS = {"user_annotation", "cpu_op", "operator"}
READ_CATS = LAUNCH_CATS | GPU_CATS | RANGE_CATS
CHUNK = 1 << 20  # characters read at a time
MAX_VALUE = 64 << 20  # characters one event may take
MAX_META = 1 << 20  # characters one top-level value beside traceEvents may take: Kineto's are a few KB
US = 1e-6  # seconds in a trace's time unit: Chrome traces count microseconds
MAX_EVENT_US = 86400e6  # no profiled event lasts a day: a longer one is a broken trace
MAX_TS_US = 1e17  # Kineto's clock (microseconds since the epoch, ~1.8e15 now) for 3,000 years


def read_in_folder(names: list[str]) -> list[str]:
    """Which of a folder's file ``names`` ``pipesim profile DIR`` reads: the rank files
    (rank*.json, rank*.json.gz: what ``pipesim run --profile`` writes) where there are
    any, else every .json / .json.gz. Also what ``run --profile`` weighs before writing
    there: a file this leaves out is never read beside its traces."""
    traces = [n for n in names if n.endswith((".json", ".json.gz"))]
    return [n for n in traces if n.startswith("rank")] or traces


RUN_KEY = "pipesimRun"  # beside traceEvents: the run that wrote it (pipesim run --profile; runtime.worker.run_stamp)
_KIND = {"int": "a number", "float": "a number", "str": "a string", "list": "a list", "bool": "true or false", "NoneType": "null"}


@dataclass(frozen=True, slots=True)
class Range:
    """A CPU-side range: ``name`` on thread (pid, tid) from ``start`` to ``end`` (us)."""

    pid: object
    tid: object
    start: float
    end: float
    name: str


@dataclass(frozen=True, slots=True)
class Kernel:
    """GPU work on ``stream`` from ``start`` to ``end`` (us), launched under ``correlation``."""

    stream: int
    start: float
    end: float
    correlation: int | None
    name: str
    blocks: int  # grid size: a communication kernel's grid is the SMs it holds


@dataclass
class Trace:
    path: str
    ranges: list[Range] = field(default_factory=list)
    launches: dict[int, tuple[object, object, float]] = field(default_factory=dict)  # corr -> (pid, tid, ts)
    kernels: list[Kernel] = field(default_factory=list)
    rank: int | None = None  # distributedInfo.rank
    run: str | None = None  # RUN_KEY: the run's identity, the same in every rank's trace of one run
    device: str | None = None
    total_sms: int | None = None
    events: int = 0  # events read, of any kind
    cpu_ops: int = 0


def read_trace(path: str | Path, wanted=lambda name: True) -> Trace:
    """The parts of the trace at ``path`` that attribution needs. ``wanted(name)`` says
    which cpu_op names to keep as ranges (user annotations are always kept): a trace has
    far more operator events than annotations, and most of them name nothing."""
    p = Path(path)
    tr = Trace(str(p))
    meta: dict = {}
    names: dict[str, str] = {}  # one copy of each name: kernels and ranges repeat theirs
    for kind, value in _items(p):
        if kind == "meta":
            meta[value[0]] = value[1]
            continue
        tr.events += 1
        if not isinstance(value, dict):
            kind = _KIND.get(type(value).__name__, type(value).__name__)
            raise PipesimError(f"{p}: not a profiler trace: its events include {kind}, expected event objects")
        cat = value.get("cat")
        if value.get("ph") != "X" or not isinstance(cat, str):
            continue
        cat = cat.lower()
        ts, dur = value.get("ts"), value.get("dur", 0.0)
        if not (_number(ts) and _number(dur)):
            # Kineto writes every complete event's ts and dur as numbers (pytorch/kineto
            # libkineto/src/output_json.cpp, ChromeTraceLogger::handleActivity: "ts":
            # {}.{:03}, "dur": {}.{:03}), so one that pipesim reads without them is a
            # malformed file, not a kind of event to pass over: dropping it would leave
            # an annotation, or its kernels, out of every count without a word
            if cat in READ_CATS:
                field_, got = ("ts", ts) if not _number(ts) else ("dur", dur)
                got = f"{field_} {_short(got)}" if field_ in value else f"no {field_}"
                raise PipesimError(
                    f"{p}: event {tr.events - 1} of traceEvents ({_short(value.get('name', ''))}, cat {cat}) has {got}; "
                    f"expected a number of microseconds, as torch.profiler writes"
                )
            continue  # a kind pipesim does not read: its times are not needed
        ts, dur = float(ts), float(dur)
        if not (abs(ts) <= MAX_TS_US and 0.0 <= dur <= MAX_EVENT_US):  # NaN fails both
            raise PipesimError(
                f"{p}: event {str(value.get('name', ''))[:60]!r} has ts {value['ts']} and dur {value.get('dur')}; "
                f"expected a start from -{MAX_TS_US:g} to {MAX_TS_US:g} and a duration from 0 to a day ({MAX_EVENT_US:g}), in microseconds"
            )
        end = ts + dur
        args = value.get("args")
        args = args if isinstance(args, dict) else {}
        pid, tid = _id(value.get("pid")), _id(value.get("tid"))
        if cat in RANGE_CATS:
            name = str(value.get("name", ""))
            name = names.setdefault(name, name)
            if cat != "user_annotation":
                tr.cpu_ops += 1
                if not wanted(name):
                    continue
            tr.ranges.append(Range(pid, tid, ts, end, name))
        elif cat in LAUNCH_CATS:
            corr = args.get("correlation")
            if isinstance(corr, int):
                tr.launches[corr] = (pid, tid, ts)
        elif cat in GPU_CATS:
            corr = args.get("correlation")
            stream = args.get("stream", tid)
            kname = str(value.get("name", ""))
            grid = args.get("grid") or [1]
            blocks = 1
            for g in grid if isinstance(grid, list) else [1]:
                blocks *= g if isinstance(g, int) else 1
            tr.kernels.append(
                Kernel(
                    int(stream) if isinstance(stream, (int, float)) and math.isfinite(stream) else -1,
                    ts,
                    end,
                    corr if isinstance(corr, int) else None,
                    names.setdefault(kname, kname),
                    blocks,
                )
            )
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict) and isinstance(dist.get("rank"), int):
        tr.rank = dist["rank"]
    run = meta.get(RUN_KEY)
    if isinstance(run, str):
        tr.run = run[:100]
    props = meta.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        tr.device = props[0].get("name")
        sms = props[0].get("numSms")
        tr.total_sms = sms if isinstance(sms, int) and sms > 0 else None
    return tr


def _number(x) -> bool:
    """A JSON number (true and false decode as bools, which are ints to Python)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _short(x) -> str:
    """A value as JSON writes it, cut to fit in one line of an error."""
    text = json.dumps(x, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def _id(x):
    """A pid or tid as a key: Kineto writes numbers or strings; anything else is kept as
    its text, so a malformed one neither matches a real thread nor breaks the reading."""
    return x if isinstance(x, (int, float, str)) or x is None else repr(x)


def _open(p: Path):
    """The trace's bytes as a binary file (decompressed when gzipped), and whether it
    is gzipped. Its text is bounded by ``MAX_TRACE_BYTES``: a plain file by its size, up
    front; a gzipped one by the size its trailer gives, up front, and by the bytes it
    decompresses to, as they are read (``_Reader``)."""
    check_file(p, "trace", MAX_TRACE_BYTES)  # a FIFO or device would block or never end
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
            if magic != b"\x1f\x8b":
                return open(p, "rb"), False
            # ISIZE, the last 4 bytes: the last member's size mod 2**32, so at most the
            # whole; one larger than it is written wrong (decompressing would fail on it)
            # or the text is past the limit. Either way nothing needs decompressing.
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4))
            size = int.from_bytes(f.read(4), "little")
    except OSError as e:
        raise PipesimError(f"cannot read trace {str(p)!r}: {e.strerror}") from None
    if size > MAX_TRACE_BYTES:
        raise _too_long(str(p), f"its gzip trailer gives {size:,} bytes decompressed (or the file is cut short), above")
    return gzip.open(p, "rb"), True


def _too_long(where: str, what: str) -> PipesimError:
    return PipesimError(
        f"{where}: {what} the limit of {MAX_TRACE_BYTES:,} bytes of trace text ({MAX_TRACE_COST}); "
        "profile fewer steps (torch.profiler's schedule with active=1) or without record_shapes"
    )


class _Reader:
    """A text buffer over a file that decodes one JSON value at a time, reading more of
    the file only when a value runs past the end of what has been read. The file's
    bytes are counted as they are read, up to ``MAX_TRACE_BYTES``."""

    def __init__(self, f, where: str, gzipped: bool = False):
        self.f, self.where, self.gzipped = f, where, gzipped
        self.buf, self.pos, self.eof, self.bytes = "", 0, False, 0
        self.dec = json.JSONDecoder(parse_int=json_int)
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def _more(self, size: int = CHUNK) -> bool:
        if self.eof:
            return False
        try:
            data = self.f.read(size)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise PipesimError(f"{self.where}: cannot read it ({e}); expected a plain or gzipped profiler trace") from None
        self.bytes += len(data)
        if self.bytes > MAX_TRACE_BYTES:  # a gzip bomb, or a file that grew while read
            raise _too_long(self.where, "it decompresses to more than" if self.gzipped else "it has more than")
        try:
            chunk = self.utf8.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise PipesimError(f"{self.where}: not UTF-8 text ({e.reason}); expected the JSON of torch.profiler") from None
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if c == "" or c not in chars:
            found = "the end of the file" if c == "" else repr(c)
            raise PipesimError(f"{self.where}: not a profiler trace: found {found} where {what} should be")
        self.pos += 1
        return c

    def value(self, limit: int = MAX_VALUE):
        """The next JSON value. One that fails to decode may only be cut by the end of
        what was read: read as much again and retry (so a long value costs linear time),
        up to ``limit`` characters (no profiler event is that large, so a malformed file
        fails without being read whole)."""
        self.peek()
        while True:
            try:
                v, end = self.dec.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise PipesimError(f"{self.where}: not a profiler trace: JSON nested too deeply to be one") from None
            except LongInteger:  # name its key: the value being decoded starts at pos
                raise long_integer_error(self.buf[self.pos : self.pos + MAX_VALUE], self.where) from None
            except json.JSONDecodeError as e:
                error = e
            else:
                # a number at the end of the buffer may go on in the next chunk
                if end < len(self.buf) or not isinstance(v, (int, float)) or not self._more():
                    self.pos = end
                    return v
                continue
            if len(self.buf) - self.pos > limit:
                raise PipesimError(
                    f"{self.where}: not a profiler trace: a JSON value of more than {limit:,} characters "
                    f"({'an event' if limit == MAX_VALUE else 'metadata beside traceEvents'} is far smaller)"
                )
            if not self._more(max(CHUNK, len(self.buf) - self.pos)):
                raise PipesimError(
                    f"{self.where}: not valid JSON ({error.msg}); expected the Chrome-trace JSON of torch.profiler"
                ) from None


def _items(p: Path):
    """("meta", (key, value)) for each top-level key but traceEvents, and ("event", e)
    for each of its events, in file order. A bare list of events (Chrome's other form)
    is taken too."""
    where = str(p)
    f, gzipped = _open(p)
    with f:
        r = _Reader(f, where, gzipped)
        first = r.expect("{[", "a JSON object with traceEvents")
        if first == "[":
            yield from (("event", e) for e in _array(r))
            return
        seen, keys = False, set()
        if r.peek() == "}":
            r.pos += 1
        else:
            while True:
                key = r.value()
                if not isinstance(key, str):
                    raise PipesimError(f"{where}: not valid JSON (a key that is not a string); expected a profiler trace")
                r.expect(":", "':'")
                if key == "traceEvents":
                    seen = True
                    if r.peek() != "[":
                        raise PipesimError(f"{where}: not a profiler trace: traceEvents is not a list of events")
                    r.pos += 1
                    yield from (("event", e) for e in _array(r))
                else:
                    keys.add(key)
                    yield ("meta", (key, r.value(MAX_META)))
                if r.expect(",}", "',' or '}'") == "}":
                    break
        if not seen:
            raise PipesimError(
                f"{where}: not a profiler trace: a JSON object without traceEvents{_pipesim_file(keys, where)}; "
                "expected the Chrome-trace JSON that torch.profiler's export_chrome_trace writes"
            )


def _pipesim_file(keys: set[str], where: str) -> str:
    """What a file pipesim wrote itself is, named with the command that reads it: the
    timeline profile --timeline writes was fed back to profile, told only 'no traceEvents'."""
    if not {"format", "ranks"} <= keys:
        return ""
    if "timeline" in keys:
        return f" (a measured timeline, which pipesim draw --measured {where} draws)"
    return f" (a pipesim schedule file, which pipesim simulate -s {where} runs)"


def _array(r: _Reader):
    """The elements of a JSON array whose '[' has been read."""
    if r.peek() == "]":
        r.pos += 1
        return
    while True:
        yield r.value()
        if r.expect(",]", "',' or ']'") == "]":
            return
