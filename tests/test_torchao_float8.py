"""torchao's tensorwise Float8 linears as torchtitan ran them (``fp8_casts = "torchao"``,
``fsdp_float8_all_gather``): the bytes of their casts and of FSDP's float8 all-gather,
worked by hand from what torchao eab345c's kernels read and write.

The model is test_planner.py's tiny GQA model: hidden 64, 4 heads of 16, 2 KV heads,
SwiGLU FFN 128. Its multiplies: wq, wk, wv on the attention norm's output (outputs 64 +
32 + 32 = 128), wo on the attention's output (64 -> 64), w1 and w3 on the MLP norm's
output (128 + 128 = 256), w2 on SwiGLU's output (128 -> 64). One micro-batch of 32 tokens.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import test_nccl
from pipesim.errors import PipesimError
from pipesim.ir import Placement
from pipesim.planner.compute import gemm_fbw, gemms, mlp_shapes
from pipesim.planner.elementwise import elementwise_terms
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Cluster, Training, load_cluster, load_training
from pipesim.planner.stages import component_costs
from pipesim.planner.step import step_sync
from test_planner_costs import TINY

TORCHAO = Training(seq=32, precision="fp8", fp8_scaling="tensor", fp8_casts="torchao")
LAY = Layout(pp=1, dp=1)
T = 32  # tokens of the micro-batch


def cast_rows(t: Training) -> dict[str, tuple[float, float]]:
    """The "fp8 casts" rows (forward, backward) by block, in bytes for the micro-batch."""
    return {b: (f * 2 * T, w * 2 * T) for b, term, f, w in elementwise_terms(TINY, 0, t, LAY) if term == "fp8 casts"}


def test_torchao_casts_by_hand():
    """Each cast under torch.compile (torchao roofline_utils.py): read bf16 2, write fp8
    row-major 1 and column-major 1, Inductor's re-read of its own fp8 output 1: 5 bytes an
    element, the amax riding in the producer; a weight's amax reads it first: 7. The
    attention's output comes from no Inductor kernel: its amax reads it (2)."""
    rows = cast_rows(TORCHAO)
    attn_forward = (
        T * 64 * 5  # the attention norm's output, cast once for wq, wk and wv
        + T * 64 * 5  # the attention's output, wo's input
        + T * 64 * 2  # ... read first for its amax
        + (128 * 64 + 64 * 64) * 7  # the weights of wq, wk, wv and wo, every micro-batch
    )
    attn_backward = T * 128 * 5 + T * 64 * 5  # the gradients of q, k, v and of wo's output
    mlp_forward = T * 64 * 5 + T * 128 * 5 + (256 * 64 + 64 * 128) * 7
    mlp_backward = T * 256 * 5 + T * 64 * 5  # the gradients of w1 and w3's outputs and of w2's
    assert rows["attention"] == pytest.approx((attn_forward, attn_backward))
    assert rows["mlp"] == pytest.approx((mlp_forward, mlp_backward))
    assert (attn_forward, mlp_forward) == (110592, 202752)


def test_float8_all_gather_moves_the_weight_casts_out_of_the_micro_batch():
    """With FSDP's float8 all-gather the weights arrive in fp8: no micro-batch casts them,
    and the input-gradient multiply copies each to the other layout in the backward (read
    1, write 1: preprocess_addmm's ``b.t().contiguous().t()``)."""
    rows = cast_rows(replace(TORCHAO, zero=3, fsdp_float8_all_gather=True))
    assert rows["attention"] == pytest.approx((T * 64 * 5 * 2 + T * 64 * 2, T * 128 * 5 + T * 64 * 5 + (128 * 64 + 64 * 64) * 2))
    assert rows["mlp"] == pytest.approx((T * 64 * 5 + T * 128 * 5, T * 256 * 5 + T * 64 * 5 + (256 * 64 + 64 * 128) * 2))
    # without ZeRO-3 there is no FSDP all-gather: the weights are cast every micro-batch
    assert cast_rows(replace(TORCHAO, fsdp_float8_all_gather=True)) == cast_rows(TORCHAO)


def test_transformer_engine_casts_beside_torchao():
    """Block scaling under the default fp8_casts (DeepSeek-V3's casts): 1.5 elements per
    multiply input forward (read 2, write 1 and a scale), twice that backward, as before.
    Neither torchao's casts nor Transformer Engine's current scaling (per-tensor, its
    casts counted in tests/test_te_current_casts.py) re-cast the weight gradient's
    operands: both leave it a bare FP8 multiply."""
    rows = cast_rows(replace(TORCHAO, fp8_casts="transformer_engine", fp8_scaling="block"))
    assert rows["attention"] == pytest.approx((T * 1.5 * (64 + 64) * 2, T * 3 * (64 + 64) * 2))
    assert rows["mlp"] == pytest.approx((T * 1.5 * (64 + 128) * 2, T * 3 * (64 + 128) * 2))
    te = replace(TORCHAO, fp8_casts="transformer_engine")
    c = load_cluster("h100")
    shapes = mlp_shapes(TINY, 0, te, LAY)
    bare = sum(gemm_fbw(c, te, tok, n, k, count=cnt)[2] for tok, n, k, cnt in shapes)
    assert gemms(c, TORCHAO, shapes)[2] == pytest.approx(bare)
    assert gemms(c, te, shapes)[2] == pytest.approx(bare)


