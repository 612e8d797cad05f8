"""Tensor parallelism's collectives in a layer's backward, and how many of their seconds
the multiplies beside them hide (``Training.tp_overlap``).

Each half of a transformer block (attention, MLP) is a column-parallel multiply (QKV,
FC1) that reads the block's input, then a row-parallel one (the output projection, FC2).
Backward, per half, on its tensor group:

- without sequence parallelism: the column-parallel multiply's input gradient is
  all-reduced (the row-parallel one's backward is the identity);
- with it: the row-parallel multiply's output gradient is all-gathered first; the
  column-parallel multiply's input gradient is reduce-scattered, and where the forward
  kept only its input's sequence shard (Megatron-LM and Transformer Engine;
  ``Training.sp_saves_gathered`` false) the backward all-gathers that shard again for
  the weight gradient.

How the frameworks run them (``tp_overlap``):

- ``"backward"``: the column-parallel multiply's backward launches its collectives
  asynchronously: the re-gather of the input before the input-gradient multiply and
  waited for after it, the all-reduce or reduce-scatter of the input gradient after it
  and waited for after the weight-gradient multiply (``beside``). Megatron-LM since 6e1bde1e0f
  ("allreduce overlap with wgrad gemm", 2 Sep 2021, mpu/layers.py
  ColumnParallelLinearWithAsyncAllreduce, on by default); the re-gather and the
  reduce-scatter since its sequence parallelism (9aad9203aa, May 2022: mpu/layers.py
  LinearWithGradAccumulationAndAsyncCommunication.backward), today
  megatron/core/tensor_parallel/layers.py; Transformer Engine's ``_Linear.backward``
  (transformer_engine/pytorch/module/linear.py: ``gather_along_first_dim(...,
  async_op=True)`` when ``backward_input_needs_gather``, then the dgrad's
  ``reduce_scatter_along_first_dim`` or ``allreduce`` with ``async_op=True``, each
  waited for after the next multiply; layernorm_linear.py the same). So each hides
  under its multiply up to that multiply's time; the row-parallel all-gather, and
  every forward collective, stay exposed. A collective beside a multiply holds some of
  its SMs (``Training.comm_sms``), so what it hides still costs that share of its time.
- ``"all"``: every collective chunked under the multiplies (Megatron-Core's
  --tp-comm-overlap userbuffers, torchtitan's AsyncTP). A dense model's lone ops then
  split their micro-batch in two (``ComponentCosts.lone_overlap``, stages.py) with the
  collectives counted in full here. An MoE model's lone ops do not split (their expert
  all-to-alls overlap only in pairs), so the halves that run Transformer Engine's
  userbuffers hide their collectives under their own multiplies instead, forward and
  backward (``userbuffer_halves``, ``chunked_halves``): the column-parallel multiply's
  input all-gather beside its forward multiply, the row-parallel one's output
  reduce-scatter beside its forward multiply; backward the row-parallel output
  gradient's all-gather beside that multiply's input-gradient multiply, and the
  column-parallel re-gather and reduce-scatter beside its input- and weight-gradient
  multiplies as in ``"backward"``. Transformer Engine 2.7 (fedd9ddc) pairs them so:
  pytorch/module/linear.py:1134-1160 (column: ``ub_overlap_ag_fprop``, ``ub_bulk_dgrad``,
  ``ub_bulk_wgrad``; row: ``ub_overlap_rs_fprop``, ``ub_overlap_ag_dgrad``),
  layernorm_linear.py:1203-1221 alike; Megatron-Core passes ub_overlap_ag, ub_overlap_rs
  and the bulk flags under its defaults (model_parallel_config.py:265-291 at d98e8a6).
  Each is priced by ``beside``, the collective holding ``comm_sms`` of the SMs as it
  does beside the other half micro-batch in a dense model. The rest of such a model
  hides what ``"backward"`` hides: the output head (Megatron-Core's own
  ColumnParallelLinear, no userbuffers: models/gpt/gpt_model.py:213 at core_v0.14.0,
  :272-277 at d98e8a6 unless its output projection runs MXFP8) and, in a model with MLA, the dense layers' MLPs
  (MLA's attention stays exposed, below).
- ``"micro_pipeline"``: what torch Inductor's micro-pipeline pass (torchtitan's AsyncTP:
  ``torch._inductor.config._micro_pipeline_tp`` and symmetric memory on the tensor group,
  torchtitan 9dec370 parallelisms/parallelize_llama.py ``apply_tp``) decomposes, as
  ``"all"`` hides them, and the rest exposed. The pass
  (torch/_inductor/fx_passes/micro_pipeline_tp.py as of late 2024: pytorch/pytorch
  #131409, #131832, #131833, #131950, July 2024) fuses an all-gather (a Float8 one
  too, moved as uint8 and viewed back) with the multiplies that read it, directly or
  through reshape -> mm -> reshape (QKV's three, gate and up together), and a
  reduce-scatter whose input is one multiply's output with no other reader. In the
  backward the column-parallel half's input gradient is the sum of its multiplies'
  input gradients (wq + wk + wv, w1 + w3), so its reduce-scatter matches no pattern
  and waits exposed; the row-parallel output gradient's all-gather feeds the
  input-gradient multiply and is fused, as are the forward's collectives and their
  full-recompute rerun. The maintainers said as much on pytorch/pytorch #149946
  (2025-03-28: valid multiply -> reduce-scatter patterns only in the forward graph,
  the backward's reduce-scatters taking a sum of scaled multiplies), and the pass's own
  pattern finders say so of a compiled torchtitan feed-forward half on torch 2.13
  (tests/test_micro_pipeline_tp_torch.py). The output head's
  input gradient is one multiply's, so its reduce-scatter fuses. The pass matches no
  all-reduce, so without sequence parallelism nothing is hidden; an MoE model's lone
  ops do not split (see ``"all"``), so its collectives stay exposed too.
- ``"none"``: every collective exposed.

MLA attention (DeepSeek-V3) is left exposed: Megatron-Core runs its down-projections
duplicated on the sequence shard and gathers the latent explicitly
(multi_latent_attention.py, ``parallel_mode = 'duplicated'``), not the column-parallel
pattern above.

Which linears run userbuffers (Megatron-LM d98e8a6, megatron/core/extensions/
transformer_engine.py): TELinear (row-parallel proj and fc2, column-parallel fc1 without
a fused norm) sets ub_overlap_ag and ub_overlap_rs unless ``is_expert`` (:1189-1205), and
TELayerNormColumnParallelLinear (qkv, fc1) the bulk flags and ub_overlap_ag (:1456-1487;
it refuses ``is_expert`` at :1417): the attention's qkv and proj, a dense layer's fc1 and
fc2, and a shared expert's (SharedExpertMLP is an MLP built with is_expert left false,
whose linears are named "fc1" and "fc2": moe/shared_experts.py:128, mlp.py:176 and
:219-251). Routed experts (TEGroupedLinear, is_expert) get none, and have no tensor-parallel collective
anyway (their tokens stay sequence-sharded into the all-to-all). In a model with
MLA none at all, past the first projection: TELinear keeps the config it is given
(:1152) and, handed a buffer name other than qkv, proj, fc1 or fc2, sets
``self.config.tp_comm_overlap = False`` (:1176-1186) on the TransformerConfig every layer
shares (transformer_block.py passes its own to each layer, the layer to its attention
and MLP, and multi_latent_attention.py builds its projections with ``config=self.config``
and the names "q_down_proj", "q_proj", "kv_down_proj": :510-614). The first layer's
linear_proj is built before them (:221) and keeps its userbuffers; every linear built
after reads the overlap off. That one projection a model chunk is not priced.

A shared expert (DeepSeek-V3's one a layer) is the MLP half of an MoE layer, priced as a
dense layer's MLP on its own width (``mlp_halves``). Megatron-Core core_v0.14.0 runs it
on the MoE block's input shard, ``residual`` (moe/moe_layer.py:204-220, inside
``experts_compute`` after the dispatch; d98e8a6 runs it just before the dispatch,
moe_layer.py:508-533 and :661, on the same stream either way), and its fc1 is a
column-parallel TELinear, fc2 a
row-parallel one (models/gpt/moe_module_specs.py:49-62), so Transformer Engine gathers the
sequence shard over the attention's tensor group before fc1 and reduce-scatters fc2's
output (an all-reduce without sequence parallelism), and the mirror backward, as for any
column- and row-parallel pair above. Nothing is shared with the dispatcher: the
all-to-all dispatcher sends the routed copies of the same sequence shard over the expert
group and gathers only over the expert tensor group, after the all-to-all
(moe/token_dispatcher.py:625-660: ``self.tp_group`` is ``expt_tp``, :66). Megatron-Core's
--moe-shared-expert-overlap instead strips the linears' own collectives
(shared_experts.py:88-100, ``parallel_mode = None``) and runs an explicit gather and
reduce-scatter with fc1 and fc2 on a side stream beside the dispatcher's all-to-alls
(:146-266; token_dispatcher.py:584-585, :647-648, :787-806): not modelled, and off by
default (transformer_config.py:394); the flex (DeepEP) dispatcher refuses it
(token_dispatcher.py:1178-1181), and Megatron-Bridge 25.09 turns it off for DeepSeek-V3's
row (v0.1.0rc4 scripts/performance/run_script.py:82-85, recipes/deepseek/deepseek_v3.py:
146-149). Under --tp-comm-overlap its linears, named fc1
and fc2 and not ``is_expert``, get TELinear's userbuffers: fc1 ub_overlap_ag (its forward
gather chunked under its multiply), fc2 ub_overlap_rs and ub_overlap_ag (transformer_
engine.py:272-289 at core_v0.14.0), no bulk flags (those are TELayerNormColumnParallelLinear's,
:482-483), so fc1's backward collectives run beside its multiplies as at ``"backward"``.

A split B and W (Zero Bubble, --delay-wgrad-compute) runs the weight-gradient multiply
later, so the reduction waits exposed in B there; the hidden seconds are taken off B
whatever the schedule (the fused BW of 1F1B and interleaved 1F1B, which Megatron runs by
default, is exact; a split one has the right sum with B short by the hidden part).
"""

