"""The experts' output bias as Megatron-Core adds it: expert by expert, outside the multiply.

A model whose experts have biases (gpt-oss: ``Model.biases``, each expert a bias on its
gated pair and one on its down projection) runs through Megatron-Core's ``TEGroupedMLP``
with Transformer Engine's ``GroupedLinear``. The first bias rides inside the multiply
(``linear_fc1`` built with ``skip_bias_add=False``) and its gradient in the weight
gradient's cuBLASLt epilogue (TE v2.9, pytorch/module/grouped_linear.py: ``grad_biases``
from ``grouped_gemm_wgrad``). The second cannot: it must be scaled by each token's routing
weight, like the expert's output. ``linear_fc2`` is built with ``skip_bias_add=True``, so
``GroupedLinear`` hands back its biases as a list, one tensor a local expert
(grouped_linear.py at v2.9, ``return_bias``), and ``TEGroupedMLP._apply_bias``
(NVIDIA/Megatron-LM megatron/core/transformer/moe/experts.py, 0d8e0714c, the
core_dev_r0.15.0 commit NeMo 25.11 ships; the same list path at d98e8a6) splits the
experts' output and the routing weights by expert and runs ``t + b * p`` for each, then
one ``cat``. As PyTorch runs that, a local expert costs:

- forward: the multiply ``b * p`` (writing an expert-output-sized tensor) and the add (2
  kernels an expert), then the ``cat`` of all of them (1). The ``split`` and ``view`` make
  views; the final ``.to(dtype)`` is a no-op in BF16 (the routing weights are the router's
  BF16: Megatron-Bridge's GPT-OSS provider leaves ``moe_router_dtype`` unset, and
  ``TopKRouter.gating`` then computes in the input's dtype);
- backward: the multiply's two gradients, each a multiply and a sum back to its operand's
  shape (``grad * p`` summed over the tokens for the bias, ``grad * b`` summed over the
  hidden dimension for the routing weight, which requires a gradient: 4 an expert), and
  one ``cat`` each for the gradients of the two ``split``s (2). Megatron-Core's data
  parallelism then adds each bias gradient into its ``main_grad`` in a hook of its own
  (distributed_data_parallel.py ``_make_backward_post_hook``: ``main_grad.add_``; TE's
  fused accumulation sets ``grad_added_to_main_grad`` for the weights only): one kernel a
  local expert for each of the two biases.

tests/test_moe_bias.py counts the autograd kernels by running the same expression under
torch. The layer's issue floor (``moe_layer_issue_ms``) was measured on experts without
biases (Megatron-LM's moe_perf builds its ``MoELayer`` with ``add_bias_linear=False``:
tests/functional_tests/test_cases/common/moe_perf/__main__.py at d98e8a6), so these
kernels are issued on top of it, each at ``host_us_per_kernel`` (``layer_costs._floored``).

Bytes, per routed token copy of ``hidden`` 2-byte elements: forward the multiply writes 1,
the add reads 2 and writes 1, the ``cat`` reads 1 and writes 1 (6); backward the two
multiplies read 1 and write 1 each, their sums read 1 each, the ``split``'s ``cat``
reads 1 and writes 1 (8). The biases, the routing weights and the per-token sums are
smaller by the hidden width and left out.

Only ``moe_expert_gemms = "per_expert"`` (Transformer Engine's ``GroupedLinear`` on Hopper
under Megatron-Core) is priced so: a grouped-kernel framework adds its biases its own way,
and no published row gives one with expert biases.
"""

from __future__ import annotations

from .layout import Layout
from .specs import Model, Training

#: 2-byte elements a routed token copy moves per hidden unit: (forward, backward)
BIAS_ELEMENTS = (6, 8)


def bias_applies(m: Model, layer: int, t: Training) -> bool:
    """Whether ``layer``'s experts add an output bias expert by expert (module docstring)."""
    return m.biases and m.is_moe_layer(layer) and t.moe_expert_gemms == "per_expert"


def apply_bias_kernels(local_experts: int) -> tuple[int, int]:
    """(forward, backward) kernels autograd runs for ``_apply_bias`` over ``local_experts``."""
    e = max(1, local_experts)
    return 2 * e + 1, 4 * e + 2


def bias_kernels(m: Model, layer: int, t: Training, local_experts: int) -> tuple[int, int]:
    """(forward, backward) kernels the experts' biases add to one layer's passes: the
    output bias's ``_apply_bias`` and the two biases' ``main_grad`` additions."""
    if not bias_applies(m, layer, t):
        return 0, 0
    forward, backward = apply_bias_kernels(local_experts)
    return forward, backward + 2 * max(1, local_experts)


def bias_bytes(m: Model, layer: int, t: Training, lay: Layout) -> tuple[float, float]:
    """(forward, backward) bytes ``_apply_bias`` moves for one micro-batch on one GPU: the
    copies it receives (balanced routing: those it sends, times the etp shards that gather
    them, as ``layer_costs.local_sort_seconds`` counts them)."""
    if not bias_applies(m, layer, t):
        return 0.0, 0.0
    copies = lay.etp * lay.expert_tokens(t.seq) * m.moe.top_k
    f, b = BIAS_ELEMENTS
    return copies * m.hidden * 2 * f, copies * m.hidden * 2 * b
