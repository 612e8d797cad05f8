"""Where Chimera repeats the steady state of its order at SHORT_UNITS units of pp
micro-batches (``schedules.chimera.repeated``) instead of running the list scheduler at
M, is the order op for op the list scheduler's at M? Over every even pp from 2 to 64 (the
planner's deepest pipelines) and M from just past the short build to 16 units, printed
as a row per pp as it finishes, with the CPU time of the whole list schedules beside the
repeated builds' (the short build included once per pp, as a planner run pays it).

    python benchmarks/chimera_repeat_grid.py              # pp 2..64 (a few minutes)
    python benchmarks/chimera_repeat_grid.py --pp 8,64    # only these pp

A ``different`` count above 0 is a size where the repeated order is not the list
scheduler's: the rule is then wrong there.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", help="comma-separated even pp (default 2..64)")
    ap.add_argument("--units", type=int, default=16, help="largest M, in units of pp micro-batches (default 16)")
    args = ap.parse_args()
    os.environ["PIPESIM_CACHE"] = "off"  # every build runs
    mod = importlib.import_module("pipesim.schedules.chimera")
    pps = [int(x) for x in args.pp.split(",")] if args.pp else list(range(2, 65, 2))
    print(f"{'pp':>3s} {'M':>9s} {'same':>5s} {'different':>9s} {'list s':>8s} {'repeat s':>9s} {'ratio':>6s}")
    bad = 0
    for pp in pps:
        Ms = [u * pp for u in range(mod.SHORT_UNITS + 1, args.units + 1)]
        same = differ = 0
        t_list = t_repeat = 0.0
        mod._short.cache_clear()
        for M in Ms:
            t0 = time.process_time()
            want = mod.searched(pp, M).schedule("chimera").table
            t1 = time.process_time()
            got = mod.repeated(pp, M)
            t2 = time.process_time()
            t_list, t_repeat = t_list + t1 - t0, t_repeat + t2 - t1
            equal = got is not None and got == want
            same, differ = same + equal, differ + (not equal)
            if not equal:
                print(f"  pp={pp} M={M}: {'no steady window' if got is None else 'orders differ'}", flush=True)
        bad += differ
        ratio = f"{t_list / t_repeat:.0f}x" if t_repeat else "-"
        print(f"{pp:3d} {f'{Ms[0]}-{Ms[-1]}':>9s} {same:5d} {differ:9d} {t_list:8.2f} {t_repeat:9.2f} {ratio:>6s}", flush=True)
    print(f"{bad} sizes where the repeated order differs from the list scheduler's")


if __name__ == "__main__":
    main()
