"""The large fuzz run (issues 13 and 23): hostile cases over every command and file
format (tests/fuzzing.py draws them; tests/test_fuzz.py runs a few hundred in CI).

    python benchmarks/fuzz.py [--cases 20000] [--seed 1] [--workers 1] [--timeout 60] [--huge]

Run it on a tree nobody edits during the run (a checkout, or ``git archive HEAD``): the
children import lazily, so an edit mid-run mixes two versions of pipesim.

Each case runs in a child process of its own (forked, ``cli.main`` in-process with
captured streams, in a fresh folder), so that its time and its peak memory (the child's
``ru_maxrss``) are its own. The table counts, per command, exits and every kind of
failure (target: 0 of each): a traceback, a hang (past --timeout, 60 s), a run past
--memory (4 GB: a peak RSS over it, or a MemoryError under the child's address-space
cap), a rejection that is not exactly one line, an invalid output, a clobbered or
partial file; beside them the slowest case and the largest peak RSS, with their seeds.
``new`` counts the cases that drew from issue 23's classes (digit-heavy integers,
int32/int64 boundaries, zeros and denormals, negative and zero counts; with --huge,
legal-but-huge sizes in every spec field), ``recent`` those of the planner's recent
inputs (tests/fuzzing_planner.py: NVL72 GPU counts, cluster and training keys, pins
against the runnable rules, HuggingFace config.json files, cost files' layer-by-layer
memory).
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import resource
import select
import signal
import sys
import tempfile
import time
from collections import Counter
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fuzzing import RandomPick, case, run_case, verdict  # noqa: E402
from fuzzing_planner import RECENT_CLASSES  # noqa: E402

SETTINGS = {"timeout": 60.0, "memory_mb": 4096.0, "huge": False}
KINDS = ["traceback", "hang", "memory", "bad-error", "bad-output", "clobbered", "partial"]


def _child(c, write_fd: int) -> None:
    """In the forked child: run the case, send (rc, verdict) back, exit at once."""
    try:
        # a runaway case stops with a MemoryError instead of swapping a shared machine
        cap = int(2 * SETTINGS["memory_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        with tempfile.TemporaryDirectory(prefix="pipesim-fuzz-") as d:
            r = run_case(c, Path(d), SETTINGS["timeout"])
        bad = verdict(c, r)
        if bad and bad[0] == "traceback" and bad[1].startswith("MemoryError"):
            bad = ("memory", bad[1])
        payload = pickle.dumps((r.rc, bad))
    except BaseException as e:  # noqa: BLE001 - everything is a finding
        payload = pickle.dumps(("traceback", ("traceback", f"{type(e).__name__}: {e}"[:300])))
    os.write(write_fd, payload)
    os._exit(0)


def one(seed: int):
    """(seed, command, argv, tags, rc, failure or None, wall seconds, peak RSS in MB)."""
    pick = RandomPick(random.Random(seed))
    pick.huge = SETTINGS["huge"]
    c = case(pick)
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(c, write_fd)
    os.close(write_fd)
    chunks, deadline = [], start + SETTINGS["timeout"] + 30  # the child's own alarm fires first
    while True:
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            break
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    rss = usage.ru_maxrss / 1024  # KiB on Linux
    if chunks:
        rc, bad = pickle.loads(b"".join(chunks))
    else:
        rc, bad = "hang", ("hang", f"killed after {wall:.0f} s (status {status})")
    if bad is None and rss > SETTINGS["memory_mb"]:
        bad = ("memory", f"peak RSS {rss:.0f} MB")
    if bad is None and wall > SETTINGS["timeout"]:
        bad = ("hang", f"{wall:.0f} s")
    return seed, c.argv[0], c.argv, c.tags, rc, bad, wall, rss


def _init(settings: dict) -> None:
    SETTINGS.update(settings)


def _warm() -> None:
    """Import what most cases use once, before forking, so that no child pays for it
    (torch is left out: its address space would weigh on every child's peak). The
    parser imports every command's module; ``pipesim.cli`` alone no longer does, and
    without them each child spent 0.5 s importing 112 modules (a run 3-4 times slower)."""
    from pipesim.parser import make_parser

    make_parser()

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=SETTINGS["timeout"], help="seconds a case may take (a hang past it)")
    ap.add_argument("--memory", type=float, default=SETTINGS["memory_mb"], help="MB of peak RSS a case may reach")
    ap.add_argument("--huge", action="store_true", help="draw legal-but-huge sizes in every spec field too")
    a = ap.parse_args()
    settings = {"timeout": a.timeout, "memory_mb": a.memory, "huge": a.huge}
    SETTINGS.update(settings)
    _warm()
    seeds = range(a.seed * 1_000_000, a.seed * 1_000_000 + a.cases)
    by_command: dict[str, Counter] = {}
    slowest: dict[str, tuple[float, int]] = {}
    largest: dict[str, tuple[float, int]] = {}
    failures = []
    start = time.monotonic()
    if a.workers == 1:
        results = map(one, seeds)
    else:
        pool = get_context("fork").Pool(a.workers, initializer=_init, initargs=(settings,), maxtasksperchild=200)
        results = pool.imap_unordered(one, seeds, chunksize=8)
    for seed, command, argv, tags, rc, bad, wall, rss in results:
        row = by_command.setdefault(command, Counter())
        row["cases"] += 1
        row["new"] += bool(set(tags) - set(RECENT_CLASSES))
        row["recent"] += bool(set(tags) & set(RECENT_CLASSES))
        if isinstance(rc, int):  # a traceback or a hang is counted once, as a failure below
            row[f"exit {rc}"] += 1
        row["wall"] += wall
        slowest[command] = max(slowest.get(command, (0.0, 0)), (wall, seed))
        largest[command] = max(largest.get(command, (0.0, 0)), (rss, seed))
        if bad:
            row[bad[0]] += 1
            failures.append((seed, bad, argv))
    huge = ", legal-but-huge sizes" if a.huge else ""
    print(
        f"pipesim fuzz: {a.cases} cases, seed {a.seed}, workers {a.workers}, limits {a.timeout:g} s and {a.memory:g} MB "
        f"per case{huge}, {time.monotonic() - start:.0f} s wall"
    )
    head = ["command", "cases", "new", "recent", "exit 0", "exit 2", *KINDS, "slowest s", "(seed)", "peak MB", "(seed)"]
    print(" | ".join(f"{h:>10}" for h in head))
    total: Counter = Counter()
    for command in sorted(by_command):
        row = by_command[command]
        total.update(row)
        (wall, wseed), (rss, rseed) = slowest[command], largest[command]
        cells = [f"{row[h]:>10}" for h in head[1 : 5 + len(KINDS)]]
        print(" | ".join([f"{command:>10}", *cells, f"{wall:>10.1f}", f"{wseed:>10}", f"{rss:>10.0f}", f"{rseed:>10}"]))
    (wall, wseed), (rss, rseed) = max(slowest.values()), max(largest.values())
    cells = [f"{total[h]:>10}" for h in head[1 : 5 + len(KINDS)]]
    print(" | ".join([f"{'all':>10}", *cells, f"{wall:>10.1f}", f"{wseed:>10}", f"{rss:>10.0f}", f"{rseed:>10}"]))
    for seed, (kind, why), argv in sorted(failures)[:30]:
        shown = " ".join(x if len(x) < 60 else f"{x[:20]}...({len(x)} chars)" for x in argv)
        print(f"{kind}: seed {seed}: pipesim {shown}\n    {why}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
