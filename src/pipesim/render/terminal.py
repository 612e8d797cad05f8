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

import numpy as np
from rich.console import Console
from rich.text import Span, Text

from ..ir import KINDS, Item, Op, Pair, Schedule
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
#: fewest columns of time a squeezed table draws, whatever --width asks
MIN_TIME_COLUMNS = 8
#: tick labels: at least this many columns apart, and about this many across the axis
TICK_GAP, TICKS = 8, 10


#: most rows the table draws: each is up to ``MAX_COLUMNS`` cells, and a schedule of a
#: million ranks of one op is a legal size
MAX_ROWS = 1024


def render(schedule: Schedule, timeline: Timeline, width: int | None = None) -> tuple[list[Text], bool, int]:
    """The table as Rich text lines (``str(line)`` for plain text), whether it was squeezed
    to fit ``width`` columns (labels then show micro-batch numbers only), and how many drawn
    cells were left unlabelled because no label fits them.

    Array work over the items, then Python per drawn cell (at most ``MAX_ROWS`` x
    ``MAX_COLUMNS``): a cell shows the last item of its rank that covers it, so an item
    drawn over by the next one costs no label."""
    chunks = schedule.placement.chunks
    t0, t1 = timeline.start, timeline.end
    if timeline.pp > MAX_ROWS:
        return [Text(f"(timeline not drawn: {timeline.pp:,} ranks is more than the {MAX_ROWS:,} rows the table shows)")], False, 0
    t = timeline.table
    dur = timeline.ends - timeline.starts
    if not (dur > 0).any():
        return [Text("(empty timeline)")], False, 0
    unit = float(dur[dur > 0].min())
    units = (t1 - t0) / unit
    single = (dur > 0) & (dur <= unit * 1.0001) & (t.kind2 < 0)
    cell = _widest_label(t, single, chunks) + 1  # columns per unit: the shortest op's label and a gap
    squeezed = False
    # a width that leaves time no room still draws a few columns of it (the note then says
    # the width drawn): below the labels, time became one column under a 16-column line
    avail = max(MIN_TIME_COLUMNS, width - len(HEAD) - len(TAIL)) if width else None
    if units * cell > MAX_COLUMNS and (avail is None or avail > MAX_COLUMNS):
        avail = MAX_COLUMNS
    if avail is not None and units * cell > avail:
        squeezed = True
        # whole columns per unit keep the ranks aligned; below one, time is simply squeezed
        cell = max(1, math.floor(avail / units)) if avail >= units else max(1, avail) / units
    scale = cell / unit
    cols = max(1, math.ceil((t1 - t0) * scale - 1e-9))
    busy = np.bincount(t.ranks_of_items(), dur, timeline.pp).tolist()
    lines = [_axis(t0, t1, scale, cols, len(HEAD))]
    unlabelled = 0
    for r in range(timeline.pp):  # rank by rank: temporaries of one rank's size
        lo, hi = int(t.offsets[r]), int(t.offsets[r + 1])
        line = Text(f"rank {r:>2} │", style="bold")
        row, blank = _row(
            t, lo, hi, (timeline.starts[lo:hi] - t0) * scale, (timeline.ends[lo:hi] - t0) * scale, cols, chunks, squeezed
        )
        unlabelled += blank
        line.append_text(row)
        line.append(f"│ {busy[r] / (t1 - t0) if t1 > t0 else 0.0:4.0%}")
        lines.append(line)
    return lines, squeezed, unlabelled


def _row(t, lo: int, hi: int, start: np.ndarray, end: np.ndarray, cols: int, chunks: int, squeezed: bool) -> tuple[Text, int]:
    """One rank's cells, items lo..hi of ``t`` (``start`` and ``end`` in columns), and how
    many drawn items are left unlabelled."""
    # each item's columns [a, b), at least one wide; half a column rounds up at both ends,
    # so an item starting and ending on half columns keeps its whole width (half to even
    # cut a 3-column op at 25.5-28.5 to 26-28, too narrow for its label)
    a = np.floor(start + 0.5).astype(np.int64)
    b = np.minimum(cols, np.maximum(a + 1, np.floor(end + 0.5).astype(np.int64)))
    a = np.minimum(a, b)
    # the cells each item covers, then per cell the last item covering it (a rank's
    # items are in drawing order, so the largest index wins)
    width_of = b - a
    first = np.repeat(a - np.cumsum(width_of) + width_of, width_of)
    owner = np.full(cols, -1, np.int64)
    np.maximum.at(owner, first + np.arange(len(first)), np.repeat(np.arange(len(a)), width_of))
    del first
    drawn = np.unique(owner[owner >= 0])
    a_of, b_of = a.tolist(), b.tolist()
    text: dict[int, tuple[str, int, str, str]] = {}
    cols_of = [c[lo:hi][drawn].tolist() for c in (t.kind, t.chunk, t.mb, t.kind2, t.chunk2, t.mb2)]
    for i, k, c, m, k2, c2, m2 in zip(drawn.tolist(), *cols_of):
        # label, split column and the two halves' styles of each drawn item
        fwd = Op(KINDS[k], c, m)
        bwd = fwd if k2 < 0 else Op(KINDS[k2], c2, m2)
        item = fwd if k2 < 0 else Pair(fwd, bwd)
        split = a_of[i] + len(op_label(fwd, chunks, squeezed)) + 1 if isinstance(item, Pair) else b_of[i]
        label = _fitting_label(item, chunks, squeezed, b_of[i] - a_of[i])
        text[i] = (label.ljust(b_of[i] - a_of[i]), split, _style(fwd), _style(bwd))
    chars, spans, run = [], [], None  # run: [start, end, style]
    for col, i in enumerate(owner.tolist()):
        if i < 0:
            chars.append(IDLE)
            style = "dim"
        else:
            label, split, s1, s2 = text[i]
            chars.append(label[col - a_of[i]])
            style = s1 if col < split else s2
        if run is not None and run[2] == style:
            run[1] = col + 1
        else:
            run = [col, col + 1, style]
            spans.append(run)
    blank = sum(not label.strip() for label, *_ in text.values())
    return Text("".join(chars), spans=[Span(x, y, st) for x, y, st in spans]), blank


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
        drawn = max(min(width or MAX_COLUMNS, MAX_COLUMNS), max(line.cell_len for line in lines))
        note = f"; squeezed to {drawn} columns: cells show micro-batch numbers, colour the kind"
    if unlabelled:
        note += f"; {unlabelled} cells too narrow for their label are left blank"
    if note:
        note += " (widen with --width, 0 = never squeeze)"
    if timeline.source != "simulated":  # the axis of a measured run counts seconds, not cost units
        note += "; time in seconds, measured"
    out.print(f"[dim]{legend(schedule)}{note}[/]")


def _widest_label(t, single: np.ndarray, chunks: int) -> int:
    """Longest label among the ``single`` items (single ops), 2 if none: a kind's letters
    and the micro-batch's digits (and the chunk's, when the label names it)."""
    if not single.any():
        return 2
    kinds = np.array([len(k) for k in KINDS])[t.kind[single]]
    n = kinds + _digits(t.mb[single])
    if chunks > 2:
        n = n + _digits(t.chunk[single]) + 1
    return int(n.max())


def _digits(x: np.ndarray) -> np.ndarray:
    return np.searchsorted(10 ** np.arange(1, 19, dtype=np.int64), np.maximum(x, 0), side="right") + 1


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
