"""Measure, then simulate: every registry schedule run for real (the runtime's tiny
transformer, float64, one process per rank on gloo, one thread each) under ``pipesim run
--profile``'s recording, its traces read back by ``pipesim profile`` into per-stage F/B/W/BW
costs, the time between items and a P2P latency, simulated with those, and the simulated
makespan printed against the measured one, for each of ``--repeats`` launches.

    python benchmarks/profile_loop.py [--pp N] [--microbatches 8] [--dim 256] [--repeats 3]

The measured makespan is the one in the traces (first op start to last op end over all
ranks). Beside the simulation from the per-stage means (what the loop gives a user), the
table shows the schedule that ran simulated with each item's own measured time
("replayed"): its error is what the simulation's model of dependencies, time between
items and P2P leaves; and with each item taking the measured time of a random item of
its kind and stage ("shuffled"): the op times' spread without their order. Where the
shuffled error is small and the first one is not, the spread itself made the run slower
than its means (ranks that wait on each other at every step run at the pace of the
slower one); where only the replayed error is small, the order mattered (which ops were
slow when).

The default ``--pp`` is the largest of 4 and 2 that gives each rank a core of its own
(this process's CPU affinity): with more ranks than cores, an op's time depends on how
many ranks compute beside it (the ramps run fast, the steady state slowly), which one mean
per kind and stage cannot show; the summary line "ops while k ranks compute" measures it.
Other work on the machine does the same, so the load average is printed per launch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections import defaultdict

import numpy as np
from rich.console import Console
from rich.table import Table

from pipesim import REGISTRY, PipesimError, build, kernel, simulate
from pipesim.engine import compile, edge_latency
from pipesim.ir import Pair
from pipesim.metrics import summarize
from pipesim.profile.measure import profile
from pipesim.profile.pipeline_actions import between_items
from pipesim.runtime import TinyTransformer, execute_many, job


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def kind_and_stage(placement, e) -> tuple:
    """What the per-stage costs price an item by: its kind and stage (one class for pairs)."""
    if isinstance(e.item, Pair):
        return ("pair",)
    return (e.item.kind, placement.stage_of(e.rank, e.item.chunk, e.item.mb))


def replays(prof, draws: int = 20) -> tuple[float, float]:
    """The schedule that ran simulated with the measured time between items and P2P
    latency, and each item taking (``replayed``) the time it measured, or (``shuffled``,
    the mean over ``draws``) the measured time of a random item of its kind and stage:
    the same spread of op times, without the order it came in."""
    program = compile(prof.schedule)
    overhead, _ = between_items(prof.schedule, prof.timeline)
    lat = edge_latency(program, prof.stage_costs)
    events = [e for evs in prof.timeline.events for e in evs]  # the program's numbering: rank after rank
    dur = np.array([e.duration + overhead for e in events])

    def makespan(d: np.ndarray) -> float:
        start, end = kernel.times(program.order, program.first, program.dep_ptr, program.dep, lat, d)
        return float(end.max() - start.min())

    classes = defaultdict(list)
    for i, e in enumerate(events):
        classes[kind_and_stage(prof.schedule.placement, e)].append(i)
    rng = np.random.default_rng(0)
    shuffled = []
    for _ in range(draws):
        d = dur.copy()
        for idx in classes.values():
            d[idx] = rng.permutation(dur[idx])
        shuffled.append(makespan(d))
    return makespan(dur), statistics.fmean(shuffled)


def by_concurrency(prof, into: dict) -> float:
    """Each op's time over the mean of its kind and stage, filed under how many ranks
    (itself included, rounded) computed while it ran, on average over its duration;
    returns the spread of those ratios (their standard deviation): how far op times
    strayed from the means the simulation takes."""
    pl = prof.schedule.placement
    events = list(prof.timeline.all_events())

    def key(e):
        return kind_and_stage(pl, e)

    times = defaultdict(list)
    for e in events:
        times[key(e)].append(e.duration)
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    ratios, seen = [], set()
    for e in sorted(events, key=lambda e: e.start):
        if mean[key(e)] < 1e-3 or e.duration <= 0:  # B of the first stage: nothing to compute
            continue
        beside = sum(max(0.0, min(e.end, o.end) - max(e.start, o.start)) for o in events if o.rank != e.rank)
        ratios.append(e.duration / mean[key(e)])
        into[round(1 + beside / e.duration)].append(ratios[-1])
        if key(e) not in seen:  # the first of its kind and stage in this run: any warm-up left?
            seen.add(key(e))
            into["first"].append(ratios[-1])
    return statistics.pstdev(ratios)


def one_launch(schedules, model, backend: str, into: dict) -> dict:
    """Run every schedule profiled and unprofiled in one launch (after one warm-up job);
    per schedule: measured, simulated and replayed makespans, the profiled run's costs and
    the unprofiled run's makespan."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [job(schedules[0], model)]  # warms each rank up (lazy initialisation, allocator, caches)
        for s in schedules:
            jobs += [job(s, model, profile=os.path.join(tmp, s.name)), job(s, model)]
        results = execute_many(jobs, backend=backend, timeout=1200)
        for i, s in enumerate(schedules):
            prof = profile(os.path.join(tmp, s.name))
            out[s.name] = {
                "spread": by_concurrency(prof, into),
                "measured": summarize(prof.schedule, prof.timeline).makespan,
                "simulated": summarize(s, simulate(s, prof.stage_costs)).makespan,
                **dict(zip(("replayed", "shuffled"), replays(prof))),
                "unprofiled": summarize(s, results[2 + 2 * i].timeline).makespan,
                "costs": prof.stage_costs,
                "overhead": between_items(prof.schedule, prof.timeline)[0],
            }
    return out


