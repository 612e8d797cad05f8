"""The step's ends: the data-parallel gradient and parameter collectives and the optimizer."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..components import ComponentCosts
from ..ir import Op
from ..memory import MemoryModel
from .collectives import ring_seconds
from .compute import hbm_rate
from .footprint import float8_params_at
from .layout import Layout, keeps_gathered
from .param_gather import combined
from .specs import Cluster, Training


def per_microbatch(t: Training, lay: Layout) -> bool:
    """Whether ``step_sync`` depends on the micro-batch count: only FSDP regathering
    the parameters for every micro-batch does (each branch below that reads it)."""
    return t.zero >= 3 and not keeps_gathered(t, lay)


#: the ops step_sync asks a cost model about, made once (an Op is a frozen dataclass)
_F, _B, _W, _BW = (Op(k, 0, 0) for k in ("F", "B", "W", "BW"))

#: bytes of an fp32 master weight the copy into the bf16 parameters reads
FP32 = 4


def exposed(comm: float, window: float, rate: float) -> float:
    """Seconds a collective of ``comm`` seconds adds to ``window`` seconds of compute it
    runs beside, when the compute keeps ``rate`` of its speed while the collective runs.

    Both streams start together. If the collective outlasts the compute slowed to
    ``rate`` (comm >= window / rate), the pass takes the collective's time and shows
    comm - window; otherwise the compute finishes rate * comm of its work during the
    collective and the rest at full speed, so the pass shows (1 - rate) * comm. The two
    meet at comm = window / rate; rate 1 is perfect overlap, rate 0 none. Measured on
    A100, H100, MI250 and MI210 with GPT and Llama layers, compute beside a collective
    took 18.9% longer on average (at most 40%): Lee et al., "Characterizing
    Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
    Performance and Power Implications", arXiv 2507.03114, 2025 (``dp_overlap`` 0.84,
    1 / 1.189)."""
    return max(comm - window, (1.0 - rate) * comm, 0.0)


def optimizer_seconds(c: Cluster, t: Training, local: float, shard: float, scaled: bool) -> float:
    """Seconds of the memory-bound passes at a step's end over a rank's ``local``
    parameters and the ``shard`` of them its optimizer updates, at HBM bandwidth.

    ``"adam"``: the fused Adam update reads the gradient and reads and writes the master
    weights and moments, and the bf16 weights are written.

    ``"megatron"`` (Megatron-LM's DistributedDataParallel and DistributedOptimizer, the
    defaults of its pretraining scripts): besides that update, over the whole gradient
    buffer ``zero_grad_buffer`` zeroes it at the step's start (write), the NaN check
    (``check_for_nan_in_grad``, ``grad_nan_check``; since b1116a0c80 of Sep 2023 an
    assertion on the clipping norm, a pass of its own over each bucket since d66807759c
    of Dec 2023) takes each bucket's norm (read) and, with more than one data-parallel
    replica and no ``--ddp-average-in-collective``, ``start_grad_sync`` scales it by 1/dp in
    place (read and write; experts' buckets too); over the shard, the clipping
    (``--clip-grad``) takes the norm of the fp32 gradients (read) and scales them when it
    exceeds the limit (read and write; early in training it does), and the bf16
    parameters are copied from the fp32 master weights (read the master, write the
    parameter) rather than written by the update; a bf16 buffer (no ``grad_reduce_in_fp32``,
    ``grad_bytes`` 2) is cast to fp32 over the shard first (megatron/core/distributed/
    param_and_grad_buffer.py, megatron/core/optimizer/distrib_optimizer.py and clip_grads.py).

    ``"megatron-fp16"`` (Megatron-LM's Float16OptimizerWithFloat16Params, megatron/
    optimizer/optimizer.py at de7dc40f88 of Aug 2021 and after): the 1/dp scaling of the
    fp16 gradients as above (the zeroing only with a kept buffer: 2021's DDP had none,
    its ``zero_grad(set_to_none=True)`` frees them, ``zero_grad_frees``), then over the
    shard ``_copy_model_grads_to_main_grads`` casts them to fp32 (read, write 4 bytes),
    ``_unscale_main_grads_and_check_for_nan`` divides out the loss scale and flags
    overflow (read and write), ``clip_grad_norm_fp32`` takes the norm and scales (the
    default --clip-grad 1.0), Adam updates from the fp32 gradient, and
    ``_copy_main_params_to_model_params`` writes the fp16 weights from the masters. No NaN
    norm: before Dec 2023 that check rode on the clipping norm."""
    g = t.grad_bytes
    update = 2 * t.optimizer_bytes + t.param_bytes  # Adam's master and moments, the weight written
    if t.optimizer_step == "adam":
        return shard * (g + update) / hbm_rate(c, t)
    fp16 = t.optimizer_step == "megatron-fp16"
    zero = 0.0 if t.zero_grad_frees else g
    nan = g if t.grad_nan_check and not fp16 else 0.0
    scale = 2 * g if scaled and not t.average_in_collective else 0.0
    # the optimizer's .float() of a narrower gradient writes an fp32 copy; of an fp32 buffer
    # it is the buffer itself (distrib_optimizer's and optimizer.py's _copy_model_grads_to_main_grads)
    cast = g + FP32 if g < FP32 else 0.0
    unscale = 2 * FP32 if fp16 else 0.0
    # clipping norm and scale, Adam's read of the fp32 gradient, the master read for the copy
    main = cast + unscale + 3 * FP32 + FP32 + FP32
    return (local * (zero + nan + scale) + shard * (main + update)) / hbm_rate(c, t)


@dataclass(frozen=True)
class StepSync:
    """The step's exposed data-parallel collectives and optimizer step (``step_sync``),
    kept apart where the simulation prices the gradient reduction (``reduce`` set).

    ``rest``: per rank, its exposed collectives besides the timed reduction and parameter
    gather (all of them where the reduction is not timed); ``floor``: per rank, the
    reduction's exposure known before simulating (``reduction_floor``: never above what
    ``tail_exposure`` finds, so the search's bound stays a lower bound); ``reduce``: per
    rank, per chunk, the reduction's seconds; ``rate``: the speed compute keeps beside it
    (``dp_overlap``); ``opt``: the worst rank's optimizer step; ``extra``: what is added
    after (the tied embedding's all-reduce); ``gather``: per rank, per chunk, the timed
    parameter gather's seconds (``param_gather``), ``head_floor`` what the ranks' gathers
    add at least before simulating (``gather_floor``), ``chunks`` the chunks a rank
    holds (``param_gather.combined``)."""

    rest: tuple[float, ...]
    floor: tuple[float, ...]
    opt: float
    reduce: tuple[tuple[float, ...], ...] | None = None
    rate: float = 1.0
    extra: float = 0.0
    windows: tuple[tuple[float, ...], ...] = ()  # per rank, per chunk: the longest item its last backward can be
    gather: tuple[tuple[float, ...], ...] | None = None
    head_floor: float = 0.0
    chunks: int = 1

    @property
    def comm(self) -> float:
        """The exposed data-parallel communication known before simulating (the worst
        rank's, its timed reduction at its floor, and the timed gathers at theirs): a
        lower bound."""
        return max((r + f for r, f in zip(self.rest, self.floor)), default=0.0) + self.head_floor

    @property
    def before(self) -> float:
        """Seconds the step adds to the pipeline, known before simulating (a lower bound)."""
        return self.comm + self.opt + self.extra

    def ordered(self, paired: tuple[bool, ...], last: tuple[int | None, ...], longest: tuple[float | None, ...] = ()) -> StepSync:
        """The floor as the order says more, per rank: ``paired``, its order has overlapped
        pairs, so its last backward may be in one, and each chunk's reduction counts
        against ``longest`` (the rank's longest item, where priced) or else no window,
        (1 - rate) of it; ``last``, the chunk known to end the rank's backwards (None: any
        may), whose reduction alone counts against its window (``reduction_floor``)."""
        if self.reduce is None or not (any(paired) or any(x is not None for x in last)):
            return self
        floor = []
        for r, (g, w, f, p, x) in enumerate(zip(self.reduce, self.windows, self.floor, paired, last)):
            if p:
                most = longest[r] if r < len(longest) and longest[r] is not None else math.inf
                f = reduction_floor(g, tuple(max(most, v) for v in w), self.rate)
            elif x is not None:
                f = reduction_floor(g[x : x + 1], w[x : x + 1], self.rate)
            floor.append(f)
        return self.changed(floor=tuple(floor))

    def changed(self, **fields) -> StepSync:
        """``dataclasses.replace`` without its per-field work: a copy with ``fields`` set.
        The search makes one for every candidate's step and bound, and replace took 11 us
        of each (it rebuilds every field through the frozen ``__init__``); StepSync checks
        nothing when made, so the copy is the object replace would make."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__, **fields)
        return new

    def after(self, shows: tuple[float, ...], heads: tuple[float, ...] = ()) -> float:
        """Seconds the step adds to the pipeline, given per rank what its timed reduction
        shows past its last compute (``grad_reduction.reduction_tails``) and how much its
        timed parameter gathers delay it (``param_gather.gather_heads``); ``before`` if
        none is timed."""
        if self.reduce is None:
            return self.before
        tails = max((r + s for r, s in zip(self.rest, shows)), default=0.0)
        return tails + combined(heads, self.chunks) + self.opt + self.extra


def reduction_floor(reduce: tuple[float, ...], windows: tuple[float, ...], rate: float) -> float:
    """What one rank's reductions (``reduce``, seconds per chunk) show at least, before
    simulating: the rank's last item holds some chunk's last backward, so that chunk's
    reduction starts no earlier than that item and runs beside no more compute than it;
    ``exposed`` of it against the item is a floor of ``tail_exposure`` (the queue can only
    start it later, earlier reductions only slow the item more). Which chunk ends last is
    the simulation's to say, so the least over the chunks; ``windows``: per chunk, the
    longest item its last backward can be (math.inf where it may be in an overlapped pair,
    whose time is not priced before simulating: then (1 - rate) of it)."""
    return min((exposed(g, w, rate) for g, w in zip(reduce, windows)), default=0.0)


def timed(t: Training) -> bool:
    """Whether the simulation prices the gradient reduction chunk by chunk
    (``grad_reduction``), and with ZeRO 1 or 2 the parameter gather (``param_gather``): a
    DDP whose reduction overlaps the backward (ZeRO below 3, ``dp_overlap`` above 0:
    Megatron-Core's --overlap-grad-reduce, and --overlap-param-gather beside it). Not FSDP (ZeRO-3,
    whose reduction under PyTorch's pipelining waits for the stage's last backward,
    REDUCE_GRAD), nor a reduction after the whole backward (``dp_overlap`` 0: Megatron-LM
    2021's local DDP, DeepSpeed's pipeline engine and its ZeRO-1 all-reduce), whose every
    chunk shows whole."""
    return t.zero < 3 and t.dp_overlap > 0


def step_sync(
    c: Cluster,
    t: Training,
    lay: Layout,
    pl,
    mm: MemoryModel,
    costs: ComponentCosts,
    microbatches: int,
) -> StepSync:
    """The exposed data-parallel communication, per rank, and the optimizer step (worst
    rank) in seconds, for any order on the placement (``StepSync.ordered`` for what an
    order says more).

    Gradients are reduce-scattered (ZeRO >= 1) or all-reduced over their replicas (dense
    parameters over dp, experts over dp / ep) at ``grad_reduce_bytes`` per element; with
    ZeRO >= 1 the updated bf16 parameters are all-gathered back, each an NCCL ring
    collective (``nccl.py``: its latency is counted once, not per bucket; beside these
    buffers it is small). Bucketed, the reduction
    overlaps the last micro-batch's backward on the rank and the gather the next step's
    first forward; what shows is ``exposed``'s: what outlasts the window, and while it
    runs the compute beside it keeps ``dp_overlap`` of its speed. ZeRO-3 gathers parameters
    for every micro-batch's forward and backward and reduces its gradients, each behind
    that micro-batch's forward (the first gather) and backward (the second, and the
    reduction); each gather's output is then copied into the unsharded parameters on the
    compute stream (FSDP2's ``foreach_all_gather_copy_out``: read and write the
    parameter bytes), which nothing hides; torchao's Float8 linears gathered in float8
    (``fsdp_float8_all_gather``) move one byte an element in both. Under pipeline
    parallelism FSDP keeps a stage's parameters gathered from its first forward to its
    last backward instead
    (``keeps_gathered``: torchtitan's default with PP, reshard_after_forward off): one
    gather and one copy-out per step, behind the first micro-batch's forward.

    Under pipeline parallelism the gradients are reduce-scattered once a step per stage,
    and exposed: PyTorch's pipelining runs every micro-batch's backward with gradient
    sync and resharding off (``PipelineStage.backward_maybe_with_nosync`` sets
    ``set_requires_gradient_sync(False)``), then schedules a REDUCE_GRAD action right after
    each stage's last backward (``schedules._add_reduce_grad``), whose
    ``perform_reduce_grad`` runs FSDP's post-backward (the reduce-scatter of everything the
    stage accumulated) and its final callback, which makes the compute stream wait for it
    (PyTorch 2.13, torch/distributed/pipelining). No backward is left to hide it behind,
    so the whole reduction shows, whether the stage was kept gathered or regathered for
    each micro-batch. The optimizer step reads gradients and reads and writes master
    weights and moments (its shard, under ZeRO) and writes the bf16 weights, at HBM
    bandwidth, after everything else.

    Where the reduction overlaps the backward (``timed``) each chunk's reduction is timed
    on the simulated order (``grad_reduction``): beside its own last backward and the
    rank's backwards after it, not all of them beside one micro-batch's backward.
    Before simulating it counts only as much as ``reduction_floor`` says. So is each
    chunk's parameter gather (``param_gather``: Megatron-Core's --overlap-param-gather),
    from when the code launches it to the chunk's first forward, not the whole stage's
    beside one micro-batch's forward; before simulating, ``gather_floor``."""
    rests, floors, reduces, windows, gathers = [], [], [], [], []
    worst_opt = 0.0
    r = t.dp_overlap
    every = pl.held()  # worked out once: a placement's held() builds its tuples anew each call
    terms = layout_terms(c, t, lay)
    for held in every:
        # the rank's forward and backward seconds: only the untimed branches read them
        fwd = 0.0 if timed(t) else sum(costs.op_time(_F, st) for st in held)
        bwd = 0.0 if timed(t) else sum(costs.op_time(_B, st) + costs.op_time(_W, st) for st in held)
        grads = gather = opt = copy_out = 0.0
        per_chunk, per_gather = [], []
        for st in held:
            mine = theirs = 0.0  # this chunk's reduction and gather
            dense, experts = mm.params_at(st)
            out, groups = terms[dense, experts, float8_params_at(mm, st)]
            copy_out += out
            for one, their, update, amax in groups:
                grads += one
                mine += one
                gather += their
                theirs += their
                opt += update
                opt += amax
            per_chunk.append(mine)
            per_gather.append(theirs)
        if t.zero >= 3 and not keeps_gathered(t, lay):  # regathered for every micro-batch's forward and backward
            # under pipelining the gradients wait for one exposed reduce-scatter a stage
            # (REDUCE_GRAD) after the last backward; without it each micro-batch's
            # reduction shares its backward's window with the second gather
            after_last = grads if lay.pp > 1 else 0.0
            behind_bwd = 0.0 if lay.pp > 1 else grads
            per_mb = exposed(gather, fwd, r) + exposed(gather + behind_bwd, bwd, r) + 2 * copy_out
            comm = after_last + per_mb * microbatches
        elif t.zero >= 3 and lay.pp > 1:  # kept gathered, once a step before the first forward; REDUCE_GRAD exposed
            comm = grads + exposed(gather, fwd, r) + copy_out
        elif t.zero >= 3:  # kept gathered without pp (fsdp_reshard = "never")
            comm = exposed(grads, bwd, r) + exposed(gather, fwd, r) + copy_out
        elif timed(t):
            windows.append(tuple(_last_backward(costs, st) for st in held))
            floors.append(reduction_floor(tuple(per_chunk), windows[-1], r))
            reduces.append(tuple(per_chunk))
            gathers.append(tuple(per_gather))
            rests.append(0.0)
            worst_opt = max(worst_opt, opt)
            continue
        else:
            comm = exposed(grads, bwd, r) + exposed(gather, fwd, r)
        rests.append(comm)
        floors.append(0.0)
        worst_opt = max(worst_opt, opt)
    if not timed(t):
        return StepSync(tuple(rests), tuple(floors), worst_opt, None, r)
    held = every
    firsts = tuple(costs.op_time(_F, h[0]) for h in held)
    # with one chunk a rank, stage s > 0's first forward waits for stage s - 1's on another rank
    fed = tuple(pl.chunks == 1 and h[0] > 0 and costs.op_time(_F, h[0] - 1) > 0.0 for h in held)
    head = gather_floor(tuple(gathers), firsts, bool(held) and held[0][0] == 0, r, fed)
    return StepSync(
        tuple(rests),
        tuple(floors),
        worst_opt,
        tuple(reduces),
        r,
        windows=tuple(windows),
        gather=tuple(gathers) if t.zero >= 1 else None,
        head_floor=head,
        chunks=pl.chunks,
    )


class _LayoutTerms(dict):
    """``stage_terms`` of one cluster, training and layout by (dense, experts, f8), each
    worked out when first asked (``__missing__``)."""

    def __init__(self, c: Cluster, t: Training, lay: Layout):
        super().__init__()
        self.specs = (c, t, lay)

    def __missing__(self, key: tuple[float, float, float]):
        got = self[key] = stage_terms(*self.specs, *key)
        return got


@functools.lru_cache(maxsize=4096)
def layout_terms(c: Cluster, t: Training, lay: Layout) -> _LayoutTerms:
    """What ``step_sync`` reads of ``stage_terms`` for one layout, kept by the stage's
    three numbers: a MoE search asks for them thousands of times, and a cache keyed by
    all six arguments hashed the three specs at every stage (1.5 us a look-up against
    0.26 us); here they are hashed once a ``step_sync``. As many layouts kept as a wide
    search has (Qwen3-235B-A22B on h800-2048: about 1,700)."""
    return _LayoutTerms(c, t, lay)


def stage_terms(
    c: Cluster, t: Training, lay: Layout, dense: float, experts: float, f8: float
) -> tuple[float, tuple[tuple[float, float, float, float], ...]]:
    """What ``step_sync`` adds up for one stage of ``dense`` and ``experts`` parameters on a
    GPU, ``f8`` of them gathered in float8 (``float8_params_at``): the seconds of its
    gathered parameters' copy-out, and for its dense parameters (over cp x dp) then its
    experts (over edp), the seconds of their reduction, their gather and the optimizer's
    two passes (the update, and the amax of a float8 shard). The same for every placement,
    split and micro-batch count with a stage of these parameters: kept (``layout_terms``),
    returned apart so ``step_sync`` sums them in its own order."""
    # gathered in one byte (fsdp_float8_all_gather)
    copy_out = ((dense + experts - f8) * t.param_bytes + f8) * 2 / hbm_rate(c, t)
    groups = []
    for n, group, one_byte in ((dense, "cpdp", f8), (experts, "edp", 0.0)):
        replicas = lay.size(group)
        reduce = "reduce_scatter" if t.zero >= 1 and not t.zero1_allreduce else "all_reduce"
        one = ring_seconds(c, lay, group, reduce, n * t.grad_reduce_bytes)
        gathered = (n - one_byte) * t.param_bytes + one_byte
        their = ring_seconds(c, lay, group, "all_gather", gathered) if t.zero >= 1 else 0.0
        shard = replicas if t.zero >= 1 else 1
        update = optimizer_seconds(c, t, n, n / shard, lay.size("cpdp") > 1)
        # precompute_float8_dynamic_scale_for_fsdp: the amax of every float8 shard once
        # a step (torch._foreach_norm over the fp32 shards; torchao eab345c fsdp_utils.py)
        amax = one_byte / shard * FP32 / hbm_rate(c, t)
        groups.append((one, their, update, amax))
    return copy_out, tuple(groups)


def gather_floor(
    gathers: tuple[tuple[float, ...], ...], firsts: tuple[float, ...], opens: bool, rate: float, fed: tuple[bool, ...] = ()
) -> float:
    """What the timed parameter gathers (``gathers``: per rank, per chunk, seconds) add to the
    step at least, before simulating (``param_gather.combined`` of per-rank floors, never above
    ``gather_heads``' on any order); ``firsts``: per rank, the forward of its chunk 0's stage.
    Rank 0, where it holds stage 0 as its chunk 0 (``opens``), starts the step with that
    forward beside chunk 0's gather, the first dispatched: at least ``exposed`` of the two.
    With one chunk a rank every rank launches its gather at its first forward, that chunk's:
    one whose first forward waits for another rank's (``fed``: per rank, its stage's input
    comes from a forward of nonzero time, so it cannot start with the step and its gather is
    one bucket, ``param_gather.gather_heads``) waits for all of it; one that may start with
    the step runs it beside: at least ``exposed`` of it. With more chunks a later rank's
    gathers start with the step and may hide: nothing."""
    chunks = max((len(g) for g in gathers), default=1)
    if chunks == 1:
        waits = [r < len(fed) and fed[r] for r in range(len(gathers))]
        return combined([g[0] if w else exposed(g[0], f, rate) for g, f, w in zip(gathers, firsts, waits)], 1)
    heads = [0.0] * len(gathers)
    if opens and gathers and gathers[0]:
        heads[0] = exposed(gathers[0][0], firsts[0], rate)
    return combined(heads, chunks)


def _last_backward(costs: ComponentCosts, st: int) -> float:
    """The longest lone item a stage's last backward can be: the fused BW, or a B and its W
    (``reduction_floor``'s window: the longer, the less it claims)."""
    b, w, bw = costs.op_time(_B, st), costs.op_time(_W, st), costs.op_time(_BW, st)
    return max(bw, b + w)
