"""The two-stream picture of one overlapped pair: which component hides which.

A compute row and a communication row, each part a box as long as it runs, coloured by
the kind it belongs to (forward, backward for the input, weight gradient: the palette of
every other picture). A communication box with compute above it is hidden; one with an
empty compute row above is exposed. In the terminal (``render_pair``) or as a chart
(``pair_chart_bytes``, png/svg/pdf).
"""

from __future__ import annotations

import textwrap

from rich.text import Text

from ..timeline import Segment
from .mpl import figure_bytes
from .palette import fill, ink

_STYLE = {k: f"{ink(k)} on {fill(k)}" for k in ("F", "B", "W")}


def _kind(seg: Segment) -> str:
    """F, B or W part, from a label like 'MLP(W) BW1.5 L0'."""
    return seg.label.split("(", 1)[1][0]


def render_pair(segments: tuple[Segment, ...], width: int = 100) -> list[Text]:
    """Two rows, compute and communication, each part a cell as wide as its time."""
    end = max((g.end for g in segments), default=0.0)
    if end <= 0:
        return [Text("(empty pair)")]
    scale = width / end
    lines = []
    for stream in ("compute", "comm"):
        chars = [" "] * width
        styles = [""] * width
        for g in segments:
            if g.stream != stream:
                continue
            a, b = round(g.start * scale), max(round(g.start * scale) + 1, round(g.end * scale))
            label = g.label.split(" ")[0]
            text = label[: b - a].ljust(b - a)
            for i in range(a, min(b, width)):
                chars[i] = text[i - a]
                styles[i] = _STYLE[_kind(g)]
        line = Text(f"{stream:>8} │", style="bold")
        for ch, st in zip(chars, styles):
            line.append(ch, style=st or "dim")
        line.append("│")
        lines.append(line)
    return lines


#: narrowest part that gets a label in the chart (a 7-point label is about 0.1 inch tall)
MIN_LABEL_INCHES = 0.02


def pair_chart_bytes(segments: tuple[Segment, ...], fmt: str, title: str) -> bytes:
    """The pair as a chart: compute on top, communication below, time left to right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max((g.end for g in segments), default=1.0)
    width = max(6.0, min(24.0, 0.9 * len(segments)))
    fig, ax = plt.subplots(figsize=(width, 2.4))
    title = textwrap.fill(title, width=int(width * 14))  # about 14 characters of 9-pt text an inch
    for row, stream in ((1, "compute"), (0, "comm")):
        bars: dict[str, list[tuple[float, float]]] = {}
        for g in segments:
            if g.stream != stream:
                continue
            kind = _kind(g)
            bars.setdefault(kind, []).append((g.start, g.end - g.start))
            if (g.end - g.start) / end * width < MIN_LABEL_INCHES:
                continue  # too narrow to read: --layers 10000 is 60,000 parts, and a text each takes minutes
            part, rest = g.label.split(" ", 1) if " " in g.label else (g.label, "")
            layer = rest.rsplit(" ", 1)[-1] if rest else ""
            ax.text(
                (g.start + g.end) / 2,
                row,
                f"{part}\n{layer}",
                ha="center",
                va="center",
                fontsize=7,
                color=ink(kind),
                clip_on=True,
            )
        for kind, spans in bars.items():  # one collection per colour, not an artist per part
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=fill(kind), edgecolors="#333333", linewidth=0.6)
    ax.set_yticks([0, 1], ["communication", "compute"])
    ax.set_xlim(0, end)
    ax.set_ylim(-0.6, 1.6)
    ax.set_xlabel("time from the pair's start (cost-model units)")
    ax.set_title(title, fontsize=9, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    try:
        return figure_bytes(fig, fmt)
    finally:
        plt.close(fig)
