"""zb-auto's heuristic against CP-SAT's optimum on small problems, printed as a table.

    python benchmarks/zb_auto_gap.py [--quick] [--time-limit S] [--w-memory 1,0.366,1.3]

For each (pp, M, costs, memory limit, w_memory): the heuristic's longest per-rank span
and time, the exact mode's span, whether it proved it optimal (or its lower bound when
it did not), its time, and the heuristic's gap to the best span found. Spans are those
of ``pipesim.simulate`` on the returned orders, and each one's peak (heuristic / exact)
is what ``pipesim.memory`` counts on that timeline, in activations: never above the
limit. A w_memory above 1 is a B that adds memory (the W keeps more than the activation,
as under tensor and sequence parallelism: ``MemoryModel.w_share``).
"""

from __future__ import annotations

import argparse
import itertools
import time

from rich.console import Console
from rich.table import Table

from pipesim import Costs, build, simulate, summarize
from pipesim.memory import MemoryModel, memory

COSTS = {
    "uniform": dict(f=1.0, b=1.0, w=1.0, comm=0.0),
    "paper 1.5B": dict(f=18.522, b=18.086, w=9.337, comm=0.601),  # Zero Bubble Table 9
    "B-heavy": dict(f=1.0, b=2.0, w=0.5, comm=0.1),
}


def longest_span(s, c) -> float:
    return max(summarize(s, simulate(s, Costs(**c))).span)


def peak(s, c, wm: float) -> float:
    """The most activations a rank holds, as ``pipesim.memory`` counts them."""
    mm = MemoryModel(params=0.0, activation=1.0, w_share=wm)
    return max(memory(s, simulate(s, Costs(**c)), mm, curves=False).activation_peak)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a smaller grid")
    ap.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT seconds per problem (default 10)")
    ap.add_argument("--w-memory", default="1,0.366,1.3", help="w_memory values, comma-separated (default 1,0.366,1.3)")
    args = ap.parse_args()
    w_mems = tuple(float(x) for x in args.w_memory.split(","))
    shapes = [(2, 4), (3, 6), (4, 8)] if args.quick else [(2, 4), (3, 6), (4, 6), (4, 8), (4, 12), (6, 12)]
    t = Table(title=f"zb-auto: heuristic vs CP-SAT (time limit {args.time_limit:g} s, flat placement)")
    cols = ("pp", "M", "costs", "limit", "w_mem", "heuristic", "heur. ms", "exact", "proven", "bound", "exact s", "gap", "peak")
    for col in cols:
        t.add_column(col, justify="right")
    for (pp, M), (cname, c), mult, wm in itertools.product(shapes, COSTS.items(), (1, 2), w_mems):
        if args.quick and mult == 2 and wm != 1.0:
            continue
        opts = dict(memory_limit=mult * pp, w_memory=wm, **c)
        t0 = time.perf_counter()
        heur = build("zb-auto", pp, M, **opts)
        th = time.perf_counter() - t0
        t0 = time.perf_counter()
        exact = build("zb-auto", pp, M, exact=True, time_limit=args.time_limit, **opts)
        te = time.perf_counter() - t0
        h, e = longest_span(heur, c), longest_span(exact, c)
        bound = exact.info.get("lower_bound")
        proven = exact.info["proven_optimal"]
        t.add_row(
            str(pp),
            str(M),
            cname,
            f"{mult}pp",
            f"{wm:g}",
            f"{h:.6g}",
            f"{th * 1e3:.0f}",
            f"{e:.6g}",
            "yes" if proven else "no",
            "" if bound is None or proven else f"{bound:.6g}",
            f"{te:.1f}",
            f"{(h - e) / e:+.2%}" if e else "",
            f"{peak(heur, c, wm):.3g} / {peak(exact, c, wm):.3g}",
        )
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
