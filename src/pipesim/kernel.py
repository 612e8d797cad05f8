"""The engine's two loops (the walk that orders a program, the pass that times it), and
the list scheduler's (``autoschedule.greedy``) and the V blocks' passes
(``autoschedule.blocks``), in C when a compiler is at hand and in
plain Python otherwise; both give the same answers.

``_engine.c`` and ``_vblocks.c`` are compiled once, at first use, into one library in the
user's cache directory (``$XDG_CACHE_HOME/pipesim`` or ``~/.cache/pipesim``, keyed by the sources' hash and the
interpreter) with ``$CC`` or ``cc`` at -O1, and loaded with ctypes: ``pip install`` needs no
compiler, and a machine without one runs the Python loops (compile + simulate of 1F1B at
pp=64, M=1024: 259 ms instead of 17 ms).
``PIPESIM_KERNEL=python`` forces the Python loops (the tests compare the two).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections import deque
from pathlib import Path

import numpy as np

#: the C sources, compiled together into one library: the engine's loops and the list
#: scheduler (_engine.c), the V blocks' passes and the as-soon-as-possible timing (_vblocks.c)
_SOURCES = tuple(Path(__file__).with_name(name) for name in ("_engine.c", "_vblocks.c"))
_lib: list = []  # [ctypes library or None], once tried


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pipesim"


def _build() -> ctypes.CDLL | None:
    """The compiled loops, or None (no source, no compiler, or a failed build)."""
    try:
        src = b"".join(path.read_bytes() for path in _SOURCES)
    except OSError:
        return None
    tag = hashlib.sha256(src + sys.version.encode() + sysconfig.get_platform().encode()).hexdigest()[:16]
    lib = _cache_dir() / f"engine-{tag}.so"
    if not lib.exists():
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            return None
        try:
            lib.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
                out = Path(tmp) / lib.name
                # -O1: the loops run as fast as at -O2 (the V blocks, the list scheduler
                # and the engine's walk and timing, within noise) and compile in under half
                # the time (gcc 12: 0.19 s against 0.43 s), which a new user's first plan pays
                if not _compile([cc, "-O1", "-shared", "-fPIC", "-o", str(out), *map(str, _SOURCES)]):
                    return None
                os.replace(out, lib)  # atomic: a concurrent first use sees all or nothing
        except OSError:
            return None
    try:
        dll = ctypes.CDLL(str(lib))
    except OSError:
        return None
    p = ctypes.c_void_p
    dll.pipesim_walk.restype = ctypes.c_int64
    dll.pipesim_walk.argtypes = [ctypes.c_int64] + [p] * 9
    dll.pipesim_times.restype = None
    dll.pipesim_times.argtypes = [ctypes.c_int64] + [p] * 8
    dll.pipesim_list_schedule.restype = ctypes.c_int64
    dll.pipesim_list_schedule.argtypes = [p] * 34
    dll.pipesim_asap.restype = ctypes.c_int64
    dll.pipesim_asap.argtypes = [ctypes.c_int64] * 3 + [p] * 18
    dll.pipesim_block_variants.restype = ctypes.c_int64
    dll.pipesim_block_variants.argtypes = [ctypes.c_int64] * 3 + [p] * 2 + [ctypes.c_int64] * 2 + [p] * 2
    return dll


#: seconds the compiler may take (cc -O1 of both sources takes well under one); past them
#: the Python loops run instead
COMPILE_TIMEOUT = 20.0


def _compile(argv: list[str]) -> bool:
    """Run the compiler in a session of its own, so that on timeout the whole process
    group goes (a compiler driver's children, or a wrapper's, would outlive a kill of
    the driver alone and hold its pipes open). True when it succeeded."""
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except OSError:
        return False
    try:
        proc.communicate(timeout=COMPILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        return False
    except BaseException:  # Ctrl-C while compiling: leave nothing running
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        raise
    return proc.returncode == 0


def compiled():
    """The C loops, or None when they cannot be had (or ``PIPESIM_KERNEL=python``)."""
    if os.environ.get("PIPESIM_KERNEL") == "python":
        return None
    if not _lib:
        try:
            lib = _build()
        except AttributeError:  # ctypes: the library lacks one of the loops' symbols
            lib = None  # a cached library from another build, or a $CC that made another: as with no compiler
        _lib.append(lib)
    return _lib[0]


def _ptr(a: np.ndarray):
    return a.ctypes.data


def walk(offsets: np.ndarray, dep_ptr: np.ndarray, dep: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(order, head per rank, items placed). Each rank runs its items in order until its
    head waits for an item not yet done, parks on that item and is woken when it is done;
    every item is looked at once plus once per wake-up. Fewer placed than items: the
    ranks stuck at ``head`` wait on each other in a cycle."""
    pp, n = len(offsets) - 1, len(dep_ptr) - 1
    order = np.empty(n, np.int32)
    head = np.empty(pp, np.int64)
    lib = compiled()
    if lib is not None:
        done = np.zeros(n, np.uint8)
        parked = np.full(n, -1, np.int32)
        scratch = np.empty(2 * pp, np.int32)
        placed = lib.pipesim_walk(
            pp, *(_ptr(a) for a in (offsets, dep_ptr, dep, order, head, done, parked, scratch, scratch[pp:]))
        )
        return order, head, int(placed)
    off, ptr, dp = offsets.tolist(), dep_ptr.tolist(), dep.tolist()
    is_done = [False] * n
    parked_on: dict[int, list[int]] = {}
    heads = off[:-1]
    out: list[int] = []
    ready = deque(range(pp))
    while ready:
        r = ready.popleft()
        i, stop = heads[r], off[r + 1]
        while i < stop:
            missing = next((d for d in dp[ptr[i] : ptr[i + 1]] if not is_done[d]), None)
            if missing is not None:
                parked_on.setdefault(missing, []).append(r)
                break
            out.append(i)
            is_done[i] = True
            if i in parked_on:
                # newest first, as the compiled loop keeps its parked ranks (a linked list)
                ready.extend(reversed(parked_on.pop(i)))
            i += 1
        heads[r] = i
    order[: len(out)] = out
    head[:] = heads
    return order, head, len(out)


