"""The large fuzz run of issue 13: >= 10,000 hostile cases over every command and file
format (tests/fuzzing.py draws them; tests/test_fuzz.py runs a few hundred in CI).

    python benchmarks/fuzz.py [--cases 10000] [--seed 1] [--workers 2] [--timeout 20]

Each case runs in-process (cli.main, captured streams) in its own folder with a per-case
timeout; the table counts exits and every kind of failure (target: 0 tracebacks, 0 hangs,
0 clobbered or partial files), then lists the first failures to reproduce.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from fuzzing import RandomPick, case, run_case, verdict  # noqa: E402

TIMEOUT = 20.0


def one(seed: int) -> tuple[int, str, list[str], str | int, tuple[str, str] | None, float]:
    c = case(RandomPick(random.Random(seed)))
    t = time.process_time()
    with tempfile.TemporaryDirectory(prefix="pipesim-fuzz-") as d:
        r = run_case(c, Path(d), TIMEOUT)
    return seed, c.argv[0], c.argv, r.rc, verdict(c, r), time.process_time() - t


def _init(timeout: float) -> None:
    global TIMEOUT
    TIMEOUT = timeout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=TIMEOUT)
    a = ap.parse_args()
    seeds = range(a.seed * 1_000_000, a.seed * 1_000_000 + a.cases)
    by_command: dict[str, Counter] = {}
    failures = []
    start = time.monotonic()
    with get_context("fork").Pool(a.workers, initializer=_init, initargs=(a.timeout,), maxtasksperchild=200) as pool:
        for seed, command, argv, rc, bad, cpu in pool.imap_unordered(one, seeds, chunksize=8):
            row = by_command.setdefault(command, Counter())
            row["cases"] += 1
            row[f"exit {rc}" if isinstance(rc, int) else rc] += 1
            row["cpu"] += cpu
            if bad:
                row[bad[0]] += 1
                failures.append((seed, bad, argv))
    kinds = ["traceback", "hang", "bad-error", "bad-output", "clobbered", "partial"]
    head = ["command", "cases", "exit 0", "exit 2", *kinds, "CPU s"]
    print(
        f"pipesim fuzz: {a.cases} cases, seed {a.seed}, per-case timeout {a.timeout:g} s, {time.monotonic() - start:.0f} s wall"
    )
    print(" | ".join(f"{h:>10}" for h in head))
    total: Counter = Counter()
    for command in sorted(by_command):
        row = by_command[command]
        total.update(row)
        print(" | ".join([f"{command:>10}"] + [f"{row[h]:>10}" for h in head[1:-1]] + [f"{row['cpu']:>10.1f}"]))
    print(" | ".join([f"{'all':>10}"] + [f"{total[h]:>10}" for h in head[1:-1]] + [f"{total['cpu']:>10.1f}"]))
    for seed, (kind, why), argv in sorted(failures)[:30]:
        print(f"{kind}: seed {seed}: pipesim {' '.join(argv)}\n    {why}")


if __name__ == "__main__":
    main()
