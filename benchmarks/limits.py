"""What the work limit really costs: every command that scales with a schedule's size,
timed as a user runs it (a fresh ``pipesim`` process), from 10K ops up to
``inputs.MAX_OPS``, with its CPU seconds, wall seconds and peak memory (the child's own
max RSS, from ``os.wait4``), printed beside the limit's promise (docs/limits.md).

    python benchmarks/limits.py            # 10K ops to the limit (minutes; run alone)
    python benchmarks/limits.py --quick    # 10K to 1M ops

The schedule is zb-h1 at pp=64: three ops (F, B, W) per micro-batch and stage, the most
any schedule has, so its ops are exactly the bound ``inputs.work`` checks. compare runs
1f1b, zb-h1 and dualpipev at a sixth of M each, and all 17 schedules at a 34th (the limit
holds for the whole comparison, counted at two chunks a schedule); ops -o and export -o
write a file (the JSON schedule, PyTorch's CSV), the others print to a pipe. Linear means ops/s stays flat as the size grows; the slope column is
d log(CPU s) / d log(ops) between a row and the one before it (1.0 = linear).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipesim.inputs import MAX_OPS

PP = 64
OUT = Path(tempfile.mkdtemp(prefix="pipesim-limits-"))  # where -o writes (removed at the end)
TARGET_S, TARGET_GB = 60.0, 4.0  # the limit's promise, docs/limits.md

COMMANDS = {
    "simulate (report)": lambda M: ["simulate", "-s", "zb-h1", "--pp", PP, "-m", M, "--no-timeline"],
    "simulate (terminal draw)": lambda M: ["simulate", "-s", "zb-h1", "--pp", PP, "-m", M, "--width", 200],
    "simulate --json": lambda M: ["simulate", "-s", "zb-h1", "--pp", PP, "-m", M, "--json"],
    "compare (3 schedules)": lambda M: ["compare", "--pp", PP, "-m", max(1, M // 6), "--schedules", "1f1b,zb-h1,dualpipev"],
    # all 17 schedules, counted at two chunks each: M = the limit / (3 x 17 x 2 x pp)
    "compare (all 17)": lambda M: ["compare", "--pp", PP, "-m", max(1, M // 34), "--json"],
    "ops --json": lambda M: ["ops", "-s", "zb-h1", "--pp", PP, "-m", M, "--json"],
    "ops -o": lambda M: ["ops", "-s", "zb-h1", "--pp", PP, "-m", M, "-o", OUT / "ops.json"],
    "export -o": lambda M: ["export", "-s", "zb-h1", "--pp", PP, "-m", M, "-o", OUT / "export.csv"],
}


def measure(argv: list) -> tuple[float, float, float, int]:
    """(CPU s, wall s, peak RSS GB, exit status) of one ``pipesim`` run, output discarded."""
    cmd = [sys.executable, "-c", "import sys; from pipesim.cli import main; sys.exit(main())", *map(str, argv)]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, use = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.stderr.close()
    return use.ru_utime + use.ru_stime, wall, use.ru_maxrss * 1024 / 1e9, os.waitstatus_to_exitcode(status)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="up to 1M ops")
    ap.add_argument("--commands", help="comma-separated subset of: " + ", ".join(COMMANDS))
    args = ap.parse_args()
    top = 1_000_000 if args.quick else MAX_OPS
    sizes = [n for n in (10_000, 100_000, 1_000_000, 4_000_000, 12_000_000) if n < top] + [top]
    names = args.commands.split(",") if args.commands else list(COMMANDS)
    t = Table(title=f"pipesim at sizes up to the work limit (MAX_OPS = {MAX_OPS:,}); zb-h1 pp={PP}; one fresh process each")
    for col in ("command", "ops", "CPU s", "wall s", "ops/s (CPU)", "slope", "peak GB", "target at limit"):
        t.add_column(col, justify="right")
    for name in names:
        prev = None
        for ops in sizes:
            M = ops // (3 * PP)
            cpu, wall, gb, code = measure(COMMANDS[name](M))
            n = 3 * PP * M
            slope = f"{math.log(cpu / prev[1]) / math.log(n / prev[0]):.2f}" if prev and cpu > 0 else "-"
            prev = (n, cpu)
            ok = (
                ""
                if ops < MAX_OPS
                else ("ok" if wall <= TARGET_S and gb <= TARGET_GB else "MISSED") + f" ({TARGET_S:g} s, {TARGET_GB:g} GB)"
            )
            t.add_row(
                name,
                f"{n:,}",
                f"{cpu:.1f}",
                f"{wall:.1f}",
                f"{n / cpu:,.0f}",
                slope,
                f"{gb:.2f}",
                ok if code == 0 else f"exit {code}",
            )
    shutil.rmtree(OUT, ignore_errors=True)
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
