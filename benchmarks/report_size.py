"""The interactive report's page size and build time against the SVG chart of the same
timelines, measured in the same run, printed as a table.

    python benchmarks/report_size.py [--big]

The report carries each timeline once, as compact JSON the page's script draws from; the
SVG chart (what the static report used to inline) spells out every box and label.
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pipesim import build, simulate
from pipesim.render.chart import Panel, chart_bytes
from pipesim.render.html import report_html
from pipesim.render.report_data import timeline_data, to_json

NAMES = ("1f1b", "zb-h1", "dualpipe", "dualpipev")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", action="store_true", help="also pp=32, M=512")
    args = ap.parse_args()
    shapes = [(8, 16), (16, 128)] + ([(32, 512)] if args.big else [])
    t = Table(title=f"report against inline SVG charts, {', '.join(NAMES)} (CPU seconds)")
    for col in ("pp", "M", "items", "report kB", "report s", "svg charts kB", "svg s", "size ratio"):
        t.add_column(col, justify="right")
    for pp, M in shapes:
        runs = [(s, simulate(s)) for s in (build(n, pp, M) for n in NAMES)]
        c0 = time.process_time()
        data = {"schedules": [timeline_data(s, tl) for s, tl in runs], "sweep": None}
        page = report_html("r", "", ("schedule",), [[(s.name, s.name)] for s, _ in runs], to_json(data), [])
        c1 = time.process_time()
        svg = sum(len(chart_bytes([Panel(s, tl)], "svg")) for s, tl in runs)
        c2 = time.process_time()
        items = sum(len(evs) for _, tl in runs for evs in tl.events)
        size = len(page.encode())
        t.add_row(
            str(pp),
            str(M),
            str(items),
            f"{size / 1e3:.0f}",
            f"{c1 - c0:.2f}",
            f"{svg / 1e3:.0f}",
            f"{c2 - c1:.2f}",
            f"{svg / size:.1f}x",
        )
    Console().print(t)


if __name__ == "__main__":
    main()
