"""The one colour scheme of every picture pipesim draws (terminal, charts, HTML).

Colour says the kind of an op: blue forward, orange backward for the input, green weight
gradient, red fused backward. Shade says the chunk: light for chunk 0, dark for chunk 1
(the return leg of a V, or the second direction of DualPipe), shades in between when
ranks hold more chunks. ``INK`` is the text colour readable on each fill.
"""

from __future__ import annotations

# kind -> (fill of chunk 0, fill of the last chunk)
FILLS: dict[str, tuple[str, str]] = {
    "F": ("#9ecae1", "#3182bd"),
    "B": ("#fdd0a2", "#fd8d3c"),
    "W": ("#c7e9c0", "#31a354"),
    "BW": ("#fcbba1", "#cb181d"),
}
# kind -> (ink on the light fill, ink on the dark fill)
INK: dict[str, tuple[str, str]] = {
    "F": ("#000000", "#ffffff"),
    "B": ("#000000", "#000000"),
    "W": ("#000000", "#ffffff"),
    "BW": ("#000000", "#ffffff"),
}
KIND_NAMES = {"F": "forward", "B": "backward (input)", "W": "weight gradient", "BW": "fused backward"}


def _shade(chunk: int, chunks: int) -> float:
    """0 for chunk 0, 1 for the last chunk (two-chunk schedules: 0 and 1)."""
    if chunks <= 2:
        return float(min(chunk, 1))
    return min(chunk, chunks - 1) / (chunks - 1)


def _mix(a: str, b: str, t: float) -> str:
    ca = [int(a[i : i + 2], 16) for i in (1, 3, 5)]
    cb = [int(b[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(ca, cb))


def fill(kind: str, chunk: int = 0, chunks: int = 2) -> str:
    """The fill colour of an op of ``kind`` on ``chunk`` when ranks hold ``chunks`` chunks."""
    light, dark = FILLS[kind]
    return _mix(light, dark, _shade(chunk, chunks))


def ink(kind: str, chunk: int = 0, chunks: int = 2) -> str:
    """The text colour for a label on ``fill(kind, chunk, chunks)``."""
    return INK[kind][round(_shade(chunk, chunks))]
