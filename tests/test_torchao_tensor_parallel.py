"""torchao's Float8 tensor parallelism's amax all-reduces (planner/torchao_tensor_parallel.py).
Expected counts are hand derivations from torchtitan 9dec370's apply_tp plan and torchao
eab345c's styles (PrepareFloat8ModuleInput, Float8ColwiseParallel, Float8RowwiseParallel,
each cast of a sharded DTensor all-reducing its amax: tests/test_torchao_tp_amax_torch.py
counts that in torch); the time is NCCL's LL ring latency (tuning.cc: 6.6 us a collective,
0.6 us a step on NVLink)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, MoE, load_cluster
from pipesim.planner.te_tensor_parallel import te_tp_seconds
from pipesim.planner.torchao_tensor_parallel import amax_reductions
from pipesim.planner.training import Training

H100 = load_cluster("h100")
#: a dense SwiGLU first layer, an MoE second, grouped-query attention
M = Model("m", 2, 1024, 8, 32000, Attention(kv_heads=2), (1,), 4096, moe=MoE(experts=8, expert_ffn=512, top_k=2))
TP4 = Layout(1, 1, tp=4, micro_batch=1)
AO = Training(seq=2048, precision="fp8", fp8_scaling="tensor", fp8_casts="torchao", zero=3, fsdp_float8_all_gather=True)
#: NCCL's LL ring all-reduce of one float over 4 GPUs of a node: 6.6 us + 2 x 3 steps of 0.6 us
AMAX_TP4 = (6.6 + 6 * 0.6) * 1e-6


def test_each_sharded_cast_waits_for_one_amax_all_reduce():
    """Forward the block input's shard (one cast for wq/wk/wv, one for w1/w3) and wo's and
    w2's inputs; backward wq, wk, wv, wo and w1, w3, w2's output gradients."""
    assert amax_reductions(M, 0, AO, TP4) == (2, 4, 2, 3)
    assert te_tp_seconds(M, 0, H100, AO, TP4) == pytest.approx((2 * AMAX_TP4, 4 * AMAX_TP4, 2 * AMAX_TP4, 3 * AMAX_TP4), rel=1e-4)


def test_weights_cast_every_micro_batch_reduce_too():
    """Without FSDP's float8 all-gather each of the seven weights' scales is taken forward."""
    assert amax_reductions(M, 0, replace(AO, fsdp_float8_all_gather=False), TP4) == (2 + 4, 4, 2 + 3, 3)


def test_replicated_tensors_reduce_nothing_without_sequence_parallelism():
    """The block input and the row-parallel outputs' gradients are then replicated."""
    assert amax_reductions(M, 0, replace(AO, sequence_parallel=False), TP4) == (1, 3, 1, 2)


def test_a_gelu_mlp_has_one_column_parallel_linear():
    gelu = replace(M, activation="gelu", moe=None, moe_layers=())
    assert amax_reductions(gelu, 0, AO, TP4) == (2, 4, 2, 2)


@pytest.mark.parametrize(
    "change", [{"fp8_casts": "transformer_engine"}, {"precision": "bf16"}, {"fp8_scaling": "block"}], ids=str
)
def test_only_torchaos_per_tensor_casts(change):
    assert amax_reductions(M, 0, replace(AO, **change), TP4) == (0, 0, 0, 0)
    assert amax_reductions(M, 0, AO, Layout(1, 1, tp=1, micro_batch=1)) == (0, 0, 0, 0)


def test_an_moe_layers_experts_reduce_nothing():
    assert amax_reductions(M, 1, AO, TP4) == (2, 4, 0, 0)
