"""The memory-bound kernels of a layer (norms, residual adds, rotary, activations, MoE
routing, FP8 casts): the bytes each moves forward and backward, fused or as PyTorch's
eager ops run them. ``layer_costs`` prices them at ``compute.hbm_rate``."""

from __future__ import annotations

from ..errors import PipesimError
from .compute import attention_shapes, mlp_shapes
from .footprint import float8_gathered
from .layout import Layout
from .llm_foundry import llm_foundry_terms
from .params import attention_dims
from .specs import Model, Training
from .training import norm_fused, te_current_scaling

#: bytes torchao's tensorwise cast moves per element of an activation or output gradient
#: under torch.compile (torchao eab345c, float8/roofline_utils.py,
#: get_tensor_memory_traffic_bytes, dynamic scaling, fuse_with_prev, with
#: model_torch_compile_limitations): the amax's first stage rides in the kernel that
#: produced the tensor; the cast reads it in bf16 (2) and writes it in fp8 twice, row-major
#: and column-major (1 + 1: torch._scaled_mm takes its first operand row-major and its
#: second column-major, float8_ops.py preprocess_addmm, and the weight-gradient multiply
#: takes both tensors the other way round), and Inductor's kernel reads its own fp8 output
#: back for the transposed copy (1: pytorch/pytorch#130015, open at torch 1963fc8)
TORCHAO_CAST_BYTES = 5


#: ... and per element of a weight cast from bf16: its amax reads it first (2), the
#: producer being FSDP's all-gather, no Inductor kernel (fuse_with_prev=False)
TORCHAO_WEIGHT_CAST_BYTES = TORCHAO_CAST_BYTES + 2


#: bytes per element of the amax read of an activation whose producer is no Inductor
#: kernel: the attention kernel's output, the output projection's input
AMAX_READ_BYTES = 2


#: bytes per element of the transposed copy of a weight FSDP gathered in float8 (read 1,
#: write 1): the input-gradient multiply takes it as its second operand row-major, which
#: preprocess_addmm copies with ``b.t().contiguous().t()`` (torchao eab345c, float8_ops.py)
FP8_TRANSPOSE_BYTES = 2


