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
from dataclasses import dataclass

from ..components import ComponentCosts, LayerCosts
from ..errors import PipesimError
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
    layer's MLP: SwiGLU matrices are 3 * hidden * ffn."""
    h = m.hidden
    if not m.is_moe_layer(layer):
        return 3 * h * m.dense_ffn, 0.0
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


def matmul_rate(c: Cluster, t: Training) -> float:
    peak = c.fp8_tflops if t.precision == "fp8" and c.fp8_tflops else c.bf16_tflops
    return peak * 1e12 * t.efficiency


def attention_rate(c: Cluster, t: Training) -> float:
    return c.bf16_tflops * 1e12 * t.attention_efficiency


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
    """Seconds of one ring all-reduce of a micro-batch's hidden states over tp GPUs."""
    if lay.tp <= 1:
        return 0.0
    size = lay.micro_batch * t.seq * m.hidden * 2
    return 2 * (lay.tp - 1) / lay.tp * size / (c.nvlink_gbps * 1e9)


def layer_costs(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, recompute: str) -> LayerCosts:
    tokens = lay.micro_batch * t.seq
    fl = layer_flops(m, layer, t.seq)
    mm, at = matmul_rate(c, t), attention_rate(c, t)
    moe = m.is_moe_layer(layer)
    proj = tokens * fl["attn_proj"] / lay.tp / mm
    core = tokens * fl["attn_core"] / lay.tp / at
    mlp = tokens * fl["mlp"] / (1 if moe else lay.tp) / mm
    attn_b, mlp_b = proj + 2 * core, mlp
    if recompute == "selective":
        attn_b += core  # the attention scores are recomputed in the backward
    elif recompute == "full":
        attn_b += proj + core  # the whole layer's forward runs again
        mlp_b += mlp
    if moe:
        dispatch, combine, dispatch_b, combine_b = moe_comm(m, c, t, lay)
    else:  # tensor parallelism: an all-reduce after attention and after the MLP
        dispatch = combine = dispatch_b = combine_b = tp_allreduce(m, c, t, lay)
    return LayerCosts(
        attn_f=proj + core,
        mlp_f=mlp,
        dispatch_f=dispatch,
        combine_f=combine,
        attn_b=attn_b,
        attn_w=proj,
        mlp_b=mlp_b,
        mlp_w=mlp,
        dispatch_b=dispatch_b,
        combine_b=combine_b,
    )


def head_costs(m: Model, c: Cluster, t: Training, lay: Layout) -> LayerCosts:
    """The output projection and loss, as a compute-only pseudo-layer on the last stage."""
    x = lay.micro_batch * t.seq * 2 * m.hidden * m.vocab / lay.tp / matmul_rate(c, t)
    return LayerCosts(attn_f=0.0, mlp_f=x, attn_b=0.0, attn_w=0.0, mlp_b=x, mlp_w=x)


def p2p_seconds(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """One activation (or its gradient) between two stages, over the network."""
    size = lay.micro_batch * t.seq * m.hidden * 2 / lay.tp
    return t.p2p_latency_us * 1e-6 + size / (c.network_gbps * 1e9)


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
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


def component_costs(m: Model, c: Cluster, t: Training, lay: Layout, stages: int, recompute: str) -> ComponentCosts:
    parts = partition(m.layers, stages)
    per_layer = {}
    stage_layers = []
    for s, rng in enumerate(parts):
        row = []
        for i in rng:
            key = (m.is_moe_layer(i),)
            if key not in per_layer:
                per_layer[key] = layer_costs(m, i, c, t, lay, recompute)
            row.append(per_layer[key])
        if s == stages - 1:
            row.append(head_costs(m, c, t, lay))
        stage_layers.append(tuple(row))
    # Tensor-parallel all-reduces overlap with the matrix multiplies around them in every
    # schedule (Megatron and TransformerEngine chunk them so), modelled by splitting a lone
    # op's micro-batch in two; expert all-to-alls overlap only inside overlapped pairs.
    return ComponentCosts(
        tuple(stage_layers), p2p=p2p_seconds(m, c, t, lay), comm_sms=t.comm_sms, total_sms=c.sms, lone_overlap=m.moe is None
    )


# --------------------------------------------------------------------------------------
# memory


def layer_activation(m: Model, layer: int, t: Training, lay: Layout, recompute: str) -> tuple[float, float]:
    """(bytes one micro-batch keeps for one layer on one GPU, share of it W needs).

    Kept per token, in elements: the layer input; attention's projections (for MLA the
    latent vectors only: DeepSeek-V3 recomputes the up-projections) and its output; the
    MLP's input, gate and up outputs and their product, once per expert a token reaches.
    Elements take ``2`` bytes, or ``1`` under fp8 training (activations cached in FP8).
    Without recomputation the attention matrix adds 5 * heads * seq bytes (Korthikanti et
    al. 2022); full recomputation keeps only the layer input. The weight gradient needs
    the inputs of the weighted matrix multiplies.
    """
    h, a, tp = m.hidden, m.attention, lay.tp
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
        mlp, mlp_w = h + 3 * f, h + f
    width = 1 if t.precision == "fp8" else 2
    tokens = lay.micro_batch * t.seq
    if recompute == "full":
        return tokens * h * 2, 0.0
    scores = 5 * m.heads * t.seq / tp if recompute == "none" else 0.0
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
    if last and not m.tied_embeddings:
        dense += m.vocab * m.hidden / lay.tp
    return dense, experts


def memory_model(m: Model, t: Training, lay: Layout, stages: int, recompute: str) -> MemoryModel:
    parts = partition(m.layers, stages)
    params, experts, acts, shares = [], [], [], []
    for s, rng in enumerate(parts):
        d, e = stage_params(m, rng, s == stages - 1, s == 0, lay)
        params.append(d)
        experts.append(e)
        pairs = [layer_activation(m, i, t, lay, recompute) for i in rng]
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
