"""Parameter counts of a model's parts: per layer, the embedding, the whole model and what a
token passes through (the numerators of MFU and of the parameter bytes a GPU holds)."""

from __future__ import annotations

from .specs import Model


def attention_params(m: Model) -> float:
    a, h = m.attention, m.hidden
    if a.kind == "mla":
        qk = a.qk_nope_dim + a.qk_rope_dim
        q = h * a.q_lora_rank + a.q_lora_rank * m.heads * qk if a.q_lora_rank else h * m.heads * qk
        kv = h * (a.kv_lora_rank + a.qk_rope_dim) + a.kv_lora_rank * m.heads * (a.qk_nope_dim + a.v_head_dim)
        return q + kv + m.heads * a.v_head_dim * h
    hd = a.head_dim or h // m.heads
    kv = a.kv_heads or m.heads
    # q and o: heads; k and v: kv heads; with biases one a output of q, k, v and o
    bias = hd * (m.heads + 2 * kv) + h if m.biases else 0
    # gpt-oss's sinks: one a head (transformers' GptOssAttention: nn.Parameter of
    # num_attention_heads; Megatron-Core's softmax_offset, learnable)
    sinks = m.heads if m.attention_sinks else 0
    return h * hd * (2 * m.heads + 2 * kv) + bias + sinks


def mlp_params(m: Model, layer: int) -> tuple[float, float]:
    """(parameters every GPU of the layer's tensor group holds, expert parameters) of a
    layer's MLP: SwiGLU matrices are 3 * hidden * ffn, GELU ones 2 * hidden * ffn."""
    h = m.hidden
    if not m.is_moe_layer(layer):
        return (3 if m.activation == "swiglu" else 2) * h * m.dense_ffn + _mlp_biases(m, m.dense_ffn), 0.0
    e = m.moe
    # the router's matrix (and, with biases, one an expert) is held like the dense weights
    shared = (3 * h * e.expert_ffn + _mlp_biases(m, e.expert_ffn)) * e.shared_experts + (h + (1 if m.biases else 0)) * e.experts
    return shared, (3 * h * e.expert_ffn + _mlp_biases(m, e.expert_ffn)) * e.experts


def _mlp_biases(m: Model, ffn: int) -> int:
    """An MLP's (or one expert's) biases: one a output, of the gated pair (2 ffn under
    SwiGLU, ffn under GELU) and of the down projection (hidden). gpt-oss's experts
    (transformers' GptOssExperts: gate_up_proj_bias of 2 x intermediate_size, down_proj_bias
    of hidden_size) hold 8,640 a 2880-wide expert: 39.8M of gpt-oss-120b's 116.83B."""
    if not m.biases:
        return 0
    return (2 if m.activation == "swiglu" else 1) * ffn + m.hidden


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


def published_active_params(m: Model) -> float:
    """The active count as the model's maker publishes it, for the report beside their
    figure; the costs use ``active_params``. DeepSeek leave the input embedding out (a
    row lookup, no multiply), and only so do their figures come out: V2 20.85B (21B
    published; 21.38B with it), V3 36.62B (37B; 37.55B with it, and README_WEIGHTS.md's
    36.7B is nearer this side), V2-Lite 2.45B (2.4B; 2.66B with it). Mistral and Qwen
    count it: Mixtral 8x7B's 12.9B and Qwen3-30B-A3B's 3.3B hold only with it (12.75B and
    3.04B without). A tied embedding is the output head too, which every token multiplies."""
    lookup = 0 if m.active_counts_embedding or m.tied_embeddings else m.vocab * m.hidden
    return active_params(m) - lookup


def attention_dims(m: Model) -> tuple[int, int]:
    """(query/key size, value size) per head."""
    a = m.attention
    if a.kind == "mla":
        return a.qk_nope_dim + a.qk_rope_dim, a.v_head_dim
    hd = a.head_dim or m.hidden // m.heads
    return hd, hd
