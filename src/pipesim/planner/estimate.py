"""From a model, a cluster and a layout to per-layer times, bytes and parameter counts.

Everything here is arithmetic over the specs; the assumptions it rests on are fields of
``Training`` (efficiencies, byte widths, overlap shares) or are stated where they are
made. Counts are per token unless a name says otherwise; times are seconds for one
micro-batch on one GPU.

FLOPs: a matrix multiply of an n-vector by an n x m matrix costs 2nm. The backward for
inputs (B) and for weights (W) each cost what the forward's matrix multiplies cost;
causal attention scores cost heads * seq/2 * (qk_dim + v_dim) * 2 forward and twice that
backward (all of it in B: no weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..components import ComponentCosts, LayerCosts
from ..errors import PipesimError
from ..ir import Op
from ..memory import MemoryModel
from .specs import Cluster, Model, Training


@dataclass(frozen=True)
class Layout:
    """How the GPUs are used: pp pipeline ranks x dp data-parallel replicas x tp tensor
    shards; experts sharded over ep of the dp replicas (ep divides dp)."""

    pp: int
    dp: int
    tp: int = 1
    ep: int = 1
    micro_batch: int = 1  # sequences per micro-batch

    @property
    def gpus(self) -> int:
        return self.pp * self.dp * self.tp

    def __str__(self) -> str:
        parts = [f"pp{self.pp}", f"dp{self.dp}"]
        if self.tp > 1:
            parts.append(f"tp{self.tp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        return " x ".join(parts[:3]) + (f", {parts[3]}" if len(parts) > 3 else "")


# --------------------------------------------------------------------------------------
# parameters


def attention_params(m: Model) -> float:
    a, h = m.attention, m.hidden
    if a.kind == "mla":
        qk = a.qk_nope_dim + a.qk_rope_dim
        q = h * a.q_lora_rank + a.q_lora_rank * m.heads * qk if a.q_lora_rank else h * m.heads * qk
        kv = h * (a.kv_lora_rank + a.qk_rope_dim) + a.kv_lora_rank * m.heads * (a.qk_nope_dim + a.v_head_dim)
        return q + kv + m.heads * a.v_head_dim * h
    hd = a.head_dim or h // m.heads
    kv = a.kv_heads or m.heads
    return h * hd * (2 * m.heads + 2 * kv)  # q and o: heads; k and v: kv heads


def mlp_params(m: Model, layer: int) -> tuple[float, float]:
    """(parameters every GPU of the layer's tensor group holds, expert parameters) of a
    layer's MLP: SwiGLU matrices are 3 * hidden * ffn, GELU ones 2 * hidden * ffn."""
    h = m.hidden
    if not m.is_moe_layer(layer):
        return (3 if m.activation == "swiglu" else 2) * h * m.dense_ffn, 0.0
    e = m.moe
    return 3 * h * e.expert_ffn * e.shared_experts + h * e.experts, 3 * h * e.expert_ffn * e.experts


def layer_params(m: Model, layer: int) -> float:
    dense, experts = mlp_params(m, layer)
    return attention_params(m) + dense + experts + 2 * m.hidden  # two norms


def embedding_params(m: Model) -> float:
    return m.vocab * m.hidden * (1 if m.tied_embeddings else 2)


def total_params(m: Model) -> float:
    return sum(layer_params(m, i) for i in range(m.layers)) + embedding_params(m) + m.hidden


def active_params(m: Model) -> float:
    """Parameters a token passes through (the routed experts it reaches, not all)."""
    total = embedding_params(m)
    for i in range(m.layers):
        dense, experts = mlp_params(m, i)
        if m.is_moe_layer(i):
            experts = experts * m.moe.top_k / m.moe.experts
        total += attention_params(m) + dense + experts
    return total


# --------------------------------------------------------------------------------------
# FLOPs (forward, per token)


def attention_dims(m: Model) -> tuple[int, int]:
    """(query/key size, value size) per head."""
    a = m.attention
    if a.kind == "mla":
        return a.qk_nope_dim + a.qk_rope_dim, a.v_head_dim
    hd = a.head_dim or m.hidden // m.heads
    return hd, hd


def layer_flops(m: Model, layer: int, seq: int) -> dict[str, float]:
    """Forward FLOPs per token: attention projections, attention scores (causal), MLP."""
    qk, v = attention_dims(m)
    dense, _ = mlp_params(m, layer)
    if m.is_moe_layer(layer):
        e = m.moe
        mlp = 2 * (3 * m.hidden * e.expert_ffn * (e.top_k + e.shared_experts) + m.hidden * e.experts)
    else:
        mlp = 2 * dense
    return {"attn_proj": 2 * attention_params(m), "attn_core": m.heads * seq * (qk + v), "mlp": mlp}


def model_flops_per_token(m: Model, seq: int) -> float:
    """Training FLOPs per token without recomputation (forward, B and W: three times the
    forward, attention scores included since their backward costs twice their forward):
    the numerator of MFU."""
    forward = sum(sum(layer_flops(m, i, seq).values()) for i in range(m.layers)) + 2 * m.hidden * m.vocab
    return 3 * forward


# --------------------------------------------------------------------------------------
# times
#
# Every part of a layer is priced by what bounds it: a matrix multiply by the roofline of
# its FLOPs (at the share of peak large multiplies reach) and its bytes (at HBM bandwidth),
# which is the one shape- and precision-dependent efficiency curve; attention by its FLOPs
# at the fused kernel's share of peak; norms, activations, residual adds, rotary
# embeddings, routing permutes and FP8 casts by the bytes they move at HBM bandwidth.

#: bytes an unfused attention moves per score element besides its two multiplies' own
#: reads and writes, in fp16, as Megatron-LM 2021's ParallelAttention runs it (baddbmm,
#: FusedScaleMaskSoftmax, dropout, bmm): forward the fused softmax reads and writes the
#: scores (4) and the dropout reads them and writes them and a one-byte mask (5) ...
FORWARD_SCORE_BYTES = 9
#: ... backward the dropout's gradient reads the gradient and the mask and writes (5) and
#: the softmax's reads the gradient and its saved output and writes (6)
BACKWARD_SCORE_BYTES = 11
#: output tile of a matrix-multiply kernel (rows x columns), for wave quantization
TILE = 128
#: the backward of fused attention runs at this share of its forward's FLOP rate
#: (FlashAttention-2: 73% vs 63% of A100 peak; FlashAttention-3: about 75% vs 55% on H100)
FLASH_BACKWARD_SHARE = 0.75
#: block-scaled FP8 weight-gradient multiplies (both operands scaled along the token
#: dimension, accumulated into FP32) run at this share of the forward multiplies' rate:
#: in DeepSeek's public training profile (deepseek-ai/profile-data, train.json, H800) the
#: grouped expert wgrad kernels take 5.8 ms per layer against 2.9 ms forward, same FLOPs
FP8_WGRAD_SHARE = 0.5


def gemm_efficiency(c: Cluster, t: Training, fp8: bool) -> float:
    if t.compute_efficiency:
        return t.compute_efficiency
    return c.fp8_gemm_efficiency if fp8 else c.gemm_efficiency


def hbm_rate(c: Cluster, t: Training) -> float:
    """Bytes per second memory-bound kernels move."""
    return c.hbm_tbps * 1e12 * t.hbm_efficiency


def gemm(c: Cluster, t: Training, m: float, n: float, k: float, fp8: bool | None = None, count: float = 1) -> float:
    """Seconds of ``count`` (m x k) @ (k x n) multiplies run as one (grouped) kernel.

    The one efficiency curve: 2mnk FLOPs at the achieved share of dense peak, times the
    wave quantization of the output's 128 x 128 tiles over the GPU's SMs (a last partial
    wave idles the rest: NVIDIA's matrix-multiplication performance guide), or the bytes
    (inputs at their width, a bf16 output) at HBM bandwidth, whichever is longer. Thin
    multiplies (few tokens per expert, narrow shards) fall below the peak share this way,
    large ones reach it; FP8 has its own peak and share."""
    low = (t.precision == "fp8" if fp8 is None else fp8) and c.fp8_tflops > 0
    peak = (c.fp8_tflops if low else c.bf16_tflops) * 1e12 * gemm_efficiency(c, t, low)
    tiles = count * math.ceil(m / TILE) * math.ceil(n / TILE)
    if tiles == 0 or k <= 0:  # an empty dimension: nothing to multiply
        return 0.0
    waves = tiles / (math.ceil(tiles / c.sms) * c.sms)
    width = 1 if low else 2
    return count * max(2 * m * n * k / (peak * waves), (width * (m * k + k * n) + 2 * m * n) / hbm_rate(c, t))


def gemm_fbw(
    c: Cluster, t: Training, m: float, n: float, k: float, fp8: bool | None = None, count: float = 1
) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) of a multiply of m tokens by a k x n
    weight: dX = dY W^T is m x n by n x k, dW = X^T dY is k x m by m x n."""
    return gemm(c, t, m, n, k, fp8, count), gemm(c, t, m, k, n, fp8, count), gemm(c, t, k, n, m, fp8, count)


def _sum3(parts) -> tuple[float, float, float]:
    f = b = w = 0.0
    for x, y, z in parts:
        f, b, w = f + x, b + y, w + z
    return f, b, w


def attention_shapes(m: Model, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """The attention block's multiplies as (tokens, n, k, count): tokens x k by k x n."""
    a, h, tp, T = m.attention, m.hidden, lay.tp, lay.micro_batch * t.seq
    if a.kind == "mla":
        qk = a.qk_nope_dim + a.qk_rope_dim
        shapes = [(a.kv_lora_rank + a.qk_rope_dim, h), (m.heads * (a.qk_nope_dim + a.v_head_dim) / tp, a.kv_lora_rank)]
        shapes += [(a.q_lora_rank, h), (m.heads * qk / tp, a.q_lora_rank)] if a.q_lora_rank else [(m.heads * qk / tp, h)]
        shapes.append((h, m.heads * a.v_head_dim / tp))
    else:
        hd, kv = attention_dims(m)[0], a.kv_heads or m.heads
        shapes = [((m.heads + 2 * kv) * hd / tp, h), (h, m.heads * hd / tp)]  # fused q, k, v; output
    return [(T, n, k, 1) for n, k in shapes]


