"""Measure, then simulate: every registry schedule at pp=4 run for real (the runtime's tiny
transformer, float64, one process per rank on gloo) under ``pipesim run --profile``'s
recording, its traces read back by ``pipesim profile`` into per-stage F/B/W/BW costs and a
P2P latency, simulated with those, and the simulated makespan printed against the
measured one.

    python benchmarks/profile_loop.py [--pp 4] [--microbatches 8] [--dim 256] [--layers 2]

The measured makespan is the one in the traces (first op start to last op end over all
ranks). What the simulation cannot know: per-op variation around each stage's mean (a
busy machine slows some ops, not all) and the P2P latency's spread around its median.
Each rank uses one thread (torch.set_num_threads(1), as the runtime's workers do).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from rich.console import Console
from rich.table import Table

from pipesim import REGISTRY, PipesimError, build, simulate
from pipesim.metrics import summarize
from pipesim.profile.measure import profile
from pipesim.runtime import TinyTransformer, execute_many, job


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=4)
    ap.add_argument("--microbatches", "-m", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--schedules", default=",".join(REGISTRY), help="comma-separated names (default: the whole registry)")
    args = ap.parse_args()
    model = TinyTransformer(dim=args.dim, layers_per_stage=args.layers, seq=args.seq, batch=4)
    schedules, skipped = [], []
    for name in args.schedules.split(","):
        try:
            schedules.append(build(name, args.pp, args.microbatches))
        except PipesimError as e:
            skipped.append(f"{name}: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        # the first job warms each rank up (lazy initialisation, allocator, caches)
        jobs = [job(schedules[0], model)] + [job(s, model, profile=os.path.join(tmp, s.name)) for s in schedules]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        execute_many(jobs, backend="gloo", timeout=1200)
        wall = time.perf_counter() - t0
        rows = []
        for s in schedules:
            prof = profile(os.path.join(tmp, s.name))
            measured = summarize(prof.schedule, prof.timeline)
            simulated = summarize(s, simulate(s, prof.stage_costs))
            rows.append((s.name, measured, simulated, prof.stage_costs))
    t = Table(
        title=f"measured (profiled) vs simulated from the profile: pp={args.pp}, M={args.microbatches}, tiny transformer "
        f"dim {args.dim}, {args.layers} layers per stage, seq {args.seq}, float64, gloo, 1 thread per rank"
    )
    for col in (
        "schedule",
        "F ms",
        "BW or B ms",
        "P2P us",
        "measured ms",
        "simulated ms",
        "error",
        "measured bubble",
        "simulated bubble",
    ):
        t.add_column(col, justify="right")
    worst = 0.0
    for name, m, sim, c in rows:
        err = (m.makespan - sim.makespan) / sim.makespan
        worst = max(worst, abs(err))
        f = sum(c.f) / len(c.f) if isinstance(c.f, tuple) else c.f
        b = sum(c.b) / len(c.b) if isinstance(c.b, tuple) else c.b
        t.add_row(
            name,
            f"{f * 1e3:.2f}",
            f"{b * 1e3:.2f}",
            f"{c.comm * 1e6:.0f}",
            f"{m.makespan * 1e3:.1f}",
            f"{sim.makespan * 1e3:.1f}",
            f"{err:+.1%}",
            f"{m.bubble_ratio:.1%}",
            f"{sim.bubble_ratio:.1%}",
        )
    out = Console(width=180)
    out.print(t)
    out.print(
        f"worst |error| {worst:.1%} (target 10%); one launch, {len(schedules)} schedules, {wall:.1f} s wall; "
        f"{os.cpu_count()} cores, load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        f"(this run's {args.pp} ranks included)"
    )
    for line in skipped:
        out.print(f"skipped {line}")


if __name__ == "__main__":
    main()
