"""How fast pipesim builds and simulates schedules, printed as a table.

    python benchmarks/simulate_speed.py [--quick]

The simulator is one pass over the ops (linear); this shows ops simulated per second
stays flat as pp and M grow to 64 ranks and 1024 micro-batches.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pipesim import Costs, build, simulate, summarize


def best_of(n, fn, *args):
    """Fastest of n calls of fn(*args), with its result."""
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller grid")
    args = ap.parse_args()
    pps = [8, 32] if args.quick else [8, 16, 32, 64]
    Ms = [64, 256] if args.quick else [64, 256, 1024]
    costs = Costs(f=1, b=1, w=1, comm=0.05)
    t = Table(title="build + simulate + metrics (best of 3, one core)")
    for col in ("schedule", "pp", "M", "ops", "build ms", "simulate ms", "metrics ms", "ops simulated / s"):
        t.add_column(col, justify="right")
    for name in ("1f1b", "zb-h1", "dualpipe", "dualpipev"):
        for pp in pps:
            for M in Ms:
                if M < 2 * pp and name.startswith("dualpipe"):
                    continue
                tb, s = best_of(3, build, name, pp, M)
                ts, tl = best_of(3, simulate, s, costs)
                tm, _ = best_of(3, summarize, s, tl)
                t.add_row(
                    name,
                    str(pp),
                    str(M),
                    f"{s.num_ops:,}",
                    f"{tb * 1e3:.1f}",
                    f"{ts * 1e3:.1f}",
                    f"{tm * 1e3:.1f}",
                    f"{s.num_ops / ts:,.0f}",
                )
    Console(width=140).print(t)


if __name__ == "__main__":
    main()