def mla_up_shapes(m: Model, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """MLA's up-projections (query and key/value), which DeepSeek-V3 recomputes in the
    backward rather than keep their outputs."""
    a, T = m.attention, lay.micro_batch * t.seq
    if a.kind != "mla":
        return []
    up = [(m.heads * (a.qk_nope_dim + a.v_head_dim) / lay.tp, a.kv_lora_rank)]
    if a.q_lora_rank:
        up.append((m.heads * (a.qk_nope_dim + a.qk_rope_dim) / lay.tp, a.q_lora_rank))
    return [(T, n, k, 1) for n, k in up]


def mlp_shapes(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """The MLP's multiplies as (tokens, n, k, count). A routed expert on a GPU of the ep
    group sees, with balanced routing, top_k * ep / experts of the group's tokens per
    micro-batch; the router's multiply (count 0 here) is priced apart, in BF16."""
    h, T = m.hidden, lay.micro_batch * t.seq
    if not m.is_moe_layer(layer):
        f = m.dense_ffn / lay.tp
        return [(T, 2 * f if m.activation == "swiglu" else f, h, 1), (T, h, f, 1)]
    e = m.moe
    local = e.experts / lay.ep
    tokens = T * e.top_k / local  # token copies per local expert
    out = [(tokens, 2 * e.expert_ffn, h, local), (tokens, h, e.expert_ffn, local)]
    if e.shared_experts:
        f = e.expert_ffn * e.shared_experts
        out += [(T, 2 * f, h, 1), (T, h, f, 1)]
    return out


def gemms(c: Cluster, t: Training, shapes) -> tuple[float, float, float]:
    """(F, B, W) seconds of a list of multiplies; under FP8 the weight gradient also casts
    both of its operands (the input and the output's gradient) to FP8 along the token
    dimension: read 2 bytes, write 1 and a scale per element, at HBM bandwidth."""
    f, b, w = _sum3(gemm_fbw(c, t, tok, out, k, count=n) for tok, out, k, n in shapes)
    if t.precision == "fp8":
        w = w / FP8_WGRAD_SHARE + sum(n * tok * (out + k) * 3 for tok, out, k, n in shapes) / hbm_rate(c, t)
    return f, b, w


def attention_gemms(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float]:
    """The attention block's projections: (F, B, W) seconds for one micro-batch."""
    return gemms(c, t, attention_shapes(m, t, lay))


def mlp_gemms(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float]:
    """The MLP's multiplies and, for an MoE layer, the router's (BF16)."""
    f, b, w = gemms(c, t, mlp_shapes(m, layer, t, lay))
    if m.is_moe_layer(layer):
        rf, rb, rw = gemm_fbw(c, t, lay.micro_batch * t.seq, m.moe.experts, m.hidden, fp8=False)
        f, b, w = f + rf, b + rb, w + rw
    return f, b, w


def attention_core(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float]:
    """(forward, backward) seconds of the attention scores and their product with values.

    Fused (flash) attention: the causal half of the scores, heads * seq * (qk + v) FLOPs
    per token forward at ``attention_efficiency`` of BF16 peak, 2.5 times that backward
    (it recomputes the scores) at ``FLASH_BACKWARD_SHARE`` of the forward's rate; nothing
    goes through HBM. Unfused (Megatron 2021): the whole square as batched multiplies,
    twice that backward (four multiplies), and each score element moves
    ``FORWARD_SCORE_BYTES`` through HBM forward and ``BACKWARD_SCORE_BYTES`` backward
    for the softmax and dropout between them."""
    qk, v = attention_dims(m)
    T, heads = lay.micro_batch * t.seq, m.heads / lay.tp
    if t.flash_attention:
        f = T * heads * t.seq * (qk + v) / (c.bf16_tflops * 1e12 * t.attention_efficiency)
        return f, 2.5 * f / FLASH_BACKWARD_SHARE
    per_seq = lay.micro_batch * heads
    products = per_seq * (gemm(c, t, t.seq, t.seq, qk, fp8=False) + gemm(c, t, t.seq, v, t.seq, fp8=False))
    scores = T * heads * t.seq / hbm_rate(c, t)
    return products + scores * FORWARD_SCORE_BYTES, 2 * products + scores * BACKWARD_SCORE_BYTES


def elementwise_bytes(m: Model, layer: int, t: Training, lay: Layout) -> tuple[float, float]:
    """Forward bytes of the memory-bound kernels of (attention block, MLP block) for one
    micro-batch; their backward moves twice as much (it reads the saved input and the
    incoming gradient and writes a gradient).

    Per token, in elements of 2 bytes: a norm reads and writes the hidden state (2h), a
    residual add reads two and writes one (3h); with sequence parallelism both run on
    1/tp of the tokens. Rotary embeddings read and write the rotated parts of q and k
    (a model with learned or ALiBi positions has none). SwiGLU reads gate and up and
    writes their product (3 ffn), GELU reads and writes
    (2 ffn). MoE: the router's softmax and top-k read and write the expert scores, the
    permute copies each token to its top_k slots and the un-permute sums them back
    ((1 + top_k) h each way). Under FP8 each multiply's input is cast (read 2 bytes,
    write 1 and a scale: 1.5 elements).

    Without ``fused_elementwise`` the kernels are PyTorch's eager ones, one per operation,
    as torchtitan's Llama runs without torch.compile (its models/llama/model.py and
    models/norms.py): RMSNorm upcasts to fp32 and runs pow, mean, multiply, downcast and
    the weight's multiply (18 elements of 2 bytes per hidden one, against 2 fused); rotary
    upcasts q and k, multiplies them as complex numbers and downcasts (10 per element,
    against 2); grouped-query attention copies k and v out to every query head
    (``repeat_kv``: read kv, write q-sized, each); the attention output is made contiguous
    (2 per element); SwiGLU's SiLU and multiply are two kernels (5 ffn, against 3)."""
    h, tp, a = m.hidden, lay.tp, m.attention
    qk, v = attention_dims(m)
    seq_share = 1 / tp if t.sequence_parallel else 1.0
    eager = not t.fused_elementwise and a.kind == "gqa"
    block = (21 if eager else 5) * h * seq_share  # norm + residual add
    if a.kind == "mla":
        rotary = 2 * (m.heads / tp + 1) * a.qk_rope_dim
        cast_attn = h + a.q_lora_rank + a.kv_lora_rank + m.heads * v / tp
    else:
        q, kv = m.heads * qk / tp, (a.kv_heads or m.heads) * qk / tp
        rotary = (10 if eager else 2) * (q + kv) if m.rotary else 0.0
        if eager:
            rotary += 2 * q + (2 * (kv + q) if kv < q else 0.0)  # contiguous output; repeat_kv of k and v
        cast_attn = h + m.heads * v / tp
    if m.is_moe_layer(layer):
        e = m.moe
        act = 3 * e.expert_ffn * (e.top_k + e.shared_experts)
        routing = 2 * e.experts + 2 * (1 + e.top_k) * h
        cast_mlp = h * (1 + e.shared_experts) + e.expert_ffn * (e.top_k + e.shared_experts)
    else:
        f = m.dense_ffn / tp
        act, routing = ((5 if eager else 3) * f if m.activation == "swiglu" else 2 * f), 0.0
        cast_mlp = h + f
    fp8 = 1.5 if t.precision == "fp8" else 0.0
    T = lay.micro_batch * t.seq
    return T * 2 * (block + rotary + fp8 * cast_attn), T * 2 * (block + act + routing + fp8 * cast_mlp)


def moe_comm(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Seconds per micro-batch of (dispatch F, combine F, dispatch B, combine B).

    Each GPU sends its tokens to the top-k experts, spread over the ep GPUs of its expert
    group. Between nodes a token is sent once per destination node (DeepSeek-V3's
    node-limited routing caps those at ``max_nodes``) and forwarded inside the node over
    NVLink; the two links work at once, so the slower one sets the time. Dispatch is
    FP8 under fp8 training, everything else BF16.
    """
    if lay.ep <= 1:
        return 0.0, 0.0, 0.0, 0.0
    e, h, gpn = m.moe, m.hidden, c.gpus_per_node
    tokens = lay.micro_batch * t.seq
    nodes = math.ceil(lay.ep / gpn)
    if nodes > 1:
        reach = min(e.max_nodes or nodes, nodes, e.top_k) if e.max_nodes else nodes * (1 - (1 - 1 / nodes) ** e.top_k)
        network = reach * (1 - 1 / nodes)  # copies per token over the network
        nvlink = e.top_k * (1 - 1 / min(gpn, lay.ep))
    else:
        network, nvlink = 0.0, e.top_k * (1 - 1 / lay.ep)

    def seconds(width: float) -> float:
        per_token = h * width
        return tokens * max(network * per_token / (c.network_gbps * 1e9), nvlink * per_token / (c.nvlink_gbps * 1e9))

    dispatch = seconds(1 if t.precision == "fp8" else 2)
    combine = seconds(2)
    return dispatch, combine, combine, combine


def tp_allreduce(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of one ring all-reduce of a micro-batch's hidden states over tp GPUs (or,
    with sequence parallelism, the all-gather and reduce-scatter that replace it: the
    same bytes)."""
    if lay.tp <= 1:
        return 0.0
    size = lay.micro_batch * t.seq * m.hidden * 2
    return 2 * (lay.tp - 1) / lay.tp * size / (c.nvlink_gbps * 1e9)


def accumulation_seconds(c: Cluster, t: Training, params: float) -> float:
    """Seconds one micro-batch spends adding the weight gradients of ``params`` local
    parameters into the step's accumulated ones when the weight-gradient multiply does not
    do it itself: ``grad_accumulation_bytes`` per parameter at HBM bandwidth, besides the
    gradient the multiply writes. Megatron-LM 2021's DDP hook (``main_grad.add_(grad)``;
    its gradient_accumulation_fusion came in 2022) and PyTorch autograd's AccumulateGrad
    under DeepSpeed's fp16 engine read the gradient and the sum and write the sum: 6
    bytes in 16 bits. DeepSpeed's bf16 optimizer (``update_hp_grads`` after every
    micro-batch) upcasts the gradient (read 2, write 4) and adds it into the fp32 sum
    (read 4 + 4, write 4): 18."""
    return params * t.grad_accumulation_bytes / hbm_rate(c, t)


def layer_costs(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, recompute: str) -> LayerCosts:
    proj_f, proj_b, proj_w = attention_gemms(m, c, t, lay)
    mlp_f, mlp_b, mlp_w = mlp_gemms(m, layer, c, t, lay)
    dense, experts = mlp_params(m, layer)
    proj_w += accumulation_seconds(c, t, attention_params(m) / lay.tp)
    mlp_w += accumulation_seconds(c, t, dense / lay.tp + experts / lay.ep)
    core_f, core_b = attention_core(m, c, t, lay)
    ew_attn, ew_mlp = (x / hbm_rate(c, t) for x in elementwise_bytes(m, layer, t, lay))
    attn_f = proj_f + core_f + ew_attn
    mlp_fwd = mlp_f + ew_mlp
    attn_b = proj_b + core_b + 2 * ew_attn
    mlp_bwd = mlp_b + 2 * ew_mlp
    if t.hidden_dropout:  # each block's dropout mask: one byte an element, written forward, read backward
        mask = lay.micro_batch * t.seq * m.hidden * (1 / lay.tp if t.sequence_parallel else 1.0) / hbm_rate(c, t)
        attn_f, mlp_fwd, attn_b, mlp_bwd = attn_f + mask, mlp_fwd + mask, attn_b + mask, mlp_bwd + mask
    if recompute == "selective":
        # unfused attention recomputes its scores in the backward (flash always does);
        # MLA recomputes its up-projections (DeepSeek-V3, section 3.3.2)
        attn_b += (0.0 if t.flash_attention else core_f) + gemms(c, t, mla_up_shapes(m, t, lay))[0]
    elif recompute == "full":
        attn_b += attn_f  # the whole layer's forward runs again
        mlp_bwd += mlp_fwd
    if m.is_moe_layer(layer):
        dispatch, combine, dispatch_b, combine_b = moe_comm(m, c, t, lay)
    else:  # tensor parallelism: an all-reduce after attention and after the MLP
        dispatch = combine = dispatch_b = combine_b = tp_allreduce(m, c, t, lay)
    if recompute == "full":  # the recomputed forward communicates again
        dispatch_b, combine_b = dispatch_b + dispatch, combine_b + combine
    return LayerCosts(
        attn_f=attn_f,
        mlp_f=mlp_fwd,
        dispatch_f=dispatch,
        combine_f=combine,
        attn_b=attn_b,
        attn_w=proj_w,
        mlp_b=mlp_bwd,
        mlp_w=mlp_w,
        dispatch_b=dispatch_b,
        combine_b=combine_b,
    )


def embedding_costs(m: Model, c: Cluster, t: Training, lay: Layout) -> LayerCosts:
    """The token embedding, a pseudo-layer on the first stage: a row gather forward (read
    and write h per token), a scatter-add into the fp32 gradient table backward, and with
    tensor parallelism the all-reduce of the vocabulary-parallel lookup, forward only: its
    backward is the identity (Megatron-LM 2021 mpu/layers.py VocabParallelEmbedding,
    ``reduce_from_tensor_model_parallel_region``); with sequence parallelism a
    reduce-scatter forward whose backward is an all-gather (Megatron-Core)."""
    T = lay.micro_batch * t.seq
    f = T * m.hidden * 2 * 2 / hbm_rate(c, t)
    ar = tp_allreduce(m, c, t, lay)
    back = ar if t.sequence_parallel else 0.0
    return LayerCosts(attn_f=f, mlp_f=0.0, attn_b=3 * f, attn_w=0.0, mlp_b=0.0, mlp_w=0.0, dispatch_f=ar, dispatch_b=back)


def head_costs(m: Model, c: Cluster, t: Training, lay: Layout) -> LayerCosts:
    """The final norm, the output projection (BF16 even under FP8 training, as DeepSeek-V3
    keeps it) and the cross-entropy, a pseudo-layer on the last stage. The loss over the
    vocabulary shard moves ``t.logit_bytes`` per logit (fused, or Megatron-LM 2021's eager
    fp32 ops: see ``Training``), half forward, half backward; with tensor parallelism the
    vocabulary-parallel loss all-reduces two numbers per token (neglected), and the
    projection's input gradient is all-reduced backward (Megatron-LM 2021's
    ``parallel_lm_logits``: ``copy_to_tensor_model_parallel_region``, identity forward);
    with sequence parallelism its input is all-gathered forward and the gradient
    reduce-scattered backward, and the norm runs on 1/tp of the tokens (without it, on
    all of them on every tensor rank)."""
    T, h = lay.micro_batch * t.seq, m.hidden
    f, b, w = gemm_fbw(c, t, T, m.vocab / lay.tp, h, fp8=False)
    norm = T * 2 * 2 * h * (1 / lay.tp if t.sequence_parallel else 1.0) / hbm_rate(c, t)
    loss = T * m.vocab / lay.tp * t.logit_bytes / hbm_rate(c, t)
    w += accumulation_seconds(c, t, m.vocab * h / lay.tp)
    ar = tp_allreduce(m, c, t, lay)
    return LayerCosts(
        attn_f=norm,
        mlp_f=f + loss / 2,
        attn_b=2 * norm,
        attn_w=0.0,
        mlp_b=b + loss / 2,
        mlp_w=w,
        dispatch_f=ar if t.sequence_parallel else 0.0,
        dispatch_b=ar,
    )


def mtp_costs(m: Model, c: Cluster, t: Training, lay: Layout, recompute: str) -> tuple[LayerCosts, ...]:
    """DeepSeek-V3's multi-token prediction modules, on the last stage: each joins the
    embedding of the next token to the hidden state (two norms and a 2h -> h
    projection), runs one more transformer layer (an MoE one) and the shared output head."""
    if not m.mtp_layers:
        return ()
    T, h = lay.micro_batch * t.seq, m.hidden
    block = layer_costs(m, m.layers - 1, c, t, lay, recompute)
    pf, pb, pw = gemm_fbw(c, t, T, h, 2 * h)
    norms = T * 2 * 2 * 2 * h / hbm_rate(c, t)
    joined = replace(block, attn_f=block.attn_f + pf + norms, attn_b=block.attn_b + pb + 2 * norms, attn_w=block.attn_w + pw)
    return (joined, head_costs(m, c, t, lay)) * m.mtp_layers


def p2p_seconds(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """One activation (or its gradient) between two stages: with tensor parallelism each
    shard sends its 1/tp, over the network (stages sit on different nodes once tp x pp
    exceeds a node; inside a node NVLink is faster, and the network bound is kept as the
    conservative one). Without sequence parallelism every shard needs the whole tensor, so
    the receiving shards all-gather it over NVLink (Megatron-LM 2021's scatter/gather
    optimisation, DeepSpeed's partitioned pipeline buffers); under it the shard is what
    the next stage consumes."""
    full = lay.micro_batch * t.seq * m.hidden * 2
    gather = 0.0 if t.sequence_parallel else (lay.tp - 1) / lay.tp * full / (c.nvlink_gbps * 1e9)
    return t.p2p_latency_us * 1e-6 + full / lay.tp / (c.network_gbps * 1e9) + gather


def blocking_p2p(stage: int, stages: int, p2p: float) -> LayerCosts:
    """The transfers of a stage whose schedule waits for them (Megatron-LM 2021's
    ``batch_isend_irecv`` then ``wait`` before each op; DeepSpeed's pipeline engine's
    blocking send and recv instructions), as a pseudo-layer on the compute stream: a
    forward receives its input and sends its output, a backward receives the output's
    gradient and sends the input's, each one transfer per neighbouring stage (one for the
    end stages, two for the middle ones)."""
    hops = (stage > 0) + (stage < stages - 1)
    return LayerCosts(attn_f=hops * p2p, mlp_f=0.0, attn_b=hops * p2p, attn_w=0.0, mlp_b=0.0, mlp_w=0.0)


def partition(layers: int, stages: int) -> list[range]:
    """Split layers over stages as evenly as possible; when uneven, the first and last
    stages (which also hold the embedding and the output head) get the fewer layers."""
    if stages > layers:
        raise PipesimError(f"{stages} stages need at least {stages} layers, the model has {layers}")
    base, extra = divmod(layers, stages)
    sizes = [base] * stages
    order = sorted(range(stages), key=lambda s: (s in (0, stages - 1), s))  # middle stages first
    for s in order[:extra]:
        sizes[s] += 1
    return ranges_of(sizes)


def ranges_of(sizes) -> list[range]:
    """Consecutive layer ranges of the given sizes, from layer 0."""
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


def work(c: LayerCosts) -> float:
    """A layer's compute for one micro-batch, forward and backward: what balances stages."""
    return c.forward_compute + c.backward_compute + c.weight_compute


def balanced_partition(
    layer_work: tuple[float, ...],
    first: float,
    last: float,
    stages: int,
    ranks: tuple[tuple[int, ...], ...] | None = None,
    even_out: bool = True,
) -> list[range]:
    """Contiguous layers per stage, at least one each, where the first stage also carries
    ``first`` (the embedding) and the last ``last`` (the output head, the loss and any MTP
    modules): the end stages take fewer layers (Llama 3 drops one from each for this
    reason) and the middle ones share the rest evenly. The end sizes chosen minimise the
    busiest rank's work, a rank holding the stages ``ranks`` lists (one stage each by
    default; DualPipe's rank 0 holds both ends). Then, unless ``even_out`` is off, single
    layers move to even out the ranks (``_even_out_ranks``)."""
    n = len(layer_work)
    if stages > n:
        raise PipesimError(f"{stages} stages need at least {stages} layers, the model has {n}")
    if stages <= 2:
        options = [[k, n - k] for k in range(1, n)] if stages == 2 else [[n]]
    else:
        top = min(n - stages + 2, -(-n // stages) + 1)  # an end stage never needs more than the mean
        ends = [(a, b) for a in range(1, top + 1) for b in range(1, top + 1) if n - a - b >= stages - 2]
        middle = {k: [len(r) for r in partition(k, stages - 2)] for k in {n - a - b for a, b in ends}}  # by layers shared
        options = [[a, *middle[n - a - b], b] for a, b in ends]
    groups = ranks or tuple((s,) for s in range(stages))
    # every option at once (a deep model on few stages has thousands): stage loads from
    # prefix sums, rank loads through which stages each rank holds
    sizes_of = np.array(options)
    prefix = np.concatenate(([0.0], np.cumsum(layer_work)))
    ends = np.cumsum(sizes_of, axis=1)
    loads = prefix[ends] - prefix[ends - sizes_of]
    loads[:, 0] += first
    loads[:, -1] += last
    holds = np.zeros((stages, len(groups)))
    for r, g in enumerate(groups):
        for st in g:
            holds[st, r] += 1
    rank_loads = loads @ holds
    # the busiest rank, then the slowest stage, then of equal splits the most even
    best = np.lexsort((np.square(rank_loads).sum(axis=1), loads.max(axis=1), rank_loads.max(axis=1)))[0]
    sizes = options[best]
    return ranges_of(_even_out_ranks(sizes, layer_work, first, last, groups) if even_out else sizes)


def _even_out_ranks(sizes: list[int], layer_work, first: float, last: float, groups) -> list[int]:
    """Move single layers across stage boundaries while that lowers the busiest rank's
    work, or keeps it and evens the ranks out (the sum of squared rank loads). A rank runs
    every stage it holds, so on a loop or a V (DeepSeek-V3 at pp8 with 4 chunks: rank 7
    holds stages 7, 15, 23 and the head's and MTP's 31) the busiest rank, not the slowest
    stage, sets the pace, and the even middle above cannot see that; for the same reason
    layers of unequal work (dense and MoE) move where the even count put too many. The
    moves that only even out let a layer travel through ranks already at the top load.
    No move raises the top load and each lowers it or the sum of squares, so it ends. Memory is
    not looked at: the planner falls back to the split without these moves where this one
    does not fit (``search.prepare``)."""
    sizes = list(sizes)
    k = len(sizes)
    if k < 2:
        return sizes
    eps = 1e-12 * (sum(layer_work) + first + last)
    held_by: list[list[int]] = [[] for _ in range(k)]
    for r, g in enumerate(groups):
        for st in g:
            held_by[st].append(r)
    starts = [0]
    for n in sizes[:-1]:
        starts.append(starts[-1] + n)
    stage = [sum(layer_work[a : a + n]) for a, n in zip(starts, sizes)]
    stage[0] += first
    stage[-1] += last
    load = [sum(stage[st] for st in g) for g in groups]
    for _ in range(k * len(layer_work)):  # far more moves than a split takes: a guard against a hang
        move = _better_move(sizes, starts, load, layer_work, groups, held_by, eps)
        if move is None:
            break
        st, to, moved = move
        sizes[st] -= 1
        sizes[to] += 1
        if to < st:
            starts[st] += 1
        else:
            starts[to] -= 1
        for q, v in moved.items():
            load[q] = v
    return sizes


def _better_move(sizes, starts, load, layer_work, groups, held_by, eps: float):
    """The first single-layer move that lowers the busiest rank's load, or keeps it and
    lowers the sum of squared rank loads: (from stage, to stage, new loads of the ranks it
    changes), or None."""
    top = max(load)
    for st in range(len(sizes)):
        if sizes[st] == 1:
            continue
        for to in (st - 1, st + 1):
            if not 0 <= to < len(sizes):
                continue
            gain = {q: groups[q].count(to) - groups[q].count(st) for q in {*held_by[st], *held_by[to]}}
            x = layer_work[starts[st]] if to < st else layer_work[starts[st] + sizes[st] - 1]
            moved = {q: load[q] + x * d for q, d in gain.items()}
            peak = max(moved.values())
            if peak > top:
                continue
            new_top = max(peak, max((v for q, v in enumerate(load) if q not in moved), default=-math.inf))
            squares = sum(v * v - load[q] * load[q] for q, v in moved.items())
            if new_top < top - eps or squares < -eps * top:
                return st, to, moved
    return None


def default_ep(m: Model, dp: int) -> int:
    """The expert-parallel degree ``memory`` and ``compare --model`` assume when none is
    given: experts spread over up to 64 data-parallel GPUs (DeepSeek-V3's ep64)."""
    return min(64, dp, m.moe.experts) if m.moe else 1


def stage_parts(
    m: Model,
    c: Cluster,
    t: Training,
    lay: Layout,
    stages: int,
    recompute: str,
    ranks: tuple[tuple[int, ...], ...] | None = None,
    even_out: bool = True,
) -> list[range]:
    """The layers of each model stage, balanced by cost (see ``balanced_partition``), or
    with ``stage_split = "even"`` the same number of layers on every stage whatever else
    the end stages hold: Megatron-LM 2021 gives each stage (and each interleaved chunk)
    layers / stages of them (its arguments.py asserts they divide), DeepSpeed's pipeline
    partitions by counting transformer layers (``partition_method="type:transformer"``)."""
    if t.stage_split == "even":
        return partition(m.layers, stages)
    kinds = {}
    for i in range(m.layers):
        key = m.is_moe_layer(i)
        if key not in kinds:
            kinds[key] = work(layer_costs(m, i, c, t, lay, recompute))
    layer_work = tuple(kinds[m.is_moe_layer(i)] for i in range(m.layers))
    last = work(head_costs(m, c, t, lay)) + sum(work(x) for x in mtp_costs(m, c, t, lay, recompute))
    return balanced_partition(layer_work, work(embedding_costs(m, c, t, lay)), last, stages, ranks, even_out)


def component_costs(
    m: Model, c: Cluster, t: Training, lay: Layout, stages: int, recompute: str, parts: list[range] | None = None
) -> ComponentCosts:
    parts = parts or stage_parts(m, c, t, lay, stages, recompute)
    per_layer = {}
    stage_layers = []
    for s, rng in enumerate(parts):
        row = [embedding_costs(m, c, t, lay)] if s == 0 else []
        for i in rng:
            key = (m.is_moe_layer(i),)
            if key not in per_layer:
                per_layer[key] = layer_costs(m, i, c, t, lay, recompute)
            row.append(per_layer[key])
        if s == stages - 1:
            row += [*mtp_costs(m, c, t, lay, recompute), head_costs(m, c, t, lay)]
        if not t.p2p_overlap and stages > 1:
            row.append(blocking_p2p(s, stages, p2p_seconds(m, c, t, lay)))
        stage_layers.append(tuple(row))
    # Tensor-parallel collectives overlap with the multiplies around them when the run
    # overlaps them (Megatron-Core and TransformerEngine chunk them so; ``tp_overlap``),
    # modelled by splitting a lone op's micro-batch in two; expert all-to-alls overlap
    # only inside overlapped pairs. Blocking transfers sit on the ranks' compute streams
    # instead of the edges between them.
    return ComponentCosts(
        tuple(stage_layers),
        p2p=p2p_seconds(m, c, t, lay) if t.p2p_overlap else 0.0,
        comm_sms=t.comm_sms,
        total_sms=c.sms,
        lone_overlap=m.moe is None and t.tp_overlap,
        held_in_pairs=t.comm_held_in_pairs,
    )


# --------------------------------------------------------------------------------------
# the step's ends: data-parallel collectives and the optimizer


def dp_bandwidth(c: Cluster, lay: Layout, spacing: int = 1) -> float:
    """Bytes per second of a data-parallel ring whose members sit ``spacing`` data-parallel
    ranks apart (1 for the dense replicas, ep for the expert replicas; tensor ranks are
    innermost, then data-parallel ones, as Megatron orders them). Inside a node: NVLink.
    Across nodes NCCL runs one ring per network interface (its channels), each crossing
    every node boundary once, so a group with k members in a node drives k interfaces at
    once: k times a GPU's network bandwidth, at most NVLink's (DGX A100's 8 x 200 Gb/s
    give the ~190 GB/s bus bandwidth nccl-tests show across nodes for 8 GPUs a node); a
    group with one member a node has its own link only."""
    stride = lay.tp * spacing
    if stride * (lay.dp // spacing) <= c.gpus_per_node:
        return c.nvlink_gbps * 1e9
    per_node = max(1, c.gpus_per_node // stride)
    return min(c.nvlink_gbps, per_node * c.network_gbps) * 1e9


def step_overhead(
    c: Cluster, t: Training, lay: Layout, pl, mm: MemoryModel, costs: ComponentCosts, microbatches: int
) -> tuple[float, float]:
    """(exposed data-parallel communication, optimizer step) in seconds, worst rank.

    Gradients are reduce-scattered (ZeRO >= 1) or all-reduced over their replicas (dense
    parameters over dp, experts over dp / ep) at ``grad_reduce_bytes`` per element; with
    ZeRO >= 1 the updated bf16 parameters are all-gathered back. Bucketed, the reduction
    overlaps the last micro-batch's backward on the rank and the gather the next step's
    first forward, so only what exceeds those windows shows (``dp_overlap`` of the window
    is usable: the collectives slow the kernels they overlap). ZeRO-3 gathers parameters
    for every micro-batch's forward and backward and reduces its gradients, each behind
    that micro-batch's forward (the first gather) and backward (the second, and the
    reduction); each gather's output is then copied into the unsharded parameters on the
    compute stream (FSDP2's ``foreach_all_gather_copy_out``: read and write the
    parameter bytes), which nothing hides. The optimizer step reads gradients and reads and writes
    master weights and moments (its shard, under ZeRO) and writes the bf16 weights, at
    HBM bandwidth, after everything else."""
    worst_comm = worst_opt = 0.0
    for held in pl.held():
        fwd = sum(costs.op_time(Op("F", 0, 0), st) for st in held)
        bwd = sum(costs.op_time(Op("B", 0, 0), st) + costs.op_time(Op("W", 0, 0), st) for st in held)
        grads = gather = opt = copy_out = 0.0
        for st in held:
            dense, experts = mm.params_at(st)
            copy_out += (dense + experts) * 2 * t.param_bytes / hbm_rate(c, t)
            for n, replicas, spacing in ((dense, lay.dp, 1), (experts, max(1, lay.dp // lay.ep), lay.ep)):
                ring = (replicas - 1) / replicas * n / dp_bandwidth(c, lay, spacing)
                reduce = ring * t.grad_reduce_bytes * (1 if t.zero >= 1 else 2)
                grads += reduce
                gather += ring * t.param_bytes if t.zero >= 1 else 0.0
                shard = replicas if t.zero >= 1 else 1
                opt += n / shard * (t.grad_bytes + 2 * t.optimizer_bytes + t.param_bytes) / hbm_rate(c, t)
        if t.zero >= 3:  # per micro-batch: gather for forward and backward, reduce the gradients
            per_mb = max(0.0, gather - t.dp_overlap * fwd) + max(0.0, gather + grads - t.dp_overlap * bwd) + 2 * copy_out
            comm = per_mb * microbatches
        else:
            comm = max(0.0, grads - t.dp_overlap * bwd) + max(0.0, gather - t.dp_overlap * fwd)
        worst_comm, worst_opt = max(worst_comm, comm), max(worst_opt, opt)
    return worst_comm, worst_opt


def tied_embedding_sync(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of the all-reduce of a tied word embedding's gradient between the first
    stage (the input embedding) and the last (its copy, the output head), which Megatron-LM
    (``_allreduce_embedding_grads``) and DeepSpeed's pipeline engine (``ReduceTiedGrads``)
    run after the last backward, exposed. A two-rank all-reduce moves each rank's
    vocab * hidden / tp shard once across the link (half out, half back), over the network
    unless the whole pipeline shares a node; nothing without pp > 1 or tied embeddings."""
    if not m.tied_embeddings or lay.pp < 2:
        return 0.0
    same_node = lay.tp * lay.dp * lay.pp <= c.gpus_per_node
    bw = (c.nvlink_gbps if same_node else c.network_gbps) * 1e9
    return m.vocab * m.hidden / lay.tp * t.grad_reduce_bytes / bw


# --------------------------------------------------------------------------------------
# memory


def layer_activation(m: Model, layer: int, t: Training, lay: Layout, recompute: str) -> tuple[float, float]:
    """(bytes one micro-batch keeps for one layer on one GPU, share of it W needs).

    Kept per token, in elements: the layer input; attention's projections (for MLA the
    latent vectors only: DeepSeek-V3 recomputes the up-projections) and its output; the
    MLP's input, gate and up outputs and their product, once per expert a token reaches;
    with sequence parallelism the hidden-sized ones are split over the tensor shards.
    Elements take ``2`` bytes, or ``1`` under fp8 training (activations cached in FP8).
    Without recomputation unfused attention keeps its score matrix, 5 * heads * seq bytes
    (Korthikanti et al. 2022; flash attention keeps none); full recomputation keeps only the layer input. The weight gradient needs
    the inputs of the weighted matrix multiplies.
    """
    a, tp = m.attention, lay.tp
    h = m.hidden / tp if t.sequence_parallel else m.hidden  # the hidden states kept: sharded under SP
    qk, v = attention_dims(m)
    if a.kind == "mla":
        attn = h + a.q_lora_rank + a.kv_lora_rank + a.qk_rope_dim + m.heads * v / tp
        attn_w = h + a.q_lora_rank + a.kv_lora_rank + m.heads * v / tp
    else:
        kv = a.kv_heads or m.heads
        attn = h + (m.heads * qk + kv * (qk + v) + m.heads * v) / tp
        attn_w = h + m.heads * v / tp
    if m.is_moe_layer(layer):
        copies, f = m.moe.top_k + m.moe.shared_experts, m.moe.expert_ffn
        mlp, mlp_w = h + copies * (h + 3 * f), copies * (h + f)
    else:
        f = m.dense_ffn / tp
        mlp, mlp_w = h + (3 if m.activation == "swiglu" else 2) * f, h + f
    width = 1 if t.precision == "fp8" else 2
    tokens = lay.micro_batch * t.seq
    if recompute == "full":
        return tokens * h * 2, 0.0
    scores = 5 * m.heads * t.seq / tp if recompute == "none" and not t.flash_attention else 0.0
    total = (attn + mlp) * width + scores
    return tokens * total, (attn_w + mlp_w) * width / total


def stage_params(m: Model, rng: range, last: bool, first: bool, lay: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters one GPU holds for a stage of these layers."""
    dense = experts = 0.0
    for i in rng:
        d, e = mlp_params(m, i)
        dense += (attention_params(m) + d) / lay.tp + 2 * m.hidden
        experts += e / lay.ep
    if first:
        dense += m.vocab * m.hidden / lay.tp
    if last and not (m.tied_embeddings and first):  # a tied head on its own stage keeps a copy
        dense += m.vocab * m.hidden / lay.tp
    if last and m.mtp_layers:  # each MTP module: an MoE (or dense) layer, a 2h x h projection, two norms
        d, e = mlp_params(m, m.layers - 1)
        dense += m.mtp_layers * ((attention_params(m) + d + 2 * m.hidden * m.hidden) / lay.tp + 4 * m.hidden)
        experts += m.mtp_layers * e / lay.ep
    return dense, experts


def memory_model(
    m: Model, t: Training, lay: Layout, stages: int, recompute: str, parts: list[range] | None = None
) -> MemoryModel:
    """Bytes per stage; ``parts`` the stages' layers (``stage_parts``; default an even split)."""
    parts = parts or partition(m.layers, stages)
    params, experts, acts, shares = [], [], [], []
    for s, rng in enumerate(parts):
        d, e = stage_params(m, rng, s == stages - 1, s == 0, lay)
        params.append(d)
        experts.append(e)
        mtp = [m.layers - 1] * m.mtp_layers if s == stages - 1 else []
        pairs = [layer_activation(m, i, t, lay, recompute) for i in [*rng, *mtp]]
        size = sum(b for b, _ in pairs)
        acts.append(size)
        shares.append(sum(b * w for b, w in pairs) / size if size else 0.0)
    return MemoryModel(
        params=tuple(params),
        expert_params=tuple(experts),
        expert_dp=max(1, lay.dp // lay.ep),
        activation=tuple(acts),
        w_share=max(shares),
        param_bytes=t.param_bytes,
        grad_bytes=t.grad_bytes,
        optimizer_bytes=t.optimizer_bytes,
        zero=t.zero,
        dp=lay.dp,
    )
