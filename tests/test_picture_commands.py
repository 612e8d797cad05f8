"""pipesim draw, sweep and report: the files they write, and one-line errors that write nothing."""

from __future__ import annotations

import csv
import json
import re

import pytest

import svgread as sv
from pipesim import Costs, Pair, build, simulate, summarize
from pipesim.cli import main


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_draw_writes_each_output_by_extension(capsys, tmp_path):
    png, svg, pdf, trace = (tmp_path / n for n in ("d.png", "d.svg", "d.pdf", "d.json"))
    code, _, err = run(
        capsys,
        "draw",
        "--schedule",
        "dualpipe",
        "--pp",
        4,
        "-m",
        8,
        "--comm",
        0.5,
        *sum((["-o", p] for p in (png, svg, pdf, trace)), []),
    )
    assert code == 0, err
    assert png.read_bytes().startswith(b"\x89PNG") and pdf.read_bytes().startswith(b"%PDF")
    s = build("dualpipe", 4, 8)
    tl = simulate(s, Costs(comm=0.5))
    root = sv.parse(svg.read_bytes())
    assert sum(len(sv.paths(sv.group(root, f"ops:0:{r}"))) for r in range(4)) == s.num_ops
    doc = json.loads(trace.read_text())
    assert sum(e["ph"] == "s" for e in doc["traceEvents"]) == len(tl.transfers)
    assert doc["otherData"]["costs"]["comm"] == 0.5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "d.pdf", "d.png", "d.svg"]
    assert err.count("wrote ") == 4


def test_draw_side_by_side_and_a_schedule_file(capsys, tmp_path):
    sched = tmp_path / "mine.json"
    assert run(capsys, "ops", "--schedule", "zb-h1", "--pp", 4, "-m", 8, "-o", sched)[0] == 0
    out = tmp_path / "side.svg"
    code, _, err = run(
        capsys, "draw", "--schedules", f"1f1b,{sched},interleaved-1f1b", "--pp", 4, "-m", 8, "--chunks", 2, "-o", out
    )
    assert code == 0, err
    root = sv.parse(out.read_bytes())
    titles = [t.text for t in root.iter(sv.NS + "text") if t.text and "makespan" in t.text]
    assert [t.split(" ")[0] for t in titles] == ["1f1b", str(sched), "interleaved-1f1b"]  # the file as listed
    assert sv.group(root, "ops:2:3") is not None


def test_trace_time_unit(capsys, tmp_path):
    out = tmp_path / "t.json"
    assert run(capsys, "draw", "-s", "1f1b", "--pp", 2, "-m", 2, "--time-unit", "ms", "-o", out)[0] == 0
    items = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "X" and e["name"] == "BW0.1"]
    tl = simulate(build("1f1b", 2, 2))
    want = sorted((e.start * 1000, e.duration * 1000) for e in tl.all_events() if str(e.item) == "BW0.1")
    assert sorted((e["ts"], e["dur"]) for e in items) == want


def test_sweep_csv_and_plot(capsys, tmp_path):
    png, data = tmp_path / "sweep.png", tmp_path / "sweep.csv"
    code, _, err = run(
        capsys, "sweep", "--pp", 4, "--microbatches", "4:16", "--schedules", "1f1b,dualpipe", "-o", png, "--csv", data
    )
    assert code == 0, err
    assert "skipped dualpipe at M=4: dualpipe needs --microbatches >= 2 * --pp = 8, got 4" in err
    assert png.read_bytes().startswith(b"\x89PNG")
    rows = list(csv.DictReader(data.open()))
    assert [(r["schedule"], int(r["microbatches"])) for r in rows] == [
        ("1f1b", 4),
        ("1f1b", 8),
        ("1f1b", 16),
        ("dualpipe", 8),
        ("dualpipe", 16),
    ]
    for r in rows:
        s = build(r["schedule"], 4, int(r["microbatches"]))
        assert float(r["bubble_ratio"]) == summarize(s, simulate(s)).bubble_ratio


def test_sweep_to_csv_only_and_a_table(capsys, tmp_path):
    data = tmp_path / "s.csv"
    assert run(capsys, "sweep", "--pp", 2, "-m", "2,4", "--schedules", "zb-h1", "-o", data)[0] == 0
    assert len(list(csv.DictReader(data.open()))) == 2
    code, out, _ = run(capsys, "sweep", "--pp", 2, "-m", "2,4", "--schedules", "zb-h1")
    assert code == 0 and "zb-h1" in out and list(tmp_path.iterdir()) == [data]


