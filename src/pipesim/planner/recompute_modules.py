"""Megatron-Core's per-module selective recompute (``--recompute-modules``), as pipesim
prices it: the training file's ``recompute_modules``, a list of Megatron-Core's module names.

Two of its modules are priced, both output-discarding checkpoints
(``tensor_parallel.CheckpointWithoutOutput``: the module runs without autograd, its input
is kept, its output's storage is freed once the next module has used it and rebuilt
before that module's backward), read at NVIDIA/Megatron-LM 0d8e0714c (core_dev_r0.15.0,
NeMo 25.11's Megatron-Core; the same at d98e8a6):

- ``"layernorm"``: the input norm and the pre-MLP norm (transformer/transformer_layer.py,
  ``recompute_input_layernorm`` / ``recompute_pre_mlp_layernorm``), but only where the
  norm is a module of its own. Transformer Engine's layer spec fuses the input norm into
  the QKV projection (``TELayerNormColumnParallelLinear``; models/gpt/gpt_layer_specs.py
  ``get_transformer_layer_spec_for_backend`` makes ``input_layernorm`` an ``IdentityOp``)
  and a dense MLP's norm into fc1, so on that spec only an MoE layer's pre-MLP norm (a
  ``TENorm``: the router reads it) is recomputed;
- ``"moe_act"``: the experts' activation (``TEGroupedMLP.forward``,
  moe/experts.py: ``activation_checkpoint`` around ``bias_act_func``), whose output is fc2's
  input.

Each reruns its forward kernel once in the backward (the bytes ``elementwise_terms``
prices for it forward, and one more launch: ``layer_costs``), and no longer keeps its
output: the pre-MLP norm's output and fp32 statistics (its input stays, held by the
checkpoint) and the activation's output a routed copy (``activations.layer_saved``).
The rerun kernels are issued beyond Megatron-LM's MoE-layer issue floor, measured
without recompute (moe_perf sets no recompute_granularity). Megatron-Core's other modules
are pipesim's ``recompute`` modes or not priced: ``core_attn`` and ``mla_up_proj`` are
``recompute = "selective"``, ``mlp``, ``moe`` and ``shared_experts`` are refused.
Megatron-Core refuses ``moe_act`` without grouped experts (transformer_config.py), and
takes ``recompute_modules`` only under selective granularity: with a ``full`` (or
torchtitan's ``op``, ``every-N``) layer it does nothing there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .training import Training

if TYPE_CHECKING:  # annotations only: layout and specs sit above the training fields
    from .layout import Layout
    from .specs import Model

#: each module's forward row in ``elementwise.elementwise_terms`` (the MLP block's)
_ROWS = {"layernorm": "norm", "moe_act": "swiglu"}


def rerun_modules(m: Model, layer: int, t: Training, recompute: str) -> tuple[str, ...]:
    """The modules ``layer`` recomputes under layer mode ``recompute``: both act on an MoE
    layer only (module docstring), and only where the layer is not wholly recomputed."""
    if recompute not in ("none", "selective") or not m.is_moe_layer(layer):
        return ()
    return t.recompute_modules


def rerun_bytes(m: Model, layer: int, t: Training, lay: Layout, recompute: str, rows) -> float:
    """Bytes the backward of one micro-batch moves rerunning ``layer``'s modules: each one's
    forward, from ``rows``, the layer's ``elementwise.elementwise_terms`` (the MLP block's,
    2-byte elements a token; passed in, as elementwise reads the footprint, which reads
    the saved set this module trims)."""
    names = {_ROWS[x] for x in rerun_modules(m, layer, t, recompute)}
    if not names:
        return 0.0
    e = m.moe
    # the activation row counts shared experts too; moe_act reruns the routed ones'
    share = {"norm": 1.0, "swiglu": e.top_k / (e.top_k + e.shared_experts)}
    elements = sum(share[term] * forward for block, term, forward, _ in rows if block == "mlp" and term in names)
    return lay.tokens(t.seq) * 2 * elements


def rerun_kernels(m: Model, layer: int, t: Training, recompute: str) -> int:
    """Kernels the rerun adds to the backward: one fused kernel a module."""
    return len(rerun_modules(m, layer, t, recompute))
