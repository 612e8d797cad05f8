"""The searched zoo builders cold (``PIPESIM_CACHE=off``: nothing read back) and warm
(read back from the cache file), beside 1F1B's handcrafted builder at the same size,
printed as a table.

    python benchmarks/builder_cold.py [--quick]

Issue 10's target: every one under 2 s of CPU cold at pp=64, M=1024. ``how`` says what a
cold build does at that size: ``direct`` (a one-pass construction: ZB-V and ZB-H2 from
M = 2pp - 1 on), ``repeated`` (V-Half and V-Min: blocks built for a few micro-batches,
their steady state repeated), ``searched`` (the full search, stored in the cache file
under the user's cache directory; warm is reading it back) or ``list`` (Chimera's list
scheduling, never cached). The last rows are sizes below 2pp - 1, which ZB-V and ZB-H2
still search. CPU seconds.
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
    from pipesim import build
    from pipesim.schedules import cache, v_shape

    def how(name: str, pp: int, M: int) -> str:
        if name == "chimera":
            return "list"
        path = cache.path_of(name, pp, M)
        if path is not None and path.exists():
            return "searched"
        return "repeated" if name in ("v-half", "v-min") and v_shape.repeats(name, pp, M) else "direct"

    sizes = [(8, 64), (32, 256)] + ([] if args.quick else [(64, 1024)])
    cases = [(name, pp, M) for name in ("zb-h2", "zb-v", "v-half", "v-min", "chimera") for pp, M in sizes]
    cases += [(name, 32, 48) for name in ("zb-h2", "zb-v")]  # M < 2pp - 1: searched
    t = Table(title="searched builders: cold (PIPESIM_CACHE=off) and warm (cache file) builds, CPU s")
    for col in ("schedule", "pp", "M", "ops", "how", "cold s", "target", "warm s", "1f1b build s", "cold / 1f1b"):
        t.add_column(col, justify="right")
    for name, pp, M in cases:
        os.environ["PIPESIM_CACHE"] = "off"
        v_shape.forget()  # what the V builders keep per process
        cold, s = cpu(build, name, pp, M)
        os.environ.pop("PIPESIM_CACHE")
        build(name, pp, M)  # stores the order where the builder searches
        v_shape.forget()
        warm, again = cpu(build, name, pp, M)
        assert again.ranks == s.ranks
        peer, _ = cpu(build, "1f1b", pp, M)
        target = ("ok" if cold < 2 else "MISS") + " (< 2 s)" if (pp, M) == (64, 1024) else ""
        t.add_row(
            name,
            str(pp),
            str(M),
            f"{s.num_ops:,}",
            how(name, pp, M),
            f"{cold:.2f}",
            target,
            f"{warm:.2f}",
            f"{peer:.3f}",
            f"{cold / peer:.0f}x",
        )
    Console(width=150).print(t)


if __name__ == "__main__":
    main()
