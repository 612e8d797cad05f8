"""How fast pipesim builds, simulates and summarizes schedules, against PyTorch's own
schedule generator and simulator on the same sizes, printed as tables.

    python benchmarks/simulate_speed.py [--quick] [--no-torch]

Times are CPU seconds (time.process_time, best of a few runs); bytes per op is the
tracemalloc peak of one build + simulate + summarize divided by its ops (a separate run:
tracing slows allocation). Targets (issue 10): >= 2M ops/s at 1F1B and DualPipeV pp=64
M=1024; a log-log slope of time against ops <= 1.05 from 10K to 4M ops; <= 100 bytes
per op; >= 20x PyTorch 2.13's generate + lower + ``_simulate_comms_compute``.

PyTorch's side: its schedule class is constructed with stand-in stages (it generates the
per-rank order and, for the multi-stage runtime, lowers it for execution: that is
"generate"); the compute-only order, overlapped pairs split into their two actions
(its simulator rejects OVERLAP_F_B), gets ``_add_send_recv`` ("lower") and then
``_simulate_comms_compute`` ("simulate"). For ZB-V, whose pipesim order is searched
(a cold build of tens of seconds, issue 10's item 4), a second row times pipesim on
PyTorch's own order (compiled, simulated and summarized; reading its action rows into
a Schedule is timed apart) against PyTorch's lower + simulate of it. "simulators alone" is PyTorch's
lower + simulate against pipesim's compile + simulate. Its 1F1B is ``ScheduleInterleaved1F1B`` with
one stage per rank: ``Schedule1F1B``'s order has an off-by-one on the last rank that
``_add_send_recv`` rejects (shared/PYTORCH.md).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import tracemalloc

from rich.console import Console
from rich.table import Table

from pipesim import Costs, build, simulate, summarize
from pipesim.engine import compile
from pipesim.schedules import v_shape

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


def cold(name: str, pp: int, M: int, **opts):
    """Build with nothing cached (the searched builders keep an lru_cache)."""
    for fn in (v_shape.zb_v, v_shape.v_half, v_shape.v_min):
        fn.cache_clear()
    return build(name, pp, M, **opts)


#: searched builders: minutes under tracemalloc (a Python object per op), so their bytes
#: per op are not measured; their speed is issue 10's item 4
SEARCHED = ("zb-v",)


def pipeline(name: str, pp: int, M: int, opts: dict, repeat: int = 3) -> dict:
    """CPU seconds of each step (best of ``repeat``), ops, and bytes per op."""
    tb, s = cpu(lambda: cold(name, pp, M, **opts), repeat=repeat)
    tc, prog = cpu(compile, s, repeat=repeat)
    ts, tl = cpu(simulate, prog, COSTS, repeat=repeat)
    tm, _ = cpu(summarize, s, tl, repeat=repeat)
    ops = s.num_ops
    del s, prog, tl
    peak = math.nan
    if name not in SEARCHED:
        tracemalloc.start()
        s = cold(name, pp, M, **opts)
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
        r = pipeline(name, 64, 1024, opts, repeat=1 if name in SEARCHED else 3)
        targeted = name in ("1f1b", "dualpipev")
        t.add_row(
            name,
            f"{r['ops']:,}",
            *(f"{r[k] * 1e3:.1f}" for k in ("build", "compile", "simulate", "summarize")),
            f"{r['rate']:,.0f}",
            ("ok" if r["rate"] >= 2e6 else "MISS") + " (>= 2M)" if targeted else "",
            f"{r['bytes']:.0f}" if name not in SEARCHED else "-",
            ("ok" if r["bytes"] <= 100 else "MISS") + " (<= 100)" if name not in SEARCHED else "",
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
    """PyTorch's generate, lower and simulate of its own class for ``name`` (CPU seconds),
    and its order as action rows."""
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
    rows = [[str(a) for a in sched.pipeline_order[r] if a is not None] for r in range(pp)]
    return dict(ops=ops, generate=t1 - t0, lower=t2 - t1, simulate=t3 - t2, total=t3 - t0, rows=rows)


def on_torch_order(rows: list[list[str]], M: int) -> dict:
    """pipesim on PyTorch's own order: read its action rows (a Python object per op, timed
    apart), then compile, simulate and summarize."""
    from pipesim.runtime.torch_export import from_torch_rows

    t0 = time.process_time()
    s = from_torch_rows(rows, "torch", M)
    t1 = time.process_time()
    summarize(s, simulate(s, COSTS))
    return dict(ops=s.num_ops, read=t1 - t0, total=time.process_time() - t1)


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
        for name in ("1f1b", "interleaved-1f1b", "zb-v", "dualpipev"):
            opts = {"chunks": 2} if name == "interleaved-1f1b" else {}
            ours = pipeline(name, pp, M, opts, repeat=1 if name in SEARCHED else 3)
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
            if name in SEARCHED:  # the same order on both sides: pipesim reads PyTorch's
                ours = on_torch_order(theirs["rows"], M)
                ratio = (theirs["lower"] + theirs["simulate"]) / ours["total"]
                t.add_row(
                    f"{name} on torch's order (read {ours['read']:.2f} s)",
                    str(pp),
                    str(M),
                    f"{ours['ops']:,}",
                    f"{ours['total']:.3f}",
                    f"{theirs['ops']:,}",
                    "-",
                    *(f"{theirs[k]:.2f}" for k in ("lower", "simulate")),
                    f"{theirs['lower'] + theirs['simulate']:.2f}",
                    f"{ratio:.0f}x",
                    "",
                )
    console.print(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller sizes, no ZB-V at pp=64, no PyTorch at pp=64")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--tables", default="speed,scaling,peer", help="which tables, comma-separated")
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
