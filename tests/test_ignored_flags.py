"""A flag a command would accept and then not use is refused in one line (exit 2, nothing
written), so that no one reads an output as shaped by a flag that shaped nothing."""

from __future__ import annotations

import json

import pytest

from pipesim import build, simulate
from pipesim.cli import main
from pipesim.files import timeline_to_dict
from pipesim.timeline import Event, Timeline


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def measured_file(tmp_path):
    """A measured 1F1B run at pp=2, M=1 in seconds, as pipesim profile --timeline writes it:
    F 20 ms on each rank, then BW 40 ms back."""
    s = build("1f1b", 2, 1)
    times = {(0, "F0.0"): (0.0, 0.02), (1, "F0.0"): (0.02, 0.04), (1, "BW0.0"): (0.04, 0.08), (0, "BW0.0"): (0.08, 0.12)}
    events = tuple(tuple(Event(r, it, *times[(r, str(it))]) for it in s.ranks[r]) for r in range(2))
    path = tmp_path / "tl.json"
    path.write_text(json.dumps(timeline_to_dict(s, Timeline(2, events, (), source="measured"))))
    return path


def test_a_measured_trace_is_in_seconds(capsys, tmp_path):
    # the Chrome trace format counts microseconds: 0.12 s is 120000, where the default
    # cost-model unit (us) wrote 0.12
    tl, out = measured_file(tmp_path), tmp_path / "t.json"
    assert run(capsys, "draw", "--measured", tl, "-o", out)[0] == 0
    spans = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert max(e["ts"] + e["dur"] for e in spans) == pytest.approx(120000)
    assert "costs" not in json.loads(out.read_text())["otherData"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--pp", "4"], "drop --pp"),
        (["-m", "8"], "drop --microbatches"),
        (["--f", "2"], "drop the cost flags"),
        (["--preset", "ep-1to1"], "drop the cost flags"),
        # a cost equal to the default priced nothing either; compared with Costs() it passed
        (["--f", "1"], "drop the cost flags"),
        (["--comm", "0"], "drop the cost flags"),
        # a component modifier: costs_from's refusal asked for a forward time to go with it
        (["--layers", "3"], "drop the cost flags"),
        (["--time-unit", "ms", "-o", "t.json"], "a measured timeline is in seconds"),
    ],
)
def test_measured_timelines_refuse_what_shapes_a_simulated_one(capsys, tmp_path, monkeypatch, extra, needle):
    monkeypatch.chdir(tmp_path)
    tl = measured_file(tmp_path)
    code, out, err = run(capsys, "draw", "--measured", tl, "-o", "c.png", *extra)
    assert code == 2 and needle in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tl.json"]


def test_time_unit_without_a_trace_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "draw", "-s", "1f1b", "--pp", 2, "-m", 2, "-o", tmp_path / "c.png", "--time-unit", "ms")
    assert code == 2 and "--time-unit sets what one time unit is in a Chrome trace" in err
    assert list(tmp_path.iterdir()) == []


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started")


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--tolerance", "1e-3"], "--tolerance sets what --check passes; add --check"),
        (["--width", "50"], "--width squeezes the drawn timeline; add --timeline"),
        (["--json", "--timeline"], "--json prints each measured timeline as data, --timeline draws it"),
        (["--input-shape", "4,16"], "--input-shape is the input of a list of layers (--model MODULE:NAME)"),
        (["--model", "somewhere:layers", "--dim", "64"], "--dim shapes --model tiny or moe"),
        (["--model", "somewhere:layers", "--layers", "3"], "--layers shapes --model tiny or moe"),
        (["--serial-pairs"], "--serial-pairs splits overlapped F&B pairs, and 1f1b runs none: drop it"),
    ],
)
def test_run_refuses_flags_it_would_not_use_before_any_process(capsys, monkeypatch, extra, needle):
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code, out, err = run(capsys, "run", "-s", "1f1b", "--pp", 2, "-m", 2, *extra)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1


