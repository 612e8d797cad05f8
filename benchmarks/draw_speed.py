"""How long the pictures take at pp=16, M=64 (and larger with --big), printed as a table.

    python benchmarks/draw_speed.py [--big]

A chart costs about one matplotlib text per labelled op, so its time grows with the
number of ops that get a label; the trace is plain dictionaries and JSON.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pipesim import build, simulate
from pipesim.render.chart import Panel, chart_bytes
from pipesim.render.trace import trace_json


def timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="also pp=32, M=256")
    args = ap.parse_args()
    shapes = [(16, 64)] + ([(32, 256)] if args.big else [])
    t = Table(title="draw times (one core)")
    for col in ("schedule", "pp", "M", "ops", "png s", "png kB", "svg s", "svg kB", "trace s", "trace kB"):
        t.add_column(col, justify="right")
    for name in ("1f1b", "zb-h1", "interleaved-1f1b", "dualpipe", "dualpipev"):
        for pp, M in shapes:
            s = build(name, pp, M)
            tl = simulate(s)
            tp, png = timed(chart_bytes, [Panel(s, tl)], "png")
            ts, svg = timed(chart_bytes, [Panel(s, tl)], "svg")
            tt, trace = timed(trace_json, [(s, tl)])
            t.add_row(
                name, str(pp), str(M), f"{s.num_ops:,}",
                f"{tp:.2f}", f"{len(png) / 1e3:.0f}", f"{ts:.2f}", f"{len(svg) / 1e3:.0f}", f"{tt:.2f}", f"{len(trace) / 1e3:.0f}",
            )  # fmt: skip
    Console(width=140).print(t)


if __name__ == "__main__":
    main()
