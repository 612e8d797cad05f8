"""The replay of DeepSpeed's TrainSchedule that benchmarks/mtnlg_audit.py times the MT-NLG
audit with: the instruction order DeepSpeed v0.5.8's schedule.py issues, and blocking
transfers that hold both ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script

AUDIT = load_script(Path(__file__).parent.parent / "benchmarks" / "mtnlg_audit.py")


@pytest.mark.parametrize("stages, micro", [(2, 1), (3, 2), (4, 8), (5, 3), (35, 240)])
def test_every_stage_runs_each_micro_batch_forward_then_backward(stages, micro):
    for s in range(stages):
        prog = AUDIT.ds_program(s, stages, micro)
        fwd = [k for op, k in prog if op == "fwd"]
        bwd = [k for op, k in prog if op == "bwd"]
        assert fwd == list(range(micro)) and bwd == list(range(micro))
        assert all(prog.index(("fwd", k)) < prog.index(("bwd", k)) for k in range(micro))
        # a middle stage receives and sends every activation and every gradient
        assert sum(op.endswith("_act") for op, _ in prog) == micro * ((s > 0) + (s < stages - 1))


def test_two_stages_one_micro_batch_by_hand():
    """Stage 0: forward, send, receive the gradient, backward; stage 1: receive, forward,
    backward, send the gradient. Every step is on the one path: 2F + 2B + 2 transfers."""
    progs = [AUDIT.ds_program(s, 2, 1) for s in range(2)]
    assert progs[0] == [("fwd", 0), ("send_act", 0), ("recv_grad", 0), ("bwd", 0)]
    assert progs[1] == [("recv_act", 0), ("fwd", 0), ("bwd", 0), ("send_grad", 0)]
    assert AUDIT.replay(progs, [1.0, 1.0], [2.0, 2.0], 0.25) == pytest.approx(2 + 4 + 0.5)


@pytest.mark.parametrize("stages, micro", [(4, 8), (5, 12), (8, 8)])
def test_free_transfers_give_the_one_f_one_b_step(stages, micro):
    """Equal stages, transfers free: DeepSpeed's alternating order takes (M + S - 1)(F + B),
    the 1F1B step (Narayanan et al. 2021, section 2.2: the bubble is (S - 1)(F + B))."""
    progs = [AUDIT.ds_program(s, stages, micro) for s in range(stages)]
    assert AUDIT.replay(progs, [1.0] * stages, [2.0] * stages, 0.0) == pytest.approx((micro + stages - 1) * 3)
