"""Are the V-shape orders (ZB-V, V-Half, V-Min) op for op what another checkout builds? A
change meant only to make building them faster must leave every one as it was: dump them
with the checkout before it, compare with the one after. Over a grid of pp and M (every
pp from 2 to 32 with ``--full``, M from 1 to 4pp at the sizes where the constructions
change: around pp and 2pp - 1), each family's order, plus every block order
(``autoschedule.blocks``: four blocks, plain, kept in V order, squeezed) up to 6000 ops;
the build runs with the cache off, so every order is searched. CPU seconds printed.

    PYTHONPATH=/old/src python benchmarks/v_orders_same.py dump /tmp/v.pkl [--full]
    PYTHONPATH=src python benchmarks/v_orders_same.py compare /tmp/v.pkl [--full]

``compare`` prints each size whose order differs (exit status 1 if any).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time


def sizes(full: bool) -> list[tuple[str, int, int]]:
    out = set()
    for pp in range(2, 33) if full else (2, 3, 4, 5, 6, 7, 8, 9, 12, 16):
        for M in {1, 2, 3, max(1, pp // 2), pp, pp + 1, 2 * pp - 2, 2 * pp - 1, 3 * pp, 4 * pp}:
            if full or 6 * pp * M <= 40_000:
                out |= {("zb-v", pp, M), ("v-half", pp, M), ("v-min", pp, M)}
    return sorted(out, key=lambda c: (c[1] * c[2], c))


def built(family: str, pp: int, M: int) -> tuple:
    """The order as bytes (kind, chunk, mb and each rank's offset) with its placement."""
    from pipesim.schedules import v_shape

    if family == "zb-v":
        s = v_shape.zb_v(pp, M) if M >= 2 * pp - 1 else v_shape.zb_v_searched.search(pp, M)
    elif family == "v-half":
        s = v_shape.v_half(pp, M)
    else:  # the searched V-Min without ``work``'s size limit, as the planner asks for it
        s = v_shape.v_min(pp, M) if v_shape.repeats("v-min", pp, M) else v_shape.v_min_searched.search(pp, M)
    t = s.table
    return t.kind.tobytes(), t.chunk.tobytes(), t.mb.tobytes(), t.offsets.tobytes(), repr(s.placement.to_dict())


def blocks(pp: int, M: int) -> dict:
    from pipesim.autoschedule.blocks import block_orders, v_half_blocks, v_min_block, zb_v_block

    return {
        (block, paired, squeeze): block_orders(pp, M, block, paired, squeeze)
        for block in {zb_v_block(pp), *v_half_blocks(pp), v_min_block(pp)}
        for paired in (False, True)
        for squeeze in (False, True)
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=("dump", "compare"))
    ap.add_argument("path")
    ap.add_argument("--full", action="store_true", help="every pp from 2 to 32 (a few minutes)")
    args = ap.parse_args()
    os.environ["PIPESIM_CACHE"] = "off"
    start = time.process_time()
    got = {}
    for family, pp, M in sizes(args.full):
        got[(family, pp, M)] = built(family, pp, M)
        if 6 * pp * M <= 6000:
            got[("blocks", pp, M)] = blocks(pp, M)
    print(f"{len(got)} orders and block sets built in {time.process_time() - start:.1f} s CPU")
    if args.mode == "dump":
        with open(args.path, "wb") as f:
            pickle.dump(got, f)
        return 0
    with open(args.path, "rb") as f:
        want = pickle.load(f)
    differ = sorted((k for k in want.keys() | got.keys() if want.get(k) != got.get(k)), key=repr)
    for k in differ:
        print("differs:", *k)
    print(f"{len(differ)} of {len(want)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
