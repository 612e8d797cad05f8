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
import re
import stat
import tomllib
from collections.abc import Callable, Iterable

from .errors import PipesimError

#: The work limit: the most ops one schedule may have (a micro-batch passes each of its
#: stages with at most three ops, F, B and W), and the one place to tune it. Every size
#: (flags, schedule files, sweeps, comparisons, builds, compiles) is checked against it
#: before anything of that size is allocated, so a hostile size is one error line rather
#: than a hang or gigabytes of memory. What it costs is measured, not estimated, by
#: benchmarks/limits.py and stated in docs/limits.md: zb-h1 (three ops per micro-batch
#: and stage, the most) at pp=64, M=125,000 is 24M ops; simulate there takes about 20 s
#: of CPU and 2.1 GB, with --json too (its op order is written a rank at a time).
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
#: The work limits of the other searched builders that do Python work per op, by their
#: CPU time per op on the 2-core machine pipesim is built on (pp from 2 to 128): zb-auto
#: 22-31 us (24M ops would be 10 minutes), zb-h2 about 3.5 us, and V-Min where its
#: repeated block does not fit the memory limit (pp = 2 or 5) and it searches the whole
#: order, 64-73 us. Each is about 30 s at its limit.
MAX_ZB_AUTO_OPS = 1_000_000
MAX_ZB_H2_OPS = 8_000_000
MAX_V_MIN_SEARCH_OPS = 500_000
MAX_SEARCH_OPS_COST = "about 30 s in its search"
#: Largest single count (ranks, micro-batches, layers, ...): past it an int cannot be
#: an index, and nothing real is that large.
MAX_COUNT = 16_000_000
#: Most layers of one model or chunk (DeepSeek-V3 has 61): per-layer costs and the
#: planner's stage splits loop over them.
MAX_LAYERS = 10_000
#: Largest time or cost: MAX_OPS of them still sum to a finite float (no overflow to inf).
MAX_VALUE = 1e15
#: Least --activation-bytes (zb-auto's bytes a forward adds, the unit of its memory
#: limit): a forward adds at least a byte, and 0 divided the limit by zero. The flag and
#: zb-auto's own check both read it.
MIN_ACTIVATION_BYTES = 1
#: Deepest nesting of a JSON document (a schedule file needs 5: placement routes).
MAX_DEPTH = 32
#: Largest input file: a schedule at MAX_OPS ops with room for spacing (and /dev/zero
#: style endless inputs are refused before reading, as non-regular files).
MAX_FILE_BYTES = 1 << 30
#: Most text of one profiler trace, read in pieces rather than whole (decoded one event
#: at a time): the file's size, or for a gzipped trace what it decompresses to, counted
#: as it is read (a gzip "bomb" of events expands a thousandfold, so its size on disk
#: bounds nothing). The reader takes about 5 s of CPU per 100 MB of a Kineto-like trace
#: and holds about 1.5 bytes per byte of text when every event is one it keeps
#: (benchmarks/profile_memory.py), so 1 GiB is about a minute and under 2 GB.
MAX_TRACE_BYTES = 1 << 30
MAX_TRACE_COST = "about a minute of reading"
#: Most digits of an integer read from text (a file or a flag). int() of a long digit
#: string costs time quadratic in its length (Python refuses past 4,300 digits with a
#: ValueError), and no count, size or time pipesim takes needs more than 2**63's 19.
MAX_DIGITS = 24
#: The engine's arrays hold indices (ranks, chunks, micro-batches, stages) as int32.
INT32_MAX = 2**31 - 1


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


