"""A timeline as a hand-drawn table in the terminal: a row per rank, time left to right.

Each op is a cell as wide as its duration, labelled ``F3`` (kind, micro-batch), lower
case for chunk 1 (the return leg of a V, or DualPipe's second direction), full notation
when ranks hold more than two chunks; ``legend`` says which for the schedule shown. An overlapped pair is one cell, ``F3&bw0``. Idle
time is dotted. The scale makes the shortest op just wide enough for its label, unless
that exceeds ``width``, in which case time is squeezed: a cell then shows its micro-batch
number when that fits with a gap after it, and nothing otherwise (the colour still gives the
kind), so neighbouring labels never run together; the note under the table says so.
Piped output (no terminal to measure) is drawn ``PIPED_WIDTH`` columns wide.
"""

from __future__ import annotations

import math
import shutil
import sys

from rich.console import Console
from rich.text import Text

from ..ir import Item, Op, Pair, Schedule
from ..timeline import Timeline
from .chunks import chunk_caption
from .palette import FILLS, fill, ink

# Rich styles from the shared palette: chunk 0 light, chunk 1 and above dark.
STYLES = {(kind, c): f"{ink(kind, c)} on {fill(kind, c)}" for kind in FILLS for c in (0, 1)}
IDLE = "·"
KINDS_LEGEND = "F forward, B backward for inputs, W weight gradient, BW fused backward; X&y = overlapped pair; · = idle"


def legend(schedule: Schedule) -> str:
    """The key under a table: the kinds, how chunks are written and what they mean here."""
    pl = schedule.placement
    if pl.chunks == 1:
        return KINDS_LEGEND
    written = "lower case = chunk 1" if pl.chunks == 2 else "cells name KIND CHUNK.MICRO-BATCH"
    return f"{KINDS_LEGEND}; {written}; {chunk_caption(pl)}"


def op_label(op: Op, chunks: int, numbers_only: bool = False) -> str:
    if numbers_only:
        return str(op.mb)
    if chunks > 2:
        return str(op)
    text = f"{op.kind}{op.mb}"
    return text.lower() if op.chunk == 1 else text


def item_label(item: Item, chunks: int, numbers_only: bool = False) -> str:
    if isinstance(item, Pair):
        return f"{op_label(item.forward, chunks, numbers_only)}&{op_label(item.backward, chunks, numbers_only)}"
    return op_label(item, chunks, numbers_only)


def _style(op: Op) -> str:
    return STYLES[(op.kind, min(op.chunk, 1))]


HEAD = "rank 00 │"
TAIL = "│ 100%"


#: widest unsqueezed table: its width grows with makespan / shortest op, which hostile
#: costs make 1e15 (a MemoryError, or minutes building one line)
MAX_COLUMNS = 4000
#: the width of a timeline written to a pipe or a file, as the piped tables' (cli.console)
PIPED_WIDTH = 160
#: tick labels: at least this many columns apart, and about this many across the axis
TICK_GAP, TICKS = 8, 10


