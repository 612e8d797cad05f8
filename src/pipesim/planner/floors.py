"""The small-kernel regime: what a kernel and a layer cost however little work they do.

Two floors, both fields of ``Training`` so each framework states its own:

- ``kernel_floor_us``: a GPU kernel occupies the stream for at least its launch latency.
  NVIDIA's "Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs)
  measures short kernels issued back to back at 3.8 us each from a stream and 3.4 us from
  a graph; the default is the graph figure, the lower of the two.
- ``host_us_per_kernel``: the host issues a layer's kernels one after another; when that
  takes longer than the GPU runs them, the GPU waits. PyTorch's operator micro-benchmarks
  put one eager operator's dispatch at 3.3 us on CUDA tensors (pytorch/pytorch#32194, the
  ``split`` benchmark, which launches nothing), so an eager framework pays at least that
  per kernel besides the launch; under CUDA graphs (``cuda_graphs = true``: Megatron-Core's
  ``--enable-cuda-graph``, TransformerEngine's make_graphed_callables) a layer is one graph
  launch and the host floor is that launch's.

A layer's kernels are counted from its structure (``layer_kernels``), the same kernels the
estimate prices: the multiplies, attention, norms, activation, residual adds, rotary and
routing, fused or as PyTorch's eager ops. Context parallelism adds its scheme's launches,
counted from Transformer Engine's and PyTorch's source (``cp_steps.extra_kernels``): at cp 8
TE's ring launches 37 more kernels forward and 40 backward per layer.

An MoE layer as Megatron-Core issues it has two more terms, both fields of ``Training``:

- ``moe_expert_gemms = "per_expert"``: its grouped experts (``--moe-grouped-gemm``,
  ``TEGroupedMLP``) run through Transformer Engine's ``GroupedLinear``, which on Hopper
  launches one cuBLASLt multiply per local expert over a pool of streams
  (``nvte_multi_stream_cublas_gemm``, TE 2.7 common/gemm/cublaslt_gemm.cu) and, under
  per-tensor current scaling, quantizes each expert's slice on its own: an amax, a scale
  and a cast kernel (``split_quantize`` -> ``Float8CurrentScalingQuantizer::quantize``).
  The kernel count then grows with the local experts (``layer_kernels``).
- ``moe_layer_issue_ms``: the least time one MoE layer takes, forward and backward of a
  micro-batch, when it is issued op by op (``issue_floor``). Megatron-LM's own MoE-layer
  benchmark (tests/functional_tests/test_cases/common/moe_perf, which runs a dummy multiply
  first so that the host's launches before the layer are hidden), run on 8 H100 at
  Qwen3-30B-A3B's MoE layer (128 experts, top 8, hidden 2048, expert width 768, 16 local
  experts at EP8) by marin-community/marin#3666 (2026-03-14), takes 12.41 ms at 4,096
  tokens a GPU and 12.42 ms at 8,192 (DeepEP dispatch, BF16): twice the tokens, the same
  time, so neither the GPU's work nor the tokens set it; at Qwen3-235B-A22B's (hidden 4096,
  width 1536: four times the expert FLOPs) 11.75 ms. NVIDIA's own baselines of that
  benchmark at a few large experts (its baseline.json: Mixtral-like 8 experts, DeepSeek-
  like 32) are the GPU's work: they measure 0.77-0.96x of pipesim's price for it, the
  Qwen3 ones 3.9x, 2.0x at twice the tokens and 1.4x (benchmarks/moe_layer.py). Measured in
  BF16: per-tensor FP8 adds the issue of its per-expert casts. Under CUDA graphs the layer
  is one launch and no such floor holds.
"""

from __future__ import annotations

from .specs import Model, Training


def kernel_floor(t: Training) -> float:
    """Seconds a kernel takes at least."""
    return t.kernel_floor_us * 1e-6


