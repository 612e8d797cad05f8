"""Memory per rank over time: parameters, gradients, optimizer states and activations.

Static memory follows from what a rank holds: for each of its chunks, the parameters of
that model stage (so DualPipe's two copies count twice), their gradients, and optimizer
states, with ZeRO sharding over ``dp`` data-parallel ranks (stage 1: optimizer states;
stage 2: gradients too; stage 3: parameters too). Activations follow the timeline: a
forward allocates its stage's activation when it starts, a B frees all but the share
``w_share`` that the weight gradient still needs, and the W (or a fused BW) frees the
rest when it ends. A share above 1 is a B that allocates more than it frees: the W keeps
each weighted multiply's output gradient besides its input, and under tensor parallelism
with sequence parallelism a row-parallel multiply's gradient arrives gathered over the
whole sequence, more than the sharded activation (``planner.weight_grad_saved``); its B
then ends with +(w_share - 1) times the activation, and its W frees w_share of it.

Activation sizes come from the model shape (Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", eq. 1: one transformer layer keeps
s*b*h*(34 + 5*a*s/h) bytes in 16-bit precision without recomputation; the 5*a*s/h term is
the attention matrix, which flash attention does not keep). The weight gradient needs each
linear layer's input and output gradient, 32*h bytes per token (the Zero Bubble paper's
M_W: inputs 7h and output gradients 9h elements, in 16-bit), so
``w_share = 32h / (34h + 5as)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .costs import PerStage, at_stage
from .errors import PipesimError
from .ir import Schedule
from .metrics import B, running_peak
from .order_memo import per_table
from .timeline import Timeline


def layer_activation(
    hidden: int, heads: int, seq: int, micro_batch: int = 1, flash_attention: bool = False
) -> tuple[float, float]:
    """(bytes one micro-batch keeps for one transformer layer, share of it W needs)."""
    for name, v in (("hidden", hidden), ("heads", heads), ("seq", seq), ("micro_batch", micro_batch)):
        if v < 1:
            raise PipesimError(f"{name} must be >= 1, got {v}")
    per_token = 34 * hidden + (0 if flash_attention else 5 * heads * seq)
    return seq * micro_batch * per_token, 32 * hidden / per_token


@dataclass(frozen=True)
class MemoryModel:
    """Sizes of one model stage as one GPU holds it (experts already divided by the
    expert-parallel degree), and the training set-up that scales them."""

    params: PerStage  # parameters of one stage (count), sharded over dp by ZeRO
    activation: PerStage  # bytes one micro-batch keeps for one stage
    w_share: float = 0.0  # share of an activation kept from B until W (above 1: B adds memory)
    param_bytes: float = 2.0  # bf16 weights
    grad_bytes: float = 4.0  # fp32 gradient accumulation
    optimizer_bytes: float = 12.0  # fp32 master weights, Adam m and v
    zero: int = 1  # ZeRO stage (0-3)
    dp: int = 1  # data-parallel ranks sharing the sharded states
    expert_params: PerStage = 0.0  # expert parameters of one stage on one GPU (already / ep)
    expert_dp: int = 0  # replicas of each expert that shard its states (0: dp)
    # a stage's gradients are held from the end of its first weight-gradient op (B+W or
    # W) to the end of its last, not through the whole step (``grad_lifetimes``)
    grads_in_backward: bool = False
    # per stage, the bytes of its layers in the order its forward runs them (one tuple of
    # numbers: the same layers on every stage), the rest of ``activation`` (the head's)
    # made after them: an overlapped pair then runs layer by layer (``pair_peak``);
    # empty, a pair makes its forward whole before its backward frees anything
    layer_bytes: tuple = ()
    # ``pair_peak_of``'s answers by (forward stage, backward stage, backward kind), each a
    # walk over both stages' layers: a search asks a model about the same pairs for each
    # order it checks on it (Qwen3-235B on b200: 51807 asks, 14346 of them repeats)
    _pair_peaks: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)
    _layers: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)  # ``layers_at``'s
    # ``stage_bytes``' answers by stage: the planner sums them for every rank of every
    # placement of a split (``bounds.static_bytes``), and again for each simulation
    _bytes: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not 0 <= self.w_share < float("inf"):  # above 1 a B adds memory (module docstring)
            raise PipesimError(f"w_share must be a finite share >= 0 (the W's bytes over the activation's), got {self.w_share}")
        if self.zero not in (0, 1, 2, 3):
            raise PipesimError(f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero}")
        if self.dp < 1 or self.expert_dp < 0:
            raise PipesimError(f"dp must be >= 1, got {self.dp}")

    def params_at(self, stage: int) -> tuple[float, float]:
        """(non-expert, expert) parameters of one stage on one GPU."""
        return at_stage(self.params, stage, "memory sizes"), at_stage(self.expert_params, stage, "memory sizes")

    def stage_bytes(self, stage: int) -> tuple[float, float, float]:
        """(parameter, gradient, optimizer) bytes of one stage on one GPU. ZeRO stage k
        shards optimizer states (k >= 1), gradients (k >= 2) and parameters (k = 3) over
        the replicas of each parameter: dp for the dense ones, expert_dp for experts."""
        got = self._bytes.get(stage)
        if got is None:
            got = self._bytes[stage] = self._bytes_made(stage)
        return got

    def _bytes_made(self, stage: int) -> tuple[float, float, float]:
        dense, experts = self.params_at(stage)
        zero, dp = self.zero, self.dp
        edp = self.expert_dp or dp
        # each sum as the dense term then the experts' onto 0.0 (the search asks this for
        # every rank of every split: written out, not looped)
        pb, gb, ob = self.param_bytes, self.grad_bytes, self.optimizer_bytes
        return (
            0.0 + dense * pb / (dp if zero >= 3 else 1) + experts * pb / (edp if zero >= 3 else 1),
            0.0 + dense * gb / (dp if zero >= 2 else 1) + experts * gb / (edp if zero >= 2 else 1),
            0.0 + dense * ob / (dp if zero >= 1 else 1) + experts * ob / (edp if zero >= 1 else 1),
        )

    def activation_bytes(self, stage: int) -> float:
        return at_stage(self.activation, stage, "memory sizes")

    def layers_at(self, stage: int) -> tuple[tuple[float, ...], float]:
        """(a stage's layers' bytes in forward order, the bytes made after them): without
        ``layer_bytes``, the whole stage as one layer. Kept per stage: each pair a search
        prices asks for both its stages' layers, made anew from ``layer_bytes`` each time."""
        got = self._layers.get(stage)
        if got is None:
            got = self._layers[stage] = self._layers_made(stage)
        return got

    def _layers_made(self, stage: int) -> tuple[tuple[float, ...], float]:
        whole = self.activation_bytes(stage)
        if not self.layer_bytes:
            return (whole,), 0.0
        every = isinstance(self.layer_bytes[0], (int, float))
        if not every and stage >= len(self.layer_bytes):
            raise PipesimError(
                f"memory sizes list layers for {len(self.layer_bytes)} stages, but the schedule has a stage {stage}"
            )
        layers = tuple(float(x) for x in (self.layer_bytes if every else self.layer_bytes[stage]))
        rest = whole - sum(layers)
        if rest < -1e-9 * whole:
            raise PipesimError(f"stage {stage}'s layers hold {sum(layers):g} bytes, more than its activation of {whole:g}")
        return layers, max(0.0, rest)