def mean_of(v) -> float:
    return sum(v) / len(v) if isinstance(v, tuple) else float(v)


def main() -> None:
    n_cores = cores()
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=4 if n_cores >= 4 else 2, help="default: 4, or 2 on fewer than 4 cores")
    ap.add_argument("--microbatches", "-m", type=int, default=8)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="launches, each running every schedule once")
    ap.add_argument("--schedules", default=",".join(REGISTRY), help="comma-separated names (default: the whole registry)")
    ap.add_argument("--backend", default="gloo", choices=("gloo", "nccl", "auto"), help="nccl: one GPU per rank")
    args = ap.parse_args()
    model = TinyTransformer(dim=args.dim, layers_per_stage=args.layers, seq=args.seq, batch=4)
    schedules, skipped = [], []
    for name in args.schedules.split(","):
        try:
            schedules.append(build(name, args.pp, args.microbatches))
        except PipesimError as e:
            skipped.append(f"{name}: {e}")
    runs, loads, concurrency = [], [], defaultdict(list)
    for _ in range(args.repeats):
        before = os.getloadavg()[0]
        runs.append(one_launch(schedules, model, args.backend, concurrency))
        loads.append((before, os.getloadavg()[0]))

    t = Table(
        title=f"measured (profiled) vs simulated from the profile: pp={args.pp}, M={args.microbatches}, tiny transformer "
        f"dim {args.dim}, {args.layers} layers per stage, seq {args.seq}, float64, {args.backend}, 1 thread per rank, "
        f"{args.repeats} launches"
    )
    cols = ("schedule", "F ms", "BW or B ms", "between ms", "P2P ms", "measured ms", "simulated ms", "error per launch",
            "worst", "shuffled error", "replayed error", "op time spread")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="right")
    worst_all, within = 0.0, 0
    for s in schedules:
        rows = [run[s.name] for run in runs]
        errs = [(r["measured"] - r["simulated"]) / r["simulated"] for r in rows]
        replay = [(r["measured"] - r["replayed"]) / r["replayed"] for r in rows]
        shuffled = [(r["measured"] - r["shuffled"]) / r["shuffled"] for r in rows]
        worst = max(map(abs, errs))
        worst_all = max(worst_all, worst)
        within += worst <= 0.10
        meas = [r["measured"] * 1e3 for r in rows]
        c = [r["costs"] for r in rows]
        t.add_row(
            s.name,
            f"{statistics.median(mean_of(x.f) for x in c) * 1e3:.1f}",
            f"{statistics.median(mean_of(x.b) for x in c) * 1e3:.1f}",
            f"{statistics.median(r['overhead'] for r in rows) * 1e3:.2f}",
            f"{statistics.median(x.comm for x in c) * 1e3:.2f}",
            f"{statistics.median(meas):.0f} ({min(meas):.0f}-{max(meas):.0f})",
            f"{statistics.median(r['simulated'] for r in rows) * 1e3:.0f}",
            " ".join(f"{e:+.1%}" for e in errs),
            f"{worst:.1%}",
            " ".join(f"{e:+.1%}" for e in shuffled),
            f"{max(replay, key=abs):+.1%}",
            " ".join(f"{r['spread']:.2f}" for r in rows),
        )
    out = Console(width=200)
    out.print(t)
    out.print(
        f"worst |error| {worst_all:.1%} (target 10%): {within} of {len(schedules)} schedules within 10% in every launch. "
        "simulated with each item taking, 'shuffled', the measured time of a random item of its kind and stage "
        "(mean of 20 draws, per launch) or, 'replayed', its own measured time (the worst launch); 'op time spread': the "
        "standard deviation of op times over the means of their kind and stage, per launch."
    )
    ratios = [run[s.name]["measured"] / run[s.name]["unprofiled"] for run in runs for s in schedules]
    out.print(
        f"profiled / unprofiled makespan (the same schedule run just after, without the profiler): median "
        f"{statistics.median(ratios):.3f}, {min(ratios):.2f}-{max(ratios):.2f}"
    )
    first = concurrency.pop("first")
    out.print(
        "ops while k ranks compute, time over the mean of their kind and stage: "
        + ", ".join(f"k={k}: {statistics.fmean(v):.2f} ({len(v)} ops)" for k, v in sorted(concurrency.items()))
        + f"; the first op of each kind and stage in a run: {statistics.fmean(first):.2f} ({len(first)} ops)"
    )
    oversubscribed = f"; {args.pp} ranks on {n_cores} cores: the ranks compete for cores" if args.pp > n_cores else ""
    out.print(
        f"{n_cores} cores{oversubscribed}; load average (1 min) at the start and end of each launch: "
        + ", ".join(f"{a:.1f}-{b:.1f}" for a, b in loads)
        + f" (this run's {args.pp} ranks included)"
    )
    for line in skipped:
        out.print(f"skipped {line}")


if __name__ == "__main__":
    main()
