"""Searched orders kept on disk, so that each (schedule, pp, M) is searched once.

ZB-H2, ZB-V, V-Half and V-Min are searched at unit costs where no direct construction
reaches the answer (ZB-H2 and ZB-V below M = 2pp - 1, V-Half and V-Min below the sizes
that repeat a short steady state: up to seconds at pp=64), and Chimera is the list
scheduler's order at every size; the result depends only on (name, pp, M) and on the
code that searched it. The first search stores the order in ``$XDG_CACHE_HOME/pipesim/`` (default ``~/.cache/pipesim/``),
one JSON file per (name, pp, M) whose name and content carry a version key: a hash of
the searching code, so that a changed search never serves an old order. Writes are
atomic (a temporary file renamed into place); a file that cannot be read, is corrupt or
has another key is ignored and rewritten. ``PIPESIM_CACHE=off`` turns the cache off, and
a cache directory that cannot be written only costs the search.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..inputs import parse_json, read_text
from ..ir import KINDS, Placement, RankTable, Schedule

#: the modules whose code decides a searched order
_SEARCH_CODE = ("autoschedule", "schedules/v_shape.py", "schedules/zero_bubble.py", "schedules/chimera.py", "schedules/cache.py")


@functools.cache
def version_key() -> str:
    """A hash of the searching code (and the format of the files)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256(b"pipesim-orders-2")
    for part in _SEARCH_CODE:
        path = root / part
        for f in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path | None:
    """Where orders are kept, or None when the cache is off."""
    if os.environ.get("PIPESIM_CACHE", "").lower() in ("0", "off", "no", "false"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pipesim"


def _stem(name: str, pp: int, microbatches: int) -> str:
    return f"{name}-pp{pp}-m{microbatches}"


def path_of(name: str, pp: int, microbatches: int) -> Path | None:
    return _path(_stem(name, pp, microbatches))


def _path(stem: str) -> Path | None:
    d = cache_dir()
    return None if d is None else d / f"{stem}-{version_key()}.json"


def encode_triples(ranks) -> list[str]:
    """Per rank, its (kind, chunk, mb) integer triples as one string: read back in one
    split, where a JSON list costs a Python call per integer (the strict parser checks
    each one); a pp=64 M=512 Chimera reads in 0.03 s, not 0.46 s."""
    return [" ".join(f"{k} {c} {m}" for k, c, m in ops) for ops in ranks]


def decode_triples(texts: list[str], kinds: int, chunks: int, microbatches: int) -> list[list[tuple[int, int, int]]]:
    """``encode_triples``'s ranks; ValueError for a torn string or a triple out of range."""
    out = []
    for text in texts:
        flat = list(map(int, text.split()))
        if len(flat) % 3:
            raise ValueError("torn triples")
        ops = list(zip(flat[0::3], flat[1::3], flat[2::3]))
        if ops and not (
            min(flat) >= 0 and max(flat[0::3]) < kinds and max(flat[1::3]) < chunks and max(flat[2::3]) < microbatches
        ):
            raise ValueError("an op out of range")
        out.append(ops)
    return out


def _encode(s: Schedule) -> dict:
    t = s.table  # read off the arrays: no Op object per op
    if (t.kind2 >= 0).any():
        raise ValueError("a searched order of lone ops was expected, not pairs")
    flat = np.column_stack([t.kind, t.chunk, t.mb]).astype(np.int64)
    ranks = [" ".join(map(str, flat[a:b].ravel().tolist())) for a, b in zip(t.offsets[:-1].tolist(), t.offsets[1:].tolist())]
    head = {"schedule": s.name, "pp": s.pp, "microbatches": s.microbatches}
    return {**head, "placement": s.placement.to_dict(), "ranks": ranks}


def _decode(d: dict, name: str, pp: int, M: int) -> Schedule | None:
    head = (d.get("schedule"), d.get("pp"), d.get("microbatches"))
    if head != (name, pp, M):
        return None
    placement = Placement.from_dict(d["placement"], pp, M)
    return Schedule(name, pp, M, placement, decode_table(d["ranks"], len(KINDS), placement.chunks, M))


def decode_table(texts: list[str], kinds: int, chunks: int, microbatches: int) -> RankTable:
    """``encode_triples``'s ranks as a ``RankTable`` (no Op object per op; its rows are
    made when asked for); ValueError for a torn string or a triple out of range."""
    rows = []
    for text in texts:
        flat = np.array(list(map(int, text.split())), np.int64)
        if len(flat) % 3:
            raise ValueError("torn triples")
        ops = flat.reshape(-1, 3)
        if len(ops) and not (ops.min() >= 0 and (ops.max(axis=0) < (kinds, chunks, microbatches)).all()):
            raise ValueError("an op out of range")
        rows.append((ops[:, 0], ops[:, 1], ops[:, 2]))
    return RankTable.stack(rows)


def read(stem: str) -> dict | None:
    """The stored payload of ``stem`` under this version key, or None when there is none
    that can be trusted."""
    path = _path(stem)
    if path is None:
        return None
    try:
        # the one reader of every file: a FIFO or device put where the cache file was blocks no search
        d = parse_json(read_text(path, "schedule cache"), str(path))
    except Exception:  # unreadable or corrupt: search again
        return None
    return d if isinstance(d, dict) and d.get("version") == version_key() else None


def write(stem: str, payload: dict) -> None:
    """Store ``payload`` (with the version key) atomically; a failure only costs the next search."""
    path = _path(stem)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump({**payload, "version": version_key()}, f, separators=(",", ":"))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    except OSError:  # a read-only or full disk only costs the next search
        pass


def load(name: str, pp: int, microbatches: int) -> Schedule | None:
    """The stored order, or None when there is none that can be trusted."""
    d = read(_stem(name, pp, microbatches))
    try:
        return None if d is None else _decode(d, name, pp, microbatches)
    except Exception:  # from another format, or ops the schedule cannot hold: search again
        return None


def store(s: Schedule) -> None:
    if cache_dir() is not None:  # off: nothing to encode (a V order's text is ~0.4% of a plan)
        write(_stem(s.name, s.pp, s.microbatches), _encode(s))


def for_costs(name: str, pp: int, microbatches: int, options: dict, search: Callable[[], Schedule]) -> Schedule:
    """A schedule searched for the given costs (zb-auto's per-stage F/B/W, latency and
    memory limit), kept on disk under a digest of every option's exact value (``repr``
    of a float round-trips) and of the builder's own code (``schedules/zb_auto.py``, on
    top of the version key): a search of the same model on the same cluster asks for the
    same ones again. Only deterministic searches belong here (not a time-limited
    CP-SAT run): the caller says which. The order and placement are kept; the search's
    report (``info``) is not, so a read schedule has none."""
    digest = hashlib.sha256(_builder_code() + repr(sorted(options.items())).encode()).hexdigest()[:16]
    stem = f"{_stem(name, pp, microbatches)}-{digest}"
    d = read(stem)
    try:
        hit = None if d is None else _decode(d, name, pp, microbatches)
    except Exception:  # from another format, or ops the schedule cannot hold: search again
        hit = None
    if hit is not None:
        return hit
    s = search()
    if cache_dir() is not None:  # off: nothing to encode
        write(stem, _encode(s))
    return s


@functools.cache
def _builder_code() -> bytes:
    """The code of the builder whose orders ``for_costs`` keeps (read once a process)."""
    return (Path(__file__).resolve().parent / "zb_auto.py").read_bytes()


def cached(name: str) -> Callable[[Callable[[int, int], Schedule]], Callable[[int, int], Schedule]]:
    """Decorate a searching builder of (pp, microbatches): search once, then read the file."""

    def wrap(search: Callable[[int, int], Schedule]) -> Callable[[int, int], Schedule]:
        @functools.wraps(search)
        def build(pp: int, microbatches: int) -> Schedule:
            hit = load(name, pp, microbatches)
            if hit is not None:
                return hit
            s = build.search(pp, microbatches)  # looked up here, so a test can count searches
            store(s)
            return s

        build.search = search  # the uncached search, for benchmarks and tests
        return build

    return wrap
