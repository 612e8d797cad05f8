"""``tp_overlap = "micro_pipeline"``: torchtitan's AsyncTP as torch Inductor's
micro-pipeline pass ran it in late 2024 (tp_overlap.py): the collectives it fuses with a
multiply overlap as under "all", the backward's input-gradient reduce-scatters (fed by a
sum of multiplies, which no pattern matches) wait exposed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.ir import Op
from pipesim.planner.layer_costs import head_costs, layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Training, load_cluster, load_model, load_training
from pipesim.planner.stages import component_costs

M, C = load_model("llama3-8b"), load_cluster("h100")
LAY = Layout(pp=1, dp=1, tp=8)
# DTensor's sequence parallelism (the gathered input kept for the weight gradient), whole-GPU
# numbers without the small-kernel floors
T = Training(seq=4096, global_batch=8, sequence_parallel=True, sp_saves_gathered=True, kernel_floor_us=0, host_us_per_kernel=0)
# one reduce-scatter (or all-gather) of 4096 tokens x 4096 hidden x 2 bytes over tp8 in one
# H100 node, by hand as test_tp_overlap.py's test_one_layer_half_by_hand states it: NCCL's
# Simple protocol, 8.4 + 7 x 3.4 us of latency and 7/8 x 32 MiB at 360 GB/s
ONE = (8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * 4096 * 4096 * 2 / 360e9


def _layer(mode: str, t: Training = T, m=M, recompute: str = "none"):
    return layer_costs(m, 0, C, replace(t, tp_overlap=mode), LAY, recompute)


def test_backward_reduce_scatters_move_onto_the_compute_stream():
    """Each half's backward keeps two collectives: the row-parallel output gradient's
    all-gather (fused with the input-gradient multiply, overlapped) and the column-parallel
    input gradient's reduce-scatter (exposed): "all" overlaps both, "micro_pipeline" only
    the gather and adds the reduce-scatter to the half's backward compute."""
    every, micro = _layer("all"), _layer("micro_pipeline")
    assert ONE == pytest.approx(113.76e-6, rel=1e-3)
    assert every.dispatch_b == every.combine_b == pytest.approx(2 * ONE)
    assert micro.dispatch_b == micro.combine_b == pytest.approx(ONE)
    assert micro.attn_b - every.attn_b == pytest.approx(ONE)
    assert micro.mlp_b - every.mlp_b == pytest.approx(ONE)
    # the forward's all-gather and reduce-scatter a half are fused, as under "all"
    assert micro.dispatch_f == every.dispatch_f == pytest.approx(2 * ONE)
    assert (micro.attn_f, micro.mlp_f, micro.attn_w, micro.mlp_w) == (every.attn_f, every.mlp_f, every.attn_w, every.mlp_w)


def test_full_recompute_reruns_the_fused_forward_collectives():
    """Under full recomputation the backward graph reruns the forward, whose gathers and
    reduce-scatters the pass fuses there too: only the two reduce-scatters stay exposed."""
    every, micro = _layer("all", recompute="full"), _layer("micro_pipeline", recompute="full")
    assert every.dispatch_b == pytest.approx(4 * ONE)  # the rerun forward's two and the backward's two
    assert micro.dispatch_b == pytest.approx(3 * ONE)
    assert micro.attn_b - every.attn_b == pytest.approx(ONE)


def test_lies_between_none_and_all():
    """The backward op of a dense layer: slower than "all" by the exposed reduce-scatters,
    faster than "none"."""

    def backward(mode):
        return component_costs(M, C, replace(T, tp_overlap=mode), LAY, 1, "none").op_time(Op("BW", 0, 0), 0)

    assert backward("none") > backward("micro_pipeline") > backward("all")


def test_head_reduce_scatter_is_one_multiplys_and_fuses():
    """The output head's input gradient comes from one multiply, so its reduce-scatter
    matches the pattern: the head costs what it does under "all"."""
    assert head_costs(M, C, replace(T, tp_overlap="micro_pipeline"), LAY) == head_costs(M, C, replace(T, tp_overlap="all"), LAY)


def test_without_sequence_parallelism_nothing_is_fused():
    """Without sequence parallelism the collectives are all-reduces, which the pass never
    matches: everything as under "none"."""
    t = replace(T, sequence_parallel=False)
    assert _layer("micro_pipeline", t) == _layer("none", t)
    costs = component_costs(M, C, replace(t, tp_overlap="micro_pipeline"), LAY, 1, "none")
    assert not costs.lone_overlap


def test_moe_lone_ops_do_not_split():
    """An MoE model's lone ops do not split their micro-batch, so nothing models the fused
    collectives: exposed, as under "none"."""
    m = load_model("deepseek-v3")
    t = replace(T, tp_overlap="micro_pipeline")
    assert not component_costs(m, C, t, Layout(pp=1, dp=1, tp=8), 61, "none").lone_overlap
    assert component_costs(M, C, t, LAY, 1, "none").lone_overlap


def test_training_files_name_it():
    assert load_training(base={"tp_overlap": "micro_pipeline"}).tp_overlap == "micro_pipeline"