from __future__ import annotations

from .collectives import tp_allreduce, tp_halves
from .compute import attention_shapes, gemms, mlp_shapes
from .layout import Layout
from .specs import Cluster, Model, Training


def userbuffer_halves(m: Model, layer: int) -> tuple[bool, bool]:
    """Whether the (attention, MLP) halves of a layer run Transformer Engine's userbuffers
    under Megatron-Core's --tp-comm-overlap (see above): neither in a model with MLA; the
    attention otherwise; the MLP in a dense layer, and an MoE layer's shared experts."""
    if m.attention.kind == "mla":
        return False, False
    return True, not m.is_moe_layer(layer) or bool(m.moe.shared_experts)


def chunked_halves(m: Model, layer: int, t: Training) -> tuple[bool, bool]:
    """Whether the (attention, MLP) halves' collectives hide under the halves' own
    multiplies: those with userbuffers in an MoE model at ``"all"``, whose lone ops do not
    split (a dense model's collectives overlap the other half micro-batch instead)."""
    if t.tp_overlap != "all" or m.moe is None:
        return False, False
    return userbuffer_halves(m, layer)


def hides_backward(m: Model, t: Training) -> bool:
    """Whether a layer's backward collectives hide under their multiplies (see above)."""
    return t.tp_overlap == "backward" or (t.tp_overlap == "all" and m.moe is not None)