def layer_kernels(m: Model, layer: int, t: Training, local_experts: int = 1) -> tuple[int, int, int]:
    """(forward, input-gradient, weight-gradient) kernels one layer launches per
    micro-batch on one GPU (holding ``local_experts`` of an MoE layer's experts).

    Forward, fused: two norms, the QKV and output projections, attention (one flash
    kernel, or baddbmm, softmax, dropout and bmm unfused), rotary (if any), two residual
    adds, the MLP's two multiplies and its activation; an MoE layer adds the router's
    multiply, its softmax and top-k, the permute and the un-permute, and runs its experts
    as grouped multiplies. Eager (torchtitan without compile): each RMSNorm is 6 ops
    (cast, pow, mean, rsqrt, multiply, weight), rotary 4 for each of q and k, repeat_kv 2,
    the attention output's transpose 1, SwiGLU 2. The input gradient runs about one
    kernel per forward kernel (two for attention's backward and each weighted multiply's
    input gradient are the same count); the weight gradient one per weighted multiply.
    With ``moe_expert_gemms = "per_expert"`` each of the two expert multiplies is one
    kernel per local expert in every pass, and under per-tensor FP8 the forward quantizes
    each expert's two inputs and the input gradient its two output gradients, three
    kernels each (the forward's cast also writes the transposed copy the weight gradient
    reads). Megatron-LM's unfused attention and its 2021-22 layer add what
    ``unfused_kernels`` counts."""
    eager = not t.fused_elementwise
    norm = 6 if eager else 1
    attention = 1 if t.flash_attention else 4
    rotary = (8 if eager else 1) if m.rotary else 0
    weighted = 4  # qkv, output projection, the MLP's two
    forward = 2 * norm + attention + rotary + 2 + 1 + weighted
    if eager:
        forward += 3  # repeat_kv of k and v, the output's transpose
    if m.is_moe_layer(layer):
        forward += 5  # router multiply, softmax, top-k, permute, un-permute
        weighted += 1
        if m.moe.shared_experts:
            forward, weighted = forward + 3, weighted + 2
    if eager and m.activation == "swiglu":
        forward += 1
    backward = forward + unfused_kernels(m, t)[1]
    forward += unfused_kernels(m, t)[0]
    if m.is_moe_layer(layer) and t.moe_expert_gemms == "per_expert":
        more = 2 * (max(1, local_experts) - 1)  # the two multiplies, one launch per expert
        casts = expert_casts(m, layer, t, local_experts)
        forward, backward, weighted = forward + more + casts, backward + more + casts, weighted + more
    return forward, backward, weighted


def unfused_kernels(m: Model, t: Training) -> tuple[int, int]:
    """(forward, input-gradient) kernels Megatron-LM's unfused attention, its two-pass
    LayerNorm and its 2021-22 layer (``fused_kernels = "megatron-jit"``) launch beyond
    the one-per-forward-kernel count of ``layer_kernels``, per layer, from the source
    (megatron/model/transformer.py and mpu/layers.py at NVIDIA/Megatron-LM de7dc40f88 and
    9aad9203aa, bigscience-workshop/Megatron-DeepSpeed 497aa1bf):

    - unfused attention: the backward of its baddbmm and of its bmm is two multiplies
      each, besides the softmax's and the dropout's backward (6 against 4 forward), and
      autograd scales the q and k gradients by baddbmm's alpha in a kernel each (2);
      with ALiBi the forward first copies the bias into the score buffer (1);
    - ``norm_kernel = "two-pass"``: HostLayerNormGradient launches three kernels
      (cuComputePartGradGammaBeta, cuComputeGradGammaBeta, cuComputeGradInput; the
      forward is cuApplyLayerNorm alone), two more for each of the two norms;
    - ``fused_kernels = "megatron-jit"``: forward the QKV bias add and the attention
      output's permute copy (2); backward autograd's sums of four bias gradients (QKV,
      FC1 through bias-GELU, and the two bias-dropout-adds' expanded biases) and the cat
      of torch.split's backward (5)."""
    forward = backward = 0
    if not t.flash_attention:
        backward += 2 + 2
        forward += 1 if m.alibi else 0
    if t.norm_kernel == "two-pass":
        backward += 2 * 2
    if t.fused_kernels == "megatron-jit":
        forward, backward = forward + 2, backward + 5
    return forward, backward


def expert_casts(m: Model, layer: int, t: Training, local_experts: int) -> int:
    """Quantization kernels a forward (and an input gradient) of an MoE layer launches for
    its experts one by one: Transformer Engine's per-tensor current scaling quantizes each
    local expert's slice of the two expert multiplies' inputs (forward) or output gradients
    (input gradient) with an amax, a scale and a cast kernel."""
    per_expert = m.is_moe_layer(layer) and t.moe_expert_gemms == "per_expert"
    return 2 * 3 * max(1, local_experts) if per_expert and t.precision == "fp8" and t.fp8_scaling == "tensor" else 0


def host_floor(t: Training, kernels: int) -> float:
    """Seconds the host takes to issue ``kernels`` kernels: one graph launch under CUDA
    graphs, else ``host_us_per_kernel`` each."""
    return (1 if t.cuda_graphs else kernels) * t.host_us_per_kernel * 1e-6


def floored(seconds: float, kernels: int, t: Training) -> float:
    """A pass of ``kernels`` kernels costs at least each kernel's floor and at least the
    host's time to issue them."""
    return max(seconds, kernels * kernel_floor(t), host_floor(t, kernels))


def issue_floor(t: Training, share: float, casts: int = 0) -> float:
    """Seconds ``share`` of one MoE layer's passes (forward, input and weight gradient of
    a micro-batch, shared by their kernels) take at least when issued op by op:
    ``moe_layer_issue_ms``, measured in BF16, plus the host's issue of the ``casts``
    per-expert FP8 quantization kernels the pass adds; none under CUDA graphs."""
    if t.cuda_graphs or not t.moe_layer_issue_ms:
        return 0.0
    return share * t.moe_layer_issue_ms * 1e-3 + casts * t.host_us_per_kernel * 1e-6
