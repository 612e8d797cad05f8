"""Megatron-Core's MoE layer as it issues: Transformer Engine's per-expert launches on
Hopper, the layer's issue floor, and the recipe flags for the dispatcher the plan priced."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.floors import layer_kernels
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.megatron_flags import moe_flags, moe_notes
from pipesim.planner.specs import load_cluster, load_training, model_from_table

QWEN3_30B = {
    "name": "qwen3-30b-a3b",
    "layers": 48,
    "hidden": 2048,
    "heads": 32,
    "vocab": 151936,
    "attention": {"kv_heads": 4, "head_dim": 128},
    "mlp": {"dense_layers": 0},
    "moe": {"experts": 128, "expert_ffn": 768, "top_k": 8},
}


@pytest.fixture
def qwen():
    return model_from_table(QWEN3_30B, "test")


def test_per_expert_launches_grow_with_local_experts(qwen):
    """TE's GroupedLinear on Hopper: one cuBLASLt multiply per local expert for each of the
    two expert multiplies in every pass; under per-tensor FP8 an amax, a scale and a cast
    kernel per expert for each of the two forward inputs and the two output gradients."""
    grouped = layer_kernels(qwen, 0, load_training(), 16)
    bf16 = layer_kernels(qwen, 0, load_training(moe_expert_gemms="per_expert"), 16)
    assert [p - g for p, g in zip(bf16, grouped)] == [30, 30, 30]  # 2 x (16 - 1) in each pass
    fp8 = layer_kernels(qwen, 0, load_training(moe_expert_gemms="per_expert", precision="fp8", fp8_scaling="tensor"), 16)
    assert [p - b for p, b in zip(fp8, bf16)] == [96, 96, 0]  # 2 operands x 3 kernels x 16 experts
    assert layer_kernels(qwen, 0, load_training(moe_expert_gemms="per_expert"), 1) == grouped
    dense = replace(qwen, moe_layers=qwen.moe_layers[1:], dense_ffn=6144)
    assert layer_kernels(dense, 0, load_training(moe_expert_gemms="per_expert"), 16) == layer_kernels(
        dense, 0, load_training(), 16
    )


def _pass_times(lc):
    """(forward, input gradient, weight gradient) of a layer with the collectives it waits for."""
    return (
        lc.attn_f + lc.mlp_f + lc.dispatch_f + lc.combine_f,
        lc.attn_b + lc.mlp_b + lc.dispatch_b + lc.combine_b,
        lc.attn_w + lc.mlp_w,
    )


def test_the_issue_floor_holds_and_ignores_the_tokens(qwen):
    """An MoE block issued op by op takes at least moe_layer_issue_ms whatever its tokens:
    Megatron's benchmark times Qwen3-30B-A3B's bare MoELayer (router, dispatcher, experts:
    moe_perf/__main__.py builds no attention) at 12.41 ms for 4,096 tokens a GPU and 12.42
    ms for 8,192. Shared over the passes by kernels, all-to-alls counted in. Forward, the
    dispatcher waits on the host for the routing, so the attention's forward comes on top
    of the block's share; backward nothing waits and the whole pass takes its share."""
    c = load_cluster("h100").resized(8)
    t = load_training(seq=4096, precision="bf16", moe_dispatcher="deepep", moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4)
    small, large = (layer_costs(qwen, 0, c, t, Layout(pp=1, dp=8, ep=8, micro_batch=mb), "none") for mb in (1, 2))
    unfloored = layer_costs(qwen, 0, c, replace(t, moe_layer_issue_ms=0.0), Layout(pp=1, dp=8, ep=8), "none")
    kf, kb, kw = layer_kernels(qwen, 0, t, 16)
    share_f = 12.4e-3 * kf / (kf + kb + kw)
    # forward: the MoE block (its multiplies and all-to-alls) takes the share, attention on top
    assert small.mlp_f + small.dispatch_f + small.combine_f == pytest.approx(share_f)
    assert small.attn_f == unfloored.attn_f > 0
    # backward: the input and weight gradients of the whole layer take the rest
    fwd, bwd, wgt = _pass_times(small)
    assert bwd + wgt == pytest.approx(12.4e-3 - share_f)
    assert sum(_pass_times(small)) == pytest.approx(12.4e-3 + unfloored.attn_f)  # the GPU's work is under the floor
    # twice the tokens: twice the GPU's work, about the same time (a pass whose work passes
    # its share of the floor sets its own time)
    work = [
        sum(
            _pass_times(
                layer_costs(qwen, 0, c, replace(t, moe_layer_issue_ms=0.0), Layout(pp=1, dp=8, ep=8, micro_batch=mb), "none")
            )
        )
        for mb in (1, 2)
    ]
    assert work[1] > 1.8 * work[0]
    assert 12.4e-3 <= sum(_pass_times(large)) - large.attn_f < 1.1 * 12.4e-3
    # measured in BF16: per-tensor FP8 adds the issue of its per-expert casts, 96 a pass at
    # 3.3 us each, to the forward and the backward
    fp8 = replace(t, precision="fp8", fp8_scaling="tensor")
    fp8_layer = layer_costs(qwen, 0, c, fp8, Layout(pp=1, dp=8, ep=8), "none")
    assert sum(_pass_times(fp8_layer)) - fp8_layer.attn_f == pytest.approx(12.4e-3 + 2 * 96 * 3.3e-6)
    off = layer_costs(qwen, 0, c, replace(t, moe_layer_issue_ms=0.0), Layout(pp=1, dp=8, ep=8), "none")
    assert sum(_pass_times(off)) < 6e-3  # the same layer's GPU work: a third of the measured layer
    graphs = layer_costs(qwen, 0, c, replace(t, cuda_graphs=True), Layout(pp=1, dp=8, ep=8), "none")
    assert sum(_pass_times(graphs)) <= sum(_pass_times(off))  # one graph launch: no issue floor
    big = layer_costs(qwen, 0, c, t, Layout(pp=1, dp=8, ep=8, micro_batch=16), "none")
    assert sum(_pass_times(big)) > 12.4e-3 * 1.5  # enough work and the GPU sets the time again


