"""Expert parallelism and overlapped pairs, run for real (gloo, CPU).

The process-starting tests batch: one launch runs every registry schedule at pp=2, ep=2.
The bad-input tests start no process (they are refused before any launch).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import registry_schedules  # noqa: E402
from pipesim import build  # noqa: E402
from pipesim.cli import main  # noqa: E402
from pipesim.ir import Pair  # noqa: E402
from pipesim.runtime import RunFailed, TinyTransformer, execute_many, job  # noqa: E402
from pipesim.runtime.moe import MoETransformer  # noqa: E402
from processes import with_marker  # noqa: E402

PAIRED = ("dualpipe", "dualpipev", "1f1b-overlap", "interleaved-1f1b-overlap")


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_every_registry_schedule_with_experts_gives_one_process_gradients():
    """pp=2 x ep=2: every registry schedule's losses and every gradient (the experts'
    included, each held by one rank) match one process running the unsharded model; the
    paired schedules ran their pairs on two streams, component by component."""
    schedules = registry_schedules(2)
    assert set(PAIRED) <= set(schedules)
    model = MoETransformer()
    results = execute_many([job(s, model, check=True, ep=2) for s in schedules.values()], backend="gloo", timeout=240)
    for r in results:
        assert r.checked and r.passed, f"{r.schedule.name}: errors {r.errors}"
        assert len(r.errors) == 4  # every process checked its own shard
        assert sorted(r.losses) == list(range(r.schedule.microbatches))
    for r in results:
        if r.schedule.name not in PAIRED:
            continue
        pairs = {str(it) for items in r.schedule.ranks for it in items if isinstance(it, Pair)}
        logged = {item for rank in r.parts for item, *_ in rank}
        assert pairs and pairs <= logged
        # inside a pair, the other micro-batch's backward parts ran between the forward's
        steps = [label for rank in r.parts for item, label, *_ in rank if item in pairs]
        assert "combine(B)" in steps and "mlp(W)" in steps and "dispatch(F)" in steps


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_a_pair_computes_while_its_all_to_all_is_in_flight():
    """With every all-to-all held to 50 ms, DualPipe's pairs run a compute part of one
    micro-batch while an all-to-all of the other is in flight; --serial-pairs never does."""
    s = build("dualpipe", 2, 4)
    model = MoETransformer()
    paired, serial = execute_many(
        [job(s, model, ep=2, a2a_delay=0.05), job(s, model, ep=2, a2a_delay=0.05, overlap=False)], backend="gloo"
    )
    assert _overlap(paired) > 0.001  # the tiny model's compute parts take about 1 ms each
    assert _overlap(serial) == 0.0


def _overlap(result) -> float:
    """The most compute time any one pair ran beside its own all-to-alls."""
    best = 0.0
    for rank in result.parts:
        pairs: dict = {}
        for item, label, a, b in rank:
            if "&" in item:
                pairs.setdefault(item, []).append((label.startswith(("dispatch", "combine")), a, b))
        for steps in pairs.values():
            comm = [(a, b) for is_comm, a, b in steps if is_comm]
            beside = sum(max(0.0, min(b, d) - max(a, c)) for is_comm, a, b in steps if not is_comm for c, d in comm)
            best = max(best, beside)
    return best


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_a_wrong_expert_result_fails_the_check(monkeypatch):
    """Scaling one forward output by 1.001 on its way shows up downstream, experts and all."""
    monkeypatch.setenv("PIPESIM_FAULT", "2:F0.1:corrupt")
    (r,) = execute_many([job(build("1f1b", 2, 4), MoETransformer(), check=True, ep=2)], backend="gloo", timeout=120)
    assert not r.passed
    assert max(r.errors) > 1e-6


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_a_rank_dying_inside_an_all_to_all_ends_the_run_naming_it(monkeypatch):
    """Rank 2 (pipeline rank 0 of the second replica) kills itself inside its first
    all-to-all, while rank 0 waits in the same collective: one line naming rank 2, well
    within 30 s, and no rank left running."""
    monkeypatch.setenv("PIPESIM_FAULT", "2:F0.1:a2a")
    t = time.monotonic()
    with pytest.raises(RunFailed) as info:
        execute_many([job(build("1f1b", 2, 4), MoETransformer(), ep=2)], backend="gloo", timeout=120)
    assert time.monotonic() - t < 30
    message = str(info.value)
    assert message.startswith("rank 2 died (signal SIGKILL) at F0.1 of 1f1b") and "\n" not in message
    assert all(not _alive(pid) for pid in info.value.pids)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ---------------------------------------------------------------------------------------
# refused before any process starts


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--ep", "3"], "--ep 3 must divide the model's 4 experts (each rank holds an equal share): give --ep one of 1, 2 or 4"),
        (
            ["--ep", "4", "--experts", "6"],
            "--ep 4 must divide the model's 6 experts (each rank holds an equal share): give --ep one of 1, 2, 3 or 6",
        ),
        (["--experts", "2", "--top-k", "3"], "--top-k must be between 1 and --experts=2, got 3"),
        (["--model", "tiny", "--ep", "2"], "--ep 2 shards a model's experts, and TinyTransformer has none"),
        (["--model", "tiny", "--experts", "8"], "--experts sets the experts of --model moe; --model tiny has none"),
        (["--ep", "16", "--experts", "16"], "--pp 2 x --ep 16 needs 32 processes, more than this machine can run"),
    ],
)
def test_bad_expert_input_is_one_line_before_any_process(argv, says, capsys, monkeypatch):
    monkeypatch.setenv("PIPESIM_MAX_RANKS", "16")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    model = [] if "--model" in argv else ["--model", "moe"]  # a flag given twice is refused as such
    code = main(["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--check", *model, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("pipesim: error: ") and says in err and err.count("\n") == 1


def test_a_batch_the_expert_group_cannot_slice_says_which_groups_can():
    # from the library only (the CLI's moe model takes a batch of 2 ep): a batch of 6 over
    # ep 4 is refused naming 6's divisors, counted by hand: 1, 2, 3, 6
    from pipesim.errors import PipesimError
    from pipesim.runtime.moe import MoETransformer

    with pytest.raises(PipesimError, match=r"6 sequences .*: give --ep one of 1, 2, 3 or 6, or a batch that 4 divides$"):
        MoETransformer(experts=8, batch=6).check_ep(4)


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--model", "moe"], "--model moe"),
        (["--layers", "4"], "--layers 4"),
        (["--dim", "64"], "--dim 64"),
        (["--experts", "8"], "--experts 8"),
    ],
)
def test_a_model_flag_with_synthetic_is_refused_not_ignored(argv, flag, capsys, monkeypatch):
    """--synthetic ops sleep; a model flag beside it ran nothing of that model, and said
    nothing, so the timings read as the model's."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code = main(["run", "-s", "dualpipe", "--pp", "2", "-m", "4", "--synthetic", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{flag} sets the model a real run computes; --synthetic computes none: drop one of them" in err