def times(
    order: np.ndarray, first: np.ndarray, dep_ptr: np.ndarray, dep: np.ndarray, latency: np.ndarray, duration: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every item: in ``order``, an item starts when the item before it on
    its rank (i - 1, unless ``first[i]``) has ended and every predecessor's end plus its
    edge's latency has passed."""
    n = len(duration)
    lib = compiled()
    if lib is not None:
        start = np.empty(n, np.float64)
        end = np.empty(n, np.float64)
        lib.pipesim_times(n, *(_ptr(a) for a in (order, first, dep_ptr, dep, latency, duration, start, end)))
        return start, end
    top, ptr, dp, lat, dur = first.tolist(), dep_ptr.tolist(), dep.tolist(), latency.tolist(), duration.tolist()
    st = [0.0] * n
    en = [0.0] * n
    for i in order.tolist():
        s = 0.0 if top[i] else en[i - 1]
        for e in range(ptr[i], ptr[i + 1]):
            t = en[dp[e]] + lat[e]
            if t > s:
                s = t
        st[i] = s
        en[i] = s + dur[i]
    return np.array(st), np.array(en)


def block_variants(pp: int, M: int, tf: list[int], tb: list[int], paired: bool, squeezes: tuple[bool, ...]) -> np.ndarray | None:
    """``autoschedule.blocks.block_variants``' passes in C, from the block's slots of
    micro-batch 0 (``Block.times``): per variant and rank, its 6M op codes ((kind * 2pp +
    stage) * M + mb) in order; None without the C loops, or where a slot would fall past
    the room given each rank (then the Python runs)."""
    lib = compiled()
    if lib is None:
        return None
    # a rank's slots: the blocks' last pass ends by 6M after its first op; the passes move
    # ops earlier and place each W within its rank's 6M ops of its B, so twice that is ample
    room = 2 * (max(max(tf), max(tb)) + 6 * M) + 16
    out = np.empty((len(squeezes), pp, 6 * M), np.int32)
    times = [np.array(x, np.int64) for x in (tf, tb)]
    flags = np.array(squeezes, np.uint8)
    ok = lib.pipesim_block_variants(
        pp, M, room, _ptr(times[0]), _ptr(times[1]), int(paired), len(squeezes), _ptr(flags), _ptr(out)
    )
    return out if ok else None


def asap(
    S: int, M: int, offsets: np.ndarray, kind: np.ndarray, stage: np.ndarray, mb: np.ndarray, costs: tuple, f_lat, b_lat
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | bool | None:
    """``autoschedule.evaluate.timed`` without a base or a cap, in C: (start, end of each
    op, the ends table by F then B of ``stage * M + mb``, -1 where none ran); False where
    the orders deadlock, None without the C loops (then the Python runs). Ops rank by
    rank (``offsets``), int32 kinds, stages and micro-batches."""
    lib = compiled()
    if lib is None:
        return None
    n, ops = len(offsets) - 1, len(kind)
    start, end = np.empty(ops), np.empty(ops)
    done = np.full(2 * S * M, -1.0)
    park = np.full(4 * S * M, -1, np.int32)
    scratch = np.empty(2 * n, np.int32)
    f, b, w = (np.asarray(x, np.float64) for x in costs)
    lat = [np.asarray(x, np.float64) for x in (f_lat, b_lat)]
    ok = lib.pipesim_asap(
        n,
        S,
        M,
        *(_ptr(a) for a in (offsets, kind, stage, mb, f, b, w, *lat, start, end, done)),
        *(_ptr(a) for a in (np.empty(n, np.int64), np.empty(n), park, park[2 * S * M :], scratch, scratch[n:])),
    )
    return (start, end, done) if ok else False
