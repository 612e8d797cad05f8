"""Measured against simulated: every registry schedule at pp=4 run in synthetic mode (each
op sleeps its cost) on gloo, one process per rank, printed as a table.

    python benchmarks/runtime_overhead.py [--pp 4] [--microbatches 8] [--op 20ms]

The simulation gets the P2P latency measured at start-up. What remains between the two
columns is the executor's own cost per op (Python, waking up, posting a send) and the
sleep's overshoot; the target is under 10% for 1F1B, ZB-H1, DualPipe and DualPipeV.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pipesim import REGISTRY, Costs, PipesimError, build
from pipesim.runtime import compare, execute_many, job
from pipesim.runtime.commands import parse_duration


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--microbatches", "-m", type=int, default=8)
    ap.add_argument("--op", type=parse_duration, default=0.02, help="F, B and W each (default 20ms)")
    args = ap.parse_args()
    costs = Costs(f=args.op, b=args.op, w=args.op)
    schedules, skipped = [], []
    for name in REGISTRY:
        try:
            schedules.append(build(name, args.pp, args.microbatches))
        except PipesimError as e:
            skipped.append(f"{name}: {e}")
    t0 = time.perf_counter()
    results = execute_many([job(s, synthetic=costs) for s in schedules], backend="gloo")
    wall = time.perf_counter() - t0
    latency = results[0].latency
    t = Table(
        title=f"synthetic run vs simulation: pp={args.pp}, M={args.microbatches}, F=B=W={args.op * 1e3:g} ms, "
        f"P2P latency {latency * 1e6:.0f} us (measured), gloo"
    )
    for col in ("schedule", "measured ms", "simulated ms", "difference", "measured bubble", "simulated bubble"):
        t.add_column(col, justify="right")
    for r in results:
        c = compare(r)
        t.add_row(
            r.schedule.name,
            f"{c.measured.makespan * 1e3:.1f}",
            f"{c.simulated.makespan * 1e3:.1f}",
            f"{c.makespan_error:+.1%}",
            f"{c.measured.bubble_ratio:.1%}",
            f"{c.simulated.bubble_ratio:.1%}",
        )
    out = Console(width=160)
    out.print(t)
    out.print(f"one launch, {len(results)} schedules: {wall:.1f} s wall (process start and torch import included)")
    for line in skipped:
        out.print(f"skipped {line}")


if __name__ == "__main__":
    main()
