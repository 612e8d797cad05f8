"""Timeline charts with matplotlib: one row per rank, time left to right, a box per op.

A box is coloured by its kind and shaded by its chunk (the palette of ``palette.py``,
shared with the terminal), labelled with its micro-batch id when the label fits, and
idle time is left blank. An overlapped F&B pair is one outlined box split in two
halves, the forward on top and the backward below: the two run at once, so each half
spans the whole pair. Communication segments of an event (``Event.segments`` on the
``"comm"`` stream, filled by component cost models) are drawn as a thin grey strip under
the row; compute segments are the box itself. Each rank's utilization is written at the
row's end and the title gives the schedule, pp, M, bubble ratio and makespan; the legend
says what each chunk means for each schedule shown (``chunks.py``).

Several timelines can share one figure, stacked on one time axis, so the shorter
makespan is seen at once. Time is in the cost model's units, from each timeline's first
start. The size of the figure follows the schedule: wide enough that the shortest op
can hold a two-digit label, up to ``MAX_WIDTH`` inches, beyond which labels that do not
fit are left out.

In the SVG, each row's boxes form one group ``ops:{panel}:{rank}`` whose shapes follow
the rank's order (a pair gives two, forward then backward); pair outlines are in
``pairs:{panel}:{rank}``, comm strips in ``comm:{panel}:{rank}``, and each label is
``label:{panel}:{rank}:{op}`` (``label:0:3:F1.6``), so tests and scripts can read the
shapes back.

The two-stream view of one overlapped pair (compute and communication rows, which part
hides which) is ``pair.py``'s ``pair_chart_bytes``.

matplotlib is imported inside the functions, so that the core never needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PipesimError
from ..ir import KINDS, Op, Pair, Schedule, ops_of
from ..metrics import summarize
from ..timeline import Timeline
from .chunks import chunk_caption
from .mpl import FORMATS, figure_bytes
from .palette import KIND_NAMES, fill, ink

BOX = 0.8  # box height, in rows
MAX_WIDTH = 40.0  # inches of time axis at most
MIN_WIDTH = 6.0
PER_UNIT = 0.16  # inches for the shortest op: room for a two-digit label
LEFT, RIGHT = 0.6, 0.55  # inches for the rank labels and the utilization column
TITLE, TICKS, GAP, LEGEND = 0.3, 0.35, 0.2, 0.5
COMM_GREY = "#636363"
MIN_FONT = 5.0  # labels smaller than this are left out
CAPTION_LINE = 0.14  # inches per line saying what the chunks of a schedule mean


@dataclass(frozen=True)
class Panel:
    """One timeline to draw, with its schedule (for the names) and its title line."""

    schedule: Schedule
    timeline: Timeline

    @property
    def title(self) -> str:
        rep = summarize(self.schedule, self.timeline)
        s = self.schedule
        measured = " (measured)" if self.timeline.source != "simulated" else ""
        # one space between parts: SVG collapses runs of spaces
        return (
            f"{s.name} · pp={s.pp} · M={s.microbatches} · bubble {rep.bubble_ratio:.1%} · makespan {rep.makespan:.6g}{measured}"
        )


def _row_height(pp: int) -> float:
    return min(0.3, max(0.12, 6 / max(pp, 1)))


def _shortest(panels: Sequence[Panel]) -> float:
    durations = [e.duration for p in panels for e in p.timeline.all_events() if e.duration > 0]
    return min(durations, default=1.0)


def longest(panels: Sequence[Panel]) -> float:
    """The longest makespan among the panels (1 if all are empty)."""
    return max((p.timeline.end - p.timeline.start for p in panels), default=0.0) or 1.0


def axis_width(panels: Sequence[Panel], span: float) -> float:
    """Inches of time axis: the shortest op gets room for a two-digit label, within
    ``MIN_WIDTH`` and ``MAX_WIDTH``."""
    return min(MAX_WIDTH, max(MIN_WIDTH, span / _shortest(panels) * PER_UNIT))


def chart_figure(panels: Sequence[Panel], *, span: float | None = None, width: float | None = None):
    """A matplotlib Figure with one stacked chart per panel on one time axis.

    ``span`` fixes the time axis length (default: the longest makespan) so that charts
    drawn separately (the HTML report's) share a scale; ``width`` fixes the axis width in
    inches (default: from the shortest op, see the module doc)."""
    if not panels:
        raise PipesimError("nothing to draw: give at least one schedule")
    span = span if span is not None else longest(panels)
    width = width if width is not None else axis_width(panels, span)
    heights = [TITLE + _row_height(p.timeline.pp) * p.timeline.pp + TICKS for p in panels]
    fig_h = sum(heights) + GAP * (len(panels) - 1) + LEGEND + CAPTION_LINE * len(_captions(panels)) + 0.1
    fig = _chart(panels, span, width, fig_h, LEFT + width + RIGHT)
    # the legend is one row, and its title says what the chunks mean: on a narrow chart it can
    # run past the right edge, which a PNG or PDF cuts (an SVG viewer shows it anyway); the
    # figure is widened to hold it, the time axis kept as it was
    needed = _legend_right(fig) + 0.1
    if needed > fig.get_figwidth():
        fig = _chart(panels, span, width, fig_h, needed)
    return fig


def _legend_right(fig) -> float:
    """Where the legend ends, in inches from the figure's left edge, as Agg lays out its text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    return fig.legends[-1].get_window_extent(renderer).x1 / fig.dpi


def _chart(panels: Sequence[Panel], span: float, width: float, fig_h: float, fig_w: float):
    from matplotlib.figure import Figure

    heights = [TITLE + _row_height(p.timeline.pp) * p.timeline.pp + TICKS for p in panels]
    fig = Figure(figsize=(fig_w, fig_h))
    top = fig_h - 0.1
    for panel, h in zip(panels, heights):
        rows = h - TITLE - TICKS
        ax = fig.add_axes((LEFT / fig_w, (top - TITLE - rows) / fig_h, width / fig_w, rows / fig_h))
        _draw_panel(ax, panel, len(fig.axes) - 1, span, width * 72 / span, _row_height(panel.timeline.pp) * 72)
        top -= h + GAP
    # a measured timeline (pipesim run, pipesim profile --timeline) is in seconds
    measured = all(p.timeline.source != "simulated" for p in panels)
    fig.axes[-1].set_xlabel("time (s, measured)" if measured else "time (cost-model units)", fontsize=7, loc="right", labelpad=1)
    _legend(fig, panels, fig_w)
    return fig


def chart_bytes(panels: Sequence[Panel], fmt: str, **options) -> bytes:
    """The chart encoded as ``fmt`` (png, svg or pdf)."""
    if fmt not in FORMATS:  # before any work
        raise PipesimError(f"cannot draw a chart as {fmt!r}; use one of {', '.join(FORMATS)}")
    return figure_bytes(chart_figure(panels, **options), fmt)


def _draw_panel(ax, panel: Panel, index: int, span: float, pt_per_unit: float, row_pt: float) -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.ticker import MaxNLocator

    s, tl = panel.schedule, panel.timeline
    chunks = s.placement.chunks
    t0 = tl.start
    box_pt = row_pt * BOX
    font = min(8.0, max(4.5, box_pt * 0.6))
    half_font = min(font, box_pt / 2 * 0.8)

    def label(x0: float, x1: float, y: float, op: Op, size: float, gid: str) -> None:
        # about 0.62 em a digit and a point of margin each side; shrink a little to fit
        text = str(op.mb)
        size = min(size, ((x1 - x0) * pt_per_unit - 2) / (0.62 * len(text)))
        if size >= MIN_FONT:
            colour = ink(op.kind, op.chunk, chunks)
            ax.text((x0 + x1) / 2, y, text, ha="center", va="center_baseline", fontsize=size, color=colour, gid=gid)

    for r, events in enumerate(tl.events):
        # one collection per row and per kind of shape: fast to draw, and in the SVG one
        # group per row whose shapes follow the rank's order
        boxes, colours, outlines, strips = [], [], [], []
        for e in events:
            x0, x1 = e.start - t0, e.end - t0
            if isinstance(e.item, Pair):
                for op, y in ((e.item.forward, r - BOX / 2), (e.item.backward, r)):
                    boxes.append(_rect(x0, x1, y, BOX / 2))
                    colours.append(fill(op.kind, op.chunk, chunks))
                    label(x0, x1, y + BOX / 4, op, half_font, f"label:{index}:{r}:{op}")
                outlines.append(_rect(x0, x1, r - BOX / 2, BOX))
            else:
                op = e.item
                boxes.append(_rect(x0, x1, r - BOX / 2, BOX))
                colours.append(fill(op.kind, op.chunk, chunks))
                label(x0, x1, r, op, font, f"label:{index}:{r}:{op}")
            strips += [_rect(sg.start - t0, sg.end - t0, r + BOX / 2, (1 - BOX) / 2) for sg in e.segments if sg.stream == "comm"]
        ax.add_collection(
            PolyCollection(boxes, facecolors=colours, edgecolors="white", linewidths=0.4, gid=f"ops:{index}:{r}"),
            autolim=False,
        )
        if outlines:
            ax.add_collection(
                PolyCollection(outlines, facecolors="none", edgecolors="#252525", linewidths=0.7, gid=f"pairs:{index}:{r}"),
                autolim=False,
            )
        if strips:
            ax.add_collection(
                PolyCollection(strips, facecolors=COMM_GREY, linewidths=0, gid=f"comm:{index}:{r}"),
                autolim=False,
            )
    rep = summarize(s, tl)
    for r, u in enumerate(rep.utilization):
        ax.text(1.006, r, f"{u:.0%}", transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=min(8, font))
    ax.text(
        1.006, -0.75, "util.", transform=ax.get_yaxis_transform(), ha="left", va="center", fontsize=min(7, font), color="#555"
    )
    ax.set_xlim(0, span)
    ax.set_ylim(tl.pp - 0.5, -0.5)
    ax.set_yticks(range(tl.pp))
    ax.set_yticklabels([str(r) for r in range(tl.pp)], fontsize=min(8, font))
    ax.set_ylabel("rank", fontsize=8)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=7)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=max(4, round(span * pt_per_unit / 72)), integer=True))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(panel.title, loc="left", fontsize=9)