def test_report_is_self_contained(capsys, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = run(capsys, "report", "--pp", 4, "-m", 6, "--schedules", "1f1b,dualpipe,zb-h1", "--w", 0.5, "-o", out)
    assert code == 0, err
    page = out.read_text()
    # one inline script, nothing loaded: no script files, style sheets, fonts, images or requests
    assert page.count("<script") == 2 and not re.search(r"<script[^>]*\bsrc=", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page and "<img" not in page
    assert set(re.findall(r"https?://[^\s\"']*", page)) == {"http://www.w3.org/2000/svg"}  # the SVG namespace, not a fetch
    assert not any(call in page for call in ("fetch(", "XMLHttpRequest", "import(", "WebSocket"))
    data = json.loads(re.search(r'<script type="application/json" id="pipesim-data">(.*?)</script>', page, re.S).group(1))
    assert [s["name"] for s in data["schedules"]] == ["1f1b", "zb-h1"]  # dualpipe cannot take M=6: a row saying so
    assert "dualpipe needs --microbatches &gt;= 2 * --pp = 8, got 6" in page
    assert "--w 0.5" in page  # the settings used


def test_report_data_is_the_timeline(capsys, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = run(capsys, "report", "--pp", 4, "-m", 8, "--schedules", "dualpipe,zb-v", "--comm", 0.25, "-o", out)
    assert code == 0, err
    page = out.read_text()
    data = json.loads(re.search(r'id="pipesim-data">(.*?)</script>', page, re.S).group(1))
    for d in data["schedules"]:
        s = build(d["name"], 4, 8)
        tl = simulate(s, Costs(comm=0.25))
        rep = summarize(s, tl)
        events = [e for evs in tl.events for e in evs]
        assert len(d["ev"]) == len(events)
        for row, e in zip(d["ev"], events):
            ops = [e.item.forward, e.item.backward] if isinstance(e.item, Pair) else [e.item]
            assert row[:3] == [e.rank, pytest.approx(e.start), pytest.approx(e.end)]
            assert [o[:3] for o in row[3:] if o] == [[op.kind, op.chunk, op.mb] for op in ops]
        # the memory curve peaks where the metrics put each rank's peak
        assert [max(c[1::2]) for c in d["mem"]] == pytest.approx(rep.peak_activation_memory)
        # every cross-rank wait is a transfer of the timeline, ready when it arrives
        arrivals = {(t.src, t.dst, round(t.end, 9)) for t in tl.transfers}
        for row, waits in zip(d["ev"], d["dep"]):
            for src, ready in waits:
                if d["ev"][src][0] != row[0]:
                    assert (d["ev"][src][0], row[0], round(ready, 9)) in arrivals
                assert ready <= row[1] + 1e-9  # nothing starts before what it needs is there
    assert "chunk 1: the V&#x27;s return leg" in page or "the V's return leg" in page


@pytest.mark.parametrize(
    "argv,needle",
    [
        (
            ["draw", "-s", "1f1b", "-o", "x.jpg"],
            "-o x.jpg: unknown extension '.jpg'; use .png, .svg or .pdf for a chart, .json for a Chrome trace",
        ),
        (["draw", "-s", "1f1b", "-o", "x"], "unknown extension '(none)'"),
        (["draw", "-s", "1f1b", "-o", "no/such/dir/x.png"], "cannot write 'no/such/dir/x.png': there is no folder 'no/such/dir'"),
        (["draw", "-s", "1f1b", "-o", "."], "it is a folder; give a file name"),
        (["draw", "-o", "x.png"], "one of the arguments --schedule/-s --schedules --measured is required"),
        (["draw", "-s", "1f1b", "--schedules", "zb-h1", "-o", "x.png"], "not allowed with argument"),
        (["draw", "-s", "dualpipe", "--pp", "3", "-o", "x.png"], "dualpipe needs an even --pp, got 3"),
        (["draw", "--schedules", "1f1b,zb-h9", "-o", "x.png"], "unknown schedule 'zb-h9'"),
        (["draw", "-s", "1f1b", "--time-unit", "h", "-o", "x.json"], "invalid choice: 'h'"),
        (["draw", "-s", "1f1b", "--width", "0", "-o", "x.png"], "expected a chart width in inches from 1 to 200"),
        (["sweep", "--microbatches", "128:8", "-o", "s.png"], "the start 128 is above the end 8"),
        (["sweep", "--microbatches", "8:x"], "'x' is not a whole number"),
        (["sweep", "-o", "s.txt"], "use .png, .svg or .pdf for a plot, .csv for the data"),
        (["sweep", "--csv", "s.png"], "--csv s.png: unknown extension '.png'; use .csv"),
        (
            ["sweep", "--pp", "4", "-m", "2:4", "--schedules", "dualpipe", "-o", "s.png"],
            "no schedule of dualpipe can take pp=4 with M in [2, 4]",
        ),
        (["sweep", "--schedules", ",", "-o", "s.png"], "names no schedule"),
        (["report", "-o", "r.pdf"], "use .html"),
        (["report", "--sweep", "8:x", "-o", "r.html"], "--sweep '8:x': 'x' is not a whole number"),
        (["report", "--schedules", "1f1b", "-o", "nowhere/r.html"], "there is no folder 'nowhere'"),
        (
            ["report", "--pp", "3", "--schedules", "dualpipe,chimera", "-o", "r.html"],
            "no schedule of dualpipe, chimera can take pp=3, M=16: dualpipe needs an even --pp, got 3; chimera needs",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err, err
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_failed_write_leaves_no_file(capsys, tmp_path):
    target = tmp_path / "taken.png"
    target.mkdir()  # a folder where the file should go
    code, _, err = run(capsys, "draw", "-s", "1f1b", "--pp", 2, "-m", 2, "-o", target)
    assert code == 2 and "is a folder" in err
    assert [p.name for p in tmp_path.iterdir()] == ["taken.png"] and not any(target.iterdir())


# zb-auto orders by its costs: at pp=4, M=8 with F=1, B=1, W=0.2 and a P2P latency of 1
# its order for those costs ends at 35.0, its order for unit costs at 38.6 (both simulated
# at the flags' costs). A list of schedules built zb-auto without the cost flags.
ZB_COSTS = {"f": 1, "b": 1, "w": 0.2, "comm": 1}
ZB_FLAGS = [x for k, v in ZB_COSTS.items() for x in (f"--{k}", v)]


def _zb_auto_report():
    s = build("zb-auto", 4, 8, **ZB_COSTS)
    return summarize(s, simulate(s, Costs(**ZB_COSTS)))


def test_draw_of_a_list_builds_zb_auto_for_the_cost_flags(capsys, tmp_path):
    out = tmp_path / "t.json"
    code, _, err = run(capsys, "draw", "--schedules", "zb-auto,1f1b", "--pp", 4, "-m", 8, *ZB_FLAGS, "-o", out)
    assert code == 0, err
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X" and e["pid"] <= 4]  # zb-auto's ranks
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(_zb_auto_report().makespan) == pytest.approx(35.0)


def test_sweep_of_zb_auto_builds_it_for_the_cost_flags(capsys, tmp_path):
    out = tmp_path / "s.csv"
    code, _, err = run(capsys, "sweep", "--schedules", "zb-auto,1f1b", "--pp", 4, "-m", "8:8", *ZB_FLAGS, "-o", out)
    assert code == 0, err
    rows = {r["schedule"]: r for r in csv.DictReader(out.read_text().splitlines())}
    assert float(rows["zb-auto"]["makespan"]) == pytest.approx(_zb_auto_report().makespan) == pytest.approx(35.0)


def test_report_sweep_of_zb_auto_builds_it_for_the_cost_flags(capsys, tmp_path):
    out = tmp_path / "r.html"
    argv = ["report", "--schedules", "zb-auto", "--pp", 4, "-m", 8, *ZB_FLAGS, "--sweep", "8:8", "-o", out]
    code, _, err = run(capsys, *argv)
    assert code == 0, err
    data = json.loads(re.search(r'id="pipesim-data">(.*?)</script>', out.read_text(), re.S)[1])
    (series,) = data["sweep"]["series"]
    assert series["bubble"] == [pytest.approx(_zb_auto_report().bubble_ratio, abs=1e-4)]


def _no_build(*args, **kwargs):
    raise AssertionError("built a schedule the work limit should have refused first")


def test_report_of_many_schedules_is_bounded_as_compare_is(capsys, tmp_path, monkeypatch):
    """report keeps every schedule's timeline, as compare does, but lacked compare's limit
    on all of them together: at pp=64, M=100000 it ran 7.5 minutes and died writing
    nothing. 3 ops x 100000 micro-batches x 64 ranks x 2 chunks x 17 schedules is
    652,800,000 ops, past docs/limits.md's 24,000,000 and the report's 1,500,000."""
    import pipesim.comparison

    monkeypatch.setattr(pipesim.comparison, "build", _no_build)
    out = tmp_path / "r.html"
    assert main(["report", "--pp", "64", "-m", "100000", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report of 17 schedules too large" in err and "652,800,000 ops" in err, err
    assert "above the limit of 1,500,000" in err
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, ops",
    [
        # 1f1b runs an F and a BW per micro-batch and stage: 2 x 8000 x 64 = 1,024,000 ops
        (["-s", "1f1b", "--pp", "64", "-m", "8000"], "1,024,000"),
        # stacked, the chart holds both: zb-h1's F, B, W (3 x 4000 x 64) and 1f1b's 2 x 4000 x 64
        (["--schedules", "zb-h1,1f1b", "--pp", "64", "-m", "4000"], "1,280,000"),
    ],
)
def test_draw_refuses_more_ops_than_it_can_draw_in_about_half_a_minute(capsys, tmp_path, monkeypatch, argv, ops):
    """draw was bounded only by MAX_OPS (24M), but each op is a box in a chart and events
    in a trace: zb-h1 at pp=64, M=1500 (288,000 ops) took 19.6 s of CPU for an SVG and
    1.2 GB for a Chrome trace, so at the limit an SVG took some 25 minutes. The sizes here
    are refused before any simulation."""
    import importlib

    # draw imports the simulator when it runs (so that --help does without numpy): patched at its source
    monkeypatch.setattr(importlib.import_module("pipesim.simulate"), "simulate", _no_build)
    out = tmp_path / "d.svg"
    assert main(["draw", *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{ops} ops" in err and "above the limit of 500,000" in err, err
    assert not out.exists()


@pytest.mark.parametrize("command", ["sweep", "report"])
def test_a_sweep_counts_every_schedule_against_the_work_limit(capsys, tmp_path, monkeypatch, command):
    """docs/limits.md: one limit bounds every command. The sweep counted its micro-batch
    counts together but one schedule at a time, so 17 schedules each under the limit ran
    17 times it. Here M in 1000..16000 sums to 31,000: 3 x 31,000 x 64 ranks is 5,952,000
    ops a schedule (at one chunk), and 17 schedules at two chunks each are
    3 x 31,000 x 64 x 34 = 202,368,000, past 24,000,000."""
    import pipesim.comparison
    import pipesim.schedules

    monkeypatch.setattr(pipesim.schedules, "build", _no_build)  # what run_sweep imports when it runs
    monkeypatch.setattr(pipesim.comparison, "build", _no_build)
    out = tmp_path / ("s.csv" if command == "sweep" else "r.html")
    flag = "-m" if command == "sweep" else "--sweep"
    assert main([command, "--pp", "64", flag, "1000:16000", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "202,368,000 ops" in err and "17 schedules" in err, err
    assert not out.exists()


def test_an_output_named_as_a_folder_or_through_a_broken_link_is_one_true_line(capsys, tmp_path, monkeypatch):
    """-o r.html/ names a folder (the shell's > r.html/ fails): it wrote r.html. A link
    whose target's folder is missing was said to miss the folder '.', which exists."""
    monkeypatch.chdir(tmp_path)
    argv = ["draw", "-s", "1f1b", "--pp", "2", "-m", "4", "-o"]
    assert main([*argv, "x.png/"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'x.png/'" in err and "folder" in err, err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "d.png").symlink_to(tmp_path / "gone" / "t.png")
    assert main([*argv, "d.png"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "gone") in err and "'.'" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["d.png"]


def test_sweep_writes_every_output_it_is_given(capsys, tmp_path):
    """sweep -o a.svg -o a.csv wrote a.csv alone, saying nothing of a.svg: draw takes -o
    once per file, and so does sweep. Two schedules at M = 4, 8, 16 are six CSV rows."""
    svg, data = tmp_path / "a.svg", tmp_path / "a.csv"
    argv = ["sweep", "--pp", "4", "-m", "4:16", "--schedules", "1f1b,zb-h1", "-o", str(svg), "-o", str(data)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"wrote {svg}" in err and f"wrote {data}" in err
    assert svg.read_text().lstrip().startswith("<?xml")
    rows = list(csv.DictReader(data.open()))
    assert [(r["schedule"], r["microbatches"]) for r in rows] == [(s, m) for s in ("1f1b", "zb-h1") for m in ("4", "8", "16")]


@pytest.mark.parametrize("width", [1, 12, 40])
def test_the_squeezed_timeline_says_the_width_it_drew(capsys, width):
    """--width below the rank labels and the utilization left no room: the time axis became
    one column and the note said 'squeezed to 1 columns' under lines 16 wide. The note
    never names fewer columns than the lines take, and time keeps a few columns."""
    assert main(["simulate", "-s", "1f1b", "--pp", "2", "-m", "4", "--width", str(width)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("rank ")]
    said = int(re.search(r"squeezed to (\d+) columns", out).group(1))
    assert max(len(r) for r in rows) <= said, (said, rows)
    assert all(len(r.split("│")[1]) >= 8 for r in rows)  # the time axis between the bars
