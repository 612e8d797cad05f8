"""A report as one self-contained HTML file: no scripts, no fonts, no network.

It holds the comparison table, the charts as inline SVG and the settings used, in that
order. The page is plain data in, text out: the caller supplies the table's cells and
the SVG of each chart (``chart.chart_bytes(..., "svg")``), so this module needs neither
matplotlib nor the simulator.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 2em; color: #222; background: #fff; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 2em; }
p.sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
td.na { color: #888; text-align: left; }
.chart { overflow-x: auto; border: 1px solid #eee; padding: 0.5em 0; }
.chart svg { display: block; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; font-size: 0.9em; }
dt { color: #555; } dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
"""


@dataclass(frozen=True)
class Unrunnable:
    """A table row for a schedule that cannot take the settings, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Section:
    """A chart with its heading; ``svg`` is a whole SVG document (its XML prolog is dropped)."""

    heading: str
    svg: str
    anchor: str = ""


def inline_svg(svg: str) -> str:
    """An SVG document as an element to place in HTML: no XML declaration, no DOCTYPE."""
    svg = re.sub(r"^\s*<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"^\s*<!DOCTYPE[^>]*>\s*", "", svg)
    return svg.strip()


def report_html(
    title: str,
    subtitle: str,
    header: Sequence[str],
    rows: Sequence[Sequence[str] | Unrunnable],
    sections: Sequence[Section],
    settings: Sequence[tuple[str, str]],
) -> str:
    """The page: ``rows`` of cells under ``header``, then each section's chart, then the
    settings as a list."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(subtitle)}</p>',
        '<table id="comparison"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in header) + "</tr></thead><tbody>",
    ]
    for row in rows:
        if isinstance(row, Unrunnable):
            out.append(
                f'<tr><td>{escape(row.name)}</td><td class="na" colspan="{len(header) - 1}">{escape(row.reason)}</td></tr>'
            )
        else:
            out.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    out.append("</tbody></table>")
    for sec in sections:
        anchor = f' id="{escape(sec.anchor)}"' if sec.anchor else ""
        out.append(f"<h2{anchor}>{escape(sec.heading)}</h2>")
        out.append(f'<div class="chart">{inline_svg(sec.svg)}</div>')
    out.append('<h2>Settings</h2><dl id="settings">')
    out += [f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in settings]
    out.append("</dl></body></html>")
    return "\n".join(out) + "\n"
