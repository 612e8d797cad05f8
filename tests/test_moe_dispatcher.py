"""How an MoE layer's token copies reach their experts: DeepEP's once-per-node dispatch
against Megatron-Core's all-to-all dispatcher, which sends every routed copy to its
expert's GPU and then regroups the received copies by local expert. Expected values are
worked out by hand from the bytes each moves."""

from __future__ import annotations

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.collectives import moe_comm
from pipesim.planner.layer_costs import layer_costs, local_sort_seconds
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, MoE, Training, load_cluster, load_training

# Qwen3-235B-A22B's MoE shape (its config.json): hidden 4096, 128 experts of width 1536, top-8
QWEN = Model(
    name="qwen3-moe",
    layers=4,
    hidden=4096,
    heads=64,
    vocab=151936,
    attention=Attention(kv_heads=4, head_dim=128),
    moe_layers=(0, 1, 2, 3),
    dense_ffn=0,
    moe=MoE(experts=128, expert_ffn=1536, top_k=8),
)
H100 = load_cluster("h100")  # 8 GPUs a node on NVLink (360 GB/s), 50 GB/s a GPU between nodes


def comm(dispatcher: str, gpus: int, lay: Layout) -> tuple[float, float, float, float]:
    return moe_comm(QWEN, H100.resized(gpus), Training(seq=4096, moe_dispatcher=dispatcher), lay)


def test_alltoall_sends_every_copy_across_nodes():
    """EP32 over four 8-GPU nodes, 4096 tokens a GPU, top-8: each copy lands on one of 32
    GPUs, 24 of them on other nodes, so 8 x 24/32 = 6 copies a token cross the network at
    4096 x 2 bytes each (the NVLink share, 8 x 7/32 copies at 360 GB/s, is faster), at
    NCCL's all-to-all share 0.92 of 50 GB/s, after its latency: 6.6 us, 0.6 us for each of
    the 7 peers in the node and 2.7 us for each of the 24 outside (planner/nccl.py)."""
    lay = Layout(pp=1, dp=32, ep=32)
    dispatch = comm("alltoall", 32, lay)[0]
    assert dispatch == pytest.approx(4096 * 6 * 4096 * 2 / (50e9 * 0.92) + (6.6 + 7 * 0.6 + 24 * 2.7) * 1e-6)


def test_deepep_sends_a_token_once_per_node():
    """The same layout through DeepEP: a token goes once to each other node holding one of
    its 8 experts, 4 x (1 - (3/4)^8) nodes reached, 3/4 of them elsewhere: 2.70 copies,
    at line rate (DeepEP's own kernels, not NCCL's all-to-all)."""
    lay = Layout(pp=1, dp=32, ep=32)
    reached = 4 * (1 - 0.75**8)
    dispatch = comm("deepep", 32, lay)[0]
    assert dispatch == pytest.approx(4096 * reached * 0.75 * 4096 * 2 / 50e9)
    latency = (6.6 + 7 * 0.6 + 24 * 2.7) * 1e-6
    assert (comm("alltoall", 32, lay)[0] - latency) / dispatch == pytest.approx(6 / (reached * 0.75) / 0.92)


def test_dispatchers_agree_inside_one_node():
    """EP8 on one node: both send the 7/8 of each token's 8 copies bound for other GPUs
    over NVLink; NCCL's all-to-all also pays its latency, 6.6 + 7 x 0.6 = 10.8 us."""
    lay = Layout(pp=1, dp=8, ep=8)
    expected = 4096 * 8 * 7 / 8 * 4096 * 2 / 360e9
    assert comm("alltoall", 8, lay) == pytest.approx((expected + 10.8e-6,) * 4)
    assert comm("deepep", 8, lay) == pytest.approx((expected,) * 4)


def test_alltoall_regroups_received_copies_by_local_expert():
    """EP8 with 16 local experts: the all-to-all dispatcher sorts the 4096 x 8 received
    copies by expert and back (two reads and two writes of 4096 x 2 bytes each) forward,
    and again backward, at 80% of 3.35 TB/s; DeepEP, or one local expert a GPU, has no
    second regrouping."""
    lay = Layout(pp=1, dp=8, ep=8)
    c = H100.resized(8)
    t = Training(seq=4096, moe_dispatcher="alltoall")
    expected = 2 * 4096 * 8 * 4096 * 2 * 2 / (3.35e12 * 0.8)
    assert local_sort_seconds(QWEN, 1, c, t, lay) == pytest.approx(expected)
    deepep = Training(seq=4096, moe_dispatcher="deepep")
    assert local_sort_seconds(QWEN, 1, c, deepep, lay) == 0.0
    one_each = Layout(pp=1, dp=128, ep=128)
    assert local_sort_seconds(QWEN, 1, H100.resized(128), t, one_each) == 0.0
    a, d = (layer_costs(QWEN, 1, c, x, lay, "none") for x in (t, deepep))
    assert a.mlp_f - d.mlp_f == pytest.approx(expected)
    assert a.mlp_b - d.mlp_b == pytest.approx(expected)


def test_unknown_dispatcher_is_one_line():
    with pytest.raises(PipesimError, match='moe_dispatcher must be "deepep" or "alltoall", got \'nccl\''):
        load_training(base={"moe_dispatcher": "nccl"})
