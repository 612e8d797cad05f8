"""Issue 23, the last of it: large outputs are written as they are made (a schedule's
ranks one at a time, export's CSV a rank at a time) and come out the same as the whole
text did; a trace's text is bounded in total, a gzipped one by what it decompresses to.
What that saves at the work limit is measured in docs/limits.md (benchmarks/limits.py)."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from pipesim import REGISTRY, build
from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.files import FORMAT, Stream, json_text, load_schedule, schedule_document, write_json
from pipesim.profile import trace
from pipesim.runtime import torch_export
from pipesim.runtime.torch_export import to_torch_rows, torch_action, torchtitan_hint, why_not_torch


def dumped(doc: dict) -> str:
    """The text ``json.dumps`` writes for a document pipesim writes (the peer)."""
    return json.dumps({"format": FORMAT, **doc}, indent=1) + "\n"


def test_a_stream_is_written_as_json_dumps_writes_its_list():
    rows = [["F0.0", "F0.1&B0.0"], [], ["W0.3"]]
    doc = {"a": 1.5, "n": None, "ranks": Stream(3, rows.__getitem__), "nested": {"x": [[1, 2], {"y": True}], "e": {}}}
    assert json_text(doc) == dumped({**doc, "ranks": rows})
    assert json_text({"ranks": Stream(0, rows.__getitem__)}) == dumped({"ranks": []})


def test_keys_that_are_not_strings_are_written_as_json_dumps_writes_them():
    doc = {"t": {7: "seven", 2.5: [1, {"k": 2}], True: "yes", None: "no"}}
    assert json_text(doc) == dumped(doc)
    # not finite: null, as everywhere pipesim writes
    assert json.loads(json_text({"x": [float("nan"), float("inf")], "s": Stream(1, lambda i: [float("inf")])})) == {
        "format": FORMAT,
        "x": [None, None],
        "s": [[None]],
    }


@pytest.mark.parametrize("name", ["zb-h1", "dualpipe", "interleaved-1f1b", "zb-v"])
def test_a_schedule_file_written_a_rank_at_a_time_is_the_whole_document(tmp_path, name):
    s = build(name, 4, 8)
    path = tmp_path / "s.json"
    write_json(path, schedule_document(s))
    assert path.read_text() == dumped(s.to_dict())
    assert load_schedule(path).ranks == s.ranks


def test_a_stream_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("old")

    def element(i):
        if i == 2:
            raise PipesimError("rank 2 cannot be written")
        return ["F0.0"]

    with pytest.raises(PipesimError, match="rank 2"):
        write_json(path, {"ranks": Stream(4, element)})
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["s.json"]  # no temporary file left


@pytest.mark.parametrize(
    "argv",
    [["simulate", "-s", "zb-v", "--pp", "4", "-m", "8", "--json"], ["ops", "-s", "dualpipe", "--pp", "4", "-m", "8", "--json"]],
)
def test_json_on_stdout_lists_every_rank(capsys, argv):
    assert main(argv) == 0
    ranks = json.loads(capsys.readouterr().out)["ranks"]
    assert ranks == build(argv[2], 4, 8).to_notation()


# --------------------------------------------------------------------------------------
# export: the arrays give what the per-item path gives


def test_export_rows_from_the_arrays_match_the_action_of_each_item():
    """``to_torch_rows`` reads the schedule's arrays; ``torch_action`` prices one item
    through the placement's own ``stage_of``. Every schedule PyTorch can run, pairs
    (dualpipev) and V and looped placements among them, gives the same rows both ways."""
    checked = 0
    for name in REGISTRY:
        try:
            s = build(name, 4, 8)
        except PipesimError:
            continue
        if why_not_torch(s) is not None:
            continue
        expected = [[torch_action(s, r, item) for item in items] for r, items in enumerate(s.ranks)]
        assert to_torch_rows(s) == expected, name
        checked += 1
    assert checked >= 8


def test_export_refuses_losses_out_of_order_from_the_arrays():
    s = build("1f1b", 2, 4)
    last = list(s.ranks[1])
    f1, f2 = last.index(next(op for op in last if str(op) == "F0.1")), last.index(next(op for op in last if str(op) == "F0.2"))
    last[f1], last[f2] = last[f2], last[f1]
    swapped = type(s)(s.name, s.pp, s.microbatches, s.placement, (s.ranks[0], tuple(last)))
    assert "forward of micro-batch 1 after 2" in why_not_torch(swapped)


def test_an_export_past_the_match_bound_is_not_compared_with_the_classes(monkeypatch):
    s = build("1f1b", 4, 8)
    assert 'pipeline_parallel_schedule = "1F1B" runs this order exactly' in torchtitan_hint(s)
    monkeypatch.setattr(torch_export, "MAX_MATCH_OPS", s.num_ops - 1)
    hint = torchtitan_hint(s)
    assert f"at {s.num_ops} ops (above {s.num_ops - 1}) the order is not compared" in hint
    assert 'pipeline_parallel_schedule_csv = "schedule.csv"' in hint


@pytest.mark.parametrize("name", ["x.json", "x.toml", "x"])
def test_export_refuses_an_output_that_is_no_csv(capsys, tmp_path, name):
    """export writes PyTorch's compute-only CSV whatever -o is called: -o x.json wrote CSV
    text into x.json, where every other -o refuses an extension it does not write."""
    out = tmp_path / name
    assert main(["export", "-s", "1f1b", "--pp", "2", "-m", "4", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown extension" in err and ".csv" in err, err
    assert not out.exists()


def test_export_writes_the_same_csv_to_a_file_and_to_stdout(capsys, tmp_path):
    out = tmp_path / "o.csv"
    assert main(["export", "-s", "dualpipev", "--pp", "4", "-m", "8", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["export", "-s", "dualpipev", "--pp", "4", "-m", "8"]) == 0
    text = capsys.readouterr().out
    assert out.read_text() == text
    assert text.splitlines()[0].split(",") == to_torch_rows(build("dualpipev", 4, 8))[0]


# --------------------------------------------------------------------------------------
# traces: the text is bounded in total, gzipped or not


EVENT = '{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 5, "args": {"correlation": 1}}'


def trace_text(events: int) -> bytes:
    return ('{"traceEvents": [' + ",\n".join([EVENT] * events) + "]}").encode()


def one_line(capsys, argv, needle):
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipesim: error: ") and needle in err, err
    return err


@pytest.fixture
def small_limit(monkeypatch):
    """The trace limit at 100 KB, so that a file past it is small enough for a test."""
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", 100_000)
    return 100_000


def test_a_trace_under_the_limit_reads_whole_gzipped_or_not(tmp_path, small_limit):
    text = trace_text(600)  # about 70 KB
    assert len(text) < small_limit
    (tmp_path / "t.json").write_bytes(text)
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(text))
    assert len(trace.read_trace(tmp_path / "t.json").kernels) == 600
    assert len(trace.read_trace(tmp_path / "t.json.gz").kernels) == 600


def test_a_plain_trace_past_the_limit_is_refused_by_its_size(capsys, tmp_path, small_limit):
    (tmp_path / "t.json").write_bytes(trace_text(1000))
    one_line(capsys, ["profile", tmp_path / "t.json"], "beyond the limit of 100,000")


def test_a_gzip_bomb_is_refused_by_its_trailer_before_it_is_decompressed(capsys, tmp_path, small_limit, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    text = trace_text(1000)
    path.write_bytes(gzip.compress(text))  # 113 KB of text in 1 KB
    assert path.stat().st_size < 2000
    opened = []
    monkeypatch.setattr(trace.gzip, "open", lambda *a, **k: opened.append(a))
    one_line(capsys, ["profile", path], f"its gzip trailer gives {len(text):,} bytes decompressed")
    assert not opened  # refused before any decompression


def test_a_gzip_bomb_that_hides_its_size_is_refused_as_it_decompresses(capsys, tmp_path, small_limit, monkeypatch):
    """A file of two gzip members whose last is tiny: its trailer gives that member's
    size only, so the bytes are counted as they are decompressed; the refusal comes at
    the limit, not at the end of the file."""
    text = trace_text(3000)  # 350 KB
    head, tail = text[:-100], text[-100:]
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(head) + gzip.compress(tail))
    assert int.from_bytes(path.read_bytes()[-4:], "little") == 100
    err = one_line(capsys, ["profile", path], "decompresses to more than the limit of 100,000 bytes of trace text")
    assert "about a minute" in err
    # the two members together are read as one trace when under the limit
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", len(text))
    assert len(trace.read_trace(path).kernels) == 3000


# --------------------------------------------------------------------------------------
# searched builders that are Python per op have their own work limit (compare --pp 2 at
# the work limit ran 86 s of CPU, most of it zb-auto and v-min's search)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["simulate", "-s", "zb-auto", "--pp", "4", "-m", "100000"], "zb-auto too large: pp=4, M=100000"),
        (["simulate", "-s", "zb-h2", "--pp", "64", "-m", "50000"], "above the limit of 8,000,000 (about 30 s in its search)"),
        (["ops", "-s", "v-min", "--pp", "2", "-m", "100000"], "v-min's searched order too large"),
    ],
)
def test_searched_builders_refuse_what_they_cannot_search_in_time(capsys, argv, needle):
    one_line(capsys, argv, needle)


def test_a_comparison_at_the_limit_reports_the_refused_builders_and_goes_on(capsys):
    assert main(["compare", "--pp", "2", "-m", "200000", "--schedules", "1f1b,zb-auto", "--json"]) == 0
    rows = {r["schedule"]: r for r in json.loads(capsys.readouterr().out)["schedules"]}
    assert "above the limit of 1,000,000" in rows["zb-auto"]["error"]
    assert rows["1f1b"]["makespan"] > 0


def test_a_csv_of_too_many_rows_is_refused_before_its_cells_are_read(capsys, tmp_path):
    """200,000 rows took 9 s to parse before their number was checked; the cells here
    are not even actions, and the ranks are what is refused."""
    (tmp_path / "c.csv").write_text("zzz,zzz\n" * 200_000)
    one_line(capsys, ["import", "--csv", tmp_path / "c.csv"], "pp=200,000 is above the limit of 100,000 ranks")


def test_run_refuses_a_profile_over_its_schedule_before_importing_torch(capsys, tmp_path, monkeypatch):
    """The check ran after torch's import (4-7 s): a refusal took 9 s."""
    from pipesim.runtime import commands

    def no_torch():
        raise AssertionError("torch imported before the outputs were checked")

    monkeypatch.setattr(commands, "_torch", no_torch)
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "rank0.json").write_text(json.dumps(build("1f1b", 2, 2).to_dict()))
    monkeypatch.chdir(tmp_path)
    one_line(
        capsys, ["run", "-s", "prof/rank0.json", "--profile", "prof", "--synthetic", "--pp", "2"], "would overwrite the input"
    )


def test_run_profile_into_the_folder_of_a_previous_run_is_not_refused(tmp_path, monkeypatch):
    """The folder's traces are the previous run's outputs, not this run's inputs: the
    second of two identical commands was refused ('--profile prof/rank0.json would
    overwrite the input --argv prof/rank0.json') because the folder named on the
    command line counted as an input."""
    from pipesim.runtime import commands

    class Reached(Exception):
        pass

    def reached():
        raise Reached  # every check before the launch passed

    monkeypatch.setattr(commands, "_torch", reached)
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "rank0.json").write_text('{"traceEvents": []}')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Reached):
        main(["run", "-s", "zb-h1", "--pp", "2", "-m", "4", "--profile", "prof", "--synthetic"])
