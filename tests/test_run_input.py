"""``pipesim run`` refusing bad input before any rank process starts: one line, exit 2,
nothing written. No test here launches a rank (``launch`` is replaced by one that fails
the test), so they run in seconds."""

from __future__ import annotations

import os
import sys

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started")


def _refused(argv, capsys) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


SYNTHETIC = ["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--synthetic", "--f", "1ms", "--b", "1ms", "--w", "1ms"]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no one may make a folder")
@pytest.mark.parametrize("folder", ["/proc/pipesim-traces", "/proc/pipesim-traces/run1", "/proc"])
def test_a_profile_folder_no_one_can_write_is_refused_before_the_run(folder, capsys, monkeypatch):
    """/proc takes no new folder or file, even from root, for whom os.access says yes to
    everything: the run went ahead and every rank failed to save its trace after the
    whole run (exit 1, 'rank 0 raised FileNotFoundError ... <frozen os>')."""
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    err = _refused([*SYNTHETIC, "--profile", folder], capsys)
    assert f"--profile {folder}: cannot write traces to" in err, err
    assert not os.path.exists("/proc/pipesim-traces")


def test_the_write_check_leaves_nothing_in_a_writable_folder(tmp_path, capsys, monkeypatch):
    """The check writes and takes back: a later refusal (too many ranks) finds the
    folder as it was, empty, and a folder that did not exist still does not."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setenv("PIPESIM_MAX_RANKS", "2")
    argv = ["run", "-s", "1f1b", "--pp", "4", "-m", "4", "--synthetic"]
    assert "needs 4 processes" in _refused([*argv, "--profile", str(tmp_path)], capsys)
    assert list(tmp_path.iterdir()) == []
    assert "needs 4 processes" in _refused([*argv, "--profile", str(tmp_path / "new" / "run")], capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "source, model, says",
    [
        # a sys.exit while the module loads ended pipesim with the module's status, silently
        ("raise SystemExit(3)\n", "exits:Model", "--model exits:Model: importing exits failed: it called sys.exit(3)"),
        ("import sys\ndef Model():\n    sys.exit('no')\n", "exits:Model", "calling Model() failed: it called sys.exit('no')"),
        # an empty list was "a Sequential, not a model", of what is one
        ("from torch import nn\nModel = nn.Sequential()\n", "exits:Model", "--model exits:Model is an empty Sequential"),
        # ':X' was "importing  failed: ValueError: Empty module name"
        ("", ":Model", "--model ':Model' lacks its module: give MODULE:NAME"),
        ("", "exits:", "--model 'exits:' lacks its name: give MODULE:NAME"),
    ],
)
def test_a_user_model_that_cannot_be_had_is_one_line(source, model, says, capsys, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "exits.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "exits", raising=False)
    err = _refused(["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--model", model], capsys)
    assert says in err, err


def _help_of(argv, flag, capsys) -> str:
    """The help text of one flag, its wrapped lines joined."""
    with pytest.raises(SystemExit):
        main([*argv, "--help"])
    text = capsys.readouterr().out
    entry = text.split(f"\n  {flag}", 1)[1].split("\n  -", 1)[0]
    return " ".join(entry.split())


def test_each_timeline_flag_says_whether_it_takes_a_file(capsys):
    """run --timeline is a switch, profile --timeline takes a file: the help said "draw
    each measured timeline" and "write the measured timeline", so `run --timeline tl.json`
    looked right and failed on 'unrecognized arguments: tl.json'. Each now says which it is
    and names the other."""
    run = _help_of(["run"], "--timeline", capsys)
    assert run.startswith("draw each measured timeline in the terminal (a switch, no file"), run
    assert "pipesim profile DIR --timeline FILE.json" in run
    prof = _help_of(["profile"], "--timeline", capsys)
    assert prof.startswith("FILE.json write the measured timeline to FILE.json"), prof
    assert "run --timeline is the switch that draws in the terminal" in prof


def test_import_of_a_class_and_a_csv_at_once_says_both_were_given(tmp_path, capsys):
    """--torch X --csv F was answered 'give --torch CLASS ... or --csv FILE', as if
    neither had been given."""
    csv = tmp_path / "o.csv"
    csv.write_text("0F0,0B0\n")
    out = tmp_path / "o.json"
    err = _refused(["import", "--torch", "GPipe", "--csv", str(csv), "-o", str(out)], capsys)
    assert "--torch and --csv each name the order to read: give one of them, not both" in err
    assert not out.exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no one may make a folder")
def test_the_library_refuses_a_profile_folder_no_one_can_write_when_the_job_is_made():
    """execute_many ran the whole schedule, then raised RunFailed naming '<frozen os>'."""
    pytest.importorskip("torch")
    from pipesim import Costs, build
    from pipesim.errors import PipesimError
    from pipesim.runtime import job

    with pytest.raises(PipesimError, match=r"^profile='/proc/pipesim-traces': cannot write traces to '/proc/pipesim-traces'"):
        job(build("1f1b", 2, 2), synthetic=Costs(f=0.001, b=0.001, w=0.001), profile="/proc/pipesim-traces")


def test_a_schedule_named_with_dots_keeps_its_traces_inside_the_profile_folder(tmp_path, capsys, monkeypatch):
    """--schedules FILE,1f1b --profile out writes out/NAME/rank{r}.json; a schedule file
    named '..' wrote out/../rank0.json, in the folder above, over whatever was there."""
    pytest.importorskip("torch")
    import json

    from pipesim import build

    given = {}

    def record(jobs, **kwargs):  # what the ranks would be told; None: rank 0 reports elsewhere
        given.update({j.schedule.name: j.profile for j in jobs})
        return None

    monkeypatch.setattr("pipesim.runtime.api.execute_many", record)
    monkeypatch.chdir(tmp_path)
    d = build("zb-h1", 2, 2).to_dict()
    for name, file in (("..", "dots.json"), (".", "dot.json")):
        (tmp_path / file).write_text(json.dumps({**d, "schedule": name}))
    argv = ["run", "--schedules", "dots.json,dot.json,1f1b", "--pp", "2", "-m", "2", "--synthetic", "--profile", "out"]
    assert main(argv) == 0
    assert given == {"..": os.path.join("out", "__"), ".": os.path.join("out", "_"), "1f1b": os.path.join("out", "1f1b")}


def test_a_folder_where_a_ranks_trace_goes_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """out/rank0.json a folder: rank 0 failed to rename its trace over it after the whole
    run (IsADirectoryError, exit 1), and rank 1's trace was written, half a run saved."""
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "rank0.json").mkdir()
    err = _refused([*SYNTHETIC, "--profile", str(tmp_path)], capsys)
    assert f"{str(tmp_path / 'rank0.json')!r} is a folder, where rank 0's trace goes" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.json"]


