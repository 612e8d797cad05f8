"""Expert parallelism and overlapped pairs, run for real (gloo, CPU).

The process-starting tests batch: one launch runs every registry schedule at pp=2, ep=2.
The bad-input tests start no process (they are refused before any launch).
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from conftest import registry_schedules  # noqa: E402
from pipesim import build  # noqa: E402
from pipesim.cli import main  # noqa: E402
from pipesim.ir import Pair  # noqa: E402
from pipesim.runtime import RunFailed, execute_many, job  # noqa: E402
from pipesim.runtime.moe import MoETransformer  # noqa: E402

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
        (["--ep", "3"], "--ep 3 must divide the model's 4 experts"),
        (["--ep", "4", "--experts", "6"], "--ep 4 must divide the model's 6 experts"),
        (["--experts", "2", "--top-k", "3"], "--top-k must be between 1 and --experts=2, got 3"),
        (["--model", "tiny", "--ep", "2"], "--ep 2 shards a model's experts, and TinyTransformer has none"),
        (["--model", "tiny", "--experts", "8"], "--experts sets the experts of --model moe; --model tiny has none"),
        (["--ep", "16", "--experts", "16"], "--pp 2 x --ep 16 needs 32 processes, more than this machine can run"),
    ],
)
def test_bad_expert_input_is_one_line_before_any_process(argv, says, capsys, monkeypatch):
    monkeypatch.setenv("PIPESIM_MAX_RANKS", "16")
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    base = ["run", "-s", "1f1b", "--pp", "2", "-m", "4", "--check", "--model", "moe"]
    code = main(base + argv)
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("pipesim: error: ") and says in err and err.count("\n") == 1


def _no_launch(*args, **kwargs):
    raise AssertionError("a process was started")


def test_too_many_ranks_for_the_machine_is_refused(capsys, monkeypatch):
    """run --pp 64 --synthetic on this machine: refused with the limit named, nothing started."""
    monkeypatch.delenv("PIPESIM_MAX_RANKS", raising=False)
    monkeypatch.setattr("pipesim.runtime.api.launch", _no_launch)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    code = main(["run", "-s", "1f1b", "--pp", "64", "-m", "64", "--synthetic"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--pp 64 needs 64 processes, more than this machine can run (" in err and err.count("\n") == 1
