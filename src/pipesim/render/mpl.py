"""What every matplotlib picture of pipesim shares: the formats and how a figure becomes bytes."""

from __future__ import annotations

import io

from ..errors import PipesimError

FORMATS = ("png", "svg", "pdf")


def figure_bytes(fig, fmt: str, dpi: int = 100) -> bytes:
    """``fig`` encoded as ``fmt``. Text stays text in SVG (small, searchable, no font
    files), naming matplotlib's own DejaVu Sans then any sans-serif rather than its long
    fallback list on every label; a fixed salt for the SVG ids and no date make a
    figure's bytes repeatable."""
    import matplotlib

    if fmt not in FORMATS:
        raise PipesimError(f"cannot draw a picture as {fmt!r}; use one of {', '.join(FORMATS)}")
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "pipesim", "font.sans-serif": ["DejaVu Sans"]}):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata={"Date": None} if fmt != "png" else {})
    return buf.getvalue()