def pair_peak(model: MemoryModel, f_stage: int, b_stage: int, keep: float) -> float:
    """The most bytes an overlapped pair adds at once to what was live before it (which
    holds its backward's micro-batch whole), ``keep`` the share of each layer the
    backward leaves for a later W (``w_share`` for a B, 0 for a BW).

    Megatron-Core's combined 1F1B runs a pair layer by layer (NVIDIA/Megatron-LM d98e8a6,
    combined_1f1b.py ``combined_forward_backward_step``: the loss's backward, then
    model_chunk_schedule_plan.py ``TransformerModelChunkSchedulePlan.run``): the
    backward's post-process (head) first, then for i = 0, 1, ... the forward's layer i
    beside the backward's layer L-1-i (``TransformerLayerSchedulePlan.run``; each
    ScheduleNode's backward runs autograd with keep_graph=False and releases its state,
    and the layer's delayed weight gradients run within the same step), then whichever
    chunk has layers left, then the forward's post-process (head, loss). DeepSeek's
    DualPipe pairs run the same way: its published training profile of one pair with 4
    MoE layers a chunk (deepseek-ai/profile-data 4496024, train.json) repeats
    combine(B), attn(F), mlp(B), dispatch(F), dispatch(B), mlp(W), mlp(F), attn(B),
    attn(W), combine(F) four times. So at step i the forward holds its layers 0..i and
    the backward its layers 0..L-1-i. A layer counts whole until its step ends: an upper
    bound by the backward layer's MLP part, which both orders free before the forward's
    MLP runs (left out the other way: under --delay-wgrad-compute Megatron-Core runs the
    backward's layer 0 attention weight gradient after the forward's layers left, its
    inputs held that long). A model without ``layer_bytes`` is one layer a stage: the
    forward whole, then the backward, as the DualPipe library's example hook runs a pair
    (deepseek-ai/DualPipe 3da1bbe, examples/example_dualpipe.py
    ``overlapped_forward_backward``) and torch.distributed.pipelining its OVERLAP_F_B
    (the forward's sub-action, then the backward's)."""
    fwd, f_rest = model.layers_at(f_stage)
    bwd, b_rest = model.layers_at(b_stage)
    freed = 1.0 - keep  # below 0 (keep above 1): the backward adds memory
    live = -freed * b_rest
    peak = max(0.0, live)
    for i in range(max(len(fwd), len(bwd))):
        if i < len(fwd):
            live += fwd[i]
            peak = max(peak, live)
        if i < len(bwd):
            live -= freed * bwd[-1 - i]
            peak = max(peak, live)
    return max(peak, live + f_rest)