def splits_lone_ops(m: Model, t: Training) -> bool:
    """Whether lone ops split their micro-batch in two to overlap the collectives in
    their dispatch and combine."""
    return (t.tp_overlap == "all" and m.moe is None) or micro_pipelined(m, t)


def micro_pipelined(m: Model, t: Training) -> bool:
    """Whether the micro-pipeline pass fuses a dense model's collectives (see above)."""
    return t.tp_overlap == "micro_pipeline" and m.moe is None and t.sequence_parallel


def unfused_backward(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of one half's backward reduce-scatter (the column-parallel input
    gradient's) that the micro-pipeline pass leaves exposed, for one micro-batch; 0
    where it does not run."""
    if lay.tp <= 1 or not micro_pipelined(m, t):
        return 0.0
    return tp_halves(m, c, t, lay)[1]


def column_exposed(
    m: Model,
    c: Cluster,
    t: Training,
    lay: Layout,
    dgrad: float,
    wgrad: float,
    row_parallel: bool = True,
    layer: bool = True,
    row_dgrad: float | None = None,
) -> float:
    """Exposed seconds of one half's backward collectives for one micro-batch: those of
    a column-parallel multiply whose input- and weight-gradient multiplies take
    ``dgrad`` and ``wgrad`` seconds and, with ``row_parallel``, of the row-parallel
    multiply after it (``layer`` False for the output head, whose gathers stay BF16);
    ``row_dgrad``, the row-parallel multiply's input-gradient seconds, where userbuffers
    chunk its output gradient's all-gather under it (``chunked_halves``)."""
    # an all-reduce, or with sequence parallelism an all-gather (the row-parallel output's
    # gradient; the column-parallel input again where the forward kept only its shard) and
    # a reduce-scatter (the input's gradient): collectives.tp_halves
    all_gather, reduce_scatter = tp_halves(m, c, t, lay, layer)
    if not t.sequence_parallel:
        row, gather, reduce = 0.0, 0.0, reduce_scatter
    else:
        row = all_gather if row_parallel else 0.0
        gather = 0.0 if t.sp_saves_gathered else all_gather
        reduce = reduce_scatter
    share = t.comm_sms / c.sms
    if row_dgrad is not None:
        row = beside(row, row_dgrad, share)
    elif not hides_backward(m, t):
        return row + gather + reduce
    return row + beside(gather, dgrad, share) + beside(reduce, wgrad, share)


def beside(comm: float, gemm: float, share: float) -> float:
    """Seconds a collective of ``comm`` adds to a multiply of ``gemm`` it runs beside,
    when its kernels hold ``share`` of the SMs meanwhile (``Training.comm_sms``, as the
    component model slows compute beside communication, components.run_streams): the
    multiply runs at 1 - share while the collective lasts, so a long multiply ends
    share x comm later, a short one leaves the collective's rest exposed."""
    if comm <= 0:
        return 0.0
    return max(share * comm, comm - gemm)


def mlp_halves(m: Model, layer: int, t: Training, lay: Layout):
    """The MLP half's tensor-parallel multiplies as ``compute`` shapes, column-parallel
    FC1 (SwiGLU's gate and up together) then row-parallel FC2: a dense layer's, an MoE
    layer's shared experts (the last two of ``mlp_shapes``, all of them as one MLP of
    their summed width, as Megatron-Core builds them), none in an MoE layer without."""
    shapes = mlp_shapes(m, layer, t, lay)
    if not m.is_moe_layer(layer):
        return shapes
    return shapes[2:] if m.moe.shared_experts else []


def _halves(m: Model, layer: int, t: Training, lay: Layout):
    """The (attention, MLP) halves' multiplies as ``compute`` shapes: a column-parallel
    one first (QKV fused; FC1), the row-parallel one second (the output projection, FC2)
    outside MLA; the MLP's as ``mlp_halves``."""
    return attention_shapes(m, t, lay), mlp_halves(m, layer, t, lay)


def half_forward(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, half: int) -> tuple[float, float]:
    """Exposed seconds of the forward's (all-gather, reduce-scatter) around one half of a
    layer (0 attention, 1 MLP), one micro-batch; without sequence parallelism (0, the
    all-reduce). All of them but where userbuffers chunk them under the half's own
    multiplies (``chunked_halves``): the gather beside the column-parallel multiply, the
    reduce-scatter (or all-reduce) beside the row-parallel one. An MoE layer's MLP has
    its shared experts' (none without: see ``layer_backward``)."""
    if lay.tp <= 1 or (half == 1 and not mlp_halves(m, layer, t, lay)):
        return 0.0, 0.0
    gather, reduce = tp_halves(m, c, t, lay)
    if not chunked_halves(m, layer, t)[half]:
        return gather, reduce
    shapes = _halves(m, layer, t, lay)[half]
    share = t.comm_sms / c.sms
    return beside(gather, gemms(c, t, shapes[:1])[0], share), beside(reduce, gemms(c, t, shapes[1:2])[0], share)


def layer_forward(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float]:
    """Exposed seconds of the (attention, MLP) halves' tensor-parallel collectives in one
    layer's forward, for one micro-batch (``half_forward``)."""
    attn, mlp = (sum(half_forward(m, layer, c, t, lay, half)) for half in (0, 1))
    return attn, mlp


def _half_backward(m: Model, c: Cluster, t: Training, lay: Layout, shapes, chunked: bool) -> float:
    """``column_exposed`` for a half of ``shapes`` (``_halves``)."""
    _, dgrad, wgrad = gemms(c, t, shapes[:1])
    row_dgrad = gemms(c, t, shapes[1:2])[1] if chunked else None
    return column_exposed(m, c, t, lay, dgrad, wgrad, row_dgrad=row_dgrad)


def layer_backward(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float]:
    """Exposed seconds of the (attention, MLP) halves' tensor-parallel collectives in one
    layer's backward, for one micro-batch. An MoE layer's MLP has its shared experts'
    alone (the routed tokens stay sequence-sharded into the all-to-all), none without;
    MLA's attention pays an all-reduce's bytes, exposed."""
    if lay.tp <= 1:
        return 0.0, 0.0
    attn_ub, mlp_ub = chunked_halves(m, layer, t)
    attn_shapes, mlp = _halves(m, layer, t, lay)
    attn = tp_allreduce(m, c, t, lay) if m.attention.kind == "mla" else _half_backward(m, c, t, lay, attn_shapes, attn_ub)
    if not mlp:
        return attn, 0.0
    return attn, _half_backward(m, c, t, lay, mlp, mlp_ub)
