"""Checking what comes in, before any work: numbers, sizes, files and their text.

Every input pipesim reads (flags, schedule JSON, cost, model, cluster and training TOML,
profile traces) passes through here, so that hostile or mistaken input ends in one
``PipesimError`` naming the file, the key and the accepted range, and a size that
cannot be handled is refused before anything is allocated for it. Low in the layering:
it imports nothing of pipesim but the error type.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import stat
import tomllib
from collections.abc import Iterable

from .errors import PipesimError

#: The work limit: the most ops one schedule may have (a micro-batch passes each of its
#: stages with at most three ops, F, B and W), and the one place to tune it. Every size
#: (flags, schedule files, sweeps, comparisons, builds, compiles) is checked against it
#: before anything of that size is allocated, so a hostile size is one error line rather
#: than a hang or gigabytes of memory. What it costs is measured, not estimated, by
#: benchmarks/limits.py and stated in docs/limits.md: zb-h1 (three ops per micro-batch
#: and stage, the most) at pp=64, M=125,000 is 24M ops; simulate --json there takes
#: about 25 s of CPU and 3.9 GB, the terminal table about the same.
MAX_OPS = 24_000_000
#: What the limit costs, in the words every refusal uses
MAX_OPS_COST = "about 30 s of CPU and 4 GB"
#: Most ranks of one schedule: readers, builders and the summary do some Python per
#: rank (a schedule file of a million ranks of two ops each: 20 s of CPU to validate)
MAX_RANKS = 100_000
#: The limit for ``import --torch``: PyTorch's own order generator is Python and slower
#: than linear (ZBVZeroBubble pp=32 M=1024, 197K actions: 47 s)
MAX_TORCH_OPS = 100_000
#: Largest pp for the searched builders (zb-h2, zb-v, v-half, v-min, zb-auto, zbv-torch):
#: their search grows faster than pp (v-half M=300: pp=64 1.5 s, 128 7.4 s, 256 > 60 s CPU)
MAX_SEARCH_PP = 128
#: The work limit of chimera's greedy list scheduler, Python per op (pp=512 M=1024,
#: 1.6M ops: 15 s CPU)
MAX_LIST_OPS = 4_000_000
MAX_LIST_OPS_COST = "about 40 s in its list scheduler"
#: Largest single count (ranks, micro-batches, layers, ...): past it an int cannot be
#: an index, and nothing real is that large.
MAX_COUNT = 16_000_000
#: Most layers of one model or chunk (DeepSeek-V3 has 61): per-layer costs and the
#: planner's stage splits loop over them.
MAX_LAYERS = 10_000
#: Largest time or cost: MAX_OPS of them still sum to a finite float (no overflow to inf).
MAX_VALUE = 1e15
#: Deepest nesting of a JSON document (a schedule file needs 5: placement routes).
MAX_DEPTH = 32
#: Largest input file: a schedule at MAX_OPS ops with room for spacing (and /dev/zero
#: style endless inputs are refused before reading, as non-regular files).
MAX_FILE_BYTES = 1 << 30


def work(
    pp: int,
    microbatches: int,
    chunks: int = 1,
    where: str = "",
    stages: int | None = None,
    what: str = "schedule",
    limit: int | None = None,
    cost: str = "",
) -> None:
    """Refuse a size beyond ``limit`` ops (default ``MAX_OPS``) before building it:
    ``microbatches`` through ``stages`` stages (default pp x chunks), at most three ops
    each. ``cost`` says what the limit costs, when it is not MAX_OPS's ``MAX_OPS_COST``."""
    stages = pp * chunks if stages is None else stages
    ops = 3 * microbatches * stages
    limit = MAX_OPS if limit is None else limit
    if pp > MAX_RANKS:
        raise PipesimError(
            f"{where}{what} too large: pp={pp:,} is above the limit of {MAX_RANKS:,} ranks "
            f"(work per rank: a file of 1M ranks took 20 s to read); use fewer ranks"
        )
    if ops > limit:
        raise PipesimError(
            f"{where}{what} too large: pp={pp}, M={microbatches}, {stages} stages is up to {ops:,} ops, above the limit of "
            f"{limit:,} ({cost or MAX_OPS_COST}); use fewer ranks, micro-batches or chunks"
        )


