"""The picture of a sweep (``pipesim.sweep``): two panels side by side.

Left, bubble ratio against micro-batches on a log axis, a line per schedule: 1F1B's
bubble falls only as 1/M while DualPipe's and the Zero Bubble schedules' stay low.
Right, peak activation memory against bubble ratio, a point per schedule and M joined
in M order (memory in units of one micro-batch through one 1F1B stage): the price each
schedule pays for its bubble. Each schedule's last point is labelled with its M, labels
moved apart so that none covers another. The lines carry SVG ids ``bubble:{schedule}`` and
``memory:{schedule}``. matplotlib is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import PipesimError
from ..sweep import Point
from .mpl import FORMATS, figure_bytes

MARKERS = "osD^v<>ph*"


def sweep_figure(points: Sequence[Point], *, title: str = ""):
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

    if not points:
        raise PipesimError("nothing to plot: no schedule could take any of the micro-batch counts")
    names = list(dict.fromkeys(p.schedule for p in points))
    fig = Figure(figsize=(12, 4.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    colours = [f"C{i % 10}" for i in range(len(names))]
    for i, name in enumerate(names):
        pts = sorted((p for p in points if p.schedule == name), key=lambda p: p.microbatches)
        style = {"color": colours[i], "marker": MARKERS[i % len(MARKERS)], "markersize": 5, "linewidth": 1.5, "label": name}
        left.plot([p.microbatches for p in pts], [p.bubble_ratio for p in pts], gid=f"bubble:{name}", **style)
        right.plot([p.bubble_ratio for p in pts], [p.peak_activation_memory for p in pts], gid=f"memory:{name}", **style)
    Ms = sorted({p.microbatches for p in points})
    left.set_xscale("log", base=2)
    left.set_xticks(Ms if len(Ms) <= 12 else Ms[:: -(-len(Ms) // 12)])
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    left.xaxis.set_minor_locator(LogLocator(base=2, subs="auto"))
    left.xaxis.set_minor_formatter(NullFormatter())
    left.yaxis.set_major_formatter(PercentFormatter(1.0))
    left.set_xlabel("micro-batches M")
    left.set_ylabel("bubble ratio")
    left.set_title("bubble against micro-batches", fontsize=10)
    right.xaxis.set_major_formatter(PercentFormatter(1.0))
    right.set_xlabel("bubble ratio")
    right.set_ylabel("peak activation memory (1F1B stages)")
    right.set_title("memory against bubble (a point per M)", fontsize=10)
    for ax in (left, right):
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    left.legend(fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    ends = [max((p for p in points if p.schedule == name), key=lambda p: p.microbatches) for name in names]
    _end_labels(
        fig, right, [(p.schedule, f"M={p.microbatches}", p.bubble_ratio, p.peak_activation_memory) for p in ends], colours
    )
    return fig


LABEL_FONT = 7.0  # points
LABEL_GAP = 1.0  # points between two labels


def _end_labels(fig, ax, labels: list[tuple[str, str, float, float]], colours: list[str]) -> None:
    """Each schedule's last point labelled beside it, moved up until it overlaps no label
    placed before it (schedules often end at the same point: ZB-H1 and 1F1B at pp
    stages). Boxes are estimated in points from the font size (0.75 em a character, wider
    than DejaVu Sans's digits), so the placement is the same whatever the output format.
    The SVG ids are ``end:{schedule}``."""
    fig.draw_without_rendering()  # settles the layout and the axis limits
    to_pt = 72 / fig.dpi
    placed: list[tuple[float, float, float, float]] = []
    height = LABEL_FONT * 1.2
    for (name, text, x, y), colour in sorted(zip(labels, colours), key=lambda lc: (lc[0][3], lc[0][2])):
        px, py = (v * to_pt for v in ax.transData.transform((x, y)))
        width = 0.75 * LABEL_FONT * len(text)
        dx, dy = 4.0, 3.0
        while any(_overlap((px + dx, py + dy, width, height), b) for b in placed):
            dy += height / 2
        placed.append((px + dx, py + dy, width, height))
        ax.annotate(
            text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=LABEL_FONT, color=colour, gid=f"end:{name}"
        )


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two boxes (left, bottom, width, height) overlap, with LABEL_GAP around."""
    return (
        a[0] < b[0] + b[2] + LABEL_GAP
        and b[0] < a[0] + a[2] + LABEL_GAP
        and a[1] < b[1] + b[3] + LABEL_GAP
        and b[1] < a[1] + a[3] + LABEL_GAP
    )


def sweep_bytes(points: Sequence[Point], fmt: str, **options) -> bytes:
    """The sweep picture encoded as ``fmt`` (png, svg or pdf)."""
    if fmt not in FORMATS:  # before any work
        raise PipesimError(f"cannot plot a sweep as {fmt!r}; use one of {', '.join(FORMATS)}")
    return figure_bytes(sweep_figure(points, **options), fmt, dpi=110)
