"""Where V-Half and V-Min repeat a short steady state instead of searching at M
(``v_shape.repeats``), is the order op for op the one the whole search at M picks? Over a
grid of every pp from 1 to 33 and, per pp, M just past the short build, a few more
(multiples, the planner's powers of two, 120) and the largest M below 20K ops (from
there on the search at M was never run: it repeats by construction), printed as a table
per pp as it finishes, with the CPU time of the whole search beside the repeated build's.

    python benchmarks/v_repeat_grid.py                 # pp 1..33 (about 10 minutes)
    python benchmarks/v_repeat_grid.py --pp 6,16,32    # only these pp

A ``different`` row is a size where ``repeats`` says yes and the orders differ: the rule
is then wrong there. V-Min at pp = 2 and 5 is where the search finds another order, so
those are checked the other way round (``repeats`` must say no, and the orders differ).
"""

from __future__ import annotations

import argparse
import os
import time

OPS = 20_000  # sizes up to which the search at M is run here


def sizes(pp: int) -> list[int]:
    from pipesim.schedules.v_shape import short

    lo, top = short(pp) + 1, (OPS - 1) // (6 * pp)
    picks = {lo, lo + 1, lo + 2, lo + 3, lo + 7, 2 * lo, 3 * lo, 32, 48, 64, 96, 120, 128, 256, top - 1, top}
    return sorted(M for M in picks if lo <= M <= top)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", help="comma-separated pp (default 1..33)")
    args = ap.parse_args()
    os.environ["PIPESIM_CACHE"] = "off"  # every search runs
    from pipesim.autoschedule.blocks import v_half_blocks, v_min_block
    from pipesim.schedules import v_shape

    pps = [int(x) for x in args.pp.split(",")] if args.pp else list(range(1, 34))
    print(
        f"{'schedule':8s} {'pp':>3s} {'sizes':>5s} {'M':>9s} {'same':>5s} {'different':>9s} {'search s':>9s} {'repeat s':>9s} {'ratio':>6s}"
    )
    bad = 0
    for pp in pps:
        for name in ("v-half", "v-min"):
            limit = v_shape.v_half_limit(pp) if name == "v-half" else v_shape.v_min_limit(pp)
            blocks = (*v_half_blocks(pp), v_min_block(pp)) if name == "v-half" else (v_min_block(pp),)
            Ms = sizes(pp)
            same = differ = 0
            t_search = t_repeat = 0.0
            for M in Ms:
                v_shape.forget()  # both builds cold
                t0 = time.process_time()
                full = v_shape._v(name, pp, M, limit, blocks)
                t1 = time.process_time()
                v_shape.forget()
                plan = v_shape.short_plan(pp, limit, blocks, v_shape._variants(pp, M))
                table = None if plan is None else v_shape.repeat_steady_state(plan, M)
                t2 = time.process_time()
                t_search, t_repeat = t_search + t1 - t0, t_repeat + t2 - t1
                equal = table is not None and table == full.table
                same, differ = same + equal, differ + (not equal)
                if equal != v_shape.repeats(name, pp, M):
                    bad += 1
                    print(f"  rule wrong at {name} pp={pp} M={M}: orders {'equal' if equal else 'differ'}", flush=True)
            span = f"{Ms[0]}-{Ms[-1]}" if Ms else "-"
            ratio = f"{t_search / t_repeat:.0f}x" if t_repeat else "-"
            print(
                f"{name:8s} {pp:3d} {len(Ms):5d} {span:>9s} {same:5d} {differ:9d} {t_search:9.2f} {t_repeat:9.2f} {ratio:>6s}",
                flush=True,
            )
    print(f"{bad} sizes where repeats() disagrees with the orders")


if __name__ == "__main__":
    main()
