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
routing, fused or as PyTorch's eager ops.
"""

from __future__ import annotations

from .specs import Model, Training


def kernel_floor(t: Training) -> float:
    """Seconds a kernel takes at least."""
    return t.kernel_floor_us * 1e-6


def layer_kernels(m: Model, layer: int, t: Training) -> tuple[int, int, int]:
    """(forward, input-gradient, weight-gradient) kernels one layer launches per
    micro-batch on one GPU.

    Forward, fused: two norms, the QKV and output projections, attention (one flash
    kernel, or baddbmm, softmax, dropout and bmm unfused), rotary (if any), two residual
    adds, the MLP's two multiplies and its activation; an MoE layer adds the router's
    multiply, its softmax and top-k, the permute and the un-permute, and runs its experts
    as grouped multiplies. Eager (torchtitan without compile): each RMSNorm is 6 ops
    (cast, pow, mean, rsqrt, multiply, weight), rotary 4 for each of q and k, repeat_kv 2,
    the attention output's transpose 1, SwiGLU 2. The input gradient runs about one
    kernel per forward kernel (two for attention's backward and each weighted multiply's
    input gradient are the same count); the weight gradient one per weighted multiply."""
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
    return forward, forward, weighted


def host_floor(t: Training, kernels: int) -> float:
    """Seconds the host takes to issue ``kernels`` kernels: one graph launch under CUDA
    graphs, else ``host_us_per_kernel`` each."""
    return (1 if t.cuda_graphs else kernels) * t.host_us_per_kernel * 1e-6


def floored(seconds: float, kernels: int, t: Training) -> float:
    """A pass of ``kernels`` kernels costs at least each kernel's floor and at least the
    host's time to issue them."""
    return max(seconds, kernels * kernel_floor(t), host_floor(t, kernels))
