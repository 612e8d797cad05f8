"""``pipesim import --csv`` of the CSVs PyTorch itself writes: ``PipelineScheduleMulti._dump_csv``
(torch 2.13 writes its ``pipeline_order``, UNSHARD and REDUCE_GRAD actions included, which
``_PipelineScheduleRuntime._load_csv`` refuses as compute-only) and ``_PipelineScheduleRuntime._dump_csv`` in
the compute_comms format (SEND/RECV actions). Each must come back as the order PyTorch
holds: the one ``import --torch`` reads from the class."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main

S = pytest.importorskip("torch.distributed.pipelining.schedules")

PP, M = 2, 4


def _multi(name: str):
    """A multi-stage PyTorch schedule built without a process group: the constructors read
    only how many stages there are and which this rank holds."""
    cls = S.get_schedule_class(name)
    n = 2 * PP
    held = [0, n - 1] if cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV) else [0, PP]

    class Stage:
        def __init__(self, index: int):
            self.stage_index, self.num_stages, self.group_size, self.group_rank = index, n, PP, 0
            self.is_first, self.is_last, self.submod = index == 0, index == n - 1, None

    return [Stage(i) for i in held], cls


def _imported(argv, tmp_path, capsys) -> dict:
    out = tmp_path / "back.json"
    assert main([*argv, "-o", str(out)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    return json.loads(out.read_text())


@pytest.mark.parametrize("name", ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"])
def test_pytorchs_own_dump_imports_as_the_order_it_holds(name, tmp_path, capsys):
    stages, cls = _multi(name)
    path = tmp_path / f"{name}.csv"
    cls(stages, M, loss_fn=lambda out, target: out)._dump_csv(str(path))
    assert "UNSHARD" in path.read_text()  # what torch 2.13 writes beside the compute actions
    from_csv = _imported(["import", "--csv", str(path)], tmp_path, capsys)
    from_class = _imported(["import", "--torch", name, "--pp", str(PP), "-m", str(M)], tmp_path, capsys)
    assert from_csv["ranks"] == from_class["ranks"] and from_csv["placement"] == from_class["placement"]


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zb-v", "dualpipev"])
def test_pytorchs_compute_comms_dump_imports_as_the_exported_order(name, tmp_path, capsys):
    """pipesim's export, loaded by PyTorch's runtime (which adds the sends and receives)
    and dumped with them, imports as the schedule exported."""
    exported = tmp_path / "out.csv"
    assert main(["export", "-s", name, "--pp", str(PP), "-m", str(M), "-o", str(exported)]) == 0
    stages, _ = _multi("Interleaved1F1B" if name == "interleaved-1f1b" else "ZBVZeroBubble")
    runtime = S._PipelineScheduleRuntime(stages, M, loss_fn=lambda out, target: out)
    runtime._load_csv(str(exported), "compute_only")
    comms = tmp_path / "comms.csv"
    runtime._dump_csv(str(comms), "compute_comms")
    assert "SEND_F" in comms.read_text()
    back = _imported(["import", "--csv", str(comms)], tmp_path, capsys)
    orig = tmp_path / "orig.json"
    assert main(["ops", "-s", name, "--pp", str(PP), "-m", str(M), "-o", str(orig)]) == 0
    want = json.loads(orig.read_text())
    assert back["ranks"] == want["ranks"] and back["placement"] == want["placement"]