def test_run_refuses_an_input_shape_for_a_stage_model(capsys, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "stagemod.py").write_text(
        "from pipesim.runtime.model import TinyTransformer\nstage = TinyTransformer(dim=16, layers_per_stage=1)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code, _, err = run(capsys, "run", "-s", "1f1b", "--pp", 2, "-m", 2, "--model", "stagemod:stage", "--input-shape", "4,16")
    assert code == 2 and "is a stage model, whose microbatch() makes its input: drop --input-shape" in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["simulate", "-s", "1f1b", "--json", "--width", "40"], "--width squeezes the terminal timeline, which --json drops"),
        (["simulate", "-s", "1f1b", "--no-timeline", "--width", "40"], "which --no-timeline drops"),
        (["compare", "--width", "40"], "--width squeezes the timelines --timelines draws; add --timelines"),
        (["compare", "--json", "--timelines"], "--json prints the metrics only, --timelines draws each timeline"),
        # pair took the per-chunk cost flags and priced the ep-1to1 preset whatever they said
        (["pair", "--f", "5"], "unrecognized arguments: --f 5"),
        (["pair", "--costs-per", "stage"], "unrecognized arguments: --costs-per stage"),
        (["pair", "--json", "--width", "50"], "--width sets the terminal picture's columns, which --json drops"),
        (["pair", "--json", "-o", "p.png"], "-o draws the pair as a chart, without --json"),
        (["pair", "--width", "50", "-o", "p.png"], "-o draws the pair as a chart, without --width"),
    ],
)
def test_terminal_flags_with_outputs_that_drop_them(capsys, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and needle in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["compare", "--pp", 4, "-m", 8, "--schedules", "1f1b,zb-h1", "--chunks", 3],
        ["sweep", "--pp", 4, "-m", "8:16", "--schedules", "1f1b,zb-h1", "--chunks", 3],
        ["report", "--pp", 4, "-m", 8, "--schedules", "1f1b,zb-h1", "--chunks", 3, "-o", "r.html"],
        ["draw", "--pp", 4, "-m", 8, "--schedules", "1f1b,zb-h1", "--chunks", 3, "-o", "d.svg"],
        ["run", "--pp", 2, "-m", 2, "--schedules", "1f1b,zb-h1", "--chunks", 3],
    ],
)
def test_a_builder_option_no_listed_schedule_takes_is_refused(capsys, tmp_path, monkeypatch, argv):
    # --chunks went to the schedules that take it, and with none of them listed, nowhere
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--chunks is an option of interleaved-1f1b, interleaved-1f1b-overlap, looped-bfs, interleaved-zb" in err
    assert "none of 1f1b, zb-h1 takes it" in err and list(tmp_path.iterdir()) == []


def test_sweep_takes_the_builder_options_its_siblings_take(capsys, tmp_path):
    # sweep had --chunks only: --delay-wgrad and --group-size were unknown there. With
    # --delay-wgrad each W of combined 1F1B is an op of its own (Megatron's
    # --delay-wgrad-compute); the sweep's makespan is simulate's for the same order
    csv = tmp_path / "s.csv"
    assert run(capsys, "sweep", "--pp", 4, "-m", "8:8", "--schedules", "1f1b-overlap", "--delay-wgrad", "-o", csv)[0] == 0
    out = csv.read_text()
    _, sim, _ = run(capsys, "simulate", "-s", "1f1b-overlap", "--pp", 4, "-m", 8, "--delay-wgrad", "--json")
    row = dict(zip(*[line.split(",") for line in out.strip().splitlines()[:2]]))
    assert float(row["makespan"]) == json.loads(sim)["makespan"]


def test_import_takes_no_builder_options(capsys, tmp_path):
    # PyTorch's classes and a CSV bring their own order: --group-size and --delay-wgrad
    # were accepted and changed nothing (--chunks is the stages per rank of a class)
    code, _, err = run(capsys, "import", "--torch", "DualPipeV", "--pp", 4, "-m", 8, "--group-size", 2, "-o", tmp_path / "x.json")
    assert code == 2 and "unrecognized arguments: --group-size 2" in err
    csv = tmp_path / "s.csv"
    csv.write_text("0F0,0B0\n1F0,1B0\n")
    code, _, err = run(capsys, "import", "--csv", csv, "--stages-per-rank", 3, "-o", tmp_path / "y.json")
    assert code == 2 and "--chunks sets a PyTorch class's stages per rank (--torch); a CSV names its own" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


def test_run_of_several_schedules_gives_each_its_builder_options(capsys, monkeypatch):
    # run --schedules passed --chunks alone: combined 1F1B ran without --delay-wgrad, unsaid
    pytest.importorskip("torch")
    ran = []

    def fake(jobs, **kwargs):
        ran.extend(j.schedule for j in jobs)
        return None  # as a torchrun rank other than 0 returns: nothing to report

    monkeypatch.setattr("pipesim.runtime.api.execute_many", fake)
    assert run(capsys, "run", "--schedules", "1f1b-overlap,1f1b", "--pp", 2, "-m", 2, "--delay-wgrad")[0] == 0
    # with the W split off, each of the 2 micro-batches' backwards on each of the 2 ranks
    # adds a W op: 8 ops (F and BW per micro-batch and rank) become 12
    assert [s.num_ops for s in ran] == [12, 8]


def test_a_measured_terminal_timeline_says_its_axis_is_seconds(tmp_path):
    # pipesim run --timeline drew an axis of 0, 0.002, 0.004 ... with no unit
    from rich.console import Console

    from pipesim.files import load_timeline
    from pipesim.render.terminal import print_timeline

    s, tl = load_timeline(measured_file(tmp_path))
    out = Console(record=True, width=200)
    print_timeline(out, s, tl, 80)
    assert "time in seconds, measured" in out.export_text()
    out = Console(record=True, width=200)
    print_timeline(out, s, simulate(s), 80)
    assert "seconds" not in out.export_text()