def test_padded_dispatch_lets_the_host_run_ahead_through_the_forward(qwen):
    """Padded to capacity, the all-to-all's splits are known on the host (Megatron-Core's
    cuda_sync_point stays no_sync), so nothing drains the queue: the forward's attention
    and MoE block share the forward's part of the floor as one stream of kernels."""
    c = load_cluster("h100").resized(8)
    t = load_training(
        seq=4096, precision="bf16", moe_dispatcher="alltoall", moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4
    )
    lay = Layout(pp=1, dp=8, ep=8)
    synced, padded = (layer_costs(qwen, 0, c, replace(t, moe_pad_to_capacity=p), lay, "none") for p in (False, True))
    kf, kb, kw = layer_kernels(qwen, 0, t, 16)
    share_f = 12.4e-3 * kf / (kf + kb + kw)
    assert _pass_times(padded)[0] == pytest.approx(share_f)  # attention inside the forward's share
    assert _pass_times(synced)[0] == pytest.approx(share_f + synced.attn_f)  # on top of it
    assert _pass_times(padded)[1:] == pytest.approx(_pass_times(synced)[1:])  # the backward never waits
    assert "--moe-pad-expert-input-to-capacity" in moe_flags(replace(t, moe_pad_to_capacity=True))
    with pytest.raises(PipesimError, match="DeepEP takes no padding"):
        load_training(moe_pad_to_capacity=True, moe_dispatcher="deepep")


def test_the_issue_floor_leaves_dense_layers_alone(qwen):
    dense = replace(qwen, moe_layers=(), dense_ffn=6144, moe=None)
    c = load_cluster("h100").resized(8)
    lay = Layout(pp=1, dp=8)
    on, off = (layer_costs(dense, 0, c, load_training(moe_layer_issue_ms=x), lay, "none") for x in (50.0, 0.0))
    assert on == off


def test_bad_values_are_refused_in_one_line():
    with pytest.raises(PipesimError, match='moe_expert_gemms must be "grouped" or "per_expert"'):
        load_training(moe_expert_gemms="looped")
    with pytest.raises(PipesimError, match="moe_layer_issue_ms"):
        load_training(moe_layer_issue_ms=-1)


def test_recipe_names_the_dispatcher_the_plan_priced():
    assert moe_flags(load_training(moe_dispatcher="alltoall")) == ["--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm"]
    deepep = moe_flags(load_training(moe_dispatcher="deepep"))
    assert deepep[:2] == ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    issued = moe_notes(load_training(moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4))
    assert len(issued) == 1 and "12.4 ms" in issued[0] and "--cuda-graph-impl transformer_engine" in issued[0]
    assert moe_notes(load_training(moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4, cuda_graphs=True)) == []
    assert "per_expert" in moe_notes(load_training())[0]  # grouped kernels are not what Megatron runs on Hopper


def test_the_graph_capture_the_note_names_passes_megatrons_checks():
    # Megatron-LM d98e8a6, megatron/core/transformer/transformer_config.py: under
    # moe_token_dispatcher_type "flex" with the deepep backend, moe_pad_expert_input_to_capacity
    # raises ("Flex token dispatcher with deepep backend does not support
    # moe_pad_expert_input_to_capacity"); under overlap_moe_expert_parallel_comm with
    # cuda_graph_impl "transformer_engine", moe and mlp in cuda_graph_modules are refused
    def note(dispatcher: str, combined: bool = False) -> str:
        t = load_training(moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4, moe_dispatcher=dispatcher)
        (text,) = moe_notes(t, combined)
        return text

    deepep = note("deepep")
    assert "--moe-pad-expert-input-to-capacity" in deepep and "--moe-token-dispatcher-type alltoall" in deepep
    alltoall = note("alltoall")
    assert "--moe-pad-expert-input-to-capacity" in alltoall and "dispatcher-type" not in alltoall
    combined = note("alltoall", combined=True)
    assert "--cuda-graph-modules attn moe" not in combined and "--moe-pad-expert-input-to-capacity" not in combined