def render(schedule: Schedule, timeline: Timeline, width: int | None = None) -> tuple[list[Text], bool, int]:
    """The table as Rich text lines (``str(line)`` for plain text), whether it was squeezed
    to fit ``width`` columns (labels then show micro-batch numbers only), and how many cells
    were left unlabelled because no label fits them."""
    chunks = schedule.placement.chunks
    t0, t1 = timeline.start, timeline.end
    events = [e for e in timeline.all_events() if e.duration > 0]
    if not events:
        return [Text("(empty timeline)")], False, 0
    unit = min(e.duration for e in events)
    units = (t1 - t0) / unit
    singles = [len(item_label(e.item, chunks)) for e in events if isinstance(e.item, Op) and e.duration <= unit * 1.0001]
    cell = max(singles, default=2) + 1  # columns per unit: the shortest op's label and a gap
    squeezed = False
    avail = width - len(HEAD) - len(TAIL) if width else None
    if units * cell > MAX_COLUMNS and (avail is None or avail > MAX_COLUMNS):
        avail = MAX_COLUMNS
    if avail is not None and units * cell > avail:
        squeezed = True
        # whole columns per unit keep the ranks aligned; below one, time is simply squeezed
        cell = max(1, math.floor(avail / units)) if avail >= units else max(1, avail) / units
    scale = cell / unit
    cols = max(1, math.ceil((t1 - t0) * scale - 1e-9))
    lines = [_axis(t0, t1, scale, cols, len(HEAD))]
    unlabelled = 0
    for r, evs in enumerate(timeline.events):
        chars = [IDLE] * cols
        styles: list[str] = ["dim"] * cols
        for e in evs:
            a = round((e.start - t0) * scale)
            b = min(cols, max(a + 1, round((e.end - t0) * scale)))
            label = _fitting_label(e.item, chunks, squeezed, b - a)
            unlabelled += not label
            text = label.ljust(b - a)
            first, second = (e.item.forward, e.item.backward) if isinstance(e.item, Pair) else (e.item, e.item)
            split = a + len(op_label(first, chunks, squeezed)) + 1 if isinstance(e.item, Pair) else b
            for i in range(a, b):
                chars[i] = text[i - a]
                styles[i] = _style(first if i < split else second)
        line = Text(f"rank {r:>2} │", style="bold")
        run_start = 0
        for i in range(1, cols + 1):
            if i == cols or styles[i] != styles[run_start]:
                line.append("".join(chars[run_start:i]), style=styles[run_start])
                run_start = i
        busy = sum(e.duration for e in evs)
        line.append(f"│ {busy / (t1 - t0) if t1 > t0 else 0.0:4.0%}")
        lines.append(line)
    return lines, squeezed, unlabelled


def _fitting_label(item: Item, chunks: int, squeezed: bool, room: int) -> str:
    """The cell's label when it fits in ``room`` columns with a gap after it (the last column
    of a cell may touch the next cell's label, which would run two numbers together), else
    the forward's alone for a pair, else nothing: a cut label reads as a different one."""
    for label in (item_label(item, chunks, squeezed), op_label(item.forward, chunks, squeezed) if isinstance(item, Pair) else ""):
        if label and len(label) < room:
            return label
    return ""


def print_timeline(out: Console, schedule: Schedule, timeline: Timeline, width: int | None) -> None:
    """The table and its key on ``out``: as wide as the terminal, ``PIPED_WIDTH`` when piped,
    ``width`` when given (0: unsqueezed, up to ``MAX_COLUMNS``)."""
    if width is None:
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else PIPED_WIDTH
    lines, squeezed, unlabelled = render(schedule, timeline, width or None)
    for line in lines:
        out.print(line, crop=False, no_wrap=True, overflow="ignore")
    note = ""
    if squeezed:
        note = f"; squeezed to {min(width or MAX_COLUMNS, MAX_COLUMNS)} columns: cells show micro-batch numbers, colour the kind"
    if unlabelled:
        note += f"; {unlabelled} cells too narrow for their label are left blank"
    if note:
        note += " (widen with --width, 0 = never squeeze)"
    out.print(f"[dim]{legend(schedule)}{note}[/]")


def _axis(t0: float, t1: float, scale: float, cols: int, indent: int) -> Text:
    """Tick labels every 1, 2 or 5 x 10^k time units: at least ``TICK_GAP`` columns apart and
    about ``TICKS`` across the axis, however long it is."""
    span = t1 - t0
    gap = max(TICK_GAP, cols / TICKS)
    exp = math.floor(math.log10(max(gap / scale, 1e-12)))
    step = next(m * 10**e for e in (exp, exp + 1) for m in (1, 2, 5) if m * 10**e * scale >= gap)
    axis = [" "] * (cols + 8)
    k = 0
    while (t := k * step) <= span + 1e-9:
        label = f"{t:g}"
        pos = round(t * scale)
        if pos + len(label) <= len(axis):
            axis[pos : pos + len(label)] = list(label)
        k += 1
    return Text(" " * indent + "".join(axis).rstrip(), style="dim")
