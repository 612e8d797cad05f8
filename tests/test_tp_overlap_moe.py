"""An MoE model's tensor-parallel collectives at ``tp_overlap = "all"``, as Megatron-Core's
--tp-comm-overlap runs them (planner/tp_overlap.py).

What the expected values say, read in the code: Megatron-LM d98e8a6's
megatron/core/extensions/transformer_engine.py gives Transformer Engine's userbuffers to
the linears named qkv, proj, fc1 and fc2 (TELinear :1189-1205, ub_overlap_ag and
ub_overlap_rs, both off for ``is_expert``; TELayerNormColumnParallelLinear :1456-1487, the
bulk dgrad and wgrad flags and ub_overlap_ag); Transformer Engine 2.7 (fedd9ddc)
pytorch/module/linear.py:1134-1160 turns those into, for a column-parallel linear, the
input's all-gather overlapped with its forward multiply, the bulk re-gather with its
input-gradient multiply and the bulk reduce-scatter with its weight-gradient multiply,
and for a row-parallel linear the output's reduce-scatter overlapped with its forward
multiply and the output gradient's all-gather with its input-gradient multiply. Without
--tp-comm-overlap (``"backward"``) only the column-parallel backward pair runs beside its
multiplies. So, per half with userbuffers, "all" takes off "backward"'s exposed seconds
the two forward multiplies (forward) and the row-parallel input-gradient multiply
(backward), where every collective is longer than its multiply.

The routed experts' grouped linears get none, and a model with MLA none at all past its
first projection: TELinear sets ``self.config.tp_comm_overlap = False`` on the config
every layer shares when MLA builds its "q_down_proj" (:1176-1186;
transformer/multi_latent_attention.py:510-614).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.candidates import Candidate
from pipesim.planner.compute import attention_shapes, gemms, mlp_shapes
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.results import Plan, Result
from pipesim.planner.specs import Training, load_cluster, load_model, load_training
from pipesim.planner.te_tensor_parallel import userbuffers
from pipesim.planner.tp_overlap import userbuffer_halves

# Mixtral 8x22B's shape with one dense layer first (layer 0 dense, layer 1 MoE)
M = replace(load_model("mixtral-8x22b"), moe_layers=tuple(range(1, 56)), dense_ffn=16384)
C = load_cluster("h100")
# NVLink 10,000 times slower: every collective (seconds) far longer than any multiply
# (well under a millisecond), so each hides only its multiply's time
SLOW = replace(C, nvlink_gbps=C.nvlink_gbps / 1e4)
LAY = Layout(pp=1, dp=1, tp=8)  # ep1: no all-to-all, so the layer's communication is all tensor-parallel
T = Training(seq=4096, global_batch=8, kernel_floor_us=0, host_us_per_kernel=0)


def _ring1() -> float:
    """One all-gather or reduce-scatter of a micro-batch's hidden states (4096 tokens x 6144
    x 2 bytes) over tp8 on the slowed NVLink, by hand as NCCL's tuning model prices it: the
    Simple protocol (8.4 us and 3.4 us a step, the whole rate) is the fastest this slow;
    7/8 of the buffer crosses each link."""
    size = 4096 * 6144 * 2
    return (8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * size / (SLOW.nvlink_gbps * 1e9)


def _costs(mode: str, layer: int):
    return layer_costs(M, layer, SLOW, replace(T, tp_overlap=mode), LAY, "none")


def _fbw(shapes) -> tuple[float, float, float]:
    return gemms(SLOW, T, shapes)


def test_moe_layer_attention_hides_forward_and_row_gather_under_userbuffers():
    """The MoE layer's attention: "backward" leaves the forward's gather and
    reduce-scatter and the backward's output-gradient gather exposed; "all" hides each
    under its own multiply. Its MLP (the routed experts) has no tensor-parallel
    collective in either."""
    qkv, proj = (_fbw([s]) for s in attention_shapes(M, T, LAY))
    back, every = _costs("backward", 1), _costs("all", 1)
    assert back.dispatch_f == pytest.approx(2 * _ring1(), rel=1e-6)
    assert every.dispatch_f == pytest.approx(2 * _ring1() - qkv[0] - proj[0], rel=1e-12)
    # backward: the row gather (exposed in "backward"), the re-gather and the reduce-scatter
    assert back.dispatch_b == pytest.approx(3 * _ring1() - qkv[1] - qkv[2], rel=1e-12)
    assert every.dispatch_b == pytest.approx(3 * _ring1() - proj[1] - qkv[1] - qkv[2], rel=1e-12)
    assert back.combine_f == every.combine_f == back.combine_b == every.combine_b == 0.0


def test_dense_layer_of_an_moe_model_hides_its_mlp_too():
    """A dense layer of the MoE model: fc1 and fc2 run userbuffers as qkv and proj do."""
    fc1, fc2 = (_fbw([s]) for s in mlp_shapes(M, 0, T, LAY))
    back, every = _costs("backward", 0), _costs("all", 0)
    assert back.combine_f - every.combine_f == pytest.approx(fc1[0] + fc2[0], rel=1e-6)
    assert back.combine_b - every.combine_b == pytest.approx(fc2[1], rel=1e-6)
    assert every.combine_f == pytest.approx(2 * _ring1() - fc1[0] - fc2[0], rel=1e-12)


def test_dense_model_at_all_still_counts_its_collectives_for_the_split_halves():
    """A dense model's lone ops split their micro-batch in two at "all" and overlap the
    collectives with the other half (stages.py): the layer counts them in full."""
    dense = replace(M, moe=None, moe_layers=())
    lc = layer_costs(dense, 1, SLOW, replace(T, tp_overlap="all"), LAY, "none")
    assert lc.dispatch_f == lc.combine_f == pytest.approx(2 * _ring1(), rel=1e-6)
    assert lc.dispatch_b == lc.combine_b == pytest.approx(3 * _ring1(), rel=1e-6)


@pytest.mark.parametrize(
    "model, layer, halves",
    [
        ("llama3-70b", 0, (True, True)),  # qkv, proj; fc1, fc2
        ("mixtral-8x22b", 0, (True, False)),  # the experts are TEGroupedLinear, is_expert
        ("deepseek-v3", 0, (False, False)),  # a dense layer, but MLA turned the overlap off
        ("deepseek-v3", 10, (False, False)),
    ],
)
def test_which_halves_run_userbuffers(model, layer, halves):
    assert userbuffer_halves(load_model(model), layer) == halves


def test_mla_model_prices_no_userbuffer_copies_on_its_dense_mlp():
    """Transformer Engine's userbuffer copies (te_tensor_parallel.py) follow the same
    halves: none in DeepSeek-V3's dense first layers."""
    t = replace(T, ub_fprop_rs="pipeline", tp_overlap="all")
    assert userbuffers(load_model("deepseek-v3"), 0, t, Layout(pp=1, dp=1, tp=2)) == (False, False)
    assert userbuffers(M, 0, t, LAY) == (True, True)


def test_mla_model_at_all_is_priced_as_backward():
    """DeepSeek-V3 at "all" runs no userbuffers (above): each layer as at "backward"."""
    ds = load_model("deepseek-v3")
    lay = Layout(pp=1, dp=1, tp=2)
    for layer in (0, 10):
        back, every = (layer_costs(ds, layer, C, replace(T, tp_overlap=x), lay, "none") for x in ("backward", "all"))
        assert every == back


def test_megatron_recipe_for_an_moe_plan_keeps_the_flag_without_a_caveat():
    """The plan now prices what --tp-comm-overlap runs in an MoE model, so the recipe
    asks for it with no note that the step may be shorter than priced."""
    m = load_model("mixtral-8x22b")
    plan = Plan(m, load_cluster("h100", 64), load_training(seq=4096, global_batch=512))
    plan.results.append(Result(Candidate(Layout(pp=1, dp=32, tp=2, ep=8), "1f1b", None, "selective", 16), True, step_time=1.0))
    meg = recipe(plan)["megatron"]
    assert "--tp-comm-overlap" in meg["flags"]
    assert not any("shorter than priced" in n for n in meg["notes"])
