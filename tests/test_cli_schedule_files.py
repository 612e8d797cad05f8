"""Schedule files wherever a command takes schedule names: sweep and report refused the
file `ops -o` had written ("unknown schedule 's.json'") that draw, simulate and run read,
and compare sent it to simulate; and the lists' other checks met on the way (builder
flags beside PyTorch names, the trade-off mark). What a file is called: an unnamed file
was "custom", a name that was no string was printed as its repr ("None"), and the ranks
`ops --json` prints were refused without saying which command writes a schedule file.

The expected makespans are 1F1B's at unit F, B and W (BW = 2): (M + pp - 1) slots of
F + BW (Narayanan et al. 2021, PipeDream-Flush's bubble of pp - 1 slots), 3 x 3 = 9 at
pp=2, M=2 and 5 x 3 = 15 at M=4.
"""

from __future__ import annotations

import csv
import json

import pytest

from pipesim.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, out, err) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (code, out, err)


@pytest.fixture
def mine(tmp_path, capsys):
    """A 1F1B schedule file at pp=2, M=2, made as a user makes one."""
    path = tmp_path / "s.json"
    assert main(["ops", "--schedule", "1f1b", "--pp", "2", "-m", "2", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def test_sweep_runs_a_schedule_file_as_one_point_at_its_own_size(capsys, tmp_path, mine):
    out_csv = tmp_path / "sweep.csv"
    code, _, err = _run(capsys, "sweep", "--schedules", f"{mine},1f1b", "-m", "2:4", "--csv", out_csv)
    assert code == 0, err
    rows = list(csv.DictReader(out_csv.open()))
    # the sweep runs at the file's pp (no --pp given), the file at its own M
    got = [(r["schedule"], r["pp"], r["microbatches"], float(r["makespan"])) for r in rows]
    assert got == [(str(mine), "2", "2", 9.0), ("1f1b", "2", "2", 9.0), ("1f1b", "2", "4", 15.0)]
    assert "outside" not in err  # its M is one of the range's


def test_sweep_says_when_a_files_point_lies_outside_the_range(capsys, tmp_path, mine):
    code, _, err = _run(capsys, "sweep", "--schedules", f"{mine},1f1b", "-m", "4:8", "--csv", tmp_path / "x.csv")
    assert code == 0, err
    assert f"{mine} is a schedule file of M=2, outside the sweep's M in [4, 8]" in err


def test_sweep_refuses_a_pp_the_file_does_not_have(capsys, tmp_path, mine):
    code, out, err = _run(capsys, "sweep", "--schedules", f"{mine},1f1b", "--pp", 4, "--csv", tmp_path / "x.csv")
    _one_line(code, out, err)
    assert f"--pp 4 disagrees with {mine}'s pp = 2" in err
    assert not (tmp_path / "x.csv").exists()


def test_report_reads_a_schedule_file_and_builds_the_names_at_its_size(capsys, tmp_path, mine):
    page = tmp_path / "r.html"
    code, _, err = _run(capsys, "report", "--schedules", f"{mine},zb-h1", "--sweep", "2:4", "-o", page)
    assert code == 0, err
    text = page.read_text()
    assert "pipesim report: pp=2, M=2" in text and str(mine) in text


def test_files_of_two_sizes_in_one_comparison_are_refused_naming_both(capsys, tmp_path, mine):
    other = tmp_path / "big.json"
    assert main(["ops", "--schedule", "1f1b", "--pp", "4", "-m", "8", "-o", str(other)]) == 0
    capsys.readouterr()
    for command in (["compare"], ["report", "-o", tmp_path / "r.html"]):
        code, out, err = _run(capsys, *command, "--schedules", f"{mine},{other}")
        _one_line(code, out, err)
        assert f"{other} is pp=4, M=8 and {mine} pp=2, M=2" in err
    code, out, err = _run(capsys, "sweep", "--schedules", f"{mine},{other}")
    _one_line(code, out, err)
    assert f"{other} is pp=4 and {mine} pp=2" in err


def test_draw_builds_the_names_beside_a_file_at_the_files_size(capsys, tmp_path, mine):
    trace = tmp_path / "t.json"
    code, _, err = _run(capsys, "draw", "--schedules", f"{mine},1f1b", "-o", trace)
    assert code == 0, err
    events = json.loads(trace.read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in events if e.get("name") == "process_name")
    # 1f1b was built at the default pp=8 beside a file of pp=2; each panel named as listed
    assert names == [f"{mine} rank 0", f"{mine} rank 1", "1f1b rank 0", "1f1b rank 1"]


def test_builder_flags_with_files_only_are_refused(capsys, tmp_path, mine):
    code, out, err = _run(capsys, "compare", "--schedules", str(mine), "--chunks", 2)
    _one_line(code, out, err)
    assert f"--chunks is an option of the schedule builders; {mine} brings its own order" in err


def test_a_pytorch_name_counts_as_its_family_for_builder_flags(capsys):
    # Interleaved1F1B takes --chunks; the check read only pipesim's spellings and refused it
    code, _, err = _run(capsys, "compare", "--schedules", "Interleaved1F1B,zb-h1", "--chunks", 3, "--pp", 4, "-m", 12, "--json")
    assert code == 0, err


def test_a_pytorch_name_on_the_trade_off_is_marked(capsys):
    # pareto() keyed by the report's name (zbv-torch) and looked the row up by the name
    # listed (ZBVZeroBubble): a PyTorch name was never marked
    code, out, err = _run(capsys, "compare", "--schedules", "1f1b,ZBVZeroBubble", "--pp", 4, "-m", 8, "--json")
    assert code == 0, err
    rows = {r["schedule"]: r for r in json.loads(out)["schedules"]}
    one, zbv = rows["1f1b"], next(r for name, r in rows.items() if name != "1f1b")
    # at equal peak memory (4 stages each) the smaller bubble is on the front alone
    assert max(one["peak_activation_memory"]) == max(zbv["peak_activation_memory"])
    assert zbv["bubble_ratio"] < one["bubble_ratio"]
    assert (zbv["pareto"], one["pareto"]) == (True, False)


def test_an_unnamed_file_is_named_by_its_path(capsys, tmp_path, mine):
    doc = json.loads(mine.read_text())
    del doc["schedule"]
    unnamed = tmp_path / "unnamed.json"
    unnamed.write_text(json.dumps(doc))
    code, out, err = _run(capsys, "validate", "-s", unnamed)
    assert code == 0, err
    assert out.startswith(f"{unnamed}: pp=2, M=2")
    code, out, err = _run(capsys, "simulate", "-s", unnamed, "--json")
    assert code == 0, err
    assert json.loads(out)["schedule"] == str(unnamed)


def test_a_name_that_is_not_a_string_is_refused(capsys, tmp_path, mine):
    doc = json.loads(mine.read_text())
    for value, shown in ((None, "null"), (5, "5")):
        doc["schedule"] = value
        mine.write_text(json.dumps(doc))
        code, out, err = _run(capsys, "simulate", "-s", mine)
        _one_line(code, out, err)
        assert f"schedule must be the schedule's name, a string, got {shown}" in err


def test_the_ranks_ops_json_prints_are_sent_to_ops_o(capsys, tmp_path):
    code, out, err = _run(capsys, "ops", "--schedule", "1f1b", "--pp", 2, "-m", 2, "--json")
    assert code == 0, err
    printed = tmp_path / "s.json"
    printed.write_text(out)
    code, out, err = _run(capsys, "simulate", "--schedule", printed)
    _one_line(code, out, err)
    assert "pipesim ops -s NAME -o FILE.json writes one; ops --json prints the ranks only" in err
    from pipesim.parser import make_parser

    ops = make_parser()._subparsers._group_actions[0].choices["ops"]
    assert "the ranks only (-o writes a schedule file)" in ops._option_string_actions["--json"].help


def test_width_says_its_unit_in_help_and_errors(capsys):
    from pipesim.parser import make_parser

    commands = make_parser()._subparsers._group_actions[0].choices
    for name, unit in (
        ("simulate", "terminal columns"),
        ("compare", "terminal columns"),
        ("pair", "terminal columns"),
        ("draw", "inches"),
    ):
        assert unit in commands[name]._option_string_actions["--width"].help, name
    for argv, unit in (
        (["simulate", "-s", "1f1b", "--width", "-1"], "terminal columns"),
        (["compare", "--timelines", "--width", "-1"], "terminal columns"),
        (["pair", "--width", "0"], "terminal columns"),
        (["draw", "-s", "1f1b", "-o", "x.png", "--width", "0"], "inches"),
    ):
        code, out, err = _run(capsys, *argv)
        _one_line(code, out, err)
        assert unit in err, argv


def test_one_file_listed_by_two_paths_is_refused(capsys, tmp_path, mine, monkeypatch):
    # ./s.json and s.json were two rows (or lines) of the same file
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "sweep", "--schedules", "./s.json,s.json")
    _one_line(code, out, err)
    assert "s.json names the same file as ./s.json; give each schedule once" in err


def test_every_schedules_flag_says_it_takes_files():
    from pipesim.parser import make_parser

    commands = make_parser()._subparsers._group_actions[0].choices
    for name in ("compare", "sweep", "report", "draw"):
        assert "files" in commands[name]._option_string_actions["--schedules"].help, name


def test_a_sweep_of_files_alone_runs_each_at_its_own_m_and_refuses_a_range(capsys, tmp_path, mine):
    doc = json.loads(mine.read_text())
    doc["microbatches"], doc["ranks"] = (
        3,
        [["F0.0", "F0.1", "BW0.0", "F0.2", "BW0.1", "BW0.2"], ["F0.0", "BW0.0", "F0.1", "BW0.1", "F0.2", "BW0.2"]],
    )
    three = tmp_path / "three.json"
    three.write_text(json.dumps(doc))
    code, _, err = _run(capsys, "sweep", "--schedules", str(three), "--csv", tmp_path / "x.csv")
    assert code == 0, err
    assert "outside" not in err  # no range was asked for, and none was swept
    rows = list(csv.DictReader((tmp_path / "x.csv").open()))
    # 1F1B at pp=2, M=3: (3 + 1) slots of 3
    assert [(r["microbatches"], float(r["makespan"])) for r in rows] == [("3", 12.0)]
    for command in (["sweep", "-m", "8"], ["report", "-o", tmp_path / "r.html", "--sweep", "8"]):
        code, out, err = _run(capsys, *command, "--schedules", str(mine))
        _one_line(code, out, err)
        assert f"{mine} brings its own M" in err
    assert not (tmp_path / "r.html").exists()


def test_a_file_ops_writes_as_upper_case_json_is_read_back(capsys, tmp_path, monkeypatch):
    # ops -o S.JSON wrote it (extensions are read in any case there); simulate took the
    # name for a schedule's: "unknown schedule 'S.JSON'"
    monkeypatch.chdir(tmp_path)
    assert main(["ops", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", "S.JSON"]) == 0
    code, out, err = _run(capsys, "simulate", "-s", "S.JSON", "--json")
    assert code == 0, err
    assert json.loads(out)["makespan"] == 9.0


def test_a_broken_file_is_named_and_refused_wherever_it_is_read(capsys, tmp_path, mine):
    # an edited file that ops -o wrote declares "1f1b": the error said "invalid 1f1b
    # schedule", as if pipesim's 1f1b were wrong, and compare made it a row of n/a
    doc = json.loads(mine.read_text())
    doc["ranks"][0].append("F0.0")
    mine.write_text(json.dumps(doc))
    for argv in (["validate", "-s", mine], ["simulate", "-s", mine], ["draw", "-s", mine, "-o", tmp_path / "x.svg"]):
        code, out, err = _run(capsys, *argv)
        _one_line(code, out, err)
        assert f"{mine}: invalid 1f1b schedule: rank 0: F0.0 appears 2 times" in err, argv
    for argv in (["compare"], ["report", "-o", tmp_path / "r.html"], ["sweep"]):
        code, out, err = _run(capsys, *argv, "--schedules", f"{mine},1f1b")
        _one_line(code, out, err)
        assert f"invalid {mine} schedule: rank 0: F0.0 appears 2 times" in err, argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_a_file_counts_its_own_ops_against_the_reports_limit(capsys, tmp_path, mine, monkeypatch):
    import pipesim.render.commands as picture

    # the file has 8 ops (2 ranks x 2 micro-batches x F, BW); the names beside it are
    # counted as compare counts them, 3 ops x 2 chunks x pp x M = 24 for zb-h1
    monkeypatch.setattr(picture, "REPORT_MAX_OPS", 7)
    code, out, err = _run(capsys, "report", "--schedules", str(mine), "-o", tmp_path / "r.html")
    _one_line(code, out, err)
    assert "8 ops, above the limit of 7" in err
    monkeypatch.setattr(picture, "REPORT_MAX_OPS", 8 + 23)
    code, out, err = _run(capsys, "report", "--schedules", f"{mine},zb-h1", "-o", tmp_path / "r.html")
    _one_line(code, out, err)
    assert "up to 24 ops, above the limit of 23" in err
    monkeypatch.setattr(picture, "REPORT_MAX_OPS", 8 + 24)
    assert _run(capsys, "report", "--schedules", f"{mine},zb-h1", "-o", tmp_path / "r.html")[0] == 0


def test_files_count_together_against_the_limit_of_a_comparison_or_sweep(capsys, tmp_path, mine, monkeypatch):
    import pipesim.options as options

    twin = tmp_path / "t.json"
    twin.write_text(mine.read_text())
    monkeypatch.setattr(options, "MAX_OPS", 15)  # each file's 8 ops are within it, the two together not
    for command in (["compare"], ["sweep", "--csv", tmp_path / "x.csv"]):
        code, out, err = _run(capsys, *command, "--schedules", f"{mine},{twin}")
        _one_line(code, out, err)
        assert f"{mine}, {twin} have 16 ops, above the limit of 15" in err, command


def test_an_unknown_name_is_said_before_any_file_is_read(capsys, tmp_path):
    # the file is read whole first (up to 24M ops): a typo beside it waited for that
    missing = tmp_path / "missing.json"
    for command in (["compare"], ["sweep"], ["report", "-o", tmp_path / "r.html"], ["draw", "-o", tmp_path / "x.svg"]):
        code, out, err = _run(capsys, *command, "--schedules", f"{missing},1f1bb")
        _one_line(code, out, err)
        assert "unknown schedule '1f1bb' (did you mean 1f1b?)" in err, command


def test_a_pytorch_csv_given_as_a_schedule_names_the_import_that_reads_it(capsys, tmp_path, monkeypatch):
    # export writes PyTorch's CSV; `export -s dpv.csv` (and simulate's, compare's) said only
    # "unknown schedule": the line names the import that makes a schedule file of it
    monkeypatch.chdir(tmp_path)
    assert main(["export", "-s", "dualpipev", "--pp", "2", "-m", "4", "-o", "dpv.csv"]) == 0
    capsys.readouterr()
    for argv in (["export", "-s", "dpv.csv"], ["simulate", "-s", "dpv.csv"], ["compare", "--schedules", "1f1b,dpv.csv"]):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["dpv.csv"]
        assert "unknown schedule 'dpv.csv'" in err and "pipesim import --csv dpv.csv -o s.json" in err
    # the import so named reads it
    assert main(["import", "--csv", "dpv.csv", "-o", "s.json"]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["pp"] == 2


def test_a_pytorch_csv_by_path_or_to_run_names_the_import_too(capsys, tmp_path, monkeypatch):
    # -s ./dpv.csv (a path: read as JSON) said only "not valid JSON", and run --schedules
    # only "unknown schedule", where -s dpv.csv named the import that reads the file
    monkeypatch.chdir(tmp_path)
    assert main(["export", "-s", "dualpipev", "--pp", "2", "-m", "4", "-o", "dpv.csv"]) == 0
    capsys.readouterr()
    for argv, said in (
        (["simulate", "-s", "./dpv.csv"], "./dpv.csv: not valid JSON"),
        (["run", "--schedules", "dpv.csv,1f1b"], "unknown schedule 'dpv.csv'"),
    ):
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["dpv.csv"]
        name = argv[2].split(",")[0]
        assert said in err and f"{name} looks like PyTorch's CSV: pipesim import --csv {name} -o s.json" in err, err


def test_a_gzipped_csv_is_told_to_be_decompressed(capsys, tmp_path, monkeypatch):
    # it read "not UTF-8 text (byte 1 is b'\x8b'); save it as UTF-8", which no re-save fixes
    import gzip

    monkeypatch.chdir(tmp_path)
    assert main(["export", "-s", "dualpipev", "--pp", "2", "-m", "4", "-o", "dpv.csv"]) == 0
    capsys.readouterr()
    (tmp_path / "dpv.csv.gz").write_bytes(gzip.compress((tmp_path / "dpv.csv").read_bytes()))
    (tmp_path / "dpv.csv").unlink()
    assert main(["import", "--csv", "dpv.csv.gz", "-o", "s.json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and sorted(p.name for p in tmp_path.iterdir()) == ["dpv.csv.gz"]
    assert "dpv.csv.gz: gzip-compressed, not text; decompress it first (gunzip -c dpv.csv.gz > dpv.csv)" in err, err
