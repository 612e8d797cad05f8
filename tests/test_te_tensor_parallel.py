"""Transformer Engine 2.7's tensor-parallel extras (planner/te_tensor_parallel.py): the amax
all-reduces per-tensor FP8 casts wait for under sequence parallelism. Expected values are
hand derivations from the cited sources: which casts reduce their amax (TE
linear.py:1614-1638, layernorm_linear.py:1720-1745) and NCCL's LL ring latency
(tuning.cc: 6.6 us a collective, 0.6 us a step on NVLink)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner import layer_costs as layer_costs_module
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, MoE, load_cluster
from pipesim.planner.te_tensor_parallel import amax_reductions, te_tp_seconds
from pipesim.planner.training import Training

H100 = load_cluster("h100")
#: a dense first layer, an MoE second (no shared experts), grouped-query attention
M = Model("m", 2, 1024, 8, 32000, Attention(kv_heads=2), 1, 4096, moe=MoE(experts=8, expert_ffn=512, top_k=2))
TP4 = Layout(1, 1, tp=4, micro_batch=1)
FP8 = Training(seq=2048, precision="fp8", fp8_scaling="tensor", tp_overlap="all")
#: NCCL's LL ring all-reduce of one float over 4 GPUs of a node: 6.6 us + 2 x 3 steps of 0.6 us
AMAX_TP4 = (6.6 + 6 * 0.6) * 1e-6


def test_each_gathered_cast_waits_for_one_amax_all_reduce():
    """Forward the column-parallel inputs (qkv, fc1), backward the row-parallel outputs'
    gradients (proj, fc2); an MoE layer's experts gather nothing."""
    assert amax_reductions(M, 0, FP8, TP4) == (1, 1, 1, 1)
    assert amax_reductions(M, 1, FP8, TP4) == (1, 1, 0, 0)
    assert te_tp_seconds(M, 0, H100, FP8, TP4) == pytest.approx((AMAX_TP4,) * 4, rel=1e-4)


@pytest.mark.parametrize(
    "change",
    [
        {"precision": "bf16"},  # no casts
        {"fp8_scaling": "block"},  # DeepSeek's block scaling: no per-tensor amax
        {"fp8_casts": "torchao"},  # torchao's casts, not Transformer Engine's
        {"sequence_parallel": False},  # nothing gathered after the cast
    ],
)
def test_no_amax_all_reduce_without_te_current_scaling_under_sequence_parallelism(change):
    assert amax_reductions(M, 0, replace(FP8, **change), TP4) == (0, 0, 0, 0)
    assert amax_reductions(M, 0, FP8, Layout(1, 1, tp=1, micro_batch=1)) == (0, 0, 0, 0)


def test_a_layer_waits_for_them_and_again_in_a_full_recompute(monkeypatch):
    """The layer's forward waits for its one amax all-reduce a block, its backward for the
    gradient's and, under full recomputation, the recomputed forward's too."""
    priced = {rc: layer_costs(M, 0, H100, FP8, TP4, rc) for rc in ("none", "full")}
    monkeypatch.setattr(layer_costs_module, "te_tp_seconds", lambda *_: (0.0, 0.0, 0.0, 0.0))
    without = {rc: layer_costs(M, 0, H100, FP8, TP4, rc) for rc in ("none", "full")}
    assert priced["none"].attn_f - without["none"].attn_f == pytest.approx(AMAX_TP4, rel=1e-4)
    assert priced["none"].mlp_b - without["none"].mlp_b == pytest.approx(AMAX_TP4, rel=1e-4)
    assert priced["full"].attn_b - without["full"].attn_b == pytest.approx(2 * AMAX_TP4, rel=1e-4)
