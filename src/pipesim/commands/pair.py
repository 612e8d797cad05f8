"""``pipesim pair``: one overlapped F&B pair on two streams (component costs), as text,
JSON or a chart."""

from __future__ import annotations

import argparse
import bisect
import itertools
import sys

from ..cost_flags import add_costs, costs_from
from ..errors import PipesimError
from ..options import (
    whole_number,
)
from ..output import console, emit_json, num, pct


def add_commands(command) -> None:
    c = command(
        "pair", cmd_pair, "the two-stream timeline of one overlapped F&B pair (component costs; default --preset ep-1to1)"
    )
    add_costs(c, per_chunk=False)
    c.add_argument(
        "--backward", choices=("BW", "B"), default="BW", help="the pair's backward: fused (BW, default) or input-only (B)"
    )
    c.add_argument("--json", action="store_true", help="print the pair's parts and times as JSON")
    c.add_argument("--width", type=pair_width, help="terminal columns of the picture (default 100)")
    c.add_argument(
        "--output", "-o", action="append", type=picture_path, help="draw it as a chart instead (.png, .svg or .pdf; repeatable)"
    )


def pair_width(text: str) -> int:
    """--width: 1 to the terminal picture's most columns (render.terminal holds them, and
    imports numpy: read when the flag is given, not to build the parser)."""
    from ..render.terminal import MAX_COLUMNS

    return whole_number(1, MAX_COLUMNS, "terminal columns")(text)


def picture_path(text: str) -> str:
    if not text.lower().endswith((".png", ".svg", ".pdf")):
        raise argparse.ArgumentTypeError(f"expected a .png, .svg or .pdf file, got {text!r}")
    return text


def cmd_pair(args: argparse.Namespace) -> int:
    """One overlapped F&B pair on two streams, beside the same two ops run alone."""
    from rich.table import Table  # imported when a table is printed: not to build the parser

    from ..files import write_bytes_atomic  # these import numpy, which the parser (--help) does without
    from ..ir import Op, Pair
    from ..render.pair import pair_chart_bytes, render_pair

    if args.output and (args.json or args.width):
        raise PipesimError(f"-o draws the pair as a chart, without {'--json' if args.json else '--width'}: drop one of them")
    if args.json and args.width:
        raise PipesimError("--width sets the terminal picture's columns, which --json drops: drop one of them")
    if args.preset is None and args.components is None:
        # the per-layer flags change the ep-1to1 pair that plain `pipesim pair` shows; on
        # costs_from's own base (dispatch and combine 0) `pair --layers 2` had nothing to hide
        args.preset = "ep-1to1"
    costs = costs_from(args)
    pair = Pair(Op("F", 0, 1), Op(args.backward, 1, 0))
    segs = costs.segments(pair, (0, 0))
    t_pair = costs.pair_time(pair, 0, 0)
    t_alone = costs.op_time(pair.forward, 0) + costs.op_time(pair.backward, 0)
    compute = sum(g.end - g.start for g in segs if g.stream == "compute")
    comm = sum(g.end - g.start for g in segs if g.stream == "comm")
    title = f"F&{args.backward} pair: {num(t_pair)} on two streams, {num(t_alone)} alone; {costs.describe()}"
    for path in args.output or ():
        write_bytes_atomic(path, pair_chart_bytes(segs, path.rsplit(".", 1)[-1].lower(), title))
        print(f"wrote {path}", file=sys.stderr)
    if args.output:
        return 0
    if args.json:
        emit_json(
            {
                "costs": costs.to_dict(),
                "pair_time": t_pair,
                "lone_time": t_alone,
                "segments": [{"stream": g.stream, "part": g.label, "start": g.start, "end": g.end} for g in segs],
            }
        )
        return 0
    out = console()
    out.print(f"costs: {costs.describe()}")
    out.print(
        f"F&{args.backward} pair: [bold]{num(t_pair)}[/] on two streams; the same ops alone take {num(t_alone)} "
        f"({pct(1 - t_pair / t_alone if t_alone else None)} saved). Compute stream busy {num(compute)}, communication {num(comm)}; "
        f"compute runs {pct(costs.comm_share)} slower while a communication kernel holds its SMs."
    )
    out.print()
    for line in render_pair(segs, args.width or 100):
        out.print(line, crop=False, no_wrap=True, overflow="ignore")
    out.print(
        "[dim]blue: forward parts, orange: backward for inputs, green: weight gradients; parts in DeepSeek-V3 Figure 4's order[/]"
    )
    t = Table(title="parts (time from the pair's start)")
    for col in ("stream", "part", "start", "end", "hides behind"):
        t.add_column(col)
    beside = hidden_behind(segs)
    for g in sorted(segs, key=lambda g: (g.start, g.stream))[:MAX_PART_ROWS]:
        t.add_row(g.stream, g.label, num(g.start), num(g.end), ", ".join(beside.get(id(g), ())) if g.stream == "comm" else "")
    out.print(t)
    if len(segs) > MAX_PART_ROWS:
        out.print(f"[dim]the first {MAX_PART_ROWS} of {len(segs):,} parts; --json lists them all[/]")
    return 0


#: rows of pair's parts table: Rich lays a table out at about 0.6 ms a row, and
#: --layers 10000 makes 80,000 parts
MAX_PART_ROWS = 400


def hidden_behind(segs) -> dict[int, list[str]]:
    """For each communication segment (by id), the compute parts running beside it, in
    the segments' order: a sweep over compute sorted by start, not every pair (--layers
    10000 is 80,000 segments)."""
    compute = sorted((g.start, n, g) for n, g in enumerate(segs) if g.stream == "compute")
    starts = [c[0] for c in compute]
    reach = list(itertools.accumulate((c[2].end for c in compute), max))  # latest end of the first k
    out = {}
    for g in segs:
        if g.stream == "compute":
            continue
        hi = bisect.bisect_left(starts, g.end)  # compute that starts before g ends
        lo = bisect.bisect_right(reach, g.start, 0, hi)  # skip a prefix that ended before g starts
        out[id(g)] = [h.label.split(" ")[0] for _, _, h in sorted(compute[lo:hi], key=lambda c: c[1]) if h.end > g.start]
    return out
