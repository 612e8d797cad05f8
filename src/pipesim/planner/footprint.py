"""Bytes a GPU holds: activations per layer, parameters per stage, and the memory model
``pipesim.memory`` runs the schedule's order against."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..costs import PerStage, at_stage
from ..memory import MemoryModel
from . import activations
from .layout import Layout, keeps_gathered, local_training
from .moe_layers import mtp_layer_kind
from .params import attention_params, mlp_params
from .pipeline_io import stage_boundary_pairs
from .saved_widths import layer_mode
from .specs import Model, Training
from .split import partition

FP32 = 4  # bytes of an fp32 parameter shard


def stage_params(m: Model, rng: range, last: bool, first: bool, lay: Layout) -> tuple[float, float]:
    """(non-expert, expert) parameters one GPU holds for a stage of these layers (kept by
    ``memory_model`` per layout: ``stages_params``)."""
    dense = experts = 0.0
    attention, mlps, tp, ep, norms = attention_params(m), layer_mlps(m), lay.tp, lay.ep * lay.etp, 2 * m.hidden
    for i in rng:
        d, e = mlps[i]
        dense += (attention + d) / tp + norms
        experts += e / ep
    if first:
        dense += m.vocab * m.hidden / lay.tp
    if last and not (m.tied_embeddings and first):  # a tied head on its own stage keeps a copy
        dense += m.vocab * m.hidden / lay.tp
    if last and m.mtp_layers:  # each MTP module: the last layer's kind (mtp_layer_kind), a 2h x h projection, two norms
        d, e = mlp_params(m, mtp_layer_kind(m, len(rng)))
        dense += m.mtp_layers * ((attention_params(m) + d + 2 * m.hidden * m.hidden) / lay.tp + 4 * m.hidden)
        experts += m.mtp_layers * e / (lay.ep * lay.etp)
    return dense, experts


@lru_cache(maxsize=64)
def layer_mlps(m: Model) -> tuple[tuple[float, float], ...]:
    """``mlp_params`` of each layer, worked out once a model: ``stage_params`` sums them
    over each stage of tens of thousands of splits (a search's distinct stages)."""
    return tuple(mlp_params(m, i) for i in range(m.layers))


@lru_cache(maxsize=1 << 11)
def stages_params(m: Model, lay: Layout) -> dict[tuple, tuple[float, float]]:
    """``stage_params`` of a layout by (its range's start, stop and step, whether it is the
    last stage, the first), filled in as ``memory_model`` asks: a search's splits share
    most of their stages (Qwen3-235B-A22B on h800-2048: 46k distinct of 106k), and a key
    of plain numbers costs no hash of the specs a stage."""
    return {}


def float8_gathered(t: Training) -> bool:
    """Whether FSDP2 all-gathers the Float8 linears in one byte (``fsdp_float8_all_gather``
    with tensorwise FP8 and ZeRO-3): torchao's WeightWithDynamicFloat8CastTensor hands
    FSDP2 the float8 cast of its shard in ``fsdp_pre_all_gather`` and wraps the gathered
    bytes in ``fsdp_post_all_gather`` (torchao eab345c, float8/fsdp_utils.py), so the
    gathered weight is that one byte an element, no bf16 copy beside it."""
    return t.fsdp_float8_all_gather and t.precision == "fp8" and t.zero == 3


@dataclass(frozen=True)
class Float8GatheredMemory(MemoryModel):
    """A stage whose Float8 linears FSDP gathers in one byte: each stage's
    ``float8_params`` of its parameters (what step.py's all-gather moves in one byte), and,
    where FSDP keeps the stage gathered (``kept_gathered``), held in one byte, not
    ``param_bytes``."""

    float8_params: PerStage = 0.0
    kept_gathered: bool = True

    def stage_bytes(self, stage: int) -> tuple[float, float, float]:
        p, g, o = super().stage_bytes(stage)
        if not self.kept_gathered:
            return p, g, o
        return p - (self.param_bytes - 1) * at_stage(self.float8_params, stage, "memory sizes"), g, o


def float8_params_at(mm: MemoryModel, stage: int) -> float:
    """Parameters of a stage FSDP all-gathers in float8 (0 unless ``float8_gathered``)."""
    return at_stage(mm.float8_params, stage, "memory sizes") if isinstance(mm, Float8GatheredMemory) else 0.0


@lru_cache(maxsize=1 << 10)
def layer_columns(m: Model, local: Training, lay: Layout, recompute: str) -> tuple[tuple[float, ...], ...]:
    """Per layer, its activation bytes, those bytes times the share its W keeps, and that
    share, as three columns (a stage's sums are then sums of slices). A layer's kind and
    mode (MoE or dense, recomputed or not) give its pair, computed at the first layer of
    that kind. Kept: a search prices thousands of splits of a few layouts, each over
    every layer."""
    by_kind: dict[tuple, tuple[float, float]] = {}
    pairs = []
    for i in range(m.layers):
        kind = (m.is_moe_layer(i), layer_mode(recompute, i))
        if kind not in by_kind:
            by_kind[kind] = activations.layer_activation(m, i, local, lay, recompute)
        pairs.append(by_kind[kind])
    return tuple(b for b, _ in pairs), tuple(b * w for b, w in pairs), tuple(w for _, w in pairs)


def memory_model(
    m: Model, t: Training, lay: Layout, stages: int, recompute: str, parts: list[range] | None = None
) -> MemoryModel:
    """Bytes per stage; ``parts`` the stages' layers (``stage_parts``; default an even split)."""
    parts = parts or partition(m.layers, stages)
    # context parallelism: a GPU keeps the activations of its 1/cp of each sequence
    local = local_training(t, lay)
    params, experts, acts, shares, layers = [], [], [], [], []
    # a layer's bytes and W share depend only on its kind and mode, worked out once a
    # layout (``layer_columns``)
    sizes, weighted, share = layer_columns(m, local, lay, recompute)

    kept = stages_params(m, lay)
    for s, rng in enumerate(parts):
        key = (rng.start, rng.stop, rng.step, s == stages - 1, s == 0)
        got = kept.get(key)
        if got is None:
            got = kept[key] = stage_params(m, rng, s == stages - 1, s == 0, lay)
        d, e = got
        params.append(d)
        experts.append(e)
        last = s == stages - 1
        # a stage's layers are consecutive (``stage_parts``): slices of the columns
        held, held_kept = sizes[rng.start : rng.stop], weighted[rng.start : rng.stop]
        if last and m.mtp_layers:
            k = mtp_layer_kind(m, len(rng))
            held, held_kept = held + sizes[k : k + 1] * m.mtp_layers, held_kept + weighted[k : k + 1] * m.mtp_layers
        layers.append(held)  # Megatron-Core runs MTP layers after the decoder's
        extra = []
        if last:  # the final norm and the loss's softmax (no weighted multiply's input W waits on)
            extra.append((activations.head_activation(m, local, lay), 0.0))
        # torch.distributed.pipelining: the first layer's saved input is the receive
        # buffer pipeline_buffers counts, and the stage's output waits for its backward
        extra += stage_boundary_pairs(m, t, lay, s, stages, share[rng.start] if len(rng) else None)
        # each sum over the stage's pairs in order, as one sum of one sequence (the layers'
        # own where nothing is added: most stages, ~10^5 a search, built no tuple for it)
        size = sum((*held, *(b for b, _ in extra))) if extra else sum(held)
        acts.append(size)
        kept_bytes = sum((*held_kept, *(b * w for b, w in extra))) if extra else sum(held_kept)
        shares.append(kept_bytes / size if size else 0.0)
    # FSDP2 shards each parameter in its own fp32 dtype and the optimizer steps the shard
    # in place (torch.distributed.fsdp fully_shard: MixedPrecisionPolicy casts to
    # param_dtype only for the all-gather; torchtitan builds the model in fp32): the
    # optimizer's fp32 copy is the parameter shard, and no bf16 shard sits beside it
    sharded = t.zero == 3 and not keeps_gathered(t, lay)
    fp32_shards = sharded and t.fsdp_fp32_shards
    param_bytes, optimizer_bytes = (
        (FP32, max(0.0, t.optimizer_bytes - FP32)) if fp32_shards else (t.param_bytes, t.optimizer_bytes)
    )
    # with the gradients freed after each step (zero_grad(set_to_none=True)), FSDP makes a
    # layer's gradient shard only when its reduce-scatter ends in the backward, by when
    # that layer's activations are freed, each far larger than its shard: none is alive
    # at the activations' peak (the forward's end and the loss's backward). A stage kept
    # gathered accumulates unsharded gradients from its first backward on: counted.
    grad_bytes = 0.0 if sharded and t.zero_grad_frees else t.grad_bytes
    fields = dict(
        params=tuple(params),
        expert_params=tuple(experts),
        expert_dp=lay.edp,
        activation=tuple(acts),
        w_share=max(shares),
        param_bytes=param_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=optimizer_bytes,
        # FSDP keeping the stage gathered through the step holds its parameters whole, and
        # its gradients too: torch.distributed.pipelining runs every backward of the step
        # but the last with requires_gradient_sync(False) (stage.py,
        # backward_maybe_with_nosync), and FSDP2 accumulates the unsharded gradient in its
        # reduce dtype (_fsdp_param.py, to_accumulated_grad_if_needed) until the last
        # backward's reduce-scatter; only the optimizer states stay sharded: ZeRO-1's bytes
        zero=1 if t.zero == 3 and keeps_gathered(t, lay) else t.zero,
        dp=lay.size("cpdp"),  # the distributed optimizer shards over the context and data ranks
        # those unsharded gradients live from the stage's first backward to its last
        grads_in_backward=t.grads_from_first_backward and t.zero == 3 and keeps_gathered(t, lay),
        # an overlapped pair runs layer by layer in Megatron-Core and DeepSeek's DualPipe
        # (``memory.pair_peak``); torch.distributed.pipelining (whose buffers
        # pp_keeps_outputs counts) runs OVERLAP_F_B's forward, then its backward
        # (torch/distributed/pipelining/schedules.py, _PipelineScheduleRuntime: its
        # sub-actions one after the other, where no custom function is registered)
        layer_bytes=() if t.pp_keeps_outputs else tuple(layers),
    )
    if float8_gathered(t):  # torchao converts the blocks' dense linears
        linears = [sum(attention_params(m) + mlp_params(m, i)[0] for i in rng) / lay.tp for rng in parts]
        return Float8GatheredMemory(**fields, float8_params=tuple(linears), kept_gathered=keeps_gathered(t, lay))
    return MemoryModel(**fields)