def pair_peak_of(model: MemoryModel, f_stage: int, b_stage: int, b_kind: int) -> float:
    """``pair_peak`` of a pair whose backward is of kind ``b_kind`` (ir.KINDS' index): a B
    leaves each layer's ``w_share`` for a later W, a fused BW nothing."""
    key = (f_stage, b_stage, b_kind == B)
    peak = model._pair_peaks.get(key)
    if peak is None:
        keep = model.w_share if b_kind == B else 0.0
        # by the layers' bytes, shared by every model: a search's splits hold the same
        # layers on stage after stage (Qwen3-235B-A22B on b200: 37461 walks for a few
        # hundred distinct pairs of stages)
        same = (model.layers_at(f_stage), model.layers_at(b_stage), keep)
        peak = _PAIR_PEAKS.get(same)
        if peak is None:
            peak = _PAIR_PEAKS[same] = pair_peak(model, f_stage, b_stage, keep)
            if len(_PAIR_PEAKS) > PAIR_PEAKS_KEPT:
                del _PAIR_PEAKS[next(iter(_PAIR_PEAKS))]  # the oldest: a bounded memory
        model._pair_peaks[key] = peak
    return peak


#: ``pair_peak`` by what it reads (both stages' ``layers_at`` and the share kept), for
#: every memory model: bounded, the oldest dropped first
_PAIR_PEAKS: dict[tuple, float] = {}
PAIR_PEAKS_KEPT = 1 << 14


@dataclass(frozen=True)
class MemoryReport:
    params: list[float]  # bytes per rank
    grads: list[float]
    optimizer: list[float]
    activation_peak: list[float]
    peak: list[float]  # static + activations, at the activations' peak
    timeline: list[list[tuple[float, float]]]  # per rank: (time, activation bytes) after each change

    @property
    def static(self) -> list[float]:
        return [p + g + o for p, g, o in zip(self.params, self.grads, self.optimizer)]

    def to_dict(self) -> dict:
        return {
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "activation_peak": self.activation_peak,
            "peak": self.peak,
        }


