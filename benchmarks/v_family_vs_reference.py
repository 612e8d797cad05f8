"""ZB-V, V-Half and V-Min against the Zero Bubble authors' generators over the whole
recorded grid (tests/data/reference/v_family_grid.json: pp 2..8, M 1..4pp), printed as
a table: at how many sizes pipesim is worse, equal or better on makespan, longest
per-rank span and peak memory, and the sizes where it is worse.

    python benchmarks/v_family_vs_reference.py
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

GRID = json.loads((Path(__file__).parent.parent / "tests/data/reference/v_family_grid.json").read_text())["rows"]


def main() -> None:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="pipesim-bench-")  # cold: every size searched
    from pipesim import Costs, build, simulate, summarize

    t = Table(title="pipesim vs sail-sg's V generators (F = B = W = 1): sizes worse / equal / better")
    for col in ("schedule", "sizes", "makespan", "longest span", "peak", "worse at", "CPU s"):
        t.add_column(col, justify="right")
    for name in ("zb-v", "v-half", "v-min"):
        rows = [r for r in GRID if r[0] == name]
        tally = [[0, 0, 0] for _ in range(3)]
        worse = []
        t0 = time.process_time()
        for _, pp, M, *ref in rows:
            s = build(name, pp, M)
            rep = summarize(s, simulate(s, Costs()))
            got = (rep.makespan, max(rep.span), max(rep.peak_activations))
            for k in range(3):
                tally[k][0 if got[k] > ref[k] else 1 if got[k] == ref[k] else 2] += 1
            if any(g > r for g, r in zip(got, ref)):
                worse.append(f"pp={pp} M={M}: {got[0]:g}/{got[1]:g}/{got[2]} vs {ref[0]:g}/{ref[1]:g}/{ref[2]}")
        sec = time.process_time() - t0
        cells = [" / ".join(map(str, x)) for x in tally]
        t.add_row(name, str(len(rows)), *cells, "; ".join(worse) or "-", f"{sec:.1f}")
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
