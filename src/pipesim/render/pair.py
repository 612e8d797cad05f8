"""The two-stream picture of one overlapped pair: which component hides which.

A compute row and a communication row, each part a box as long as it runs, coloured by
the kind it belongs to (forward, backward for the input, weight gradient: the palette of
every other picture). A communication box with compute above it is hidden; one with an
empty compute row above is exposed. In the terminal (``render_pair``) or as a chart
(``pair_chart_bytes``, png/svg/pdf).

In the terminal a part's name is cut to fit its cell only at a word's edge, never in the
middle: ``DISPATCH(F)``, then its first four letters ``DISP(F)``, then its first letter
``D(F)``, then ``D`` alone (the colour still gives F, B or W); a line under the picture
says which short names stand for which.
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


def fitted_name(label: str, cells: int) -> str:
    """A part's name (``DISPATCH(F)`` of ``DISPATCH(F) F0.1 L0``) in at most ``cells``
    characters: whole, or cut to its first four letters, or to its first letter, with its
    kind while that fits (the module docstring); ``cells`` is at least one."""
    name = label.split(" ")[0]
    part, _, kind = name.partition("(")
    kind = f"({kind}" if kind else ""
    for short in (name, part[:4] + kind, part[:1] + kind):
        if len(short) <= cells:
            return short
    return part[:1]


def render_pair(segments: tuple[Segment, ...], width: int = 100) -> list[Text]:
    """Two rows, compute and communication, each part a cell as wide as its time; names
    cut to fit (``fitted_name``) are spelt out in a last line."""
    end = max((g.end for g in segments), default=0.0)
    if end <= 0:
        return [Text("(empty pair)")]
    scale = width / end
    lines = []
    cut: dict[str, str] = {}  # short name -> the part's whole name
    for stream in ("compute", "comm"):
        chars = [" "] * width
        styles = [""] * width
        for g in segments:
            if g.stream != stream:
                continue
            a, b = round(g.start * scale), max(round(g.start * scale) + 1, round(g.end * scale))
            label = fitted_name(g.label, b - a)
            whole = g.label.split(" ")[0].split("(")[0]
            if label.split("(")[0] != whole:
                cut[label.split("(")[0]] = whole
            text = label.ljust(b - a)
            for i in range(a, min(b, width)):
                chars[i] = text[i - a]
                styles[i] = _STYLE[_kind(g)]
        line = Text(f"{stream:>8} │", style="bold")
        for ch, st in zip(chars, styles):
            line.append(ch, style=st or "dim")
        line.append("│")
        lines.append(line)
    if cut:
        wholes: dict[str, list[str]] = {}
        for k, v in sorted(cut.items(), key=lambda kv: -len(kv[0])):
            wholes.setdefault(v, []).append(k)
        short = ", ".join(f"{' or '.join(ks)} = {v}" for v, ks in sorted(wholes.items()))
        lines.append(Text(f"{'':>8}  names cut to fit: {short}", style="dim"))
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