def memory(schedule: Schedule, timeline: Timeline, model: MemoryModel, curves: bool = True) -> MemoryReport:
    """Per rank, static and peak memory, and (``curves``) the activation bytes after each
    change; without them (the planner's hundreds of simulations read only the peaks) the
    report's ``timeline`` is empty, and all ranks' activations are one sort and one sum."""
    pl = schedule.placement
    params, grads, opt = [], [], []
    for held in _held(pl.pp, pl.chunks, pl.routes):
        sizes = [model.stage_bytes(s) for s in held]
        params.append(sum(x[0] for x in sizes))
        grads.append(sum(x[1] for x in sizes))
        opt.append(sum(x[2] for x in sizes))
    # activations: an F allocates its stage's at its start; a B frees all but the share W
    # needs, the W the rest, a fused BW all of it, at their ends; an overlapped pair
    # reaches its layer-by-layer peak at its start (``pair_peak``). Worked out for every
    # rank's ops at once (the planner asks this of thousands of timelines)
    ops, start, end, delta = _activation_changes(pl, timeline, model)
    rank, kind, stage = ops.rank, ops.kind, ops.stage
    when = np.where(kind == 0, start, end)
    series: list = []
    live = []
    if curves or model.grads_in_backward:
        by_rank = np.argsort(rank, kind="stable")  # each rank's ops in their own order
        cut = np.searchsorted(rank[by_rank], np.arange(pl.pp + 1))
        act_peak = []
        for r, held in enumerate(_held(pl.pp, pl.chunks, pl.routes)):
            sel = by_rank[cut[r] : cut[r + 1]]
            act_peak.append(float(running_peak(when[sel], delta[sel], series if curves else None)))
            if model.grads_in_backward:
                live.append(_peak_with_grads(model, kind[sel], stage[sel], start[sel], end[sel], delta[sel], held))
    else:
        act_peak = _rank_peaks(ops, when, delta, pl.pp)
    if model.grads_in_backward:
        peak = [p + o + x for p, o, x in zip(params, opt, live)]
    else:
        peak = [p + g + o + a for p, g, o, a in zip(params, grads, opt, act_peak)]
    return MemoryReport(params, grads, opt, act_peak, peak, series)


class _Ops(NamedTuple):
    """Every rank's ops as ``memory`` reads them, from the order alone: all items' own
    (first) ops in order, then the pairs' backwards (each rank's in the order
    ``Timeline.rank_ops`` gives them)."""

    rank: np.ndarray  # per op, its rank
    kind: np.ndarray
    stage: np.ndarray  # its model stage
    pair: np.ndarray  # the items that are pairs (their forwards' indices)
    back: np.ndarray  # their backwards' indices
    triples: list  # the (forward stage, backward stage, backward kind) of the pairs, once each
    which: np.ndarray  # per pair, its triple's index
    # per op, its cell in a grid of one row per rank (``_rank_peaks``): its rank's row, at
    # its place among that rank's ops; ``width`` cells a row, the most ops a rank has
    cell: np.ndarray
    width: int


def _ops(pl, t) -> _Ops:
    ranks = np.repeat(np.arange(len(t.offsets) - 1, dtype=np.int32), np.diff(t.offsets))
    pair = np.flatnonzero(t.kind2 >= 0)
    firsts, seconds = (ranks, t.kind, t.chunk, t.mb), (ranks, t.kind2, t.chunk2, t.mb2)
    rank, kind, chunk, mb = (np.concatenate([one, two[pair]]) if len(pair) else one for one, two in zip(firsts, seconds))
    stage = pl.stage_grid()[np.asarray(pl.route_of, np.int32)[mb], rank, chunk]
    back = np.arange(len(t.kind), len(t.kind) + len(pair))
    cols = np.stack([stage[pair], stage[back], kind[back]]).astype(np.int64)
    _, first, which = np.unique(cols[0] * (1 << 40) + cols[1] * 4 + cols[2], return_index=True, return_inverse=True)
    counts = np.bincount(rank, minlength=pl.pp)
    width = int(counts.max()) if len(rank) else 0
    by_rank = np.argsort(rank, kind="stable")  # each rank's ops in their own order
    cell = np.empty(len(rank), np.int64)
    cell[by_rank] = np.arange(len(rank)) - np.repeat(np.cumsum(counts) - counts, counts) + rank[by_rank] * width
    return _Ops(rank, kind, stage, pair, back, cols[:, first].T.tolist(), which.reshape(-1), cell, width)


def _activation_changes(pl, timeline: Timeline, model: MemoryModel) -> tuple:
    """(``_Ops`` of the timeline's order, and per op its start, end and the activation
    bytes it changes)."""
    t = timeline.table
    # kept with the placement (the stages it gives): the entry holds it, so its id is its own
    ops = per_table(t, ("memory", id(pl)), lambda: (pl, _ops(pl, t)))[1]
    pair = ops.pair
    start, end = timeline.starts, timeline.ends
    if len(pair):
        start, end = np.concatenate([start, start[pair]]), np.concatenate([end, end[pair]])
    size = np.array([model.activation_bytes(s) for s in range(pl.stages)], np.float64)[ops.stage]
    w = model.w_share
    delta = np.choose(ops.kind, [size, -(1 - w) * size, -w * size, -size])
    _pairs_by_layer(model, delta, ops)
    return ops, start, end, delta