@pytest.mark.parametrize("value", ["abc", "0", "-3", "1.5", "²"])
def test_a_rank_limit_that_is_no_count_is_refused_not_ignored(value, capsys, monkeypatch):
    """PIPESIM_MAX_RANKS=abc (or 0, -3) fell back to the machine's own limit unsaid."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setenv("PIPESIM_MAX_RANKS", value)
    err = _refused(SYNTHETIC, capsys)
    assert f"PIPESIM_MAX_RANKS={value!r}: expected a whole number of rank processes >= 1" in err, err


# nn.TransformerEncoderLayer(d, 2 heads, feed-forward 2d), torch/nn/modules/transformer.py:
# in_proj 3d x d + 3d, out_proj d x d + d, linear1 2d x d + 2d, linear2 d x 2d + d, two
# LayerNorms 2d each: 8 d^2 + 11 d parameters, 8 bytes each in float64
TINY_64 = (8 * 64 * 64 + 11 * 64) * 8


class Launched(Exception):
    pass


def _launched(*args, **kwargs):
    raise Launched


@pytest.mark.parametrize(
    "check, need",
    [
        # 1f1b at pp=2: each rank holds one stage, its parameters and their gradients
        (False, 2 * 2 * TINY_64),
        # --check: every rank also builds the whole model, its gradients and their clones
        (True, 2 * 2 * TINY_64 + 2 * 3 * 2 * TINY_64),
    ],
)
def test_a_model_larger_than_free_memory_is_refused_before_any_process(check, need, capsys, monkeypatch):
    """--dim 100000 failed in the ranks after the launch (a 240 GB allocation); sizes that
    fit the machine's address space but not its memory were allocated for real until the
    kernel killed a process. The floor (parameters and gradients) is weighed first."""
    pytest.importorskip("torch")
    monkeypatch.setenv("PIPESIM_MAX_RANKS", "16")
    monkeypatch.setattr("pipesim.runtime.api.launch", _launched)
    argv = ["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--dim", "64", *(["--check"] if check else [])]
    monkeypatch.setattr("pipesim.runtime.memory_need.available_memory", lambda: need - 1)
    err = _refused(argv, capsys)
    assert f"1f1b with --dim 64 and --layers 1 on 2 processes needs at least {need / 2**20:.2f} MB" in err, err
    assert "lower --dim or --layers" in err
    monkeypatch.setattr("pipesim.runtime.memory_need.available_memory", lambda: need)
    with pytest.raises(Launched):
        main(argv)


def test_the_scaled_stage_size_is_the_built_stages_size():
    """The floor builds one layer of one and two experts and scales; torch's own count of
    the whole built stage (every layer, every expert) must be the same bytes."""
    torch = pytest.importorskip("torch")
    from pipesim.runtime.memory_need import stage_bytes
    from pipesim.runtime.model import TinyTransformer
    from pipesim.runtime.moe import MoETransformer

    for model in (MoETransformer(dim=16, layers_per_stage=3, experts=6, top_k=2), TinyTransformer(dim=24, layers_per_stage=2)):
        built = [model.build(s, 2) for s in range(2)]
        assert stage_bytes(model, 2) == [sum(p.numel() * p.element_size() for p in m.parameters()) for m in built]
    assert stage_bytes(torch.nn.Sequential(), 2) is None  # a model of the user's is not built to be weighed


def test_the_all_to_all_delay_help_says_a_bare_number_is_milliseconds(capsys):
    """--a2a-delay 10 sleeps 10 ms (parse_duration's bare unit), and the help named no
    unit: read as seconds, it is a thousand times the delay meant."""
    from pipesim.runtime.durations import parse_duration

    assert parse_duration("10") == pytest.approx(0.010)
    text = _help_of(["run"], "--a2a-delay", capsys)
    assert "or a number of ms (default 0)" in text, text


class Reached(BaseException):
    """Past every check: a BaseException, so that no `except Exception` of a rank's
    start-up takes it for a failure and ends the process (os._exit)."""


def _reached(*args, **kwargs):
    raise Reached


@pytest.mark.parametrize(
    "env, name",
    [({"RANK": "0", "WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"), ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x'"),
     ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "-1"}, "LOCAL_RANK='-1'")],
)  # fmt: skip
def test_torchruns_numbers_set_by_hand_to_no_number_are_one_line(env, name, capsys, monkeypatch):
    """RANK and WORLD_SIZE in the environment make pipesim a torchrun rank; WORLD_SIZE=abc
    was a ValueError traceback from int()."""
    pytest.importorskip("torch")
    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "FATAL")  # a rank sets it: restored after
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("pipesim.runtime.launch.check_network", _reached)  # the first step of a rank's start-up
    err = _refused(SYNTHETIC, capsys)
    assert f"{name}: torchrun sets RANK, WORLD_SIZE and LOCAL_RANK to whole numbers" in err, err


def test_one_expert_without_top_k_names_the_default_not_the_flag(capsys, monkeypatch):
    """--model moe --experts 1 was told '--top-k must be between 1 and --experts=1, got 2'
    of a --top-k never given: the default 2 is what is too many."""
    pytest.importorskip("torch")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    argv = ["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--model", "moe", "--experts", "1"]
    err = _refused(argv, capsys)
    assert "--experts 1 is fewer than the experts each token goes to (--top-k, default 2): add --top-k 1" in err, err
    assert "got 3" in _refused([*argv, "--top-k", "3"], capsys)  # given, the flag is the one named


@pytest.mark.parametrize("argv, latency", [(["--pp", "2", "--comm", "0"], "--comm 0"), (["--pp", "1"], "one rank (no P2P)")])
def test_a_synthetic_run_simulated_as_no_time_is_refused_before_the_launch(argv, latency, capsys, monkeypatch):
    """Every op 0 ms and no latency to add: the simulated step is 0 s, and the difference
    (measured - simulated) / simulated was a ZeroDivisionError traceback after the run."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    err = _refused(["run", "-s", "1f1b", *argv, "-m", "2", "--synthetic", "--f", "0", "--b", "0", "--w", "0"], capsys)
    assert f"--synthetic with these durations and {latency} simulates 1f1b as a step of 0 s" in err, err


def test_names_beside_a_schedule_file_are_built_at_its_size(tmp_path, capsys, monkeypatch):
    """run --schedules s.json,zb-h1 without --pp built zb-h1 at the default pp and then
    refused the two as of different sizes; compare, sweep and draw build it at the file's."""
    f = tmp_path / "s.json"
    assert main(["ops", "-s", "1f1b", "--pp", "2", "-m", "3", "-o", str(f)]) == 0
    seen = []

    class Stop(Exception):
        pass

    def capture(rows):
        seen.extend(rows)
        raise Stop

    monkeypatch.setattr("pipesim.runtime.commands.refuse_mixed_sizes", capture)
    with pytest.raises(Stop):
        main(["run", "--schedules", f"{f},zb-h1", "--synthetic"])
    assert [(pp, stages) for _, pp, stages, _ in seen] == [(2, 2), (2, 2)]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["-s", "1f1b", "--pair", "3ms"], "--pair prices overlapped F&B pairs, and 1f1b runs none: drop it"),
        (["-s", "zb-h1", "--bw", "3ms"], "--bw prices fused backwards (BW), and zb-h1 runs none: drop it"),
        (["--schedules", "1f1b,zb-h1", "--pair", "3ms"], "--pair prices overlapped F&B pairs, and 1f1b, zb-h1 run none"),
        # the one that runs pairs cannot be built at M=4 < 2 x pp: said, not left to guess
        (
            ["--schedules", "1f1b,dualpipev", "--pp", "3", "--pair", "3ms"],
            "and 1f1b runs none: drop it; skipped at pp=3, M=4: dualpipev (dualpipev needs --microbatches >= 2 * --pp = 6",
        ),
    ],
)
def test_a_synthetic_duration_no_schedule_runs_is_refused(argv, says, capsys, monkeypatch):
    """1F1B runs no overlapped pair and ZB-H1 splits every backward into B and W: the
    duration slept nowhere, and the run's 'synthetic:' line listed it as if used."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    pp = [] if "--pp" in argv else ["--pp", "2"]
    err = _refused(["run", *argv, *pp, "-m", "4", "--synthetic"], capsys)
    assert says in err, err


@pytest.mark.parametrize("argv", [["-s", "dualpipev", "--pair", "3ms"], ["--schedules", "1f1b,zb-h1", "--bw", "3ms"]])
def test_a_synthetic_duration_one_schedule_runs_goes_to_the_launch(argv, monkeypatch):
    """DualPipeV overlaps F&B pairs; 1F1B (beside ZB-H1) runs fused backwards."""
    monkeypatch.setattr("pipesim.runtime.api.execute_many", _launched)
    monkeypatch.setattr("pipesim.runtime.commands.check_capacity", lambda *a: None)
    with pytest.raises(Launched):
        main(["run", *argv, "--pp", "2", "-m", "4", "--synthetic"])


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--model", "moe", "--experts", "100000"], "--experts 100000 builds 100,000 experts on every stage, above the 10,000"),
        (["--model", "moe", "--experts", "5000", "--layers", "3"], "--experts 5000 and --layers 3 build 15,000 experts"),
        (["--layers", "20000"], "--layers 20000 builds 20,000 blocks on every stage, above the 10,000"),
    ],
)
def test_a_model_that_takes_minutes_to_build_is_refused_before_the_launch(argv, says, capsys, monkeypatch):
    """100,000 experts fit in memory (dim 16), but every rank spent minutes building them,
    with no output, before its first op."""
    pytest.importorskip("torch")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    err = _refused(["run", "-s", "1f1b", "--pp", "2", "-m", "2", *argv], capsys)
    assert says in err, err


def test_a_model_at_the_build_bound_goes_to_the_launch(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setattr("pipesim.runtime.api.execute_many", _launched)
    monkeypatch.setattr("pipesim.runtime.commands.check_capacity", lambda *a: None)
    with pytest.raises(Launched):
        main(["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--model", "moe", "--experts", "10000"])


@pytest.mark.parametrize(
    "make, says",
    [
        (
            lambda m: m.MoETransformer(experts=100_000),
            "MoETransformer(experts=100000, layers_per_stage=1) builds 100,000 experts a stage, above the 10,000 blocks",
        ),
        (
            lambda m: m.MoETransformer(experts=5000, layers_per_stage=3),
            "MoETransformer(experts=5000, layers_per_stage=3) builds 15,000 experts a stage, above the 10,000 blocks",
        ),
        (
            lambda m: m.TinyTransformer(layers_per_stage=20_000),
            "TinyTransformer(layers_per_stage=20000) builds 20,000 blocks a stage, above the 10,000",
        ),
    ],
)
def test_a_library_model_that_takes_minutes_to_build_is_refused_as_the_flags_are(make, says):
    """--model moe --experts 100000 is refused before the launch; the class it builds,
    made from the library, took the same experts and spent minutes in every rank's build.
    The bound is the flags' (10,000 blocks a stage, the test above)."""
    pytest.importorskip("torch")
    from pipesim.runtime import moe

    with pytest.raises(PipesimError) as e:
        make(moe)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert moe.MoETransformer(experts=10_000).experts == 10_000  # at the bound: taken, as --experts 10000 is


