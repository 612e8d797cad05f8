"""Transformer Engine 2.7's current-scaling FP8 casts (``fp8_scaling = "tensor"`` with
``fp8_casts = "transformer_engine"``, Megatron-Bridge's fp8_cs), counted by hand from the
kernels TE launches (NVIDIA/TransformerEngine fedd9ddc, the TE 2.7 that Megatron-Bridge
25.09 built on; Megatron-Core core_v0.14.0's layer specs):

- amax: pytorch/csrc/quantizer.cpp:521 ``nvte_compute_amax`` reads the bf16 tensor (2);
  after TE's norm it is fused into the norm kernel (csrc/extensions/normalization.cpp:231,
  250, 284, ``create_hp_tensor_with_amax`` / ``quantize_with_amax``): 0.
- cast with the transposed copy: common/util/cast_kernels.cuh:1391-1396
  ``cast_transpose``, read bf16 2, write fp8 1 + 1.
- row-wise cast only (before a sequence-parallel FP8 all-gather, module/linear.py:176-187,
  layernorm_linear.py:187-189, distributed.py:922-937): cast_kernels.cuh:1402-1403, read 2,
  write 1, on the 1/tp sequence shard.
- FP8 transpose of a gathered FP8 tensor (float8_tensor_base.py:178-184,
  ``tex.fp8_transpose``; layernorm_linear.py:798-800, linear.py:790-797): read 1, write 1.

The model is test_planner.py's tiny GQA model: hidden 64, 4 heads of 16, 2 KV heads,
SwiGLU FFN 128: qkv 64 -> 128, output projection 64 -> 64, fc1 64 -> 256, fc2 128 -> 64.
One micro-batch of 32 tokens. Every expected figure below is written out from the
kernels above, not from the code under test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.compute import gemm_fbw, gemms, mlp_shapes
from pipesim.planner.elementwise import elementwise_terms
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, MoE, Training, load_cluster
from test_planner_costs import TINY

T = 32  # tokens of the micro-batch
CURRENT = Training(seq=T, precision="fp8", fp8_scaling="tensor")  # Megatron-Bridge's fp8_cs
BLOCK = replace(CURRENT, fp8_scaling="block")

AMAX = 2  # quantizer.cpp:521, read bf16
CAST_T = 2 + 1 + 1  # cast_kernels.cuh:1391-1396, read bf16, write fp8 row-wise and transposed
CAST = 2 + 1  # cast_kernels.cuh:1402-1403, read bf16, write fp8 row-wise
FP8_T = 1 + 1  # float8_tensor_base.py:183, read fp8, write its transpose


ONE_GPU = Layout(pp=1, dp=1)


def cast_rows(t: Training, m: Model = TINY, lay: Layout = ONE_GPU) -> dict[str, tuple[float, float]]:
    """The "fp8 casts" rows (forward, backward) by block, in bytes for the micro-batch."""
    return {b: (f * 2 * T, w * 2 * T) for b, term, f, w in elementwise_terms(m, 0, t, lay) if term == "fp8 casts"}


def test_current_scaling_without_tensor_parallelism_by_hand():
    """tp 1: no gather, so every cast writes both layouts at once (linear.py:215-221,
    layernorm_linear.py:186; base.py:1169-1173 for the gradients). qkv and fc1 take the
    norm's output, whose amax the norm kernel made; the output projection and fc2 read
    the attention and SwiGLU outputs for their amax first."""
    rows = cast_rows(CURRENT)
    qkv_in, proj_in, qkv_out, proj_out = 64, 64, 128, 64
    assert rows["attention"] == pytest.approx(
        (T * (qkv_in * CAST_T + proj_in * (AMAX + CAST_T)), T * (qkv_out + proj_out) * (AMAX + CAST_T))
    )
    fc1_in, fc2_in, fc1_out, fc2_out = 64, 128, 256, 64
    assert rows["mlp"] == pytest.approx(
        (T * (fc1_in * CAST_T + fc2_in * (AMAX + CAST_T)), T * (fc1_out + fc2_out) * (AMAX + CAST_T))
    )


def test_current_scaling_under_sequence_parallelism_by_hand():
    """tp 2 with sequence parallelism: qkv's and fc1's inputs are cast row-wise on their
    16-token shard and gathered in FP8, then transposed in FP8 backward; the output
    projection's and fc2's inputs are not gathered (both layouts at once); their output
    gradients are cast row-wise on the shard before the gather and transposed after it,
    while qkv's and fc1's are cast-transposed whole."""
    rows = cast_rows(CURRENT, lay=Layout(pp=1, dp=1, tp=2))
    shard = T / 2
    qkv_in, proj_in, qkv_out, proj_out = 64, 32, 64, 64  # q, k, v and the heads over tp
    assert rows["attention"] == pytest.approx(
        (
            shard * qkv_in * CAST + T * proj_in * (AMAX + CAST_T),
            T * qkv_in * FP8_T + T * qkv_out * (AMAX + CAST_T) + shard * proj_out * (AMAX + CAST) + T * proj_out * FP8_T,
        )
    )
    fc1_in, fc2_in, fc1_out, fc2_out = 64, 64, 128, 64
    assert rows["mlp"] == pytest.approx(
        (
            shard * fc1_in * CAST + T * fc2_in * (AMAX + CAST_T),
            T * fc1_in * FP8_T + T * fc1_out * (AMAX + CAST_T) + shard * fc2_out * (AMAX + CAST) + T * fc2_out * FP8_T,
        )
    )


def test_current_scaling_experts_by_hand():
    """An MoE layer: the experts are TE's GroupedLinear, each expert's tokens quantized
    on their own, amax then cast-transpose (grouped_linear.py:96-127, cast.cpp
    multi_tensor_quantize_impl fuses delayed scaling only), input and output gradient.
    32 tokens, top 2: 64 routed copies over 4 local experts of 16."""
    moe = Model(
        "moe", 2, 64, 4, 100, Attention("gqa", 2, 16), moe_layers=(0, 1), dense_ffn=0, moe=MoE(experts=16, expert_ffn=32, top_k=2)
    )
    rows = cast_rows(CURRENT, moe, Layout(pp=1, dp=4, ep=4))
    copies, fc1_in, fc2_in, fc1_out, fc2_out = 64, 64, 32, 64, 64
    assert rows["mlp"] == pytest.approx(
        (copies * (fc1_in + fc2_in) * (AMAX + CAST_T), copies * (fc1_out + fc2_out) * (AMAX + CAST_T))
    )


def test_current_scaling_casts_no_weight_gradient_operand_again():
    """TE's weight gradient takes the transposed copies its casts already wrote: no
    operand re-cast in the multiplies' time under current scaling (block scaling's
    re-quantization is tests/test_gemm_shapes.py's)."""
    c = load_cluster("h100")
    shapes = mlp_shapes(TINY, 0, CURRENT, ONE_GPU)
    bare = sum(gemm_fbw(c, CURRENT, tok, n, k, count=cnt)[2] for tok, n, k, cnt in shapes)
    assert gemms(c, CURRENT, shapes)[2] == pytest.approx(bare)


