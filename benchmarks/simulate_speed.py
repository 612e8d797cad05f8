"""How fast pipesim builds, simulates and summarizes schedules, against PyTorch's own
schedule generator and simulator on the same sizes, printed as tables.

    python benchmarks/simulate_speed.py [--quick] [--no-torch] [--tables peer --peers zb-v]

Times are CPU seconds (time.process_time, best of a few runs); bytes per op is the
tracemalloc peak of one build + simulate + summarize divided by its ops (a separate run:
tracing slows allocation). Targets (issue 10): >= 2M ops/s at 1F1B and DualPipeV pp=64
M=1024; a log-log slope of time against ops <= 1.05 from 10K to 4M ops; <= 100 bytes
per op; >= 20x PyTorch 2.13's generate + lower + ``_simulate_comms_compute``.

PyTorch's side: its schedule class is constructed with stand-in stages (it generates the
per-rank order and, for the multi-stage runtime, lowers it for execution: that is
"generate"); the compute-only order, overlapped pairs split into their two actions
(its simulator rejects OVERLAP_F_B), gets ``_add_send_recv`` ("lower") and then
``_simulate_comms_compute`` ("simulate"). pipesim's side includes its build, cold: the
searched builders' cache file is off (``PIPESIM_CACHE=off``), so nothing is read back.
"simulators alone" is PyTorch's lower + simulate against pipesim's compile + simulate. Its 1F1B is ``ScheduleInterleaved1F1B`` with
one stage per rank: ``Schedule1F1B``'s order has an off-by-one on the last rank that
``_add_send_recv`` rejects (shared/PYTORCH.md).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import tracemalloc

os.environ["PIPESIM_CACHE"] = "off"  # every build is cold: no searched order is read back

from rich.console import Console
from rich.table import Table

from pipesim import Costs, build, simulate, summarize
from pipesim.engine import compile

COSTS = Costs(f=1, b=1, w=1, comm=0.05)
console = Console(width=160)


def cpu(fn, *args, repeat: int = 3):
    """Least CPU seconds of ``repeat`` calls of fn(*args), with the last result."""
    best, out = math.inf, None
    for _ in range(repeat):
        t = time.process_time()
        out = fn(*args)
        best = min(best, time.process_time() - t)
    return best, out


def pipeline(name: str, pp: int, M: int, opts: dict, repeat: int = 3) -> dict:
    """CPU seconds of each step (best of ``repeat``), ops, and bytes per op."""
    tb, s = cpu(lambda: build(name, pp, M, **opts), repeat=repeat)
    tc, prog = cpu(compile, s, repeat=repeat)
    ts, tl = cpu(simulate, prog, COSTS, repeat=repeat)
    tm, _ = cpu(summarize, s, tl, repeat=repeat)
    ops = s.num_ops
    del s, prog, tl
    tracemalloc.start()
    s = build(name, pp, M, **opts)
    summarize(s, simulate(s, COSTS))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    total = tb + tc + ts + tm
    return dict(ops=ops, build=tb, compile=tc, simulate=ts, summarize=tm, total=total, rate=ops / total, bytes=peak / ops)


def speed_table(args) -> None:
    t = Table(title="build + compile + simulate + summarize at pp=64, M=1024 (CPU ms, best of 3; cold builds)")
    for col in ("schedule", "ops", "build", "compile", "simulate", "summarize", "ops/s", "target", "bytes/op", "target"):
        t.add_column(col, justify="right")
    cases = [("1f1b", {}), ("dualpipev", {}), ("interleaved-1f1b", {"chunks": 2}), ("zb-h1", {}), ("dualpipe", {})]
    if not args.quick:
        cases.append(("zb-v", {}))
    for name, opts in cases:
        r = pipeline(name, 64, 1024, opts)
        targeted = name in ("1f1b", "dualpipev")
        t.add_row(
            name,
            f"{r['ops']:,}",
            *(f"{r[k] * 1e3:.1f}" for k in ("build", "compile", "simulate", "summarize")),
            f"{r['rate']:,.0f}",
            ("ok" if r["rate"] >= 2e6 else "MISS") + " (>= 2M)" if targeted else "",
            f"{r['bytes']:.0f}",
            ("ok" if r["bytes"] <= 100 else "MISS") + " (<= 100)" if targeted else "",
        )
    console.print(t)


def scaling_table(args) -> None:
    t = Table(title="the same rate at any size: pp=32, 10K to 4M ops (CPU; slope of log time against log ops)")
    for col in ("schedule", "M", "ops", "total ms", "ops/s", "bytes/op"):
        t.add_column(col, justify="right")
    ladders = {"1f1b": (160, 640, 2560, 10240, 32768, 65536), "dualpipev": (80, 320, 1280, 5120, 16384, 32768)}
    if args.quick:
        ladders = {k: v[:4] for k, v in ladders.items()}
    for name, Ms in ladders.items():
        xs, ys = [], []
        for M in Ms:
            r = pipeline(name, 32, M, {}, repeat=3 if M < 10000 else 1)
            xs.append(math.log(r["ops"]))
            ys.append(math.log(r["total"]))
            t.add_row(name, str(M), f"{r['ops']:,}", f"{r['total'] * 1e3:.1f}", f"{r['rate']:,.0f}", f"{r['bytes']:.0f}")
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        t.add_row(name, "slope", "", f"{slope:.3f}", ("ok" if slope <= 1.05 else "MISS") + " (<= 1.05)", "", end_section=True)
    console.print(t)


# PyTorch ----------------------------------------------------------------------------


def torch_classes():
    from torch.distributed.pipelining import schedules as S

    return {
        "1f1b": (S.ScheduleInterleaved1F1B, 1, "looped"),
        "interleaved-1f1b": (S.ScheduleInterleaved1F1B, 2, "looped"),
        "zb-v": (S.ScheduleZBVZeroBubble, 2, "v"),
        "dualpipev": (S.ScheduleDualPipeV, 2, "v"),
    }


def torch_run(name: str, pp: int, M: int) -> dict:
    """PyTorch's generate, lower and simulate of its own class for ``name`` (CPU seconds)."""
    from torch.distributed.pipelining import schedules as S

    cls, k, style = torch_classes()[name]
    n = pp * k
    held = [0, n - 1] if style == "v" else [i * pp for i in range(k)]

    class Stage:  # what the constructors read from a stage
        def __init__(self, index: int):
            self.stage_index, self.num_stages, self.group_size, self.group_rank = index, n, pp, 0
            self.is_first, self.is_last = index == 0, index == n - 1
            self.submod = None

    def stage_to_rank(s: int) -> int:
        return (s if s < pp else n - 1 - s) if style == "v" else s % pp

    t0 = time.process_time()
    sched = cls([Stage(i) for i in held], M, loss_fn=lambda out, target: out)
    t1 = time.process_time()
    compute = {
        r: [x for a in acts if a is not None for x in (a.sub_actions if a.computation_type == S.OVERLAP_F_B else (a,))]
        for r, acts in sched.pipeline_order.items()
    }
    ops = sum(len(a) for a in compute.values())
    lowered = S._add_send_recv(compute, stage_to_rank=stage_to_rank, num_stages=n)
    t2 = time.process_time()
    S._simulate_comms_compute(lowered, stage_to_rank, n)
    t3 = time.process_time()
    return dict(ops=ops, generate=t1 - t0, lower=t2 - t1, simulate=t3 - t2, total=t3 - t0)


