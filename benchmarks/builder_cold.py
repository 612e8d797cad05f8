"""Searched builders cold (the search itself) and warm (read back from the cache file),
beside 1F1B's handcrafted builder at the same size, printed as a table.

    python benchmarks/builder_cold.py [--quick]

ZB-H2, ZB-V, V-Half and V-Min search once per (pp, M) and store the order under the
user's cache directory (``pipesim.schedules.cache``); this runs against an empty
temporary cache so that "cold" is the search, and "warm" is what every later build of
that size costs. Chimera's list scheduling is fast enough not to be cached. CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from rich.console import Console
from rich.table import Table


def cpu(fn, *args):
    t = time.process_time()
    out = fn(*args)
    return time.process_time() - t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip pp=64, M=1024")
    args = ap.parse_args()
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="pipesim-bench-")
    os.environ.pop("PIPESIM_CACHE", None)
    from pipesim import build

    sizes = [(8, 64), (32, 256)] + ([] if args.quick else [(64, 1024)])
    t = Table(title="searched builders: cold search and warm cache read (CPU s, empty cache at start)")
    for col in ("schedule", "pp", "M", "ops", "cold s", "warm s", "1f1b build s", "cold / 1f1b", "warm / 1f1b"):
        t.add_column(col, justify="right")
    for name in ("zb-h2", "zb-v", "v-half", "v-min", "chimera"):
        for pp, M in sizes:
            cold, s = cpu(build, name, pp, M)
            warm, again = cpu(build, name, pp, M)
            assert again.ranks == s.ranks
            peer, _ = cpu(build, "1f1b", pp, M)
            t.add_row(
                name,
                str(pp),
                str(M),
                f"{s.num_ops:,}",
                f"{cold:.2f}",
                f"{warm:.2f}",
                f"{peer:.2f}",
                f"{cold / peer:.0f}x",
                f"{warm / peer:.1f}x",
            )
    Console(width=140).print(t)


if __name__ == "__main__":
    main()
