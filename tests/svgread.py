"""Reading back the SVG pipesim's charts write: shapes by id, boxes, and the time axis."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def parse(data: bytes | str) -> ET.Element:
    return ET.fromstring(data)


def group(root: ET.Element, gid: str) -> ET.Element | None:
    return next((g for g in root.iter(NS + "g") if g.get("id") == gid), None)


def groups(root: ET.Element, prefix: str) -> dict[str, ET.Element]:
    return {g.get("id"): g for g in root.iter(NS + "g") if g.get("id", "").startswith(prefix)}


def box(path: ET.Element) -> tuple[float, float, float, float]:
    """(x0, y0, x1, y1) of a path's points, in SVG units (y grows downwards)."""
    nums = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.get("d"))]
    xs, ys = nums[0::2], nums[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def paths(g: ET.Element) -> list[ET.Element]:
    return list(g.iter(NS + "path"))


def fill_of(path: ET.Element) -> str:
    return re.search(r"fill:\s*(#[0-9a-f]{6})", path.get("style")).group(1)


def text_of(root: ET.Element, gid: str) -> ET.Element | None:
    g = group(root, gid)
    return None if g is None else g.find(NS + "text")


def time_axis(root: ET.Element, axes: int = 1):
    """The map from time (the tick labels' values) to SVG x in the ``axes``-th axes,
    checked to be affine over every tick."""
    ax = group(root, f"axes_{axes}")
    ticks = []
    for g in groups(ax, "xtick_").values():
        t = g.find(f".//{NS}text")
        ticks.append((float(t.text), float(t.get("x"))))
    ticks.sort()
    assert len(ticks) >= 3, ticks
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    scale = (x1 - x0) / (v1 - v0)
    for v, x in ticks:
        assert abs(x0 + (v - v0) * scale - x) < 0.01, (v, x)
    return lambda t: x0 + (t - v0) * scale