def test_serial_pairs_with_synthetic_is_refused_as_what_it_is(capsys, monkeypatch):
    """--serial-pairs sets no model: it splits a real run's overlapped pairs, where a
    synthetic pair sleeps --pair; the refusal said it set the model."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    code = main(["run", "-s", "dualpipe", "--pp", "2", "-m", "4", "--synthetic", "--serial-pairs"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--serial-pairs runs a real run's overlapped pairs as their two halves; --synthetic computes none" in err


@pytest.mark.parametrize(
    "argv, env, says",
    [
        (["--pp", "64", "-m", "64"], {}, "--pp 64 needs 64 processes"),
        (["--model", "tiny", "--experts", "8"], {}, "--experts sets the experts of --model moe"),
        (["--a2a-delay", "5ms"], {}, "--a2a-delay slows the expert all-to-alls"),
        (["--model", "nosuch:Model"], {}, "importing nosuch failed"),
        ([], {"GLOO_SOCKET_IFNAME": "nosuch0"}, "which is no network interface of this machine"),
    ],
)
def test_a_refused_run_leaves_no_profile_folder(argv, env, says, capsys, monkeypatch, tmp_path):
    """Bad input writes nothing: the --profile folder was made before these refusals,
    and stayed behind, empty."""
    monkeypatch.setenv("PIPESIM_MAX_RANKS", "16")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    monkeypatch.chdir(tmp_path)
    base = {"--pp": "2", "-m": "4"}  # each given once: a flag given twice is refused as such
    base.update(zip(argv[::2], argv[1::2]))
    code = main(["run", "-s", "1f1b", *(x for kv in base.items() for x in kv), "--backend", "gloo", "--profile", "prof/run1"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and err.count("\n") == 1, err
    assert not (tmp_path / "prof").exists()


def test_too_many_ranks_for_the_machine_is_refused(capsys, monkeypatch):
    """run --pp 64 --synthetic on this machine: refused with the limit named, nothing started."""
    monkeypatch.delenv("PIPESIM_MAX_RANKS", raising=False)
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    code = main(["run", "-s", "1f1b", "--pp", "64", "-m", "64", "--synthetic"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--pp 64 needs 64 processes, more than this machine can run (" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------------------
# a stage model's own pair function


@dataclass(frozen=True)
class HookedTiny(TinyTransformer):
    """The tiny model with its own overlapped pair: forward one micro-batch, then the
    other's backward into .grad (``skip``: forget the backward, which the check must see)."""

    skip: bool = False

    def pair(self, f_module, f_input, b_module, b_output, b_grad):
        y = f_module(f_input)
        if not self.skip:
            torch.autograd.backward(b_output, b_grad)
        return y


