"""The report as one self-contained HTML file: no fonts, no network, one small script.

The page holds the comparison table (sortable), the timelines with memory over time
(and the sweep when asked for) and the settings. The timelines are drawn in the browser
by ``report.js``, written for this page, from the compact JSON of ``report_data.py``
placed inside the page: hover an op for what it is and what it waited for, zoom and pan
on one time axis, show the schedules stacked or one at a time. SVG is made by the
script only, sized to the window's width, so a laptop screen shows a whole timeline.
This module is plain data in, text out: it needs neither matplotlib nor the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from importlib.resources import files

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 1.5em 2em; color: #222; background: #fff; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 1.6em; }
h3 { font-size: 0.95em; margin: 1.2em 0 0.1em; font-weight: 600; }
p.sub, p.hint, p.caption { color: #555; margin: 0.1em 0; font-size: 0.85em; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9em; }
#comparison th { cursor: pointer; user-select: none; }
#comparison th[aria-sort=ascending]::after { content: " \\25B2"; }
#comparison th[aria-sort=descending]::after { content: " \\25BC"; }
th, td { padding: 0.3em 0.8em; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
td.na { color: #888; text-align: left; }
#controls { position: sticky; top: 0; background: #fff; padding: 0.4em 0; z-index: 1; font-size: 0.9em; }
#controls button, #controls select { font: inherit; margin-right: 0.3em; }
#range { margin-left: 0.6em; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
svg { display: block; font-family: inherit; }
svg .rank, svg .tick { font-size: 11px; fill: #333; }
svg.timeline { cursor: grab; }
svg .op:hover { stroke: #000; stroke-width: 1.5; }
#sweep { display: flex; gap: 20px; flex-wrap: wrap; }
#tip { position: fixed; z-index: 2; max-width: 36em; background: #fffff4; border: 1px solid #999;
       box-shadow: 0 2px 6px rgba(0,0,0,.2); padding: 0.4em 0.6em; font-size: 0.8em; pointer-events: none; }
#tip th { white-space: nowrap; }
#tip th, #tip td { border: none; padding: 0.05em 0.4em; text-align: left; vertical-align: top; background: none; }
#tip .tiphead { font-weight: 600; margin-bottom: 0.2em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; font-size: 0.9em; }
dt { color: #555; } dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
"""


@dataclass(frozen=True)
class Unrunnable:
    """A table row for a schedule that cannot take the settings, and why."""

    name: str
    reason: str


Cell = tuple[str, float | str | None]  # what is shown, and the value it sorts by


def script() -> str:
    """The page's script, ``report.js`` beside this module."""
    return files(__package__).joinpath("report.js").read_text(encoding="utf-8")


def report_html(
    title: str,
    subtitle: str,
    header: Sequence[str],
    rows: Sequence[Sequence[Cell] | Unrunnable],
    data_json: str,
    settings: Sequence[tuple[str, str]],
    sweep: bool = False,
) -> str:
    """The page: ``rows`` of cells under ``header``, then the timelines the script draws
    from ``data_json`` (``report_data.to_json``), the sweep if ``sweep``, then the
    settings as a list."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{escape(subtitle)}</p>',
        '<div class="scroll"><table id="comparison"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in header),
        "</tr></thead><tbody>",
    ]
    for row in rows:
        if isinstance(row, Unrunnable):
            out.append(
                f'<tr><td>{escape(row.name)}</td><td class="na" colspan="{len(header) - 1}">{escape(row.reason)}</td></tr>'
            )
        else:
            cells = "".join(
                f"<td{'' if v is None else f' data-v={chr(34)}{escape(str(v))}{chr(34)}'}>{escape(text)}</td>" for text, v in row
            )
            out.append(f"<tr>{cells}</tr>")
    out.append('</tbody></table></div><p class="hint">Click a column heading to sort by it.</p>')
    out.append(
        '<h2>Timelines</h2><div id="controls">show <select id="show"><option value="all">all, stacked</option></select>'
        '<button id="zoom-in" title="zoom in">+</button><button id="zoom-out" title="zoom out">&minus;</button>'
        '<button id="reset">whole step</button><span id="range"></span>'
        '<p class="hint">Wheel over a timeline to zoom, drag to pan; hover an op for what it is and what it waited for.</p></div>'
        "<noscript><p>The timelines are drawn by the page's script; allow scripts to see them.</p></noscript>"
        '<div id="timelines"></div>'
    )
    if sweep:
        out.append('<h2>Sweep over micro-batches</h2><div id="sweep"></div>')
    out.append('<h2>Settings</h2><dl id="settings">')
    out += [f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in settings]
    out.append("</dl>")
    out.append('<div id="tip" hidden></div>')
    out.append(f'<script type="application/json" id="pipesim-data">{data_json}</script>')
    out.append(f"<script>\n{script()}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