def toml_text(value: object) -> str:
    """``value`` as a TOML file spells it, which is how the user wrote it: lowercase
    booleans, arrays and inline tables of such values; anything else as its repr (a
    plain string's is a TOML literal string, 'like this')."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(map(toml_text, value))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_text(v)}" for k, v in value.items()) + "}"
    return repr(value)


def shorten(value: object, limit: int = 40) -> str:
    """``value`` as an error shows it: as TOML spells it (``toml_text``; a flag's or a
    cell's text as its repr), cut in the middle when long (an integer too long to print
    whole is given by its number of digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * MAX_DIGITS + 10:
        digits = int(value.bit_length() * math.log10(2)) + 1
        digits -= 10 ** (digits - 1) > abs(value)  # the estimate is at most one too many
        return f"an integer of {digits:,} digits"
    text = toml_text(value)
    n = len(value) if isinstance(value, str) else len(text)
    return text if len(text) <= limit else f"{text[:20]}...{text[-8:]} ({n:,} characters)"


def int_text(text: str) -> int | None:
    """The integer ``text`` spells (decimal, an optional sign, blanks around), or None
    when it spells none or has more than ``MAX_DIGITS`` digits: the cap comes before
    int(), so no long string is ever converted."""
    s = text.strip()
    digits = s[1:] if s[:1] in "+-" else s
    if not 0 < len(digits) <= MAX_DIGITS or not (digits.isascii() and digits.isdigit()):
        return None
    return int(s)


def integer(text: str, key: str, lo: int = 0, hi: int = MAX_COUNT, where: str = "") -> int:
    """An integer written as text (a flag, a CSV cell, a layout's ``pp16``), capped in
    digits before conversion and checked against ``lo <= value <= hi``."""
    v = int_text(text)
    if v is None or not lo <= v <= hi:
        prefix = f"{where}: " if where else ""
        raise PipesimError(f"{prefix}{key} must be {_range(lo, hi, True)}, got {shorten(text)}")
    return v


def _range(lo: float | None, hi: float | None, integer: bool) -> str:
    kind = "a whole number" if integer else "a number"

    def fmt(x: float) -> str:
        return f"{int(x):,}" if integer or (x == int(x) and abs(x) < 1e7) else f"{x:g}"

    if lo is not None and hi is not None:
        return f"{kind} from {fmt(lo)} to {fmt(hi)}"
    return f"{kind} >= {fmt(lo)}" if lo is not None else f"{kind} <= {fmt(hi)}" if hi is not None else kind


def divisors_text(n: int, near: int) -> str:
    """What a refusal of a value that does not divide ``n`` offers instead: every divisor
    of n where there are ten or fewer ("one of 1, 2, 4 or 8"), else the two nearest
    ``near`` (the value refused), so that the line stays one line for any n."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    every = sorted({*small, *(n // d for d in small)})
    if len(every) <= 10:
        return "one of " + (f"{', '.join(map(str, every[:-1]))} or {every[-1]}" if len(every) > 1 else "1")
    below = [d for d in every if d < near][-1:]
    above = [d for d in every if d > near][:1]
    return f"a divisor of {n}, such as {' or '.join(map(str, below + above))}"


def number(
    value: object,
    key: str,
    lo: float | None = 0,
    hi: float | None = MAX_VALUE,
    *,
    integer: bool = False,
    where: str = "",
    show: Callable[[object], str] = shorten,
) -> int | float:
    """A number read from a file or flag: finite, ``lo <= value <= hi``, whole when
    ``integer`` (3.0 counts as 3). True/false and strings are refused, not coerced; the
    refusal shows the value with ``show`` (as a file spells it, by default; a library
    caller's Python value with its type, ``schedule_checks.shown``)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, int) and abs(value) >= 10**MAX_DIGITS:
        ok = False  # beyond every range, and past 1e308 not even a float
    elif ok:
        ok = math.isfinite(value) and (lo is None or value >= lo) and (hi is None or value <= hi)
        ok = ok and (not integer or value == int(value))
    if not ok:
        prefix = f"{where}: " if where else ""
        raise PipesimError(f"{prefix}{key} must be {_range(lo, hi, integer)}, got {show(value)}")
    return int(value) if integer else float(value)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """ " (did you mean X?)": the one known word the name begins (--cluster h800 means
    h800-2048, not the h200 one letter away), else the closest by spelling."""
    known = list(known)
    begun = [k for k in known if k.lower().startswith(name.lower())] if name else []
    close = begun if len(begun) == 1 else _closest(name, known)
    return f" (did you mean {close[0]}?)" if close else ""


def _closest(name: str, known: list[str]) -> list[str]:
    """difflib's closest match, a tie going to the word listed first rather than to the
    last in alphabetical order (difflib's): a [layer] key 'attn' is attn_f, the forward
    time --attn sets, which the table lists before attn_b and attn_w."""
    close = difflib.get_close_matches(name, known, n=len(known))
    if not close:
        return []
    score = difflib.SequenceMatcher(None, name, close[0]).ratio()
    tied = {k for k in close if difflib.SequenceMatcher(None, name, k).ratio() == score}
    return [next(k for k in known if k in tied)]


def known_keys(table: dict, known: Iterable[str], where: str) -> None:
    """Refuse the first key of ``table`` not in ``known``, with the closest known one."""
    known = list(known)
    for key in table:
        if key not in known:
            raise PipesimError(f"{where}: unknown key {key!r}{did_you_mean(str(key), known)}; expected one of {', '.join(known)}")


# --------------------------------------------------------------------------------------
# files


def check_file(path: str | os.PathLike, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """The name of ``path`` once it is known to be a regular file (a symlink is
    followed) of at most ``limit`` bytes. Devices, FIFOs and folders are refused before
    anything is read from them: a FIFO blocks, and ``/dev/zero`` never ends."""
    if not isinstance(path, (str, os.PathLike)):  # os.fspath's TypeError named no file kind
        raise PipesimError(f"{what}: expected a path (a str or a pathlib.Path), got {shorten(path)} ({type(path).__name__})")
    name = os.fspath(path)
    if name == "":
        raise PipesimError(f"{what}: the file name is empty; give a path")
    try:
        st = os.stat(name)
    except OSError as e:
        raise PipesimError(f"cannot read {what} {name!r}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise PipesimError(f"cannot read {what} {name!r}: it is {kind}; give a regular file")
    if st.st_size > limit:
        raise PipesimError(f"cannot read {what} {name!r}: {st.st_size:,} bytes is beyond the limit of {limit:,}")
    return name


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of a regular file of at most ``MAX_FILE_BYTES`` (``check_file``).
    Every file pipesim reads whole comes through here."""
    name = check_file(path, what)
    try:
        with open(name, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise PipesimError(f"cannot read {what} {name!r}: {e.strerror}") from None
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise PipesimError(f"cannot read {what} {name!r}: more than the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if data[:2] == b"\x1f\x8b":  # gzip's magic (RFC 1952, 2.3.1), never UTF-8 (0x8b continues no character)
            raise PipesimError(gzipped(name)) from None
        raise PipesimError(
            f"{name}: not UTF-8 text (byte {e.start} is {data[e.start : e.start + 1]!r}); save it as UTF-8"
        ) from None


def gzipped(name: str) -> str:
    """The refusal of a gzip-compressed file where pipesim reads text whole. Only
    profiler traces are read gzipped (``profile.trace``: torch's profiler writes them so,
    and they are read in pieces, bounded as they decompress); the files read here are
    ones pipesim or PyTorch write plainly (PyTorch's ``_load_csv`` opens its CSV as text),
    so decompressing here would take a file that PyTorch itself cannot run."""
    plain = name[:-3] if name.lower().endswith(".gz") and len(name) > 3 else "FILE"
    return f"{name}: gzip-compressed, not text; decompress it first (gunzip -c {name} > {plain}) and give the plain file"


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


class LongInteger(PipesimError):
    """An integer literal of more than ``MAX_DIGITS`` digits, met while decoding JSON."""


def json_int(text: str) -> int:
    """``parse_int`` for every JSON decoder pipesim uses: a digit cap before int()."""
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise LongInteger(
            f"{shorten(text)} is an integer of {len(text.lstrip('-')):,} digits; whole numbers have at most {MAX_DIGITS}"
        )
    return int(text)


#: a key (JSON "key": or TOML key =) and the over-long integer after it
_LONG_INT = re.compile(r'(?:"([^"\\\n]{1,80})"\s*:|([\w.-]{1,80})\s*=)?\s*[-+]?(\d[\d_]{' + str(MAX_DIGITS) + ",})")


def long_integer_error(text: str, where: str) -> PipesimError:
    """The error for an integer of more than ``MAX_DIGITS`` digits in ``text``, naming
    its key (or its line) and its length."""
    m = _LONG_INT.search(text)
    if m is None:  # not found again: say what is wrong without the place
        return PipesimError(
            f"{where}: an integer has more than {MAX_DIGITS} digits; whole numbers here have at most {MAX_DIGITS}"
        )
    key = m.group(1) or m.group(2) or f"line {text.count(chr(10), 0, m.start(3)) + 1}"
    digits = m.group(3)
    return PipesimError(
        f"{where}: {key} is {shorten(digits)}, an integer of {len(digits):,} digits; "
        f"whole numbers here have at most {MAX_DIGITS} digits (and each key its own range)"
    )


def parse_json(text: str, where: str) -> object:
    """Strict JSON (no NaN/Infinity), nested at most ``MAX_DEPTH`` deep, its integers
    at most ``MAX_DIGITS`` digits long (refused before conversion)."""
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_int=json_int)
    except LongInteger:
        raise long_integer_error(text, where) from None
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
    """A TOML file's table (TOML's own nan and inf are refused by ``number`` per key),
    nested at most ``MAX_DEPTH`` deep, its integers at most ``MAX_DIGITS`` digits long.
    tomllib converts integers itself (and raises ValueError past Python's 4,300 digits),
    so their length is checked on its result, and on the text when it fails."""
    where = os.fspath(path)
    text = read_text(path, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PipesimError(f"{where}: not valid TOML ({e})") from None
    except RecursionError:
        raise PipesimError(f"{where}: TOML nested too deeply; pipesim reads at most {MAX_DEPTH} levels") from None
    except ValueError:  # an integer past Python's int() limit
        raise long_integer_error(text, where) from None
    if _depth(data) > MAX_DEPTH:
        raise PipesimError(f"{where}: TOML nested deeper than {MAX_DEPTH} levels")
    stack: list[tuple[str, object]] = [("", data)]
    while stack:
        key, x = stack.pop()
        if isinstance(x, dict):
            stack.extend((f"{key}.{k}" if key else str(k), v) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((f"{key}[{i}]", v) for i, v in enumerate(x))
        elif isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10**MAX_DIGITS:
            raise PipesimError(
                f"{where}: {key} is {shorten(x)}; whole numbers here have at most {MAX_DIGITS} digits (and each key its own range)"
            )
    return data
