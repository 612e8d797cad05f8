"""DeepSeek's public training profile through ``pipesim profile``: per-layer component times
against the kernel-time sums counted here the plain way, and the imported cost file's
overlapped pair against the measured pair window.

    python benchmarks/profile_deepseek.py PATH/TO/train.json

``train.json`` is in https://github.com/deepseek-ai/profile-data (one DualPipe F&B pair
of 4 MoE layers on H800, EP64; it is not part of this repository). The plain count: every
GPU kernel goes to the shortest annotation of its launching process that was open when
its launch ran (one json.load, one scan per kernel); ``pipesim profile`` does the same in
one bounded-memory pass with per-thread interval lookups. The measured pair window is the
first kernel's start to the last kernel's end.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipesim.costfile import load_cost_file
from pipesim.ir import Op, Pair
from pipesim.profile.commands import cost_file
from pipesim.profile.labels import Mapping
from pipesim.profile.measure import profile


def plain_sums(path: str) -> tuple[dict[str, float], dict[str, int], float]:
    """(kernel microseconds per annotation name, instances per name, window us)."""
    events = json.loads(Path(path).read_text())["traceEvents"]
    comp = Mapping().component
    anns = [e for e in events if e.get("cat") == "user_annotation" and comp(e["name"])]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    sums: dict[str, float] = defaultdict(float)
    for k in kernels:
        lt = launch[k["args"]["correlation"]]
        open_ = [a for a in anns if a["pid"] == lt["pid"] and a["ts"] <= lt["ts"] <= a["ts"] + a["dur"]]
        if open_:
            sums[min(open_, key=lambda a: a["dur"])["name"]] += k["dur"]
    counts: dict[str, int] = defaultdict(int)
    for a in anns:
        counts[a["name"]] += 1
    window = max(k["ts"] + k["dur"] for k in kernels) - min(k["ts"] for k in kernels)
    return sums, counts, window


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/profile_deepseek.py PATH/TO/train.json (from github.com/deepseek-ai/profile-data)")
    path = sys.argv[1]
    t = time.process_time()
    prof = profile(path)
    cpu = time.process_time() - t
    sums, counts, window = plain_sums(path)
    table = Table(title=f"{Path(path).name}: pipesim profile against the plain kernel-time sums (ms per layer)")
    for col in ("component", "layers", "pipesim profile", "kernel-time sum", "difference", "stream"):
        table.add_column(col, justify="right")
    worst = 0.0
    for r in prof.rows:
        name = next(n for n in sums if Mapping().component(n) == r.component)
        plain = sums[name] / counts[name] / 1e3
        diff = (r.per_layer * 1e3 - plain) / plain
        worst = max(worst, abs(diff))
        table.add_row(
            str(r.component),
            str(r.instances),
            f"{r.per_layer * 1e3:.4f}",
            f"{plain:.4f}",
            f"{diff:+.2%}",
            "+".join(map(str, r.streams)),
        )
    out = Console(width=160)
    out.print(table)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "costs.toml"
        f.write_text(cost_file(prof))
        costs, _ = load_cost_file(f)
    pair = costs.pair_time(Pair(Op("F", 0, 1), Op("BW", 1, 0)), 0, 0)
    measured = window / 1e6
    out.print(
        f"worst per-layer difference {worst:.2%} (target 3%); imported file: {len(costs.stages[0])} layers, "
        f"comm_sms {costs.comm_sms:g} of {costs.total_sms:g}\n"
        f"pipesim pair --components (the imported file): {pair * 1e3:.2f} ms; measured pair window {measured * 1e3:.2f} ms; "
        f"error {(pair - measured) / measured:+.1%} (target 5%)\n"
        f"import took {cpu:.2f} s CPU for {prof.kernels} kernels"
    )


if __name__ == "__main__":
    main()