def test_block_scaling_casts_stay_as_they_were():
    """DeepSeek-V3's block-scaled casts (its own kernels, not TE's): 1.5 elements of 2
    bytes per multiply input forward, twice that backward."""
    rows = cast_rows(BLOCK)
    assert rows["attention"] == pytest.approx((T * 1.5 * (64 + 64) * 2, T * 3 * (64 + 64) * 2))
    assert rows["mlp"] == pytest.approx((T * 1.5 * (64 + 128) * 2, T * 3 * (64 + 128) * 2))


def test_megatron_bridge_layer_moves_what_te_launches():
    """A Megatron-Bridge-style layer (tp 4, sequence parallel, per-tensor FP8) against the
    same layer block-scaled (whose pricing is unchanged): under TE's current scaling the
    gathered inputs are cast on their shard (a quarter of the tokens) and the output
    projection's input pays its amax read and transposed copy; backward nothing is re-cast
    from bf16 for the weight gradient (TE keeps the FP8 input and transposes it in FP8)."""
    m = replace(TINY, hidden=256, heads=16, dense_ffn=512, attention=Attention("gqa", 4, 16))
    lay = Layout(pp=1, dp=1, tp=4)
    current, block = cast_rows(CURRENT, m, lay), cast_rows(BLOCK, m, lay)
    shard = T / 4
    qkv_in, proj_in, qkv_out, proj_out = 256, 64, (16 + 2 * 4) * 16 / 4, 256
    assert current["attention"] == pytest.approx(
        (
            shard * qkv_in * CAST + T * proj_in * (AMAX + CAST_T),
            T * qkv_in * FP8_T + T * qkv_out * (AMAX + CAST_T) + shard * proj_out * (AMAX + CAST) + T * proj_out * FP8_T,
        )
    )
    assert block["attention"] == pytest.approx((T * 1.5 * 2 * (qkv_in + proj_in), T * 3 * 2 * (qkv_in + proj_in)))
    # the projection's own cast costs more than block scaling's 3 bytes, the layer's casts less
    assert AMAX + CAST_T > 1.5 * 2
    assert sum(current["attention"]) < sum(block["attention"])


def test_current_scaling_mla_by_hand():
    """MLA as Megatron-Core 0.14 builds it (multi_latent_attention.py:369-370, 408-409,
    526-560): the down projections are duplicated TELinear on the 16-token sequence
    shard (amax + both layouts there, and their gradients likewise); the up projections
    take q's and kv's norms (TELayerNormColumnParallelLinear), cast row-wise on the shard,
    gathered and transposed in FP8. Hidden 64, 4 heads, q rank 32, kv rank 16, rope 8,
    nope 16, v 16, tp 2."""
    mla = Attention("mla", q_lora_rank=32, kv_lora_rank=16, qk_rope_dim=8, qk_nope_dim=16, v_head_dim=16)
    rows = cast_rows(CURRENT, replace(TINY, attention=mla), Layout(pp=1, dp=1, tp=2))
    shard = T / 2
    kv_down, q_down = (64, 16 + 8), (64, 32)  # (input, output) per token
    kv_up, q_up = (16, 4 * (16 + 16) / 2), (32, 4 * (16 + 8) / 2)
    proj = (4 * 16 / 2, 64)
    forward = shard * (kv_down[0] + q_down[0]) * (AMAX + CAST_T) + shard * (kv_up[0] + q_up[0]) * CAST
    forward += T * proj[0] * (AMAX + CAST_T)
    backward = shard * (kv_down[1] + q_down[1]) * (AMAX + CAST_T)
    backward += T * (kv_up[0] + q_up[0]) * FP8_T + T * (kv_up[1] + q_up[1]) * (AMAX + CAST_T)
    backward += shard * proj[1] * (AMAX + CAST) + T * proj[1] * FP8_T
    assert rows["attention"] == pytest.approx((forward, backward))