def peer_table(args) -> None:
    t = Table(title="against PyTorch 2.13 on the same sizes (CPU s; PyTorch: generate + lower + _simulate_comms_compute)")
    for col in (
        "schedule",
        "pp",
        "M",
        "pipesim ops",
        "pipesim s",
        "torch ops",
        "generate",
        "lower",
        "simulate",
        "torch s",
        "ratio",
        "simulators alone",
    ):
        t.add_column(col, justify="right")
    sizes = [(32, 256)] if args.quick else [(32, 256), (64, 1024)]
    for pp, M in sizes:
        for name in args.peers.split(","):
            opts = {"chunks": 2} if name == "interleaved-1f1b" else {}
            ours = pipeline(name, pp, M, opts)
            theirs = torch_run(name, pp, M)
            ratio = theirs["total"] / ours["total"]
            t.add_row(
                name,
                str(pp),
                str(M),
                f"{ours['ops']:,}",
                f"{ours['total']:.3f}",
                f"{theirs['ops']:,}",
                *(f"{theirs[k]:.2f}" for k in ("generate", "lower", "simulate", "total")),
                f"{ratio:.0f}x " + ("ok" if ratio >= 20 else "MISS") + " (>= 20x)",
                f"{(theirs['lower'] + theirs['simulate']) / (ours['compile'] + ours['simulate']):.0f}x",
            )
            print(f"  {name} pp={pp} M={M}: {ratio:.0f}x", file=sys.stderr, flush=True)
    console.print(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes, no ZB-V at pp=64, no PyTorch at pp=64")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--tables", default="speed,scaling,peer", help="which tables, comma-separated")
    ap.add_argument("--peers", default="1f1b,interleaved-1f1b,zb-v,dualpipev", help="schedules of the PyTorch table")
    args = ap.parse_args()
    tables = args.tables.split(",")
    if "speed" in tables:
        speed_table(args)
    if "scaling" in tables:
        scaling_table(args)
    if "peer" in tables and not args.no_torch:
        try:
            import torch.distributed.pipelining  # noqa: F401
        except ImportError:
            print("no PyTorch comparison: pip install 'pipesim[torch]'", file=sys.stderr)
            return
        peer_table(args)


if __name__ == "__main__":
    main()
