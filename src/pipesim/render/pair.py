"""The two-stream picture of one overlapped pair: which component hides which."""

from __future__ import annotations

from rich.text import Text

from ..timeline import Segment

_STYLE = {"F": "black on #9ecae1", "B": "black on #fdd0a2", "W": "black on #c7e9c0"}


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
