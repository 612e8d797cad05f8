"""Megatron's torch.cuda.synchronize() after each stage-to-stage exchange (planner/p2p_sync.py),
against hand derivations from the source's call sequence and NVIDIA's CUDA Graphs figures."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import test_planner_costs as costs_tests
from pipesim.cli import main
from pipesim.components import ComponentCosts, LayerCosts
from pipesim.ir import Op
from pipesim.planner.layout import Layout
from pipesim.planner.p2p_sync import sync_costs, sync_seconds, syncs_before
from pipesim.planner.specs import Training
from pipesim.planner.stages import component_costs
from pipesim.schedules.classic import one_f_one_b
from pipesim.simulate import simulate

CORE = Training(p2p_sync="megatron-core", host_us_per_kernel=3.3)
# one synchronize: NVIDIA's 9.6 us a short kernel with a synchronize after each launch less
# 3.8 us launched back to back, plus PyTorch's 3.3 us dispatch of the first kernel after it
SYNC = (9.6 - 3.8 + 3.3) * 1e-6


def test_one_synchronize_costs_the_blog_gap_and_one_dispatch():
    assert sync_seconds(CORE) == pytest.approx(SYNC)
    # under CUDA graphs the first launch after it is a graph launch, host_us_per_kernel too
    assert sync_seconds(replace(CORE, cuda_graphs=True, host_us_per_kernel=2.0)) == pytest.approx((9.6 - 3.8 + 2.0) * 1e-6)


def test_which_ops_follow_a_synchronize():
    """1F1B (both Megatrons): a forward after its receive from the stage before (none on
    the first stage), a backward after its receive from the stage after (none on the
    last). Megatron-LM 2021's interleaved schedule: one exchange before each forward
    (after the previous forward-backward pair). Megatron-Core's interleaved schedule
    overlaps its transfers (batch_p2p_comm off): none. No pipeline, or p2p_sync none: none."""
    assert [syncs_before(CORE, s, 4, 4) for s in range(4)] == [(0, 1), (1, 1), (1, 1), (1, 0)]
    old = replace(CORE, p2p_sync="megatron-2021")
    assert [syncs_before(old, s, 4, 4) for s in range(4)] == [(0, 1), (1, 1), (1, 1), (1, 0)]
    assert {syncs_before(old, s, 8, 4) for s in range(8)} == {(1, 0)}
    assert {syncs_before(CORE, s, 8, 4) for s in range(8)} == {(0, 0)}
    assert syncs_before(CORE, 0, 1, 1) == (0, 0)
    assert {syncs_before(Training(), s, 4, 4) for s in range(4)} == {(0, 0)}


def _step(t: Training, microbatches: int, sync: bool) -> float:
    """A 4-stage 1F1B of F = 1 s, B = 2 s on every stage, no transfer time."""
    layer = LayerCosts(attn_f=1.0, mlp_f=0.0, attn_b=2.0, attn_w=0.0, mlp_b=0.0, mlp_w=0.0)
    rows = []
    for s in range(4):
        extra = sync_costs(t, s, 4, 4) if sync else None
        rows.append((layer,) if extra is None else (layer, extra))
    return simulate(one_f_one_b(4, microbatches), ComponentCosts(tuple(rows), p2p=0.0)).end


@pytest.mark.parametrize(
    "microbatches,syncs",
    [
        # one micro-batch: its forward down through stages 1-3 and its backward up through
        # stages 2-0, each after a receive: 3 + 3
        (1, 6),
        # more: the middle stages, every op after a synchronize, are the slowest (F + B + 2
        # synchronizes a micro-batch against + 1 at the ends); the critical path is micro-batch
        # 1's forward on stages 0 and 1 (1), stage 2's whole 1F1B (2 x 8), micro-batch 8's
        # backward on stages 1 and 0 (2)
        (8, 1 + 2 * 8 + 2),
    ],
)
def test_pp4_1f1b_adds_the_synchronizes_on_its_critical_path(microbatches, syncs):
    added = _step(CORE, microbatches, True) - _step(CORE, microbatches, False)
    assert added == pytest.approx(syncs * SYNC, rel=1e-6)


def test_component_costs_carry_the_synchronizes():
    """The planner's stages: with p2p_sync each forward of a stage past the first and each
    backward before the last starts one synchronize later; W is untouched."""
    lay = Layout(pp=3, dp=8)
    parts = [range(0, 1), range(1, 3), range(3, 4)]
    base = replace(costs_tests.T, comm_sms=1, host_us_per_kernel=3.3)
    off = component_costs(costs_tests.TINY, costs_tests.GPU, base, lay, 3, "none", parts)
    on = component_costs(costs_tests.TINY, costs_tests.GPU, replace(base, p2p_sync="megatron-core"), lay, 3, "none", parts)
    for stage, (f, b) in enumerate(((0, 1), (1, 1), (1, 0))):
        for kind, n in (("F", f), ("B", b), ("W", 0)):
            extra = on.op_time(Op(kind, 0, 0), stage) - off.op_time(Op(kind, 0, 0), stage)
            assert extra == pytest.approx(n * SYNC)


def _report_row(capsys, tmp_path, mode: str, schedule: str) -> str | None:
    f = tmp_path / "t.toml"
    f.write_text(f'p2p_sync = "{mode}"\n')
    plan = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--pp", "2", "--schedules", schedule]
    assert main([*plan, "--training", str(f), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["assumptions"].get("p2p sync")


def test_the_report_says_where_it_synchronizes(capsys, tmp_path):
    """The plan's assumptions name the synchronize where the recommended layout runs one:
    Megatron-Core's 1F1B, Megatron-LM 2021's interleaved; not Megatron-Core's interleaved."""
    assert "1F1B's receives" in _report_row(capsys, tmp_path, "megatron-core", "1f1b")
    assert _report_row(capsys, tmp_path, "megatron-core", "interleaved-1f1b") is None
    assert "one before each forward" in _report_row(capsys, tmp_path, "megatron-2021", "interleaved-1f1b")
