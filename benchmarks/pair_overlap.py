"""Overlapped pairs, measured against simulated: does a real pair hide its all-to-alls?

    python benchmarks/pair_overlap.py [--pp 2] [--ep 2] [-m 8] [--a2a-delay 10ms] [--dim 128] [--layers 2] [--repeat 5]

Each paired schedule runs ``--model moe`` twice in one launch: pairs on two streams, and
pairs serialised (their halves one after the other, ``run --serial-pairs``). Every
all-to-all takes at least ``--a2a-delay`` (a synthetic slow link, slept inside the call),
so what the pair can hide does not hang on how busy the cores are. The component times
measured in the serialised run (lone parts, nothing beside them) become the simulator's
``LayerCosts``; the simulation then predicts:

* the pair window (``ComponentCosts.pair_time``) beside the measured mean pair;
* the communication a pair hides (its all-to-all time minus the exposed part), beside
  the same measured from the pair's own steps;
* the step time saved by pairing (the schedule with its pairs split into their halves,
  minus the schedule), beside the measured saving. The target: the measured saving is at
  least half the predicted one.

On a GPU machine (NCCL when every rank has a GPU of its own) run the same command; the
synthetic delay can be dropped (``--a2a-delay 0``) to measure the real all-to-all.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

from rich.console import Console
from rich.table import Table

from pipesim import build
from pipesim.components import ComponentCosts, LayerCosts
from pipesim.ir import Pair, Schedule
from pipesim.metrics import summarize
from pipesim.runtime import execute_many, job
from pipesim.runtime.commands import parse_duration
from pipesim.runtime.moe import MoETransformer
from pipesim.simulate import simulate
from pipesim.timeline import exposed_time

PAIRED = ("dualpipe", "dualpipev", "1f1b-overlap", "interleaved-1f1b-overlap")


def layer_costs(parts) -> LayerCosts:
    """Median time of each component over every lone step of every rank."""
    times = defaultdict(list)
    for rank in parts:
        for _, label, start, end in rank:
            times[label].append(end - start)
    field = {f"{n}({p})": f"{n}_{p.lower()}" for n in ("attn", "mlp", "dispatch", "combine") for p in "FBW"}
    return LayerCosts(**{field[k]: statistics.median(v) for k, v in times.items() if k in field})


def unpaired(s: Schedule) -> Schedule:
    """The same order with every pair run as its two halves."""
    ranks = tuple(
        tuple(op for it in items for op in ((it.forward, it.backward) if isinstance(it, Pair) else (it,))) for items in s.ranks
    )
    return Schedule(s.name, s.pp, s.microbatches, s.placement, ranks)


def measured_pairs(result) -> tuple[float, float]:
    """(mean pair window, mean communication hidden per pair) from the overlapped run."""
    windows = [e.end - e.start for evs in result.timeline.events for e in evs if isinstance(e.item, Pair)]
    hidden = []
    for rank in result.parts:
        steps = defaultdict(lambda: ([], []))
        for item, label, start, end in rank:
            if "&" in item:
                comm = label.split("(")[0] in ("dispatch", "combine")
                steps[item][comm].append((start, end))
        for compute, comm in steps.values():
            hidden.append(sum(b - a for a, b in comm) - exposed_time(sorted(compute), sorted(comm)))
    return statistics.mean(windows), statistics.mean(hidden)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--ep", type=int, default=2)
    ap.add_argument("--microbatches", "-m", type=int, default=8)
    ap.add_argument("--a2a-delay", type=parse_duration, default=0.01, help="least time of an all-to-all (default 10ms)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--schedules", default=",".join(PAIRED))
    ap.add_argument(
        "--repeat", type=int, default=5, help="runs of each (the fastest step is shown: on busy cores the least disturbed)"
    )
    args = ap.parse_args()
    model = MoETransformer(dim=args.dim, layers_per_stage=args.layers, batch=2 * args.ep)
    jobs = []
    names = args.schedules.split(",")
    for _ in range(args.repeat):  # paired and serialised alternate, so a drift in load hits both
        for name in names:
            s = build(name, args.pp, args.microbatches)
            jobs += [
                job(s, model, ep=args.ep, a2a_delay=args.a2a_delay),
                job(s, model, ep=args.ep, a2a_delay=args.a2a_delay, overlap=False),
            ]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    results = execute_many(jobs, backend="auto")
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    t = Table(
        title=f"overlapped pairs, measured vs simulated: pp={args.pp} x ep={args.ep}, M={args.microbatches}, "
        f"MoE dim {args.dim}, {args.layers} layer(s) per stage, all-to-all >= {args.a2a_delay * 1e3:g} ms"
    )
    for col in (
        "schedule",
        "pair ms meas",
        "pair ms sim",
        "hidden comm ms meas",
        "hidden comm ms sim",
        "step ms paired",
        "step ms serial",
        "saved ms meas",
        "saved ms sim",
        "meas/sim",
    ):
        t.add_column(col, justify="right")
    verdicts = []
    runs = defaultdict(lambda: ([], []))
    for paired, serial in zip(results[::2], results[1::2]):
        runs[paired.schedule.name][0].append(paired)
        runs[paired.schedule.name][1].append(serial)
    for name in names:
        pruns, sruns = runs[name]
        s = pruns[0].schedule
        costs = ComponentCosts.uniform(layer_costs([r for x in sruns for r in x.parts]), args.layers, comm_sms=0, total_sms=1)
        rank, pair = next((r, it) for r, items in enumerate(s.ranks) for it in items if isinstance(it, Pair))
        stages = tuple(s.placement.stage_of(rank, op.chunk, op.mb) for op in (pair.forward, pair.backward))
        inside = costs.inside(pair, stages)
        comm_sim = sum(b - a for stream, _, _, _, a, b in inside.parts if stream == "comm")
        sim_window = costs.pair_time(pair, *stages)
        sim_saved = summarize(s, simulate(unpaired(s), costs)).makespan - summarize(s, simulate(s, costs)).makespan
        meas_window, meas_hidden = (statistics.median(v) for v in zip(*(measured_pairs(r) for r in pruns)))
        step_p = min(summarize(s, r.timeline).makespan for r in pruns)
        step_s = min(summarize(s, r.timeline).makespan for r in sruns)
        saved = step_s - step_p
        ratio = saved / sim_saved if sim_saved > 0 else float("nan")
        verdicts.append((s.name, ratio))
        t.add_row(
            s.name,
            f"{meas_window * 1e3:.1f}",
            f"{sim_window * 1e3:.1f}",
            f"{meas_hidden * 1e3:.1f}",
            f"{(comm_sim - inside.exposed) * 1e3:.1f}",
            f"{step_p * 1e3:.1f}",
            f"{step_s * 1e3:.1f}",
            f"{saved * 1e3:.1f}",
            f"{sim_saved * 1e3:.1f}",
            f"{ratio:.2f}",
        )
    out = Console(width=180)
    out.print(t)
    out.print(
        f"machine: {cores} cores, load average {load0:.2f} before and {load1:.2f} after; "
        f"{args.pp * args.ep} rank processes; one launch, {len(results)} runs, {wall:.1f} s wall"
    )
    for name, ratio in verdicts:
        ok = ratio >= 0.5
        out.print(f"{name}: pairing saved {ratio:.0%} of what the simulator predicts (target >= 50%): {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