def fp8_cast_terms(m: Model, layer: int, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """(attention forward, attention backward, MLP forward, MLP backward) elements of 2
    bytes per token that torchao's tensorwise Float8Linear (``fp8_casts = "torchao"``)
    moves to make its FP8 operands, as torchtitan at 9dec370 ran it under torch.compile
    (torchao eab345c, float8/float8_linear.py, tensorwise path): forward each multiply's
    input is cast (``TORCHAO_CAST_BYTES``; wq, wk and wv, or w1 and w3, cast the same
    tensor alike, which the partitioner's common-subexpression pass merges into one,
    torch/_functorch/partitioners.py ``fx_graph_cse``, as ``compute.attention_shapes``
    fuses them) and each weight (``TORCHAO_WEIGHT_CAST_BYTES``),
    every micro-batch, the output projection's input first read for its amax
    (``AMAX_READ_BYTES``); backward each output gradient is cast once
    (``NoopFwToFloat8BwDynamic``) and both multiplies take the forward's fp8 tensors
    (``manual_float8_matmul_with_args_in_float8`` saves them). With FSDP's float8
    all-gather (``fsdp_float8_all_gather``) the weight arrives in fp8 and only its
    transposed copy is made, backward (``FP8_TRANSPOSE_BYTES``); the cast of each fp32
    shard before its gather (fsdp_utils.py ``fsdp_pre_all_gather``, 1/dp of the weight) is
    left out, as is the bf16 cast it replaces. Tensor parallelism is priced as one GPU's
    multiplies: torchao's Float8ColwiseParallel casts the sequence shard before its
    all-gather, which is not modelled."""
    T = lay.tokens(t.seq)
    gathered = float8_gathered(t)
    out = []
    for shapes in (attention_shapes(m, t, lay), mlp_shapes(m, layer, t, lay)):
        forward = sum(c * tok * k * TORCHAO_CAST_BYTES for tok, _, k, c in shapes)
        backward = sum(c * tok * n * TORCHAO_CAST_BYTES for tok, n, _, c in shapes)
        weights = sum(c * n * k for _, n, k, c in shapes)
        if gathered:
            backward += weights * FP8_TRANSPOSE_BYTES
        else:
            forward += weights * TORCHAO_WEIGHT_CAST_BYTES
        out += [forward / (2 * T), backward / (2 * T)]
    tok, _, k, c = attention_shapes(m, t, lay)[-1]  # the output projection
    out[0] += c * tok * k * AMAX_READ_BYTES / (2 * T)
    return out[0], out[1], out[2], out[3]


#: bytes per element that Transformer Engine 2.7's current scaling (Megatron-Bridge's
#: fp8_cs, ``fp8_scaling = "tensor"``) moves in each kernel it launches to make an FP8
#: operand of a bf16 tensor (TransformerEngine fedd9ddc, the version Megatron-Bridge
#: 25.09 built on). The scale depends on the tensor's own amax, so the cast cannot ride
#: in the producer's kernel as delayed scaling's does: Float8CurrentScalingQuantizer's
#: quantize_impl (pytorch/csrc/quantizer.cpp:501-539) runs nvte_compute_amax, a read of
#: the whole tensor (:521; common/recipe/current_scaling.cu:105) ...
TE_AMAX_BYTES = 2
#: ... then nvte_quantize_v2 (quantizer.cpp:538). With one scale per tensor
#: (NVTE_DELAYED_TENSOR_SCALING, the mode current scaling shares) and a column-wise copy
#: wanted, one cast_transpose kernel reads the tensor once and writes both FP8 layouts
#: (common/util/cast_kernels.cuh:1391-1396): read 2, write 1 + 1; Hopper's FP8 multiplies
#: take only the "TN" layout, so the weight gradient needs the transposed copy
#: (quantizer.cpp:349, ``nvte_is_non_tn_fp8_gemm_supported``) ...
TE_CAST_TRANSPOSE_BYTES = 4
#: ... or, row-wise only (cast_kernels.cuh:1402-1403, ``fp8_quantize``), read 2, write 1 ...
TE_CAST_BYTES = 3
#: ... and an FP8 tensor's transposed copy made from its row-wise data
#: (pytorch/tensor/_internal/float8_tensor_base.py:178-184, ``tex.fp8_transpose``): read 1,
#: write 1
TE_FP8_TRANSPOSE_BYTES = 2


def te_linears(m: Model, layer: int) -> tuple[list[tuple[bool, str]], list[tuple[bool, str]]]:
    """(attention, MLP): for each multiply of ``compute.attention_shapes`` and
    ``mlp_shapes``, in their order, whether Transformer Engine's norm kernel makes its
    input and how it is split over tensor parallelism ("column", "row", "duplicated" or
    "none"), as
    Megatron-Core 0.14's layer specs build them (models/gpt/gpt_layer_specs.py:123-172,
    moe_module_specs.py:49-50): a dense layer's qkv and fc1 are
    TELayerNormColumnParallelLinear (the norm inside), its output projection and fc2
    TERowParallelLinear; an MoE layer's norm is a TENorm of its own (the router reads it),
    its experts TE's GroupedLinear (no tensor-parallel collective) and its shared experts
    column- and row-parallel TE linears; MLA's down projections are duplicated TELinear
    on the sequence shard (transformer/multi_latent_attention.py:369-370, 408-409 and 526-560),
    its up projections TELayerNormColumnParallelLinear (DeepSeek-V3's q and kv norms),
    without a query LoRA rank the query a column-parallel TELinear."""
    a = m.attention
    if a.kind == "mla":
        attn = [(False, "duplicated"), (True, "column")]
        attn += [(False, "duplicated"), (True, "column")] if a.q_lora_rank else [(False, "column")]
        attn.append((False, "row"))
    else:
        attn = [(True, "column"), (False, "row")]
    if not m.is_moe_layer(layer):
        return attn, [(True, "column"), (False, "row")]
    return attn, [(False, "none"), (False, "none")] + ([(False, "column"), (False, "row")] if m.moe.shared_experts else [])


def te_current_cast_terms(m: Model, layer: int, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """(attention forward, attention backward, MLP forward, MLP backward) elements of 2
    bytes per token that Transformer Engine 2.7's current scaling moves to make the FP8
    operands of a layer's multiplies on Hopper (``TE_*_BYTES``; ``te_linears`` says
    which multiply is which):

    - Forward input. After TE's norm the norm kernel writes bf16 and the amax in one pass
      (pytorch/csrc/extensions/normalization.cpp: force_unfused_kernel for a current-scaling
      quantizer, :97-116 and :231-250) and quantize_with_amax only casts (:150, :284); any
      other input (the attention output, the SwiGLU output, routed tokens) is read for its
      amax first. Without a sequence-parallel gather the cast writes both layouts
      (module/linear.py:215-221, layernorm_linear.py:186 and 193-208; GroupedLinear per
      expert, grouped_linear.py:96-127 and csrc/extensions/cast.cpp multi_tensor_quantize_impl,
      which fuses only delayed scaling). A column-parallel input under sequence parallelism
      is cast row-wise on its sequence shard (layernorm_linear.py:187-189,
      linear.py:176-187: "All-gather is not supported with FP8 column-wise data") and
      gathered in FP8 (distributed.py:922-937); backward it is gathered again and its
      transposed copy made from the FP8 data (layernorm_linear.py:640-646 and 798-800,
      linear.py:750-752): no re-cast from bf16. A duplicated multiply (MLA's down
      projections) casts its sequence shard, both ways.
    - Output gradient: amax and a cast-transpose (linear.py:553-555, base.py:1169-1173);
      a row-parallel multiply under sequence parallelism casts its gradient's shard
      row-wise before the all-gather, NCCL's or Userbuffers' (base.py:1101-1131,
      linear.py:556-560, distributed.py:922-937) and transposes the gathered FP8 for its
      weight gradient (distributed.py:971-979, linear.py:790-797).
    - Weights: cast once a step, not priced. Megatron-Core passes is_first_microbatch
      (extensions/transformer_engine.py:382-386, set by pipeline_parallel/schedules.py:381),
      so TE recasts them only on a step's first micro-batch (linear.py:247-252).

    The gathers then move FP8 (``collectives.float8_gathers``); the amax all-reduce over
    the tensor-parallel group that the gathered casts wait for is a collective, priced in
    ``te_tensor_parallel.amax_reductions``."""
    tp = lay.tp
    sp = t.sequence_parallel and tp > 1
    T = lay.tokens(t.seq)
    out = []
    for shapes, kinds in zip((attention_shapes(m, t, lay), mlp_shapes(m, layer, t, lay)), te_linears(m, layer)):
        forward = backward = 0.0
        for (tok, n, k, c), (norm_fed, parallel) in zip(shapes, kinds, strict=True):
            amax = 0 if norm_fed else TE_AMAX_BYTES
            share = 1 / tp if sp and parallel == "duplicated" else 1.0
            if sp and parallel == "column":
                forward += c * tok * k * (amax + TE_CAST_BYTES) / tp
                backward += c * tok * k * TE_FP8_TRANSPOSE_BYTES
            else:
                forward += c * tok * k * (amax + TE_CAST_TRANSPOSE_BYTES) * share
            if sp and parallel == "row":
                backward += c * tok * n * ((TE_AMAX_BYTES + TE_CAST_BYTES) / tp + TE_FP8_TRANSPOSE_BYTES)
            else:
                backward += c * tok * n * (TE_AMAX_BYTES + TE_CAST_TRANSPOSE_BYTES) * share
        out += [forward / (2 * T), backward / (2 * T)]
    return out[0], out[1], out[2], out[3]


def elementwise_terms(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[str, str, float, float]]:
    """The memory-bound kernels of one layer as (block, term, forward, backward) rows, block
    "attention" or "mlp", in elements of 2 bytes per token (``elementwise_bytes`` sums
    them for a micro-batch).

    Fused kernels, per token: a norm reads and writes the hidden state (2h) and its
    backward reads the input and the gradient and writes a gradient (3h: TransformerEngine's
    rmsnorm_bwd_kernels.cuh, torchtitan's ``_rms_norm_bwd_kernel_sm``); a residual add reads
    two and writes one (3h), its backward hands the gradient on untouched (hidden dropout's
    multiplies it by the mask: 2h), but where the
    residual stream also feeds the norm autograd adds the two gradients (3h: "gradient
    sums"); with sequence parallelism these run on 1/tp of the tokens. Rotary embeddings
    read and write the rotated parts of q and k, forward and backward alike
    (TransformerEngine's fused_rope_backward_kernel rotates the gradient back; a model with
    learned or ALiBi positions has none). SwiGLU reads gate and up and writes their product
    (3 ffn); its backward reads the gradient and both inputs and writes both gradients (5
    ffn: Megatron-Core's ``swiglu_back``, TransformerEngine's ``nvte_dswiglu``). GELU reads
    and writes (2 ffn), its backward reads the gradient and the input and writes one (3
    ffn: ``bias_gelu_back``, ``nvte_dgelu``). MoE: the router's softmax and top-k read
    and write the expert scores, the permute copies each token to its top_k slots and the
    un-permute sums them back ((1 + top_k) h each way). Under block-scaled FP8 each
    multiply's input is cast (read 2 bytes, write 1 and a scale: 1.5 elements). The
    routing and those casts' backward is taken as twice their forward (not counted kernel
    by kernel). Transformer Engine's current scaling (``fp8_scaling = "tensor"``) and
    torchao's casts (``fp8_casts = "torchao"``) are counted tensor by tensor
    (``te_current_cast_terms``, ``fp8_cast_terms``).

    Without ``fused_elementwise`` the kernels are PyTorch's eager ones, one per operation,
    as torchtitan's Llama runs without torch.compile (its models/llama/model.py and
    models/norms.py at 9dec370), counted op by op under a TorchDispatchMode
    (tests/torch_bytes.py, held by tests/test_eager_bytes.py): RMSNorm upcasts to fp32 and
    runs pow, mean, multiply, downcast and the weight's multiply (18h forward); its
    backward is thirteen kernels, mostly fp32 (40h), and autograd adds the two fp32
    gradients of the upcast input (6h). Rotary upcasts q and k, multiplies them as complex
    numbers and downcasts (10 per element), and its backward does the same to the
    gradient (10). Grouped-query attention copies k and v out to every query head
    (``repeat_kv``: read kv, write q-sized, each), and its backward sums the copies back
    (the same bytes). The attention output's ``.transpose(1, 2).contiguous()`` moves
    nothing: PyTorch's flash and memory-efficient kernels write their output as [batch,
    seq, heads, dim] already (attention.cu). SwiGLU's SiLU and multiply are two kernels (5
    ffn) and their backward three (two multiplies and silu_backward: 9 ffn). wq, wk and wv
    (and w1 and w3) are separate multiplies of the same normalised input, so autograd
    adds their input gradients: 2 (and 1) sums of 3h, on all the tokens. ``norm_kernel``
    sets the norms apart: "fused" among eager ops is torchtitan's ``fused_rmsnorm``
    (models/norms.py: one Triton kernel each way, 2h and 3h), "eager" among fused ones
    the fp32 chain, and "two-pass" Megatron-LM's LayerNorm (``megatron_jit_terms``).

    ``eager_block = "llm-foundry"``: MosaicML's MPT block instead of torchtitan's (one
    Wqkv and one up_proj, biases, llm-foundry's Triton attention), its rows in
    ``llm_foundry.llm_foundry_terms``.

    ``fused_kernels = "megatron-jit"``: the GPT layer as Megatron-LM 2021-22 and
    Megatron-DeepSpeed ran it, its extra passes in ``megatron_jit_terms``."""
    if t.fused_kernels == "inductor":
        return inductor_terms(m, layer, t, lay)
    h, tp, a = m.hidden, lay.tp, m.attention
    qk, v = attention_dims(m)
    seq_share = 1 / tp if t.sequence_parallel else 1.0
    eager = not t.fused_elementwise and a.kind == "gqa"
    eager_norm = not norm_fused(t) and a.kind == "gqa"
    separate = t.eager_block == "torchtitan"  # wq, wk, wv and w1, w3 as multiplies of their own
    hs = h * seq_share
    norm = (18 * hs, 40 * hs) if eager_norm else (2 * hs, 3 * hs)
    if t.norm_kernel == "two-pass":
        norm = two_pass_norm(h, seq_share)
    # the residual stream's two gradients; an eager norm's fp32 upcast has two as well
    sums = 3 * hs + (6 * hs if eager_norm else 0.0)
    fp8 = 1.5 if t.precision == "fp8" else 0.0
    # hidden dropout's backward multiplies the gradient by its mask (the mask's own bytes
    # are layer_costs')
    residual = ("residual", 3 * hs, 2 * hs if t.hidden_dropout else 0.0)
    attn = [("norm", *norm), residual]
    if a.kind == "mla":
        rotary = 2 * (m.heads / tp + 1) * a.qk_rope_dim
        attn.append(("rotary", rotary, rotary))
        cast_attn = fp8 * (h + a.q_lora_rank + a.kv_lora_rank + m.heads * v / tp)
        attn_sums = sums
    else:
        q, kv = m.heads * qk / tp, (a.kv_heads or m.heads) * qk / tp
        rotary = (10 if eager else 2) * (q + kv) if m.rotary else 0.0
        attn.append(("rotary", rotary, rotary))
        if eager and kv < q:
            attn.append(("repeat_kv", 2 * (kv + q), 2 * (kv + q)))
        cast_attn = fp8 * (h + m.heads * v / tp)
        # wq, wk, wv's input gradients (llm-foundry's one Wqkv has none: llm_foundry.py)
        attn_sums = sums + (2 * 3 * h if eager and separate else 0.0)
    casts = None
    if fp8 and t.fp8_casts == "torchao":
        casts = fp8_cast_terms(m, layer, t, lay)
    elif te_current_scaling(t):
        casts = te_current_cast_terms(m, layer, t, lay)
    attn_casts = casts[:2] if casts else (cast_attn, 2 * cast_attn)
    attn += [("gradient sums", 0.0, attn_sums), ("fp8 casts", *attn_casts)]
    mlp = [("norm", *norm), residual]
    if m.is_moe_layer(layer):
        e = m.moe  # per token a GPU routes, 1/tp of its tokens (``Layout.expert_tokens``)
        f = e.expert_ffn * (e.top_k + e.shared_experts) / tp
        routing = (2 * e.experts + 2 * (1 + e.top_k) * h) / tp
        cast_mlp = fp8 * (h * (1 + e.shared_experts) / tp + f)
        mlp += [("swiglu", 3 * f, 5 * f), ("routing", routing, 2 * routing), ("gradient sums", 0.0, sums)]
    else:
        f = m.dense_ffn / tp
        if m.activation == "swiglu":
            mlp.append(("swiglu", 5 * f, 9 * f) if eager else ("swiglu", 3 * f, 5 * f))
        else:
            mlp.append(("gelu", 2 * f, 3 * f))
        cast_mlp = fp8 * (h + f)
        mlp.append(("gradient sums", 0.0, sums + (3 * h if eager and separate else 0.0)))  # w1 and w3's input gradients
    mlp.append(("fp8 casts", *(casts[2:] if casts else (cast_mlp, 2 * cast_mlp))))
    rows = [("attention", *row) for row in attn] + [("mlp", *row) for row in mlp]
    if not separate:
        rows += llm_foundry_terms(m, layer, t, lay)
    return rows + (megatron_jit_terms(m, layer, t, lay) if t.fused_kernels == "megatron-jit" else [])


def two_pass_norm(h: float, seq_share: float) -> tuple[float, float]:
    """(forward, backward) elements of 2 bytes per token of Megatron-LM's fused LayerNorm
    (megatron/fused_kernels/layer_norm_cuda_kernel.cu, taken from apex; the same file at
    Megatron-LM de7dc40f88 and 9aad9203aa, bigscience-workshop/Megatron-DeepSpeed 497aa1bf,
    microsoft/Megatron-DeepSpeed b56b50bb and 87476ced), on the tokens it runs on.

    Forward, ``cuApplyLayerNorm``: a thread block a row reads it (Welford), reads it again
    from cache to write the output, and writes the row's fp32 mean and inverse deviation:
    2h + 4. Backward, ``HostLayerNormGradient`` launches ``cuComputePartGradGammaBeta``,
    which reads the whole input and output gradient (and each row's two fp32 statistics)
    for the weight and bias gradients' partial sums, ``cuComputeGradGammaBeta`` over 16
    rows of those (no per-token bytes), then ``cuComputeGradInput``, which reads the input,
    the gradient and the statistics again and writes the input gradient: 2h + 4 + 3h + 4.
    TransformerEngine's and apex's persistent kernels do it in one pass (3h). The second
    read of a row is taken from cache: with 16 blocks of 128 threads resident on each of
    an A100's 108 SMs, the rows in flight (1728 x 2h bytes) fit its 40 MB L2 up to h of
    about 11,600; wider rows may be read from HBM again (up to 3h forward and 7h
    backward), which is not priced."""
    return (2 * h + 4) * seq_share, (5 * h + 8) * seq_share


def megatron_jit_terms(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[str, str, float, float]]:
    """What Megatron-LM 2021-22's GPT layer moves besides ``elementwise_terms``' fused rows
    (megatron/model/transformer.py, fused_bias_gelu.py and mpu/layers.py at de7dc40f88, SC21's
    launch commit, and 9aad9203aa; the same code in Megatron-DeepSpeed's forks), per token in
    elements of 2 bytes:

    - the QKV projection adds its bias after the multiply (``ColumnParallelLinear`` without
      skip_bias_add: F.linear on a 3-D input, ``output + bias`` at 9aad9203aa): read and
      write the q, k and v outputs forward (where PyTorch folds it into addmm, the bias is
      copied into the output and the multiply reads it back: the same bytes); backward
      autograd (or ``grad_output.sum(dim=0)``) reads their gradient once to sum the bias
      gradient;
    - bias-dropout-add and bias-GELU are TorchScript kernels whose bias is an input of full
      size (``attention_bias.expand_as(residual)``) or returned as the whole gradient
      (``GeLUFunction.backward``: ``return tmp, tmp``): autograd sums that gradient over
      the tokens in a pass of its own, h for each block's output bias (on the tokens the
      add runs on) and ffn for FC1's; the kernels themselves move what the fused rows count
      (bias-GELU 2 ffn forward, ``bias_gelu_back`` reads the gradient and the input and
      writes one, 3 ffn; bias-dropout-add reads two and writes one, its backward multiplies
      by the one-byte mask);
    - the unfused attention's layout: ``context_layer.permute(2, 0, 1, 3).contiguous()``
      copies the attention output (read and write heads * v / tp) forward; backward, the
      q, k and v gradients are joined by ``torch.split``'s backward, a ``cat`` into the
      projection's output gradient (read and write q, k and v). The q, k and v views and
      the permuted gradient go to the batched multiplies as strided views, no copy.

    The score-sized softmax and dropout are ``compute.attention_core``'s."""
    a = m.attention
    if a.kind == "mla":  # the 2021 layer has none; nothing to add
        return []
    qk, v = attention_dims(m)
    hs = m.hidden * (1 / lay.tp if t.sequence_parallel else 1.0)
    kv_heads = a.kv_heads or m.heads
    qkv = (m.heads * qk + kv_heads * qk + kv_heads * v) / lay.tp
    context = m.heads * v / lay.tp
    rows = [
        ("attention", "qkv bias", 2 * qkv, 0.0),
        ("attention", "layout copies", 2 * context, 2 * qkv),
        ("attention", "bias gradients", 0.0, qkv + hs),
    ]
    ffn = m.dense_ffn / lay.tp if not m.is_moe_layer(layer) and m.activation == "gelu" else 0.0
    return rows + [("mlp", "bias gradients", 0.0, ffn + hs)]


def elementwise_bytes(m: Model, layer: int, t: Training, lay: Layout, backward: bool = False) -> tuple[float, float]:
    """Bytes the memory-bound kernels of (attention block, MLP block) move for one
    micro-batch, forward or ``backward`` (``elementwise_terms``)."""
    col = 3 if backward else 2
    return _block_bytes(t, lay, ((row[0], row[col]) for row in elementwise_terms(m, layer, t, lay)))


def _block_bytes(t: Training, lay: Layout, rows) -> tuple[float, float]:
    """(attention block, MLP block) bytes for one micro-batch of (block, elements of 2
    bytes per token) rows."""
    per_block = {"attention": 0.0, "mlp": 0.0}
    for block, elements in rows:
        per_block[block] += elements
    T = lay.tokens(t.seq)
    return T * 2 * per_block["attention"], T * 2 * per_block["mlp"]


#: elements of 2 bytes a token per RMSNorm for its fp32 reciprocal RMS, written forward
#: and read back for each of the backward's two reductions
RSQRT = 2


def inductor_terms(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[str, str, float, float]]:
    """The memory-bound kernels of torchtitan's Llama block as torch.compile (Inductor)
    generates them (``fused_kernels = "inductor"``), as (block, term, forward, backward)
    rows in elements of 2 bytes per token: what Inductor's own scheduler assigns to each
    kernel of the compiled block (torchtitan 9dec370's model and ``apply_compile``, one
    ``torch.compile`` a block; tests/inductor_bytes.py counts them, torch 2.13, and
    tests/test_inductor_bytes.py holds these rows to that count).

    - Norms: forward one kernel each (read h, write h and the fp32 reciprocal RMS); the
      MLP's norm also adds the attention's residual, reading x and the attention output,
      and the sum is never written (3h). Backward each norm's input gradient is one
      kernel that also sums the gradients autograd would add (wq, wk and wv's input
      gradients, or w1 and w3's, and the residual stream's), rebuilding the MLP norm's
      input from x and the attention output: 6h each. The weight gradient is a
      reduction over the tokens, a loop order Inductor could not fuse with the input
      gradient's reduction over h before pytorch/pytorch#165370 (October 2025, Triton
      only, after torchtitan's 2024 benchmarks): a kernel of its own, both norms' fused
      horizontally, reads the input gradients, x and the attention output again (7h).
    - Residuals: the block's output is one add of x, the attention output and the MLP
      output (read 3h, write h); backward the gradient passes on inside the norms'
      kernels.
    - Rotary: torchtitan multiplies q and k as complex numbers, and Inductor generates no
      code for complex tensors on any device (torch/_inductor/lowering.py
      ``unsupported_input_tensor``): the multiply runs as PyTorch's own kernel between an
      upcast to fp32 and a downcast, as eager does (10 an element each way), except that
      k's downcast writes straight into repeat_kv's copy (9 a kv element and q written);
      backward the same, the copy's sum folded into the upcast.
    - repeat_kv: v copied out to every query head (read kv, write q), its gradient summed
      back.
    - SwiGLU: one kernel each way, 3 ffn forward and 5 backward, as the fused rows.

    Tensor parallelism takes the te rows' shares (heads and ffn over tp, the norms and
    residuals over tp with sequence parallelism). Counted for dense GQA/MHA layers with
    SwiGLU, which is what torchtitan's Llama is."""
    if m.attention.kind != "gqa" or m.is_moe_layer(layer) or m.activation != "swiglu":
        raise PipesimError(
            f'fused_kernels = "inductor" is counted for torchtitan\'s dense Llama block (grouped-query or multi-head '
            f'attention, SwiGLU); {m.name} layer {layer} is not one: use fused_kernels = "te"'
        )
    tp = lay.tp
    qk, _ = attention_dims(m)
    s = 1 / tp if t.sequence_parallel else 1.0
    h = m.hidden
    q, kv, f = m.heads * qk / tp, (m.attention.kv_heads or m.heads) * qk / tp, m.dense_ffn / tp
    repeat = kv < q
    rotary = (10 * q + 9 * kv + (q if repeat else kv)) if m.rotary else 0.0
    attn = [
        ("norm", (2 * h + RSQRT) * s, (6 * h + RSQRT) * s),
        ("norm weight gradients", 0.0, (4 * h + RSQRT) * s),  # wq, wk, wv's input gradients, x
        ("rotary", rotary, rotary),
    ]
    if repeat:
        attn.append(("repeat_kv", kv + q, kv + q))
    mlp = [
        ("norm", (3 * h + RSQRT) * s, (6 * h + RSQRT) * s),
        ("norm weight gradients", 0.0, (3 * h + RSQRT) * s),  # w1, w3's input gradients, the attention output
        ("residual", 4 * h * s, 0.0),
        ("swiglu", 3 * f, 5 * f),
    ]
    if t.precision == "fp8":
        casts = fp8_cast_terms(m, layer, t, lay)
        attn.append(("fp8 casts", *casts[:2]))
        mlp.append(("fp8 casts", *casts[2:]))
    return [("attention", *row) for row in attn] + [("mlp", *row) for row in mlp]


def inductor_recompute_terms(m: Model, layer: int, t: Training, lay: Layout, recompute: str) -> list[tuple[str, str, float]]:
    """What the compiled block's backward moves under torchtitan's activation checkpointing
    (``recompute`` "op", its selective op AC, or "full") beyond the compiled backward
    without it, as (block, term, elements of 2 bytes per token) rows: AC is applied before
    compile, so AOTAutograd's backward graph holds the recomputed forward and Inductor
    fuses it into the backward's own kernels (tests/inductor_bytes.py counts the
    checkpointed blocks against ``TitanBlock``, torch 2.13; tests/test_inductor_bytes.py
    holds these rows to it). The multiplies and attention are not these rows'.

    - Norms: the MLP's norm is rebuilt by a kernel of its own (read x and the attention
      output, write the normalised input of w1 and w3 and the reciprocal RMS: 3h + 2).
      Under op AC the attention's norm rides in the MLP norm's backward kernel, which
      reads x anyway, and only writes wq, wk and wv's input and its reciprocal RMS (h +
      2); under full AC it is a kernel of its own (2h + 2). The forward no longer writes
      the reciprocal RMS (it is not saved), which is not priced.
    - Rotary and repeat_kv: their forward again, kernel for kernel (the complex multiply
      is PyTorch's own kernel, nothing to fuse it with); SDPA's backward needs the rotated
      q and the repeated k and v, which neither AC saves.
    - SwiGLU: the backward's kernel already reads gate and up; it also writes their
      product for w2's weight gradient (ffn), not the forward's 3 ffn.
    - Residuals: nothing; x plus the attention output is rebuilt inside the norm kernels,
      and the block's output is not needed.

    FP8 casts (torchao's) were not counted under checkpointing: they are taken as their
    forward again."""
    s = 1 / lay.tp if t.sequence_parallel else 1.0
    h = m.hidden
    forward = {(block, term): fwd for block, term, fwd, _ in inductor_terms(m, layer, t, lay)}
    norm = h if recompute == "op" else 2 * h
    attn = [("norm", (norm + RSQRT) * s), ("rotary", forward["attention", "rotary"])]
    if ("attention", "repeat_kv") in forward:
        attn.append(("repeat_kv", forward["attention", "repeat_kv"]))
    mlp = [("norm", (3 * h + RSQRT) * s), ("swiglu", m.dense_ffn / lay.tp)]
    if t.precision == "fp8":
        attn.append(("fp8 casts", forward["attention", "fp8 casts"]))
        mlp.append(("fp8 casts", forward["mlp", "fp8 casts"]))
    return [("attention", *row) for row in attn] + [("mlp", *row) for row in mlp]


def inductor_recompute_bytes(m: Model, layer: int, t: Training, lay: Layout, recompute: str) -> tuple[float, float]:
    """Bytes a torch.compile'd block's recomputation moves in the backward under
    ``recompute`` "op" or "full", (attention block, MLP block), for one micro-batch
    (``inductor_recompute_terms``); eager or hand-fused kernels run their forward again
    (``elementwise_bytes``)."""
    rows = inductor_recompute_terms(m, layer, t, lay, recompute)
    return _block_bytes(t, lay, ((block, elements) for block, _, elements in rows))