@pytest.mark.parametrize(
    "source, shape, says",
    [
        # 1e11 x 16 float32 numbers: 6.4e12 bytes, past any test machine's memory; it was
        # "the layers cannot take it (RuntimeError: ... can't allocate memory ...)"
        (
            "",
            "100000000000,16",
            "too large for memory, one micro-batch's input in torch.float32 is 5.8 TB (6,400,000,000,000 bytes)",
        ),
        # past what a tensor can index: was "cannot take it (TypeError: ... Overflow when unpacking long long"
        ("", "100000000000000000000,16", "(6,400,000,000,000,000,000,000 bytes)"),
        # the input fits, a layer's output (4 x 16 float32 rows repeated 1e12 times) does not
        (
            "class Blow(nn.Module):\n    def forward(self, x):\n        return x.repeat(10**12, 1)\nlayers.append(Blow())\n",
            "4,16",
            "the layers' outputs on it are too large for memory, one needs 232.8 TB (256,000,000,000,000 bytes)",
        ),
    ],
)
def test_an_input_shape_too_large_for_memory_is_said_so(source, shape, says, capsys, monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    (tmp_path / "wide.py").write_text("from torch import nn\nlayers = [nn.Linear(16, 16), nn.Linear(16, 16)]\n" + source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "wide", raising=False)
    err = _refused(["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--model", "wide:layers", "--input-shape", shape], capsys)
    assert f"--input-shape {shape}: " in err and says in err and "cannot take it" not in err, err


def test_a_list_run_into_a_folder_holding_an_earlier_runs_traces_is_refused(tmp_path, capsys, monkeypatch):
    """--profile DIR of one schedule wrote DIR/rank0.json...; a list run then wrote
    DIR/1f1b/, DIR/zb-h1/, and pipesim profile DIR read the earlier run's traces (it looks
    into the folders only when DIR holds none), unsaid."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    for r in range(2):
        (tmp_path / f"rank{r}.json").write_text("{}")
    argv = ["run", "--schedules", "1f1b,zb-h1", "--pp", "2", "-m", "2", "--synthetic", "--profile", str(tmp_path)]
    err = _refused(argv, capsys)
    assert (
        f"--profile {tmp_path}: the folder holds rank0.json, rank1.json, which pipesim profile {tmp_path} would read instead"
        in err
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank1.json"]
    # one schedule replaces them, as it always has: its traces are the ones profile reads
    monkeypatch.setattr("pipesim.runtime.api.execute_many", _launched)
    monkeypatch.setattr("pipesim.runtime.commands.check_capacity", lambda *a: None)
    with pytest.raises(Launched):
        main(["run", "-s", "1f1b", *argv[3:]])


def test_a_schedule_and_a_list_at_once_says_both_were_given(capsys, monkeypatch):
    """It was 'give --schedule NAME ... or --schedules a,b,c|all', as if neither was given."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    err = _refused(["run", "-s", "1f1b", "--schedules", "zb-h1", "--pp", "2", "-m", "2", "--synthetic"], capsys)
    assert "--schedule and --schedules each name what to run: give one of them, not both" in err, err
    assert "give --schedule NAME" in _refused(["run", "--pp", "2", "-m", "2", "--synthetic"], capsys)


def test_each_schedule_of_a_list_is_given_the_durations_it_sleeps(monkeypatch):
    """--pair 3ms beside 1f1b and dualpipev: dualpipev's pairs sleep it, 1F1B runs none,
    and its report listed F&B=3ms as if they had (likewise --bw for zb-h1, which splits
    every backward into B and W)."""
    seen = {}

    def capture(jobs, **kwargs):
        seen.update({j.schedule.name: j.costs for j in jobs})
        raise Launched

    monkeypatch.setattr("pipesim.runtime.api.execute_many", capture)
    monkeypatch.setattr("pipesim.runtime.commands.check_capacity", lambda *a: None)
    argv = ["run", "--schedules", "1f1b,dualpipev,zb-h1", "--pp", "2", "-m", "4", "--synthetic", "--pair", "3ms", "--bw", "5ms"]
    with pytest.raises(Launched):
        main(argv)
    assert (seen["1f1b"].pair, seen["1f1b"].bw) == (None, 0.005)
    assert (seen["dualpipev"].pair, seen["dualpipev"].bw) == (0.003, 0.005)
    assert (seen["zb-h1"].pair, seen["zb-h1"].bw) == (None, None)


def test_a_file_profile_never_reads_beside_rank_traces_does_not_stop_the_run(tmp_path, capsys, monkeypatch):
    """`profile DIR --timeline DIR/tl.json` wrote a file that profile DIR then passes over
    (it reads the rank files where there are any); run --profile DIR refused it as one
    profile 'would read beside its traces'."""
    from pipesim.profile.measure import trace_paths

    for name in ("rank0.json", "rank1.json", "tl.json"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in trace_paths(tmp_path)] == ["rank0.json", "rank1.json"]
    monkeypatch.setattr("pipesim.runtime.api.execute_many", _launched)
    monkeypatch.setattr("pipesim.runtime.commands.check_capacity", lambda *a: None)
    with pytest.raises(Launched):
        main(["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--synthetic", "--profile", str(tmp_path)])
    # a list run writes DIR/NAME/: there, DIR's own files are what profile DIR reads
    for name in ("rank0.json", "rank1.json"):
        (tmp_path / name).unlink()
    assert [p.name for p in trace_paths(tmp_path)] == ["tl.json"]
    err = _refused(
        ["run", "--schedules", "1f1b,zb-h1", "--pp", "2", "-m", "2", "--synthetic", "--profile", str(tmp_path)], capsys
    )
    assert "the folder holds tl.json, which pipesim profile" in err, err