def _rank_peaks(ops: _Ops, when: np.ndarray, delta: np.ndarray, pp: int) -> list[float]:
    """Per rank, ``running_peak`` of its ops' changes (``when``, ``delta``: all ranks'
    ops), every rank's running sum at once: each in a row of its own, padded past its end
    with zeros that come last (at an infinite time) and leave its sum as it was, each row
    sorted by time then change, and summed along the rows (each row from 0, one addition
    after another: the same floats). Rows sorted each on its own, not one sort of every
    op by (rank, time, change): a key less and shorter runs, half the time of the
    planner's thousand simulations' peaks."""
    width = ops.width
    if not width:
        return [0.0] * pp
    times = np.full(pp * width, np.inf)
    times[ops.cell] = when
    changes = np.zeros(pp * width)
    changes[ops.cell] = delta
    times, changes = times.reshape(pp, width), changes.reshape(pp, width)
    rows = np.take_along_axis(changes, np.lexsort((changes, times), axis=1), axis=1)
    return [float(max(0, x)) for x in np.cumsum(rows, axis=1).max(axis=1).tolist()]


def _pairs_by_layer(model: MemoryModel, delta, ops: _Ops) -> None:
    """In place on the activation changes ``delta`` of ``ops``: a pair's forward adds at
    its start the most its layer-by-layer run holds above what was live (``pair_peak``),
    its backward at its end the rest of what the pair changes."""
    if not len(ops.pair) or not model.layer_bytes:  # a stage one piece: the F's and B's own changes give its peak
        return
    peak = np.asarray([pair_peak_of(model, f, b, bk) for f, b, bk in ops.triples])[ops.which]
    delta[ops.back] += delta[ops.pair] - peak
    delta[ops.pair] = peak


def _peak_with_grads(model: MemoryModel, kind, stage, start, end, act, held) -> float:
    """A rank's most activation and gradient bytes at once (its ops' ``kind``, model
    ``stage``, ``start`` and ``end``, and the activation change ``act`` each makes, as
    ``memory`` finds them; ``held``: its chunks' stages), each stage's gradients held
    from the end of its first weight-gradient op (BW or W) to the end of its last
    (``MemoryModel.grads_in_backward``). FSDP2 keeping a stage gathered under
    torch.distributed.pipelining (PyTorch 1963fc8, torchtitan's published runs): every
    backward but the stage's last runs with requires_gradient_sync(False), and FSDP's
    post_backward turns each layer's bf16 gradient into its unsharded reduce-dtype
    buffer (_fsdp_param.py, to_accumulated_grad_if_needed) as that backward goes; after
    the stage's last backward, counted per stage (schedules.py's backward_counter),
    stage.py's backward_maybe_with_nosync runs the groups' post_backward by hand, whose
    reduce-scatter copies them out and drops them (_fsdp_param_group.py, post_backward).
    Before the first backward no gradient exists: zero_grad freed last step's shards.
    Order at one instant: an op's end before the next op's start; at a weight op's end
    its activation goes, then its gradients come (the peak is taken there), then go if
    it was the stage's last."""
    # (time, rank of the event at that time, bytes): ends 0-2, starts 3
    when = [np.where(kind == 0, start, end)]
    order = [np.where(kind == 0, 3, 0)]
    delta = [act]
    weight = np.flatnonzero((kind == 2) | (kind == 3))
    for x in held:
        ops = weight[stage[weight] == x]
        if not len(ops):
            continue
        g = model.stage_bytes(x)[1]
        when += [end[ops[:1]], end[ops[-1:]]]
        order += [np.array([1]), np.array([2])]
        delta += [np.array([g]), np.array([-g])]
    when, order, delta = (np.concatenate(v) for v in (when, order, delta))
    live = np.cumsum(delta[np.lexsort((order, when))])
    return float(max(0.0, live.max())) if len(live) else 0.0


@functools.lru_cache(maxsize=256)
def _held(pp: int, chunks: int, routes: tuple) -> tuple[tuple[int, ...], ...]:
    """Per rank, the model stages of the chunks some route passes through, chunk by
    chunk: the same for every schedule of a placement's routes (the planner measures
    hundreds), so worked out once."""
    first: dict[tuple[int, int], int] = {}  # (rank, chunk) -> its stage on the first route through it
    for route in routes:
        for s, pos in enumerate(route):
            first.setdefault(pos, s)
    return tuple(tuple(first[(r, c)] for c in range(chunks) if (r, c) in first) for r in range(pp))
