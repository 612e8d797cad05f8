"""An MoE layer's shared expert is tensor-parallel over the attention's tensor group, and
its collectives are priced as a dense MLP's on its own width (planner/tp_overlap.py).

What the expected values say, read in the code. Megatron-Core core_v0.14.0:
moe/moe_layer.py:204-220 runs ``self.shared_experts(residual)`` on the MoE block's
sequence shard inside ``experts_compute``; models/gpt/moe_module_specs.py:49-62 builds it
from the same column-parallel fc1 and row-parallel fc2 (TEColumnParallelLinear,
TERowParallelLinear) as a dense MLP, ``is_expert`` left false, so Transformer Engine
gathers the sequence shard before fc1 and reduce-scatters fc2's output, forward, and
backward gathers fc2's output gradient, re-gathers fc1's input and reduce-scatters fc1's
input gradient (TE 2.7 fedd9ddc pytorch/module/linear.py). The all-to-all dispatcher's own
gather is over the expert tensor group after the all-to-all (moe/token_dispatcher.py:66,
:650-660), not shared with it. Under --tp-comm-overlap fc1 and fc2 keep TELinear's
userbuffers (extensions/transformer_engine.py:272-289: ub_overlap_ag, ub_overlap_rs, off
only for ``is_expert``), but not the bulk dgrad and wgrad flags, which only
TELayerNormColumnParallelLinear receives (:482-483).

So, with every collective far longer than any multiply (slowed NVLink), per layer and
micro-batch: forward a gather and a reduce-scatter, less fc1's and fc2's forward
multiplies at "all"; backward three collectives, less fc1's input- and weight-gradient
multiplies at "backward" and "all", and fc2's input-gradient multiply at "all".
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.compute import gemms
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Training, load_cluster, load_model
from pipesim.planner.te_tensor_parallel import userbuffer_bytes

BASE = load_model("mixtral-8x22b")  # every layer MoE: 8 experts of 16384, hidden 6144, GQA
M = replace(BASE, moe=replace(BASE.moe, shared_experts=1))
C = load_cluster("h100")
# NVLink 10,000 times slower: every collective (seconds) far longer than any multiply
SLOW = replace(C, nvlink_gbps=C.nvlink_gbps / 1e4)
LAY = Layout(pp=1, dp=1, tp=8)  # ep1: no all-to-all, so the MoE block's communication is the shared expert's
T = Training(seq=4096, global_batch=8, kernel_floor_us=0, host_us_per_kernel=0)
TOKENS, HIDDEN, FFN = 4096, 6144, 16384


def _ring1() -> float:
    """One all-gather or reduce-scatter of a micro-batch's hidden states (4096 tokens x 6144
    x 2 bytes) over tp8 on the slowed NVLink, by hand as NCCL's tuning model prices it: the
    Simple protocol (8.4 us and 3.4 us a step, the whole rate) is the fastest this slow;
    7/8 of the buffer crosses each link (as tests/test_tp_overlap_moe.py)."""
    size = TOKENS * HIDDEN * 2
    return (8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * size / (SLOW.nvlink_gbps * 1e9)


def _shared_fc():
    """(F, B, W) seconds of the shared expert's fc1 (gate and up, 2 x 16384 / 8 wide) and
    fc2 (16384 / 8 deep) on the micro-batch's 4096 gathered tokens."""
    fc1 = gemms(SLOW, T, [(TOKENS, 2 * FFN / 8, HIDDEN, 1)])
    fc2 = gemms(SLOW, T, [(TOKENS, HIDDEN, FFN / 8, 1)])
    return fc1, fc2


def _costs(model, mode: str, **kw):
    return layer_costs(model, 0, SLOW, replace(T, tp_overlap=mode, **kw), LAY, "none")


@pytest.mark.parametrize("mode", ["none", "backward", "all"])
def test_shared_expert_collectives_are_priced(mode):
    fc1, fc2 = _shared_fc()
    lc = _costs(M, mode)
    forward, backward = 2 * _ring1(), 3 * _ring1()
    if mode in ("backward", "all"):  # fc1's re-gather and reduce-scatter beside its dgrad and wgrad
        backward -= fc1[1] + fc1[2]
    if mode == "all":  # userbuffers: the forward pair under fc1 and fc2, fc2's gradient gather under its dgrad
        forward -= fc1[0] + fc2[0]
        backward -= fc2[1]
    assert lc.combine_f == pytest.approx(forward, rel=1e-9)
    assert lc.combine_b == pytest.approx(backward, rel=1e-9)


def test_without_a_shared_expert_the_moe_block_has_no_tensor_parallel_collective():
    lc = _costs(BASE, "none")
    assert lc.combine_f == lc.combine_b == 0.0


def test_on_the_compute_stream_under_combined_1f1b():
    """Combined 1F1B runs the shared expert in the "mlp" node on comp_stream
    (core_v0.14.0 models/gpt/fine_grained_callables.py:384-412,
    models/common/model_chunk_schedule_plan.py:141-142): its collectives move from the
    combine onto the MLP's compute."""
    apart, paired = _costs(M, "none"), _costs(M, "none", pair_tp_on_compute=True)
    assert paired.combine_f == pytest.approx(0.0, abs=1e-12)
    assert paired.combine_b == pytest.approx(0.0, abs=1e-12)
    assert paired.mlp_f - apart.mlp_f == pytest.approx(2 * _ring1(), rel=1e-9)
    assert paired.mlp_b - apart.mlp_b == pytest.approx(3 * _ring1(), rel=1e-9)


def test_shared_expert_userbuffer_copies_without_the_bulk_dgrad():
    """Under --tp-comm-overlap the shared fc1 copies its input shard into the buffer and
    fc2 its output gradient's shard (2 bytes an element, read and written); fc1, a
    TELinear without the bulk flags, copies no reduce-scattered dgrad out."""
    t = replace(T, tp_overlap="all", ub_fprop_rs="pipeline")
    shard = TOKENS * HIDDEN / 8
    assert userbuffer_bytes(M, 0, t, LAY)[2:] == pytest.approx((2 * 2 * shard, 2 * 2 * shard), rel=1e-12)