def test_profile_flags_with_json_is_refused(capsys, tmp_path):
    # --flags won and --json was dropped, unsaid
    code, out, err = run(capsys, "profile", tmp_path, "--flags", "--json")
    assert code == 2 and out == "" and "--flags prints the per-stage costs as flags, --json everything" in err


def test_run_refuses_a_synthetic_list_of_the_wrong_length_before_any_process(capsys, monkeypatch):
    # it failed inside rank 2, after the launch: "rank 2 raised PipesimError at F0.0", exit 1
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code, out, err = run(capsys, "run", "-s", "zb-h1", "--pp", 4, "-m", 4, "--synthetic", "--f", "1,2")
    assert code == 2 and err == "pipesim: error: --f lists 2 values, but zb-h1 has 4 stages: give one value, or one per stage\n"


def test_compare_with_a_model_refuses_costs_per(capsys):
    # the model prices each schedule's chunks by what they hold; --costs-per stage changed nothing
    code, out, err = run(capsys, "compare", "--model", "llama3-8b", "--cluster", "h100", "--pp", 4, "--costs-per", "stage")
    assert code == 2 and out == "" and "--model prices each chunk by the layers it holds" in err


def test_layers_beside_a_cost_file_with_memory_is_refused(capsys, tmp_path):
    # the times took --layers 8 while the [memory] sizes stayed the file's 4 layers a chunk:
    # simulate printed the same memory for twice the layers
    toml = tmp_path / "c.toml"
    toml.write_text("layers = 4\n[layer]\nattn_f = 1.0\nmlp_f = 1.0\n[memory]\nhidden = 4096\nheads = 32\nseq = 4096\n")
    argv = ["simulate", "-s", "1f1b", "--pp", 2, "-m", 2, "--components", toml, "--no-timeline"]
    assert run(capsys, *argv, "--layers", 4)[0] == 0
    code, out, err = run(capsys, *argv, "--layers", 8)
    assert code == 2 and out == "" and "--layers 8 overrides" in err and "layers = 4" in err


def test_compare_refuses_a_memory_limit_that_drops_every_schedule(capsys):
    # it printed an empty table and exit 0; 1F1B and ZB-H1 at pp=4 hold pp = 4 stages'
    # activations on rank 0 (docs/schedules.md), over a limit of 1
    code, out, err = run(capsys, "compare", "--pp", 4, "-m", 8, "--memory-limit", 1, "--schedules", "1f1b,zb-h1")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no schedule of 1f1b, zb-h1 fits --memory-limit 1 stages at pp=4, M=8: the least peak is 4 stages" in err


def test_import_csv_with_another_microbatch_count_says_so(capsys, tmp_path):
    # a CSV of micro-batches 0 and 1 at -m 1 was "not a valid schedule: ... names
    # micro-batch 1, but there is 1" and a count of problems; --pp is refused in one line
    csv = tmp_path / "s.csv"
    csv.write_text("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n")
    assert run(capsys, "import", "--csv", csv, "-m", 2, "-o", tmp_path / "ok.json")[0] == 0
    code, _, err = run(capsys, "import", "--csv", csv, "-m", 1, "-o", tmp_path / "x.json")
    assert (
        code == 2 and err == "pipesim: error: --microbatches 1 disagrees with the CSV's 2 micro-batches (0..1); drop the flag\n"
    )
    assert not (tmp_path / "x.json").exists()


def test_ops_and_validate_take_zb_autos_costs(capsys):
    # ops gave zb-auto's order for unit costs only; simulate and export took its costs.
    # With W cheap and a P2P latency its order differs from the unit-cost one (rank 1
    # below), and ops now prints the order simulate runs
    costs = ["--f", 1, "--b", 1, "--w", 0.2, "--comm", 0.5]
    _, sim, _ = run(capsys, "simulate", "-s", "zb-auto", "--pp", 4, "-m", 8, *costs, "--json")
    code, out, _ = run(capsys, "ops", "-s", "zb-auto", "--pp", 4, "-m", 8, *costs)
    assert code == 0
    shown = [line.split(": ", 1)[1].split() for line in out.strip().splitlines()]
    assert shown == json.loads(sim)["ranks"]
    unit = [line.split(": ", 1)[1].split() for line in run(capsys, "ops", "-s", "zb-auto", "--pp", 4, "-m", 8)[1].splitlines()]
    assert unit != shown
    assert run(capsys, "validate", "-s", "zb-auto", "--pp", 4, "-m", 8, *costs)[0] == 0


@pytest.mark.parametrize("command", ["ops", "validate"])
def test_ops_and_validate_refuse_costs_that_order_nothing(capsys, tmp_path, command):
    code, _, err = run(capsys, command, "-s", "1f1b", "--f", 2)
    assert code == 2 and "--f orders zb-auto, whose builder takes costs; 1f1b is built without them: drop it" in err
    path = tmp_path / "s.json"
    assert run(capsys, "ops", "-s", "1f1b", "--pp", 2, "-m", 2, "-o", path)[0] == 0
    code, _, err = run(capsys, command, "-s", path, "--comm", 1)
    assert code == 2 and "a schedule file brings its order: drop it" in err
