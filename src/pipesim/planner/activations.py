"""What one transformer layer keeps for its backward, tensor by tensor.

Each entry is a tensor autograd saves (or a fused kernel saves in its context), in bytes
per token of the micro-batch on one GPU, named for what it is. The set is what PyTorch and
the fused kernels really keep, read off their backward formulas and checked by counting
``torch.autograd.graph.saved_tensors_hooks`` on real blocks (tests/test_activations_torch.py,
benchmarks/activation_memory.py), distinct storages counted once:

- a norm keeps its input and its per-token statistics (fp32 rstd; LayerNorm also the
  mean); the multiply after it keeps the norm's output, a second tensor of the same size.
  torchtitan's eager RMSNorm keeps instead the fp32 copy of its input (pow and multiply)
  and the bf16 normalised value (the weight's multiply), besides the output;
- a linear layer keeps its input (under FP8, TransformerEngine keeps the FP8 cast: 1 byte);
- q, k and v are views of the fused QKV projection's output, so the kernel that keeps one
  of them keeps that whole buffer alive; rotary embeddings make new q and k (fused rotary
  keeps nothing of its own; torchtitan's complex multiply keeps only the angle table, a
  buffer), and torchtitan's ``repeat_kv`` copies k and v out to every query head;
- flash attention keeps q, k, v, its output (which is the output projection's input) and
  a fp32 logsumexp per head and token; unfused attention (Megatron-LM 2021: baddbmm,
  softmax, dropout, bmm) keeps the softmax output (2 bytes a score), the dropout's bool
  mask (1) and its output (2): Korthikanti et al. 2022's 5 * heads * seq per token;
- dropout keeps a one-byte keep mask (CUDA's native_dropout; Megatron's fused
  bias-dropout-add), nothing of its input;
- GELU keeps its input and the second multiply its output (Megatron's fused bias-GELU);
  a fused SwiGLU keeps its [gate, up] input, the eager one (torchtitan) also silu(gate),
  and the down projection keeps the product;
- MoE: the router keeps its fp32 softmax (the scores), top-k its int64 indices, the
  weight renormalisation the top-k weights and their sum, the permute and the combine
  their int64 token indices, each expert its routed input and its MLP as above, and the
  weighted combine the experts' outputs and the gathered weights (``moe_combine_keeps_outputs``:
  Megatron-Core's permute/unpermute and TransformerEngine's fused unpermute keep them for
  the gate's gradient; DeepSeek-V3 does not say, and its published layout fits 80 GB only
  without them). Under FP8 (DeepSeek-V3's recipe, section 3.3.3) the SwiGLU input is cached
  in FP8 and its output recomputed;
- the output head keeps the final norm as above and the loss's softmax: fp32 over the
  vocabulary shard when the logits are upcast (torchtitan's ``cross_entropy(pred.float())``,
  Megatron's vocab-parallel loss without ``--cross-entropy-loss-fusion``), bf16 when fused.

Sharding: tensor parallelism divides every head- or ffn-sized tensor by tp; sequence
parallelism also the hidden-sized ones of the norm and dropout regions (Megatron keeps the
sequence shard of a column-parallel layer's input and gathers it again in the backward:
Korthikanti et al.'s 34sbh/t; DTensor's sequence parallelism, as torchtitan runs it, keeps
the gathered input instead: ``Training.sp_saves_gathered``); expert tensor parallelism divides the experts' ffn-sized
tensors by etp. Context parallelism keeps each rank's 1/cp of the tokens: the caller
passes the local sequence length as ``t.seq`` (``footprint.memory_model`` does), so
nothing here divides by cp again.

Recomputation: ``selective`` drops what the attention core keeps inside itself (scores,
masks and dropout output unfused, the logsumexp flash) and, for MLA, what DeepSeek-V3
recomputes (section 3.2.3: every RMSNorm and the up-projections; Megatron-Core's
"layernorm" and "mla_up_proj" recompute modules free those outputs once used, keeping the
inputs: the norms' and the two latents); ``full`` keeps the layer input only, and its backward
re-materialises one layer's ``none`` set at a time (``recompute_transient``). Two more are
torchtitan's selective modes (its ``activation_checkpoint.selective_ac_option``):

- ``op``: a checkpoint around each block whose policy keeps the outputs of the ops on a
  save list, recomputing the rest (parallelize_llama.py, ``_save_list``, at 9dec370, the
  commit docs/performance.md measured): every other matrix multiply of the forward, the
  first, third, ... (wq, wv, w1 and w2 of a Llama block: q, v, the gate and the down
  projection's output), and flash attention's outputs (output, fp32 logsumexp); the
  checkpoint keeps its input besides. torch.compile'd (``fused_kernels = "inductor"``)
  the down projection's output is not kept: the partitioner saves only what the
  backward graph reads. Under torchao's tensorwise Float8 (``fp8_scaling =
  "tensor"``) the set is the same: Float8Linear's forward calls ``torch.mm`` on its
  Float8Tensor arguments (torchao eab345c, float8_linear.py,
  ``manual_float8_matmul_with_args_in_float8``), which the policy's dispatch mode sees
  as ``aten.mm`` before the subclass turns it into ``_scaled_mm``, and whose output is
  bf16. The list's ``abs`` and ``max`` (for each cast's amax) are left out: keeping
  every cast's ``abs`` would add over 30 GB to Llama 3 8B's compiled Float8 rows, whose
  published memory equals the bf16 rows' within 0.2 GiB (torchtitan
  benchmarks/llama3_h100_202412_torchtitan.md, Tables 1 and 3). Block-scaled FP8 is
  not torchtitan's and is refused;
- ``every-N``: a full checkpoint around every Nth block (torchtitan counts blocks from one,
  so the second, fourth, ... for N = 2) and nothing around the others (``layer_mode``).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import PipesimError
from .recompute_modules import rerun_modules
from .saved_widths import BF16, FP32, INDEX, MASK, fp8_swiglu_cache, gathered_width, layer_mode
from .specs import Model, Training
from .training import norm_fused, te_current_scaling
from .weight_grad_saved import layer_w_saved


#: bytes of a bf16 element, an fp32 one, an int64 index and a bool mask
def _norm(t: Training, layernorm: bool, hidden: float, out_width: float, out_hidden: float = 0.0) -> dict[str, float]:
    """A norm's saved tensors and the following multiply's input (the norm's output),
    ``out_hidden`` wide where that differs from the norm's own ``hidden`` (``saved_widths.gathered_width``)."""
    stats = FP32 * (2 if layernorm else 1)  # rstd (and mean): per token
    if norm_fused(t) or layernorm:
        kept = {"input": BF16 * hidden, "stats": stats}
    else:  # torchtitan's eager RMSNorm: fp32 input copy, bf16 normalised value
        kept = {"fp32 input": FP32 * hidden, "stats": stats, "normalised": BF16 * hidden}
    return kept | {"output": out_width * (out_hidden or hidden)}


def _prefixed(prefix: str, d: dict[str, float]) -> dict[str, float]:
    return {f"{prefix} {k}": v for k, v in d.items()}


def _attention(m: Model, t: Training, tp: int, recompute: str, lin: float, hid: float) -> dict[str, float]:
    """Attention's saved tensors after its norm: the projections' and kernel's."""
    a, heads = m.attention, m.heads / tp
    core = recompute != "none"  # selective: the core's inner state is recomputed
    if a.kind == "mla":
        qk, v = a.qk_nope_dim + a.qk_rope_dim, a.v_head_dim
        out = {
            "q down-projection output": BF16 * a.q_lora_rank,
            "kv down-projection output": BF16 * (a.kv_lora_rank + a.qk_rope_dim),
            "attention output": lin * heads * v,
            "logsumexp": FP32 * heads,
        }
        if recompute == "none":  # DeepSeek-V3 recomputes these under selective
            out |= {
                "latent norm statistics": 2 * FP32,
                "q latent norm output": lin * a.q_lora_rank,
                "kv latent norm output": lin * a.kv_lora_rank,
                "q": BF16 * heads * qk,
                "k": BF16 * heads * qk,
                "kv up-projection output": BF16 * heads * (a.qk_nope_dim + v),
            }
        return out
    d = a.head_dim or m.hidden // m.heads
    kv = (a.kv_heads or m.heads) / tp
    out = {}
    # torchtitan's eager block, and the same block torch.compile'd: the rotary's new q and
    # repeat_kv's copies of k and v, what flash attention reads (compiled, AOTAutograd's
    # partitioner saves those inputs, not the separate projections' outputs:
    # tests/test_activations_compiled.py)
    if (not t.fused_elementwise or t.fused_kernels == "inductor") and t.flash_attention:
        out |= {"q": BF16 * heads * d, "k repeated": BF16 * heads * d, "v repeated": BF16 * heads * d}
    else:
        out["qkv projection output"] = BF16 * (heads + 2 * kv) * d  # v (a view) keeps it alive
        if m.rotary:
            out["rotated q and k"] = BF16 * (heads + kv) * d
    if t.flash_attention:
        out["attention output"] = lin * heads * d
        if not core:
            out["logsumexp"] = FP32 * heads
    else:
        out["context"] = lin * heads * d
        if not core:
            dropout = (MASK + BF16) if t.hidden_dropout else 0.0  # the attention dropout goes with it
            out["softmax output"] = BF16 * heads * t.seq
            if dropout:
                out["attention dropout mask and output"] = dropout * heads * t.seq
    return out


def _mlp(
    m: Model, layer: int, t: Training, tp: int, lin: float, seq_share: float, etp: int = 1, act_rerun: bool = False
) -> dict[str, float]:
    """The MLP's saved tensors after its norm (``act_rerun``: Megatron-Core's "moe_act"
    recompute module drops the experts' activation output, fc2's input)."""
    eager = not t.fused_elementwise
    if not m.is_moe_layer(layer):
        f = m.dense_ffn / tp
        if m.activation == "gelu":
            return {"gelu input": BF16 * f, "gelu output": lin * f}
        return {"gate and up": BF16 * 2 * f, **({"silu(gate)": BF16 * f} if eager else {}), "swiglu output": lin * f}
    e, h = m.moe, m.hidden

    def swiglu(f: float, rerun: bool) -> float:
        if fp8_swiglu_cache(t):  # DeepSeek-V3 (section 3.3.3) caches the SwiGLU input in FP8 and recomputes its output
            return lin * 2 * f
        return BF16 * 2 * f + (BF16 * f if eager else 0.0) + (0.0 if rerun else lin * f)

    k = e.top_k
    per_copy = swiglu(e.expert_ffn / etp, act_rerun)
    routed = {
        "router scores (fp32 softmax)": FP32 * e.experts * seq_share,
        "top-k indices": INDEX * k * seq_share,
        "top-k weights and their sum": FP32 * (k + 1) * seq_share,
        "permute and combine indices": 3 * INDEX * k * seq_share,
        "expert inputs": lin * k * h * seq_share,
        "expert MLPs": per_copy * k * seq_share,
    }
    if t.moe_combine_keeps_outputs:
        routed["expert outputs and weights"] = BF16 * k * (h + 1) * seq_share
    if e.shared_experts:
        # an MLP tensor-parallel over tp on every token, as compute.mlp_shapes runs it: its
        # width is not split by etp, and "moe_act" reruns the routed experts' activation
        # alone (Megatron-Core core_v0.14.0 moe/experts.py:806, TEGroupedMLP; the shared
        # experts are transformer/mlp.py's MLP, which has no such module)
        routed["shared expert MLPs"] = swiglu(e.expert_ffn * e.shared_experts / tp, False)
    return routed


def _matmul_outputs(m: Model, t: Training, tp: int) -> list[tuple[str, float]]:
    """A dense Llama block's matrix multiplies' outputs per token, in forward order
    (torchtitan: wq, wk, wv, wo, then w1, w3, w2). A row-parallel multiply's local output
    is the whole hidden width before its reduce(-scatter)."""
    a = m.attention
    d = a.head_dim or m.hidden // m.heads
    kv = (a.kv_heads or m.heads) / tp
    f = m.dense_ffn / tp
    return [
        ("q projection output", BF16 * m.heads / tp * d),
        ("k projection output", BF16 * kv * d),
        ("v projection output", BF16 * kv * d),
        ("output projection output", BF16 * m.hidden),
        ("gate projection output", BF16 * f),
        ("up projection output", BF16 * f),
        ("down projection output", BF16 * m.hidden),
    ]


def _op_saved(m: Model, layer: int, t: Training, tp: int, hid: float) -> dict[str, float]:
    """torchtitan's selective op checkpointing: its input, every other multiply's output,
    flash attention's output and logsumexp (see the module docstring)."""
    block_fp8 = t.precision == "fp8" and t.fp8_scaling != "tensor"
    if m.is_moe_layer(layer) or m.attention.kind == "mla" or not t.flash_attention or block_fp8:
        raise PipesimError(
            "recompute 'op' is torchtitan's selective op checkpointing of a dense Llama block in bf16 or tensorwise "
            'fp8 (fp8_scaling = "tensor") with flash attention; use none, selective, full or every-N for this '
            "model and training"
        )
    d = m.attention.head_dim or m.hidden // m.heads
    kept = dict(_matmul_outputs(m, t, tp)[0::2])  # the first, third, ... multiply of the forward
    if t.fused_kernels == "inductor":
        # torch.compile'd, the policy only marks what may be saved: AOTAutograd's partitioner
        # saves for the backward graph what that graph reads, and nothing reads the down
        # projection's output (the residual add's gradient needs no input). Eager SAC caches
        # it all the same (tests/test_activations_compiled.py counts both)
        del kept["down projection output"]
    return {"layer input": BF16 * hid, **kept, "attention output": BF16 * m.heads / tp * d, "logsumexp": FP32 * m.heads / tp}


def layer_saved(m: Model, layer: int, t: Training, tp: int = 1, recompute: str = "none", etp: int = 1) -> dict[str, float]:
    """Bytes per token one GPU keeps for ``layer``, by tensor."""
    recompute = layer_mode(recompute, layer)
    seq_share = 1 / tp if t.sequence_parallel and tp > 1 else 1.0
    hid = m.hidden * seq_share  # hidden-sized tensors of the norm and dropout regions
    lin = 1 if t.precision == "fp8" else BF16  # a linear layer's saved input
    if recompute == "full":
        return {"layer input": BF16 * hid}
    if recompute == "op":
        return _op_saved(m, layer, t, tp, hid)
    layernorm = m.activation == "gelu"  # GPT-style blocks use LayerNorm, the rest RMSNorm
    if m.attention.kind == "mla" and recompute == "selective":
        # DeepSeek-V3 (section 3.2.3) recomputes every RMSNorm: each keeps its input only
        # (Megatron-Core's "layernorm" recompute module frees the output once used)
        norm = {"input": BF16 * hid}
    else:
        norm = _norm(t, layernorm, hid, lin, gathered_width(m, t, hid))
    out = _prefixed("attention norm", norm)
    out |= _attention(m, t, tp, recompute, lin, hid)
    # Megatron-Core's recompute modules keep the norm's input alone and drop the activation's output
    rerun = rerun_modules(m, layer, t, recompute)
    if m.is_moe_layer(layer) and te_current_scaling(t) and "output" in norm:
        # Megatron-Core's router keeps the MoE block's input as it comes, BF16
        # (core_v0.14.0 moe/moe_utils.py:914-924, RouterGatingLinearFunction saves inp), and
        # the shared expert's fc1 keeps that same tensor (shared_experts.py:65-86,
        # set_save_original_input), not an FP8 cast of it
        norm = _norm(t, layernorm, hid, BF16, gathered_width(m, t, hid))
    out |= _prefixed("mlp norm", {"input": BF16 * hid} if "layernorm" in rerun else norm)
    out |= _mlp(m, layer, t, tp, lin, seq_share, etp, act_rerun="moe_act" in rerun)
    if t.hidden_dropout:
        out["residual dropout masks"] = 2 * MASK * hid
    return out


def head_saved(m: Model, t: Training, tp: int = 1) -> dict[str, float]:
    """Bytes per token the last stage keeps for the final norm, output layer and loss."""
    hid = m.hidden / tp if t.sequence_parallel and tp > 1 else m.hidden
    fp32_loss = t.logit_bytes > 10  # see Training.logit_bytes: 10 is a fused bf16 loss
    # torchtitan compiles each block, not the final norm (Training.final_norm_eager)
    tn = replace(t, norm_kernel="eager") if t.final_norm_eager else t
    return _prefixed("final norm", _norm(tn, False, hid, BF16, gathered_width(m, t, hid))) | {
        "loss softmax": (FP32 if fp32_loss else BF16) * m.vocab / tp,
        "targets": INDEX,
    }


def _bytes(per_token: dict[str, float], tokens: float) -> float:
    return tokens * sum(per_token.values())


def layer_activation(m: Model, layer: int, t: Training, lay, recompute: str) -> tuple[float, float]:
    """(bytes one micro-batch keeps for one layer on one GPU, share of that the W keeps).

    The W keeps each weighted multiply's input and output gradient from its B to its end
    (``weight_grad_saved.layer_w_saved``), so the share can pass 1 (under tp with sequence
    parallelism the gathered output gradients outweigh the sharded activation), and does
    under ``Training.w_keeps_graph`` (the whole saved set besides the gradients). Under
    ``full`` and ``op`` recomputation the share is 0: the B frees what it rebuilt."""
    lay_etp = getattr(lay, "etp", 1)
    saved = layer_saved(m, layer, t, lay.tp, recompute, lay_etp)
    tokens = lay.micro_batch * t.seq
    total = _bytes(saved, 1)
    w_set = layer_w_saved(m, layer, t, lay.tp, recompute, lay_etp)
    if t.w_keeps_graph and w_set:  # PyTorch's split backward: the whole saved set and the gradients
        return tokens * total, 1 + sum(v for k, v in w_set.items() if k.endswith("output gradient")) / total
    return tokens * total, _bytes(w_set, 1) / total


def head_activation(m: Model, t: Training, lay) -> float:
    """Bytes one micro-batch keeps for the output head on the last stage."""
    return _bytes(head_saved(m, t, lay.tp), lay.micro_batch * t.seq)


def recompute_transient(m: Model, t: Training, lay, recompute: str) -> float:
    """Bytes a recomputing backward re-materialises at once: the largest checkpointed
    layer's ``none`` set (Megatron's CheckpointFunction and torch.utils.checkpoint rerun
    one layer's forward with autograd on, then run its backward; under ``op`` the rerun
    rebuilds what the cache does not hold, the cached outputs being counted already),
    nothing for ``none`` and ``selective``."""
    redone = [i for i in range(m.layers) if layer_mode(recompute, i) in ("full", "op")]
    if not redone:
        return 0.0
    kinds = {m.is_moe_layer(i): i for i in redone}
    extra = []
    for i in kinds.values():
        whole = layer_activation(m, i, t, lay, "none")[0]
        if layer_mode(recompute, i) == "op":  # the cached tensors the none set holds too are not made again
            op = layer_saved(m, i, t, lay.tp, "op")
            whole -= lay.micro_batch * t.seq * sum(op[k] for k in _OP_IN_NONE)
        extra.append(whole)
    return max(extra)


def cp_attention_transient(m: Model, t: Training, lay) -> float:
    """Bytes one attention layer's backward holds at once under PyTorch's context
    parallelism (``Training.torch_context_parallel``; ``t.seq`` the local sequence),
    read off torch/distributed/tensor/experimental _templated_ring_attention_backward
    (the same at the commit torchtitan's published runs used): per local token, in units
    of the query width (torchtitan's repeat_kv gives keys and values every query head)

    - the keys and values it attends to: the whole sequence's, cp times the local ones,
      gathered once (cp_comm "all_gather", torchtitan's default ``allgather`` rotate
      method), else the local and the next rank's; plus the local pair's ``cat`` it sends;
    - dq accumulated in fp32 (``convert_to_f32``), dk and dv accumulated in fp32 as views
      of the buffer received from the last rank, their ``cat`` for the next and the
      all-to-all's output: seven fp32 units;
    - one sub-attention's dq, dk, dv from the flash backward: three bf16 units.

    Counted beside the recomputed layer's saved set (``recompute_transient``), as the
    attention's backward runs while that set is alive."""
    if lay.cp == 1 or not t.torch_context_parallel or m.attention.kind == "mla":
        return 0.0
    width = m.heads / lay.tp * (m.attention.head_dim or m.hidden // m.heads)
    kv_copies = lay.cp if t.cp_comm == "all_gather" else 2
    per_token = 2 * BF16 * (kv_copies + 1) + 7 * FP32 + 3 * BF16
    return lay.micro_batch * t.seq * width * per_token


#: the tensors op checkpointing caches that a block without recomputation saves as well:
#: the input (the attention norm's), the gate (SiLU's input) and flash attention's outputs
_OP_IN_NONE = ("layer input", "gate projection output", "attention output", "logsumexp")


def loss_transient(m: Model, t: Training, lay) -> float:
    """Bytes the loss's backward holds beyond ``head_saved`` at its peak:
    ``Training.loss_backward_copies`` fp32 tensors of the logits' size on this GPU. With
    the logits upcast (``F.cross_entropy(logits.float())``, torchtitan), nll_loss's
    backward writes a dense fp32 gradient over the vocabulary and log_softmax's backward a
    second one while its saved output is alive (aten's nll_loss_backward and
    _log_softmax_backward_data allocate their results): 2. Under DTensor's loss_parallel
    (torch/distributed/tensor/parallel/loss.py) one function does both as
    ``(zeros_like(x) + exp(x)) * grad``: the zeros, their sum and the product, 3. A loss
    that writes its gradient into the softmax it saved (Megatron's vocab-parallel
    cross-entropy): 0."""
    return t.loss_backward_copies * FP32 * m.vocab / lay.tp * lay.micro_batch * t.seq
