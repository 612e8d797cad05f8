"""What a deferred weight gradient (the W of a split backward) keeps from its B to its end.

A weighted multiply ``y = x W^T`` has the weight gradient ``dW = dy^T x``: when B computes
only ``dx = dy W`` and leaves dW to a later W, both factors stay alive until then, the
multiply's input ``x`` and its output gradient ``dy``. The Zero Bubble authors' Megatron-LM
fork stores exactly those two per linear layer (sail-sg/zero-bubble-pipeline-parallelism,
megatron/core/tensor_parallel/layers.py, ``LinearWithGradAccumulationAndAsyncCommunication``:
at 77b9eed9 ``WeightGradStore.put(total_input, grad_output, weight, func)``; at its later
head it stores ``input`` and ``grad_output`` and gathers the input in the W). Counting them
for a GPT layer gives the paper's M_W = 32h bytes per token in 16-bit (Qi et al. 2023,
"Zero Bubble Pipeline Parallelism", section 2): inputs of qkv (h), the output projection
(h), fc1 (h) and fc2 (4h), and output gradients of qkv (3h), the output projection (h),
fc1 (4h) and fc2 (h): 16h elements (tests/test_weight_grad_saved.py counts it by hand;
tests/test_weight_grad_saved_torch.py holds the set to what PyTorch's split backward,
``stage_backward_input`` then ``stage_backward_weight``, reads on GPT, Llama and MoE blocks).

Widths under tensor parallelism, per token of the micro-batch (as ``activations``):

- a column-parallel multiply's input is what its autograd node keeps: the sequence shard
  under Megatron-LM's sequence parallelism (the fork's head gathers it again in the W),
  the gathered input under DTensor's (``saved_widths.gathered_width``); its output gradient is
  its own output shard, heads/tp or ffn/tp wide;
- a row-parallel multiply's input is its local shard; its output gradient is the whole
  hidden width for every token of the sequence: the gradient of the forward's all-reduce
  (or, under sequence parallelism, of its reduce-scatter: an all-gather) arrives whole,
  and the fork keeps it as it arrives ("We do not support all gather grad_output for now",
  layers.py at its head). Under tp with sequence parallelism this alone can make the W
  keep more than the forward's own, sequence-sharded, activation: a B that allocates more
  than it frees (``memory.MemoryModel.w_share`` above 1);
- experts: each routed copy's gate/up and down projections, on the copies the dispatcher
  made (``expert inputs``), ffn/etp wide; shared experts as a dense MLP of their width.
  The router's weight gradient is not deferred (Megatron-Core's router is a plain
  parameter, not a ``WeightGradStore`` linear).

Precision: 16-bit inputs and gradients; under FP8 both the cached input and the output
gradient the weight-gradient GEMM reads are FP8 casts (DeepSeek-V3 technical report,
section 3.3.1, Figure 6: Wgrad takes FP8 activations and FP8 output gradients; Transformer
Engine's and torchao's Float8 linears cast the output gradient once for both GEMMs). With
DeepSeek-V3's cached FP8 SwiGLU input (``saved_widths.fp8_swiglu_cache``) the down
projection's input is recomputed from that cache, which the W keeps instead.

Entries that name the same tensor (the norm's output feeding qkv, or the MLA down
projections, or gate and up) are counted once, as one storage.
"""

from __future__ import annotations

from .saved_widths import BF16, fp8_swiglu_cache, gathered_width, layer_mode
from .specs import Model, Training


def _attention_w(m: Model, t: Training, tp: int, io: float, hid: float, seq_share: float) -> dict[str, float]:
    """The attention's weighted multiplies: inputs and output gradients, per token."""
    a, heads = m.attention, m.heads / tp
    if a.kind == "mla":
        # Megatron-Core's MLA (multi_latent_attention.py) runs the down projections on the
        # sequence shard under sequence parallelism (it gathers q_compressed only for its
        # DSA indexer); the latents' widths follow activations._attention's
        qk, v = a.qk_nope_dim + a.qk_rope_dim, a.v_head_dim
        return {
            "attention norm output": io * hid,
            "q down-projection output gradient": io * a.q_lora_rank * seq_share,
            "kv down-projection output gradient": io * (a.kv_lora_rank + a.qk_rope_dim) * seq_share,
            "q latent norm output": io * a.q_lora_rank,
            "q up-projection output gradient": io * heads * qk,
            "kv latent norm output": io * a.kv_lora_rank,
            "kv up-projection output gradient": io * heads * (a.qk_nope_dim + v),
            "attention output": io * heads * v,
            "output projection output gradient": io * m.hidden,
        }
    d = a.head_dim or m.hidden // m.heads
    kv = (a.kv_heads or m.heads) / tp
    return {
        "attention norm output": io * gathered_width(m, t, hid),  # q, k and v read one input
        "qkv projection output gradient": io * (heads + 2 * kv) * d,
        "attention output": io * heads * d,
        "output projection output gradient": io * m.hidden,
    }


def _mlp_w(m: Model, layer: int, t: Training, tp: int, io: float, hid: float, seq_share: float, etp: int) -> dict[str, float]:
    """The MLP's (or the experts') weighted multiplies: inputs and output gradients."""
    gelu = m.activation == "gelu"

    def mlp(f: float, copies: float, inp: float) -> dict[str, float]:
        up = f if gelu else 2 * f  # fc1, or gate and up (one input, one gradient each)
        down_in = 2 * f if fp8_swiglu_cache(t) and not gelu else f  # the cached SwiGLU input
        return {
            "input": io * inp * copies,
            "up output gradient": io * up * copies,
            "down input": io * down_in * copies,
            "down output gradient": io * m.hidden * copies,
        }

    if not m.is_moe_layer(layer):
        out = mlp(m.dense_ffn / tp, 1.0, gathered_width(m, t, hid))
        return {f"mlp {k}".replace("mlp input", "mlp norm output"): v for k, v in out.items()}
    e = m.moe
    out = {f"expert {k}": v for k, v in mlp(e.expert_ffn / etp, e.top_k * seq_share, m.hidden).items()}
    if e.shared_experts:
        shared = mlp(e.expert_ffn * e.shared_experts / tp, 1.0, gathered_width(m, t, hid))
        out |= {f"shared expert {k}".replace("shared expert input", "mlp norm output"): v for k, v in shared.items()}
    return out


def layer_w_saved(m: Model, layer: int, t: Training, tp: int = 1, recompute: str = "none", etp: int = 1) -> dict[str, float]:
    """Bytes per token one GPU keeps for ``layer``'s deferred weight gradients, by tensor:
    each weighted multiply's input and output gradient (module docstring). Under ``full``
    and ``op`` recomputation nothing: pipesim keeps its W share of 0 there (the B frees
    what it rebuilt); what a recomputing B leaves for a deferred W is not modelled."""
    if layer_mode(recompute, layer) in ("full", "op"):
        return {}
    seq_share = 1 / tp if t.sequence_parallel and tp > 1 else 1.0
    hid = m.hidden * seq_share
    io = 1 if t.precision == "fp8" else BF16
    return _attention_w(m, t, tp, io, hid, seq_share) | _mlp_w(m, layer, t, tp, io, hid, seq_share, etp)
