"""Sweeps: the range syntax, the data against the simulator's, and the plot's lines."""

from __future__ import annotations

import csv
import io
import re

import pytest

import svgread as sv
from pipesim import Costs, PipesimError, build, simulate, summarize
from pipesim.render.sweep_plot import sweep_bytes
from pipesim.sweep import COLUMNS, parse_range, run_sweep, skip_lines, to_csv


@pytest.mark.parametrize(
    "text,values",
    [
        ("8:128", [8, 16, 32, 64, 128]),
        ("8:100", [8, 16, 32, 64]),
        ("3:3", [3]),
        ("8:32:8", [8, 16, 24, 32]),
        ("8:30:8", [8, 16, 24]),
        ("16,8, 12", [8, 12, 16]),
        ("24", [24]),
    ],
)
def test_range_syntax(text, values):
    assert parse_range(text) == values


@pytest.mark.parametrize(
    "text,needle",
    [
        ("8:4", "the start 8 is above the end 4"),
        ("a:8", "'a' is not a whole number"),
        ("0:8", "values must be from 1 to 16,000,000, got 0"),
        ("8:16:0", "values must be from 1 to 16,000,000, got 0"),
        ("1:2:3:4", "too many ':'"),
        ("", "is not a whole number"),
        ("4,4,4", "4 is given 3 times; give each value once"),
        ("4,8,4", "4 is given 2 times"),
    ],
)
def test_bad_ranges_say_what_is_right(text, needle):
    with pytest.raises(PipesimError, match=needle) as e:
        parse_range(text)
    assert "\n" not in str(e.value)


def test_csv_values_are_the_simulators():
    costs = Costs(f=1, b=1.5, w=0.5, comm=0.1)
    names = ["1f1b", "zb-h1", "dualpipe", "interleaved-1f1b"]
    points, skips = run_sweep(names, 4, [4, 6, 8, 18], costs, {"chunks": 2})
    rows = list(csv.DictReader(io.StringIO(to_csv(points))))
    assert tuple(rows[0]) == COLUMNS
    ran = set()
    for row in rows:
        name, M = row["schedule"], int(row["microbatches"])
        s = build(name, 4, M, **({"chunks": 2} if name == "interleaved-1f1b" else {}))
        rep = summarize(s, simulate(s, costs))
        assert int(row["pp"]) == 4
        assert float(row["makespan"]) == rep.makespan
        assert float(row["bubble_ratio"]) == rep.bubble_ratio
        assert float(row["span_bubble_ratio"]) == rep.span_bubble_ratio
        ssu = rep.steady_state_utilization
        assert (row["steady_state_utilization"] == "") if ssu is None else float(row["steady_state_utilization"]) == ssu
        assert float(row["min_utilization"]) == min(rep.utilization)
        assert int(row["peak_activations"]) == max(rep.peak_activations)
        assert float(row["peak_activation_memory"]) == max(rep.peak_activation_memory)
        assert float(row["parameter_copies"]) == rep.parameter_copies
        ran.add((name, M))
    # dualpipe needs M >= 2pp and an even M, interleaved M a multiple of its max(1, M // pp)
    # rounds (as PyTorch's): those are skipped, with why
    assert {(sk.schedule, sk.microbatches) for sk in skips} == {("dualpipe", 4), ("dualpipe", 6), ("interleaved-1f1b", 18)}
    assert ran | {(sk.schedule, sk.microbatches) for sk in skips} == {(n, M) for n in names for M in (4, 6, 8, 18)}
    lines = skip_lines(skips)
    assert len(lines) == 2 and lines[0].startswith("skipped dualpipe at M=4,6: dualpipe needs --microbatches >= 2 * --pp = 8")


def test_unknown_schedule_is_an_error_not_a_skip():
    with pytest.raises(PipesimError, match="unknown schedule 'zb-h9'"):
        run_sweep(["1f1b", "zb-h9"], 4, [8], Costs())


def test_plot_has_a_line_per_schedule_with_a_point_per_M():
    points, _ = run_sweep(["1f1b", "dualpipe"], 4, [4, 8, 16, 32], Costs())
    root = sv.parse(sweep_bytes(points, "svg"))
    for name, n in (("1f1b", 4), ("dualpipe", 3)):
        for panel in ("bubble", "memory"):
            (line,) = sv.group(root, f"{panel}:{name}").findall(sv.NS + "path")  # the line; markers are <use>s
            vertices = line.get("d").count("L") + 1
            assert vertices == n
    # the bubble line of 1F1B falls as M grows (SVG y grows downwards)
    ys = [float(v) for v in sv.group(root, "bubble:1f1b").find(sv.NS + "path").get("d").split()[2::3]]
    assert ys == sorted(ys)
    assert sweep_bytes(points, "png").startswith(b"\x89PNG")
    with pytest.raises(PipesimError, match="use one of png, svg, pdf"):
        sweep_bytes(points, "gif")


def test_end_labels_never_overlap():
    # at M=128 1F1B and ZB-H1 end at the same memory and nearly the same bubble, and the
    # two DualPipes close by: their labels used to be drawn over each other
    names = ["1f1b", "zb-h1", "interleaved-1f1b", "dualpipe", "dualpipev"]
    points, _ = run_sweep(names, 8, [16, 32, 64, 128], Costs(), {}, "stage")
    root = sv.parse(sweep_bytes(points, "svg"))
    boxes = []
    for name in names:
        t = sv.group(root, f"end:{name}").find(f".//{sv.NS}text")
        assert t.text == "M=128"
        size = float(re.search(r"font-size: ([\d.]+)px", t.get("style")).group(1))
        x, y = float(t.get("x")), float(t.get("y"))  # left end of the baseline
        # DejaVu Sans: "M" 0.86 em, "=" 0.84, digits 0.64; ascent 0.76 em, descent 0.24
        width = size * (0.86 + 0.84 + 0.64 * (len(t.text) - 2))
        boxes.append((x, y - 0.76 * size, x + width, y + 0.24 * size))
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--pp", "2", "-m", "4,4,4", "--schedules", "1f1b", "--csv", "OUT.csv"],
        ["sweep", "--pp", "2", "-m", "4,8", "--schedules", "1f1b,zb-h1,1f1b", "--csv", "OUT.csv"],
        ["compare", "--pp", "2", "-m", "4", "--schedules", "1f1b,1F1B"],
        ["draw", "--pp", "2", "-m", "4", "--schedules", "1f1b,1f1b", "-o", "OUT.svg"],
        ["report", "--pp", "2", "-m", "4", "--schedules", "1f1b,gpipe", "--sweep", "8,8", "-o", "OUT.html"],
    ],
)
def test_repeats_are_refused_not_run_twice(argv, tmp_path, capsys):
    # 1f1b,zb-h1,1f1b built, simulated and printed 1f1b twice, and 4,4,4 ran as one 4
    from pipesim.cli import main

    argv = [str(tmp_path / a) if a.startswith("OUT") else a for a in argv]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "once" in err
    assert list(tmp_path.iterdir()) == []