def _range(lo: float | None, hi: float | None, integer: bool) -> str:
    kind = "a whole number" if integer else "a number"

    def fmt(x: float) -> str:
        return f"{int(x):,}" if integer or (x == int(x) and abs(x) < 1e7) else f"{x:g}"

    if lo is not None and hi is not None:
        return f"{kind} from {fmt(lo)} to {fmt(hi)}"
    return f"{kind} >= {fmt(lo)}" if lo is not None else f"{kind} <= {fmt(hi)}" if hi is not None else kind


def number(
    value: object,
    key: str,
    lo: float | None = 0,
    hi: float | None = MAX_VALUE,
    *,
    integer: bool = False,
    where: str = "",
) -> int | float:
    """A number read from a file or flag: finite, ``lo <= value <= hi``, whole when
    ``integer`` (3.0 counts as 3). True/false and strings are refused, not coerced."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = math.isfinite(value) and (lo is None or value >= lo) and (hi is None or value <= hi)
        ok = ok and (not integer or value == int(value))
    if not ok:
        prefix = f"{where}: " if where else ""
        raise PipesimError(f"{prefix}{key} must be {_range(lo, hi, integer)}, got {value!r}")
    return int(value) if integer else float(value)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def known_keys(table: dict, known: Iterable[str], where: str) -> None:
    """Refuse the first key of ``table`` not in ``known``, with the closest known one."""
    known = list(known)
    for key in table:
        if key not in known:
            raise PipesimError(f"{where}: unknown key {key!r}{did_you_mean(str(key), known)}; expected one of {', '.join(known)}")


# --------------------------------------------------------------------------------------
# files


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of a regular file (a symlink is followed). Devices, FIFOs and
    folders are refused before reading: ``/dev/zero`` never ends."""
    name = os.fspath(path)
    if name == "":
        raise PipesimError(f"{what}: the file name is empty; give a path")
    try:
        st = os.stat(name)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise PipesimError(f"cannot read {what} {name!r}: it is {kind}; give a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise PipesimError(f"cannot read {what} {name!r}: {st.st_size:,} bytes is beyond the limit of {MAX_FILE_BYTES:,}")
        with open(name, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise PipesimError(f"cannot read {what} {name!r}: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PipesimError(
            f"{name}: not UTF-8 text (byte {e.start} is {data[e.start : e.start + 1]!r}); save it as UTF-8"
        ) from None


def _no_constant(name: str) -> None:
    raise PipesimError(f"{name} is not a JSON number (strict JSON has no NaN or Infinity)")


def _depth(data: object) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        x, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(x, dict):
            stack.extend((v, d + 1) for v in x.values())
        elif isinstance(x, list):
            stack.extend((v, d + 1) for v in x)
    return deepest


def parse_json(text: str, where: str) -> object:
    """Strict JSON (no NaN/Infinity), nested at most ``MAX_DEPTH`` deep."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except PipesimError as e:
        raise PipesimError(f"{where}: not valid JSON ({e})") from None
    except json.JSONDecodeError as e:
        raise PipesimError(f"{where}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except RecursionError:
        raise PipesimError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth(data) > MAX_DEPTH:
        raise PipesimError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels")
    return data


def load_json(path: str | os.PathLike, what: str) -> object:
    return parse_json(read_text(path, what), os.fspath(path))


def load_toml(path: str | os.PathLike, what: str) -> dict:
    """A TOML file's table (TOML's own nan and inf are refused by ``number`` per key)."""
    text = read_text(path, what)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PipesimError(f"{os.fspath(path)}: not valid TOML ({e})") from None
    except RecursionError:
        raise PipesimError(f"{os.fspath(path)}: TOML nested too deeply") from None
