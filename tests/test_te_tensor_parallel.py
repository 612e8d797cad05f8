"""Transformer Engine 2.7's tensor-parallel extras (planner/te_tensor_parallel.py): the amax
all-reduces per-tensor FP8 casts wait for under sequence parallelism, and userbuffers'
copies, reduce kernel and SM margin. Expected values are hand derivations from the cited
sources: which casts reduce their amax (TE linear.py:1614-1638, layernorm_linear.py:
1720-1745), what each userbuffer path copies (base.py:446-498 and 1104-1123,
layernorm_linear.py:903, comm_gemm_overlap.cpp:1052-1140), NCCL's LL ring latency
(tuning.cc: 6.6 us a collective, 0.6 us a step on NVLink), and Megatron-Bridge
v0.1.0rc4's userbuffer configs for the published rows."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner import layer_costs as layer_costs_module
from pipesim.planner.compute import attention_shapes, gemms, mlp_shapes
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, MoE, load_cluster, load_training
from pipesim.planner.te_tensor_parallel import amax_reductions, te_tp_seconds, userbuffer_bytes
from pipesim.planner.training import Training

RUNS = Path(__file__).parent.parent / "benchmarks" / "data" / "published_runs.toml"
H100 = load_cluster("h100")
#: a dense first layer, an MoE second (no shared experts), grouped-query attention
M = Model("m", 2, 1024, 8, 32000, Attention(kv_heads=2), (1,), 4096, moe=MoE(experts=8, expert_ffn=512, top_k=2))
TP4 = Layout(1, 1, tp=4, micro_batch=1)
FP8 = Training(seq=2048, precision="fp8", fp8_scaling="tensor", tp_overlap="all")
SHARD = 2048 * 1024 / 4  # a micro-batch's hidden states on one tensor rank: tokens x hidden / tp
HBM = 3.35e12 * 0.8  # h100's HBM at the default hbm_efficiency
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


def test_ring_exchange_userbuffers_copy_and_reduce():
    """Per block (qkv + proj, fc1 + fc2) under FP8 gathers: forward the input shard copied
    into the buffer (2 x 1 byte) and the tp = 4 BF16 chunks summed into one shard (5 x 2);
    backward the output gradient's FP8 shard copied in (2) and the reduce-scattered BF16
    dgrad copied out (4)."""
    t = replace(FP8, ub_fprop_rs="ring_exchange")
    assert userbuffer_bytes(M, 0, t, TP4) == (12 * SHARD, 6 * SHARD, 12 * SHARD, 6 * SHARD)
    assert userbuffer_bytes(M, 1, t, TP4) == (12 * SHARD, 6 * SHARD, 0, 0)  # no userbuffers for the experts
    # BF16 gathers copy two bytes an element
    assert userbuffer_bytes(M, 0, replace(t, precision="bf16"), TP4) == (14 * SHARD, 8 * SHARD, 14 * SHARD, 8 * SHARD)


def test_pipelined_reduce_scatter_reduces_as_it_sends():
    t = replace(FP8, ub_fprop_rs="pipeline")
    assert userbuffer_bytes(M, 0, t, TP4) == (2 * SHARD, 6 * SHARD, 2 * SHARD, 6 * SHARD)


def test_no_userbuffers_unless_asked_for():
    assert userbuffer_bytes(M, 0, FP8, TP4) == (0, 0, 0, 0)
    assert userbuffer_bytes(M, 0, replace(FP8, ub_fprop_rs="ring_exchange", sequence_parallel=False), TP4) == (0, 0, 0, 0)


def test_the_sm_margin_slows_the_forward_row_parallel_multiplies():
    """set_sm_margin with num_sm = 1 leaves 131 of h100's 132 SMs: proj and fc2 take 132/131
    as long; nothing else changes."""
    t = replace(FP8, ub_fprop_rs="ring_exchange")
    base = te_tp_seconds(M, 0, H100, t, TP4)
    margin = te_tp_seconds(M, 0, H100, replace(t, ub_fprop_sm_margin=1), TP4)
    proj = gemms(H100, t, attention_shapes(M, t, TP4)[1:])[0]
    fc2 = gemms(H100, t, mlp_shapes(M, 0, t, TP4)[1:])[0]
    assert margin[0] - base[0] == pytest.approx(proj / 131)
    assert margin[2] - base[2] == pytest.approx(fc2 / 131)
    assert (margin[1], margin[3]) == (base[1], base[3])


def test_a_layer_pays_them_forward_and_again_in_a_full_recompute():
    t = replace(FP8, ub_fprop_rs="ring_exchange")
    on, off = (layer_costs(M, 0, H100, x, TP4, "none") for x in (t, FP8))
    assert on.attn_f - off.attn_f == pytest.approx(12 * SHARD / HBM)
    assert on.mlp_b - off.mlp_b == pytest.approx(6 * SHARD / HBM)
    on, off = (layer_costs(M, 0, H100, x, TP4, "full") for x in (t, FP8))
    assert on.attn_b - off.attn_b == pytest.approx((12 + 6) * SHARD / HBM)


def test_margin_past_the_sms_is_refused():
    with pytest.raises(PipesimError, match="ub_fprop_sm_margin = 132 leaves none of the cluster's 132 SMs"):
        te_tp_seconds(M, 0, H100, replace(FP8, ub_fprop_rs="pipeline", ub_fprop_sm_margin=132), TP4)


def test_userbuffers_need_tp_comm_overlap():
    with pytest.raises(PipesimError, match='set tp_overlap = "all"'):
        load_training(ub_fprop_rs="ring_exchange", tp_overlap="backward")


def test_bad_ub_fprop_rs_is_one_line(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('ub_fprop_rs = "ring"\n')
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--training", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "ub_fprop_rs must be one of none, ring_exchange, pipeline" in err


def test_bridge_rows_run_their_userbuffer_configs():
    """Megatron-Bridge v0.1.0rc4: userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 and
    ..._h16384_tp8_cp2_mbs1_seqlen8192 set proj_fprop and fc2_fprop to
    RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True); the Qwen3 recipes take Transformer
    Engine's defaults (pipeline, num_sm 16, set_sm_margin); DeepSeek-V3 runs no
    --tp-comm-overlap."""
    rows = {r["name"]: r["training"] for r in tomllib.loads(RUNS.read_text())["run"]}
    expected = {
        "Megatron-Bridge 25.09 Llama 3 70B, 64 H100": ("ring_exchange", 1),
        "Megatron-Bridge 25.09 Llama 3.1 405B, 1024 H100 (CP2)": ("ring_exchange", 1),
        "Megatron-Bridge 25.09 Qwen3-235B-A22B, 256 H100 (TP2 EP32)": ("pipeline", 16),
        "Megatron-Bridge 25.09 DeepSeek-V3, 1024 H100 (TP2 EP64)": ("none", 0),
    }
    for name, (method, sms) in expected.items():
        run = rows[name]
        assert (run.get("ub_fprop_rs", "none"), run.get("ub_fprop_sm_margin", 0)) == (method, sms), name
