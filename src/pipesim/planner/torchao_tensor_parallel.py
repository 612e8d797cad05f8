"""The amax all-reduces torchao's Float8 tensor parallelism waits for (torchtitan's Float8
rows with tensor parallelism, ``fp8_casts = "torchao"``), priced as Transformer Engine's
are (``te_tensor_parallel.te_tp_seconds``: one latency-bound all-reduce of one fp32 per
reduced cast, exposed).

torchtitan 9dec370's ``apply_tp`` runs its Float8 linears under torchao's
``PrepareFloat8ModuleInput`` (attention and feed_forward), ``Float8ColwiseParallel`` (wq,
wk, wv, w1, w3) and ``Float8RowwiseParallel`` (wo, w2 to ``Shard(1)``). Read in pytorch/ao
at eab345c (20 Dec 2024) and again at 36027d82 (August 2026), where what follows is
unchanged (float8/float8_tensor_parallel.py, float8_scaling_utils.py, float8_utils.py):
every tensorwise dynamic cast is ``hp_tensor_to_float8_dynamic`` with ``reduce_amax``
left False, and the tensors it casts are DTensors, so ``max(abs(x))`` of a sharded one is
``Partial(max)`` and the scale computed from it (float64, clamp, the format's max over it)
all-reduces it over the tensor group: DTensor's reduction, which torchao's own
fsdp_utils.py:68-72 relies on for the weights ("clamp is dispatched through DTensor, it
will issue a single all-reduce"). Counted on two gloo ranks with torch 2.13
(tests/test_torchao_tp_amax_torch.py): one all-reduce per cast of a sharded tensor, none
of a replicated one. The scale is needed before the cast's multiply, so nothing runs
beside it.

Per layer and micro-batch, where the tensor is sharded:

- forward, the block input's sequence shard before its all-gather (one cast for wq, wk
  and wv, one for w1 and w3: ``PrepareFloat8ModuleInput``; replicated without sequence
  parallelism) and each row-parallel input (wo's, w2's: ``Shard(-1)``);
- forward, each weight (sharded over the tensor group), unless FSDP's float8 all-gather
  hands the linear an FP8 weight whose scale was precomputed (``footprint.float8_gathered``;
  those scales take one all-reduce a step for all weights, not priced);
- backward, each linear's output gradient (``NoopFwToFloat8BwDynamic``): the
  column-parallel outputs' ``Shard(-1)``, the row-parallel outputs' ``Shard(1)`` after
  the reduce-scatter (replicated without sequence parallelism).

torchtitan's Llama layer at 9dec370: grouped-query attention and a SwiGLU (or GELU)
MLP. MLA and MoE layers ran no torchao tensor parallelism then: nothing counted for them.
"""

from __future__ import annotations

from .footprint import float8_gathered
from .layout import Layout
from .specs import Model, Training


def torchao_tp(t: Training, lay: Layout) -> bool:
    """Whether the layers' linears run torchao's Float8 tensor parallelism."""
    return lay.tp > 1 and t.precision == "fp8" and t.fp8_scaling == "tensor" and t.fp8_casts == "torchao"


def amax_reductions(m: Model, layer: int, t: Training, lay: Layout) -> tuple[int, int, int, int]:
    """How many amax all-reduces one micro-batch of a layer waits for under torchao's
    Float8 tensor parallelism: (attention forward, attention backward, MLP forward, MLP
    backward); see above."""
    if not torchao_tp(t, lay) or m.attention.kind == "mla":
        return 0, 0, 0, 0
    sp = int(t.sequence_parallel)
    weights = not float8_gathered(t)
    attention = (sp + 1 + 4 * weights, 3 + sp)  # wq, wk, wv column-parallel, wo row-parallel
    if m.is_moe_layer(layer):
        return attention[0], attention[1], 0, 0
    column = 2 if m.activation == "swiglu" else 1  # w1 and w3, or w1
    mlp = (sp + 1 + (column + 1) * weights, column + sp)
    return attention[0], attention[1], mlp[0], mlp[1]
