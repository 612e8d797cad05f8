"""Output that keeps its information (issue 22): names never cut to the same text, squeezed
timelines that leave out what no longer fits instead of running numbers together, piped
timelines of a readable width with ticks spaced for the axis, and chart legends inside the
picture."""

from __future__ import annotations

import re

import pytest

from pipesim import REGISTRY, build, output, simulate
from pipesim.cli import main
from pipesim.commands import compare as compare_command
from pipesim.render.terminal import PIPED_WIDTH, TICKS


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_at_100_columns_keeps_every_name_whole(capsys, monkeypatch):
    monkeypatch.setattr(
        compare_command, "console", lambda: output._Console(highlight=False, soft_wrap=True, width=100, color_system=None)
    )
    code, out, _ = run(capsys, "compare", "--pp", "8", "-m", "16")
    assert code == 0 and max(len(line) for line in out.splitlines() if line.startswith("│")) <= 100
    shown = [line.split("│")[1].strip().removesuffix(" *") for line in out.splitlines() if line.startswith("│")]
    names = [n for n in shown if n]
    assert "…" not in out
    assert sorted(names) == sorted(REGISTRY)  # every name whole, so all distinct


def rank_rows(out: str) -> list[str]:
    return [line.split("│")[1] for line in out.splitlines() if line.startswith("rank")]


def test_a_squeezed_timeline_never_runs_numbers_together(capsys):
    code, out, _ = run(capsys, "simulate", "-s", "dualpipe", "--pp", "8", "-m", "64", "--width", "120")
    assert code == 0 and "squeezed to 120 columns" in out and "too narrow for their label are left blank" in out
    numbers = [int(t) for row in rank_rows(out) for t in re.split(r"[\s·&]+", row) if t]
    assert numbers and all(0 <= n < 64 for n in numbers)  # "110111112113" would be one number past M


def test_an_unsqueezed_timeline_labels_every_op(capsys):
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", "4", "-m", "8", "--width", "0")
    rows = rank_rows(out)
    assert code == 0 and "left blank" not in out
    assert [row.count("F") for row in rows] == [8] * 4 and [row.count("BW") for row in rows] == [8] * 4


def test_an_unsqueezed_timeline_labels_ops_that_start_on_half_a_column(capsys):
    """A pair of 1.5 units puts every later op on half columns; rounding half to even cut
    B0.1 (units 8.5 to 9.5: columns 25.5 to 28.5) to columns 26-27, too narrow for 'B1',
    though a unit is 3 columns wide (the label and a gap) and --width 0 never squeezes."""
    code, out, _ = run(capsys, "simulate", "-s", "dualpipe", "--pp", "2", "-m", "4", "--pair", "1.5", "--width", "0")
    rows = rank_rows(out)
    assert code == 0 and "left blank" not in out, out
    assert "B1 W1" in rows[0] and "b3 w3" in rows[1]  # each rank's last two ops, B0.1 W0.1 and B1.3 W1.3


def test_piped_timelines_have_a_readable_width(capsys):
    # capsys is no terminal: the table is drawn PIPED_WIDTH columns wide, not 4000
    code, out, _ = run(capsys, "simulate", "-s", "zb-h1", "--pp", "4", "-m", "200", "--f", "1", "--b", "1", "--w", "0.001")
    rows = [line for line in out.splitlines() if line.startswith("rank")]
    assert code == 0 and rows and max(len(r) for r in rows) <= PIPED_WIDTH
    assert f"squeezed to {PIPED_WIDTH} columns" in out


@pytest.mark.parametrize("width", [0, 100, 400])
def test_ticks_follow_the_axis_length(capsys, width):
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", "4", "-m", "300", "--width", width)
    lines = out.splitlines()
    axis = lines[lines.index(next(line for line in lines if line.startswith("rank"))) - 1]
    labels = [float(t) for t in axis.split()]
    assert code == 0 and 3 <= len(labels) <= TICKS + 1
    assert labels == sorted(labels) and labels[0] == 0


CHARTS = [[name] for name in REGISTRY] + [["1f1b", "zb-h1", "dualpipe", "dualpipev"]]


@pytest.mark.parametrize("names", CHARTS, ids=",".join)
def test_chart_legends_lie_inside_the_picture(names):
    """The figure's tight bounding box (every artist's extent, the legend's included) lies
    within the figure: nothing is cut at the edge of a PNG or PDF."""
    pytest.importorskip("matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from pipesim.render.chart import Panel, chart_figure

    panels = []
    for name in names:
        s = build(name, 4, 8)
        panels.append(Panel(s, simulate(s)))
    fig = chart_figure(panels)
    tight = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer())
    assert tight.x0 >= 0 and tight.y0 >= 0
    assert tight.x1 <= fig.get_figwidth() and tight.y1 <= fig.get_figheight()


def test_the_png_of_the_issue_holds_its_legend(capsys, tmp_path):
    """draw --schedule dualpipe --pp 4 -m 8 -o x.png cut its legend: the saved PNG is as wide
    as the legend needs, and its right-most columns are background."""
    image = pytest.importorskip("matplotlib.image")
    code, _, err = run(capsys, "draw", "--schedule", "dualpipe", "--pp", "4", "-m", "8", "-o", tmp_path / "x.png")
    assert code == 0, err
    pixels = image.imread(tmp_path / "x.png")
    assert (pixels[:, -3:, :3] == 1.0).all()  # no text or box reaches the right edge
