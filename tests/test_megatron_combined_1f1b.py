"""Megatron-Core's combined 1F1B (its EP all-to-all overlap) as pipesim prices it: where a
layer's tensor-parallel collectives wait, and the MTP module's join on a TP2 last stage.
Expected values from Megatron-Core core_v0.14.0's code, cited in each test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.collectives import moe_comm
from pipesim.planner.compute import gemm_fbw
from pipesim.planner.layer_costs import layer_costs, mtp_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training

M = load_model("deepseek-v3")
C = load_cluster("h100").resized(1024)
T = load_training(base={**model_training("deepseek-v3"), "precision": "fp8", "fp8_scaling": "tensor", "tp_overlap": "backward"})
LAY = Layout(pp=8, dp=64, tp=2, ep=64)


def test_dense_layer_communicates_nothing_beside_a_pair_under_combined_1f1b():
    """A dense layer's moe_dispatch and moe_combine nodes are no-ops
    (model_chunk_schedule_plan.py:141-150): its sequence-parallel collectives run inside
    the attn and mlp nodes, on comp_stream, so nothing of it is left to the comm stream."""
    lc = layer_costs(M, 0, C, replace(T, pair_tp_on_compute=True), LAY, "selective")
    assert (lc.dispatch_f, lc.combine_f, lc.dispatch_b, lc.combine_b) == (0.0, 0.0, 0.0, 0.0)
    assert layer_costs(M, 0, C, T, LAY, "selective").dispatch_f > 0  # the other placement keeps it on comm


def test_moe_layer_keeps_only_its_all_to_alls_on_the_comm_stream():
    """An MoE layer's comm_stream nodes are moe_dispatch and moe_combine alone
    (model_chunk_schedule_plan.py:144-146): the dispatch left beside the pair is DeepEP's
    all-to-all (collectives.moe_comm), without the attention's gather and reduce-scatter."""
    t = replace(T, pair_tp_on_compute=True)
    lc = layer_costs(M, M.layers - 1, C, t, LAY, "selective")
    a2a = moe_comm(M, C, t, LAY)
    assert lc.dispatch_f == pytest.approx(a2a[0])
    assert lc.dispatch_b == pytest.approx(a2a[2])


def test_mtp_projection_is_column_parallel():
    """eh_proj is a column-parallel 2h -> h linear with gather_output=False
    (multi_token_prediction.py:457-467): each of the tp ranks multiplies its h / tp output
    columns, so the module's weight gradient beyond its layer's is that 2h x h/tp one."""
    block = layer_costs(M, M.layers - 1, C, T, LAY, "selective")
    joined = mtp_costs(M, C, T, LAY, "selective")[0]
    tokens = LAY.tokens(T.seq)
    assert joined.attn_w - block.attn_w == pytest.approx(gemm_fbw(C, T, tokens, M.hidden / 2, 2 * M.hidden)[2])