def test_float8_all_gather_by_hand():
    """ZeRO-3 on pp1 dp2, nothing hidden, 3 micro-batches (test_planner_costs's
    test_zero3_gathers_and_copies_per_micro_batch_by_hand with Float8 linears gathered in
    float8): the blocks' linears move one byte an element in each gather and in its
    copy-out, the norms, embedding and head two; the weights' amax is taken once a step
    over each rank's fp32 shard (precompute_float8_dynamic_scale_for_fsdp)."""
    c = Cluster("t", "X", gpus=2, gpus_per_node=8, bf16_tflops=100, fp8_tflops=200, hbm_gb=80, nvlink_gbps=100, network_gbps=10, gpu_speed_sd=0.0, **test_nccl.BANDWIDTH_ONLY)  # fmt: skip
    lay = Layout(pp=1, dp=2)
    bf16_gather = replace(TORCHAO, global_batch=6, dp_overlap=0.0, hbm_efficiency=0.5, zero=3)
    t = replace(bf16_gather, fsdp_float8_all_gather=True)
    linears = 4 * (12288 + 3 * 64 * 128)  # wq, wk, wv, wo, w1, w2, w3 of 4 layers
    rest = 4 * 128 + 2 * 100 * 64  # the norms, the embedding and the head
    pl = Placement.standard("flat", 1, 1)
    results = {}
    for run in (bf16_gather, t):
        mm = memory_model(TINY, run, lay, 1, "none")
        results[run.fsdp_float8_all_gather] = step_sync(c, run, lay, pl, mm, component_costs(TINY, c, run, lay, 1, "none"), 3)
    comm, opt = results[True].comm, results[True].opt
    gathered = linears * 1 + rest * 2
    ring = 1 / 2 * gathered / 100e9
    reduce = 1 / 2 * (linears + rest) * 2 / 100e9  # the gradients stay bf16
    copy = gathered * 2 / (3.35e12 * 0.5)
    assert comm == pytest.approx(3 * (ring + ring + reduce + 2 * copy))
    assert opt - results[False].opt == pytest.approx(linears / 2 * 4 / (3.35e12 * 0.5))


def test_fp8_casts_is_checked():
    with pytest.raises(PipesimError, match=r'fp8_casts must be "transformer_engine" or "torchao", got \'te\''):
        load_training(fp8_casts="te")
    with pytest.raises(PipesimError, match=r'fp8_casts = "torchao" is torchao\'s tensorwise Float8: set fp8_scaling = "tensor"'):
        load_training(precision="fp8", fp8_casts="torchao")
    assert load_training(precision="fp8", fp8_scaling="tensor", fp8_casts="torchao").fp8_casts == "torchao"


def test_tensor_parallel_gathers_move_fp8_under_per_tensor_float8():
    """torchao's Float8 tensor parallelism (torchtitan 9dec370's apply_tp with Float8
    linears; torchao eab345c float8_tensor_parallel.py) and Transformer Engine 2.7's
    current scaling (layernorm_linear.py:187-189, base.py:1101-1131) cast each layer's
    sequence shard before the input's all-gather and the output's gradient before its
    all-gather: those move one byte an element, the reduce-scatters two. Block-scaled FP8
    (DeepSeek-V3's) and BF16 gather BF16, as do the model's ends (the embedding's
    reduce-scatter, the output head's column-parallel multiply)."""
    from pipesim.planner import nccl
    from pipesim.planner.layer_costs import embedding_costs, head_costs, layer_costs

    c = load_cluster("h100").resized(8)
    lay = Layout(pp=1, dp=1, tp=8)
    bf16 = Training(seq=32, sequence_parallel=True, sp_saves_gathered=True, tp_overlap="none")
    f8 = replace(TORCHAO, sequence_parallel=True, sp_saves_gathered=True, tp_overlap="none")
    te8 = replace(f8, fp8_casts="transformer_engine")  # current scaling
    block = replace(te8, fp8_scaling="block")
    where = lay.span("tp", c.domain)
    size = T * TINY.hidden * 2
    saved = nccl.collective_seconds(c, "all_gather", size, 8, where) - nccl.collective_seconds(
        c, "all_gather", size / 2, 8, where
    )
    assert saved > 0
    plain = layer_costs(TINY, 0, c, bf16, lay, "none")
    assert layer_costs(TINY, 0, c, block, lay, "none").dispatch_f == pytest.approx(plain.dispatch_f)
    for t in (f8, te8):
        one = layer_costs(TINY, 0, c, t, lay, "none")
        # forward: the attention's and the MLP's input gathers, one each
        assert one.dispatch_f == pytest.approx(plain.dispatch_f - saved)
        assert one.combine_f == pytest.approx(plain.combine_f - saved)
        # backward, exposed (tp_overlap "none"): the row-parallel output's gradient gather
        assert one.dispatch_b == pytest.approx(plain.dispatch_b - saved)
        for ends in (embedding_costs, head_costs):
            assert ends(TINY, c, t, lay).dispatch_f == pytest.approx(ends(TINY, c, bf16, lay).dispatch_f)
            assert ends(TINY, c, t, lay).dispatch_b == pytest.approx(ends(TINY, c, bf16, lay).dispatch_b)