def _rect(x0: float, x1: float, y: float, h: float) -> list[tuple[float, float]]:
    return [(x0, y), (x1, y), (x1, y + h), (x0, y + h)]


def _captions(panels: Sequence[Panel]) -> list[str]:
    """What the chunks mean, one line per schedule that has several (``chunks.py``)."""
    lines = (f"{p.schedule.name}: {chunk_caption(p.schedule.placement)}" for p in panels if p.schedule.placement.chunks > 1)
    return list(dict.fromkeys(lines))


def _legend(fig, panels: Sequence[Panel], fig_w: float) -> None:
    from matplotlib.patches import Patch

    present: dict[tuple[str, int], int] = {}
    pairs = False
    for p in panels:
        chunks = p.schedule.placement.chunks
        for e in p.timeline.all_events():
            pairs = pairs or isinstance(e.item, Pair)
            for op in ops_of(e.item):
                present.setdefault((op.kind, op.chunk), chunks)
    handles = [
        Patch(facecolor=fill(k, c, n), edgecolor="white", label=f"{k}{c}")
        for k in KINDS
        for c in range(max((c for kk, c in present if kk == k), default=-1) + 1)
        if (n := present.get((k, c))) is not None
    ]
    if pairs:
        handles.append(Patch(facecolor="white", edgecolor="#252525", label="F&B pair (top F, bottom B)"))
    if any(sg.stream == "comm" for p in panels for e in p.timeline.all_events() for sg in e.segments):
        handles.append(Patch(facecolor=COMM_GREY, label="exposed comm."))
    kinds = sorted({k for k, _ in present}, key=KINDS.index)
    fig.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(LEFT / fig_w, 0.0),
        ncol=len(handles),
        fontsize=7,
        frameon=False,
        handlelength=1.2,
        columnspacing=1.0,
        title="\n".join(
            [
                ", ".join(f"{k} {KIND_NAMES[k]}" for k in kinds) + "; digit = chunk; number in a box = micro-batch",
                *_captions(panels),
            ]
        ),
        title_fontsize=7,
        alignment="left",
    )