@dataclass(frozen=True)
class WrongPair(TinyTransformer):
    def pair(self, f_module, f_input):
        return f_module(f_input)


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_a_models_own_pair_function_runs_the_pairs():
    """DualPipe's pairs go through the model's pair(): done right the check passes, and a
    pair() that drops the backward fails it (so the hook really ran)."""
    s = build("dualpipe", 2, 4)
    good, bad = execute_many([job(s, HookedTiny(), check=True), job(s, HookedTiny(skip=True), check=True)], backend="gloo")
    assert good.passed, good.errors
    assert not bad.passed


def test_a_pair_function_with_the_wrong_signature_is_refused(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "mymodel.py").write_text(
        "from dataclasses import dataclass\nfrom pipesim.runtime import TinyTransformer\n\n"
        "@dataclass(frozen=True)\nclass Model(TinyTransformer):\n    def pair(self, f_module, f_input):\n        return f_module(f_input)\n"
    )
    monkeypatch.chdir(tmp_path)
    code = main(["run", "-s", "dualpipe", "--pp", "2", "-m", "4", "--model", "mymodel:Model"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "Model.pair(f_module, f_input) cannot be called as pair(f_module, f_input, b_module, b_output, b_grad)" in err


@pytest.mark.parametrize(
    "source, name, says",
    [
        ("raise RuntimeError('no GPU here\\nsecond line')\n", "Model", "importing broken failed: RuntimeError: no GPU here"),
        ("x = (\n", "Model", "importing broken failed: SyntaxError:"),
        ("Model = 42\n", "Model", "--model broken:Model is an int, not a model"),
        ("Other = 1\n", "Model", "module broken has no 'Model'"),
    ],
)
def test_a_user_model_that_cannot_load_is_one_line(source, name, says, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "broken.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "broken", raising=False)
    code = main(["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--model", f"broken:{name}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and says in err, err


@pytest.mark.parametrize(
    "argv, stages",
    [(["-s", "1f1b", "--pp", "4"], 4), (["-s", "interleaved-1f1b", "--pp", "2"], 4), (["-s", "zb-v", "--pp", "2"], 4)],
)
def test_a_list_of_layers_shorter_than_the_stages_is_refused_before_any_process(argv, stages, capsys, monkeypatch, tmp_path):
    """Three layers cannot make four stages: one line and exit 2 before a rank starts,
    not a ValueError raised by every rank at set-up (exit 1)."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "three.py").write_text("from torch import nn\nlayers = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "three", raising=False)
    code = main(["run", *argv, "-m", "4", "--model", "three:layers", "--input-shape", "4,8", "--check"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"the model has 3 layers, too few for the schedule's {stages} stages" in err


def test_an_input_shape_the_layers_cannot_take_is_refused_before_any_process(capsys, monkeypatch, tmp_path):
    """Linear(8, 8) cannot take rows of 7: torch's own words, one line, exit 2, no rank."""
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    (tmp_path / "three.py").write_text("from torch import nn\nlayers = nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)])\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "three", raising=False)
    code = main(["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--model", "three:layers", "--input-shape", "4,7"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert (
        "--input-shape 4,7: the layers cannot take it (RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x7 and 8x8))"
        in err
    )


# ---------------------------------------------------------------------------------------
# the environment


def test_a_missing_network_interface_is_one_line_before_any_process(capsys, monkeypatch):
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "nosuch0")
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    code = main(["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--check", "--backend", "gloo"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "GLOO_SOCKET_IFNAME=nosuch0 names 'nosuch0', which is no network interface of this machine" in err


def test_rendezvous_failures_name_the_fix():
    """The errors c10d really raises for a port in use and a rendezvous nobody answers."""
    import datetime
    import socket

    import torch.distributed as dist

    from pipesim.runtime.launch import network_error

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    with pytest.raises(Exception) as info:
        dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=2))
    assert network_error(info.value) == (
        f"the rendezvous port {port} is in use by another process: pick a free one "
        "(torchrun --rdzv-endpoint HOST:PORT, or MASTER_PORT)"
    )
    taken.close()
    with pytest.raises(Exception) as info:
        dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=1))
    assert network_error(info.value).startswith(f"could not reach 127.0.0.1:{port} to meet the other ranks")
    assert network_error(ValueError("something else")) is None


def test_a_torchrun_rank_that_finds_nobody_is_one_line():
    """As torchrun starts it (RANK, WORLD_SIZE, MASTER_ADDR/PORT), a rank whose rendezvous
    nobody answers prints the one line and exits 2; c10d's C++ log (its retries, with
    40 lines of stack frames) no longer comes before it."""
    import socket

    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_CPP_LOG_LEVEL", "TORCHELASTIC_RUN_ID")}
    env.update(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    proc = subprocess.run(
        [sys.executable, "-m", "pipesim.runtime", "run", "-s", "1f1b", "--pp", "2", "-m", "2", "--timeout", "2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"pipesim: error: rank 1: could not reach 127.0.0.1:{port} to meet the other ranks")
    assert proc.stderr.count("\n") == 1, proc.stderr[:2000]


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_ctrl_c_during_export_check_is_one_line(tmp_path):
    """Ctrl-C reaches the whole process group (launcher, forkserver, ranks) once the ranks
    run: exit 130 and the launcher's one line, no traceback from any of them."""
    name, value = "PIPESIM_TEST_RUN", f"{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipesim.cli", "export", "-s", "zb-h1", "--pp", "2", "-m", "4", "--check"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, name: value},
        cwd=tmp_path,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while len(with_marker(f"{name}={value}")) < 4 and time.monotonic() < deadline:  # launcher, forkserver, ranks
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == "pipesim: interrupted: pipesim export stopped by Ctrl-C (no file is left half-written)\n"


# ---------------------------------------------------------------------------------------
# docs/runtime-moe.md


@pytest.mark.runtime
@pytest.mark.xdist_group("runtime")
def test_the_pages_commands_print_what_it_says(tmp_path, monkeypatch, capsys):
    page = (Path(__file__).resolve().parents[1] / "docs" / "runtime-moe.md").read_text()
    commands = [line[len("$ pipesim ") :].split() for line in page.splitlines() if line.startswith("$ pipesim ")]
    assert [c[0] for c in commands] == ["run", "profile"]
    monkeypatch.chdir(tmp_path)
    assert main(commands[0]) == 0
    out = capsys.readouterr().out
    quoted = "PASS: dualpipe: losses and every gradient match one process (tolerance 1e-09)"
    assert quoted in page and quoted in out
    assert main(commands[1]) == 0
    out = capsys.readouterr().out
    for component in (
        "attn(F)",
        "dispatch(F)",
        "mlp(F)",
        "combine(F)",
        "combine(B)",
        "mlp(B)",
        "mlp(W)",
        "dispatch(B)",
        "attn(B)",
        "attn(W)",
    ):
        assert f"`{component}`" in page and f"│ {component}" in out
    assert "pipeline: dualpipe, pp=2, M=4, dual placement" in out


def test_too_many_ranks_is_refused_before_torch_is_imported():
    """The refusal is as quick as any other: torch (seconds to import under load) is
    not imported to say that 64 ranks are more than 2 cores run."""
    code = (
        "import os, sys; os.sched_getaffinity = lambda pid: {0, 1}\n"
        "from pipesim.cli import main\n"
        "rc = main(['run', '-s', '1f1b', '--pp', '64', '-m', '64', '--synthetic'])\n"
        "print(rc, 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PIPESIM_MAX_RANKS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert "needs 64 processes, more than this machine can run" in out.stderr


@pytest.mark.parametrize(
    "others", [["rank2.json"], ["rank2.json", "rank3.json.gz", "rank4.json", "rank5.json", "mine.json", "tl.json"]]
)
def test_a_profile_folder_with_traces_the_run_does_not_replace_is_refused(others, capsys, monkeypatch, tmp_path):
    """rank2.json of an earlier pp=3 run beside a pp=2 run: pipesim profile reads every
    rank file of the folder, so it would sit beside this run's. Refused before any process
    starts, the files named and left as they were; the run's own rank files are replaced.
    mine.json and tl.json are no rank files: profile reads none beside rank files, so
    they are not named."""
    monkeypatch.setattr("pipesim.runtime.launch._start_forkserver", _no_launch)
    for name in ["rank0.json", *others]:
        (tmp_path / name).write_text("{}")
    code = main(["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--backend", "gloo", "--profile", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, err
    ranks = sorted(n for n in others if n.startswith("rank"))
    assert f"holds {', '.join(ranks[:3])}" in err and "which this pp=2 run does not write" in err
    assert ("and 1 more" in err) == (len(ranks) == 4) and "mine.json" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["rank0.json", *others])
    assert all(p.read_text() == "{}" for p in tmp_path.iterdir())
