"""One candidate: checks and a lower bound (``prepare``), then simulation (``finish``).

Each candidate is first checked against its family's constraints (the registry's
``Family.check``), its stage count and the GPU's memory from its static bytes, from its
placement alone (nothing is built for a candidate these rule out), and given a lower
bound on its step time: the busiest rank's summed item times plus the gradient sync.
Memory of the survivors is taken from their timelines. Each pipeline rank is held to its
own usable memory (``device_memory.usable_on_rank``): only the last stage's rank keeps
the loss's transient and logits, each its own receive buffers and FSDP pools."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import PipesimError
from ..ir import Op
from ..schedules import REGISTRY
from .bounds import (
    _ends,
    affine,
    fill_drain,
    item_time,
    pipeline_bound,
    rank_work,
    stage_passes,
    unpaired_work,
    work_floor,
)
from .candidates import COST_OPTIONS, COST_ORDERED_MAX_SLOTS, SEARCHED_MAX_SLOTS, Candidate
from .collectives import tied_embedding_sync
from .compute import model_flops_per_token
from .device_memory import rank_usables
from .grad_reduction import order_ends
from .measured import extrapolated, measure
from .pipeline_layout import is_layout, stage_count
from .programs import activation_table, megatron_group, memory_peaks, sample_points
from .rank_fit import Budgets, over, refused
from .results import GB, Result
from .shared import Shared, kept
from .specs import Cluster, Model, Training
from .split import most_stages
from .step import StepSync, per_microbatch, step_sync
from .stragglers import slowest_share


@dataclass
class Prepared:
    """A candidate that passed the cheap checks, with what its simulation needs."""

    candidate: Candidate
    stages: int
    parts: list[range]  # the model's layers on each stage
    options: dict  # for its builder
    costs: object  # its component cost model (shared with candidates of its layout and placement)
    memory: object
    budgets: Budgets  # per rank, its own usable memory (device_memory.usable_on_rank)
    statics: list[float]  # per rank, bytes of parameters, gradients and optimizer states (bounds.static_bytes)
    # the step's exposed data-parallel (and tied-embedding) collectives and optimizer
    # step, in its parts (``sync``, ``StepSync.before``, is their floor; the gradient
    # reduction is timed on the simulation where the framework overlaps it chunk by
    # chunk), or the function that works them out when first asked (``step``)
    steps: StepSync | Callable[[], StepSync] | None = field(repr=False, compare=False)
    floor: float  # at most ``bound``, known without pricing overlapped pairs (``bounds.work_floor``) or the sync
    evened: bool = True  # the split evens out the ranks (split._even_out_ranks)
    # ``bound``, priced when asked, given the Prepared itself: a closure over it would make
    # a cycle, which only the cycle collector frees (the search turns it off while it runs)
    exact: Callable[[Prepared], float] | None = field(default=None, repr=False, compare=False)

    @property
    def bound(self) -> float:
        """No step can be shorter: the busiest rank's summed item times + sync. Priced when
        first asked (the search asks only candidates whose floor reaches the front of its
        queue): most candidates of a wide MoE search are skipped unpriced."""
        if self.exact is not None:
            self.floor, self.exact = self.exact(self), None
        return self.floor

    @property
    def priced(self) -> bool:
        return self.exact is None

    @property
    def step(self) -> StepSync:
        if callable(self.steps):
            self.steps = self.steps()
        return self.steps

    @property
    def sync(self) -> float:
        """Exposed data-parallel (and tied-embedding) collectives and the optimizer step,
        seconds (a floor: ``step``)."""
        return self.step.before


def builder_options(cand: Candidate, costs, mm, room: float, stages: int, pending: int = 0) -> dict:
    """The options the candidate's family is built with: its chunks, and for a family whose
    builder takes costs (zb-auto), the candidate's own per-stage F/B/W, P2P latency and
    the activation memory left (``room``; at most ``pending`` activations,
    ``Training.zb_max_pending_backward``, 0: 2pp micro-batches, ZB-2p's room). The builder caps every
    rank alike, so ``room`` is the least any rank has under its own usable memory: a cap
    no rank overflows, tighter than a roomier rank needs."""
    fam = REGISTRY[cand.schedule]
    takes = fam.options
    opts: dict = {}
    if cand.chunks is not None:
        opts["chunks"] = cand.chunks
    if not set(COST_OPTIONS) <= takes.keys():
        return opts
    for k in COST_OPTIONS:
        op = Op(k.upper(), 0, 0)  # made once: a frozen dataclass costs a microsecond to make
        opts[k] = tuple(costs.op_time(op, s) for s in range(stages))
    if "comm" in takes:
        opts["comm"] = costs.p2p_time(0, 1)
    # zb-auto counts in the bytes of one activation and a B that adds memory
    # (MemoryModel.w_share above 1: the W keeps more than the activation) as adding it,
    # after every op: its count is the bytes the memory model holds, and its cap the
    # room left. A pinned pending count caps it at that many of the F's own bytes, as the
    # Zero Bubble fork's --zero-bubble-max-pending-backward does (pending x the F's
    # measured bytes, runtime.py:1587-1589 at 39f2c186), a B's bytes checked against it
    # (scheduler/zb.py:259-264). The default, ZB-2p's room, is 2pp micro-batches in
    # flight each at its most (its activation, then after its B what its W keeps): the
    # paper's 2p M_B where M_W <= M_B
    if {"memory_limit", "activation_bytes"} <= takes.keys():
        unit = max(mm.activation_bytes(s) for s in range(stages))
        opts["activation_bytes"] = unit
        cap = pending * unit if pending else 2 * cand.layout.pp * max(1.0, mm.w_share) * unit
        opts["memory_limit"] = min(room, cap)
    if "w_memory" in takes:
        opts["w_memory"] = mm.w_share
    return opts


def too_many_slots(cand: Candidate) -> Result | None:
    """The search's refusal of a searched schedule past its size (``SEARCHED_MAX_SLOTS``,
    ``COST_ORDERED_MAX_SLOTS``): a cost of searching many candidates, so a layout priced
    alone (``calibrate.evaluate_layout``) is built at any size its family takes."""
    fam, lay, M = REGISTRY[cand.schedule], cand.layout, cand.microbatches
    limit = COST_ORDERED_MAX_SLOTS if set(COST_OPTIONS) <= fam.options.keys() else SEARCHED_MAX_SLOTS
    if not fam.periodic and M * lay.pp > limit:
        return Result(cand, False, f"a searched schedule, built for pp x M up to {limit}, not {lay.pp} x {M}")
    return None


def _sizes(name: str, pp: int, M: int, chunks: int | None, exhaustive: bool) -> tuple:
    """What ``prepare`` reads of a family at these sizes, whatever the layout: the builder's
    chunk options (Megatron's group among them), the micro-batch counts simulated
    (``sample_points``; None where M itself is, as in an exhaustive search), the
    registry's refusal at one of them, else the placement (sized at the last), without
    building: most candidates are ruled out by what follows, before any build."""
    fam = REGISTRY[name]
    options = {"chunks": chunks} if chunks is not None else {}
    group = megatron_group(name, pp, M, options)
    options |= group
    points = None if exhaustive else sample_points(name, pp, M, options)
    for x in points or (M,):
        refused = fam.check(pp, x, **options)
        if refused is not None:
            return options, group, points, refused, None
    return options, group, points, None, fam.placement_of(pp, x, **options)


def prepare(
    m: Model, c: Cluster, t: Training, cand: Candidate, shared: Shared | None = None, splits: tuple[bool, ...] = (True, False)
) -> Prepared | Result:
    """Check the candidate against its schedule's constraints and the GPU's memory, and
    bound its step time from below, without simulating it. The layers are split over the
    stages evening out the ranks' work, or where that split's memory does not fit, without
    those moves (``splits``: which to try, in order)."""
    shared = shared or Shared(m, c, t)
    lay, M = cand.layout, cand.microbatches
    # the same for every layout of this pipeline depth: worked out once
    key = (cand.schedule, lay.pp, M, cand.chunks)
    chunks, group, points, refused, pl = kept(shared.sizes, key, lambda: _sizes(*key, shared.exhaustive))
    if refused is not None:
        return Result(cand, False, f"cannot run: {refused}")
    k = (M - points[0]) / (points[1] - points[0]) if points else 0.0
    stages = pl.stages
    if is_layout(t.stage_split) and stage_count(t.stage_split) != stages:
        return Result(
            cand,
            False,
            f"has {stages} stage{'s' * (stages > 1)}; stage_split {t.stage_split!r} names {stage_count(t.stage_split)}",
        )
    if stages > most_stages(m.layers, t.stage_split):
        return Result(cand, False, f"needs {stages} stages, the model has {m.layers} layers")
    tried = []
    for evened in splits:
        model = shared.cost_model(lay, stages, cand.recompute, pl, evened)
        if model[0] in tried:
            continue  # the same split: the same verdict
        tried.append(model[0])
        got = _within_memory(m, c, t, cand, shared, pl, points, k, chunks, group, model, evened)
        if isinstance(got, Prepared):
            return got
    return got


def _within_memory(
    m: Model,
    c: Cluster,
    t: Training,
    cand: Candidate,
    shared: Shared,
    pl,
    points,
    k: float,
    chunks: dict,
    group: dict,
    model,
    evened: bool,
) -> Prepared | Result:
    """``prepare``'s checks that depend on the stage split (``model``, from
    ``Shared.cost_model``): memory, each rank against its own usable memory, then the bound."""
    lay, M, fam = cand.layout, cand.microbatches, REGISTRY[cand.schedule]
    stages = pl.stages
    parts, costs, mm, statics, memo, split_memo = model
    held = shared.placement(pl)[0]
    common = shared.layout_held(lay, cand.recompute)

    def make():  # per M too: the micro-batch count sets the pipeline's receive buffers
        bytes_ = [u.bytes for u in rank_usables(m, c, t, lay, cand.recompute, held, stages, M, mm, common)]
        return Budgets(bytes_, lambda r: rank_usables(m, c, t, lay, cand.recompute, held[r : r + 1], stages, M, mm, common)[0])

    own = kept(memo, ("usable", M), make)
    budgets = own.bytes
    r = over(statics, budgets)
    if r is not None:
        why = "parameters, gradients and optimizer states need"
        return refused(cand, why, statics[r], r, own, static_gb=statics[r] / GB)
    # a builder takes one activation cap for every rank: that of the rank with the least room
    tight = min(range(len(budgets)), key=lambda r: budgets[r] - statics[r])
    opts = builder_options(cand, costs, mm, budgets[tight] - statics[tight], stages, t.zb_max_pending_backward) | group
    # one micro-batch at a time: its activation, and after its B what its W keeps
    one = opts.get("activation_bytes", 0.0) * max(1.0, opts.get("w_memory", 1.0))
    if "memory_limit" in opts and opts["memory_limit"] < one:
        why = (
            f"static memory {statics[tight] / GB:.1f} GB on rank {tight} leaves no room for one micro-batch's activations "
            f"({one / GB:.1f} GB) in its {budgets[tight] / GB:.1f} GB usable"
        )
        if budgets[tight] - statics[tight] >= one:  # the room holds it: the pinned pending count does not
            why = (
                f"zb_max_pending_backward {t.zb_max_pending_backward} caps a rank at {opts['memory_limit'] / GB:.1f} GB "
                f"of activations, less than one micro-batch holds after its B ({one / GB:.1f} GB: its W keeps "
                f"{opts['w_memory']:.2f} of its activation)"
            )
        # what the builder cannot place: the static bytes and one micro-batch's bytes at the size it caps
        need = statics[tight] + one
        return Result(
            cand,
            False,
            why,
            static_gb=statics[tight] / GB,
            memory_gb=need / GB,
            peak_known=False,
            rank=tight,
            usable=own.usable(tight),
        )
    runs = shared.placement(pl)[1]
    ones = kept(  # the same for every schedule of this placement and cost model
        memo,
        ("one", runs),
        lambda: [statics[r] + max(map(mm.activation_bytes, held), default=0.0) for r, held in enumerate(runs)],
    )
    r = over(ones, budgets)
    if r is not None:  # every rank holds at least one forward's activation
        why = "static memory and one micro-batch's activations need"
        return refused(cand, why, ones[r], r, own, memory_gb=ones[r] / GB, peak_known=False)
    # the exact activation peak (a floor under grads_in_backward), from the order: what does
    # not fit is not simulated
    if fam.periodic:
        shapes = [shared.shape(cand.schedule, lay.pp, x, chunks) for x in points or (M,)]
        table = kept(split_memo, "activations", lambda: activation_table(mm, stages))
        at = _ends(lambda sh, mm: memory_peaks(sh, mm, table), shapes, mm)
        peaks = [affine(statics[r] + a, statics[r] + b, k) for r, (a, b) in enumerate(zip(*at))]
        r = over(peaks, budgets)
        if r is not None:
            return refused(cand, "peak memory", peaks[r], r, own, memory_gb=peaks[r] / GB)
        times = kept(split_memo, "items", dict)

        def work():
            (b1, w1), (b2, w2) = _ends(lambda sh, c: rank_work(sh.counts, c, times), shapes, costs)
            return [affine(x, y, k) for x, y in zip(b1, b2)], [affine(x, y, k) for x, y in zip(w1, w2)]

        floor = None if shared.exhaustive else work_floor(shapes, k, costs, times, kept(split_memo, "floors", dict))
        # the order's alone (its family, pp, M and options fix its shapes and placement):
        # candidates of every layout with that order share it
        order = (cand.schedule, lay.pp, M, tuple(sorted(chunks.items())))
        paired, last, pairs = kept(shared.orders, order, lambda: order_ends(shapes, held, len(pl.routes)))

        def priced(p: Prepared | None):  # the bound's: a paired rank's last item at most its longest pair
            for keys in pairs:
                # set.difference with a dict tests the set's keys in it; ``keys - times.keys()``
                # copied the set and discarded every one of the cost model's item times from it
                for key in keys.difference(times):
                    times[key] = item_time(key, costs)
            longest = tuple(max((times[key] for key in keys), default=0.0) if keys else None for keys in pairs)
            return step_sync_of().ordered(paired, last, longest).changed(extra=tied).before
    else:
        floor = None
        paired = (False,) * lay.pp  # orders without overlapped pairs (``unpaired_work``)
        last = (None,) * lay.pp

        def priced(p: Prepared | None):
            return sync(p)

        def work():
            return kept(split_memo, ("unpaired", shared.routes_key(pl)), lambda: unpaired_work(pl, costs))

    passes = kept(split_memo, ("passes", stages), lambda: stage_passes(costs, stages))
    fills = kept(split_memo, ("fill", shared.routes_key(pl)), lambda: fill_drain(pl, costs, passes))

    # exposed data-parallel collectives + optimizer step
    # the memo is this cost model's, whose key holds the placement's held stages already;
    # the micro-batch count matters only where FSDP regathers for each micro-batch
    syncs = kept(memo, "sync", dict)  # (its own store: what a candidate priced later holds on to)
    per_m = M if per_microbatch(t, lay) else None

    def step_sync_of():
        return kept(syncs, per_m, lambda: step_sync(c, t, lay, pl, mm, costs, M))

    tied = tied_embedding_sync(m, c, t, lay)

    def step_of() -> StepSync:
        return step_sync_of().ordered(paired, last).changed(extra=tied)

    # the sync is worked out when first asked (the bound's pricing, or the simulation):
    # most candidates of a wide search never reach the front of its queue, and their
    # floors count none of it. Where this cost model's is known already, the floor
    # counts it (cheaply tighter)
    step = step_of() if per_m in syncs else step_of
    known = step.before if isinstance(step, StepSync) else 0.0

    def sync(p: Prepared | None) -> float:
        return step.before if isinstance(step, StepSync) else p.sync

    if floor is None:  # no floor cheaper than the work itself: summed now
        ahead = pipeline_bound(pl, costs, *work(), passes, fills)
        if any(paired):  # an exhaustive search's paired order: priced at once
            step = step if isinstance(step, StepSync) else step_of()
            return Prepared(
                cand, stages, parts, opts, costs, mm, own, statics, step, ahead + max(step.before, priced(None)), evened
            )
        return Prepared(
            cand, stages, parts, opts, costs, mm, own, statics, step, ahead + known, evened, lambda p: ahead + sync(p)
        )

    def bound(p: Prepared) -> float:
        busy = work()  # prices the order's items (a paired rank's pairs among them) first
        return pipeline_bound(pl, costs, *busy, passes, fills) + (sync(p) if not any(paired) else max(sync(p), priced(p)))

    # more work and less deferrable W can only lengthen pipeline_bound, and sync is at
    # least 0: a floor under the bound
    below = pipeline_bound(pl, costs, *floor, passes, fills) + known
    return Prepared(cand, stages, parts, opts, costs, mm, own, statics, step, below, evened, bound)


def finish(m: Model, c: Cluster, t: Training, p: Prepared, shared: Shared | None = None) -> Result:
    """Simulate a prepared candidate and measure it. Where the split that evens out the
    ranks differs from the split without those moves, both are simulated and the faster
    that fits is kept: evening out each rank's total is not the pace of a fixed order.
    Under interleaved 1F1B a stage with a layer more than the others in its slot stalls
    every rank there, whatever the ranks' totals (DeepSeek-V3 on pp8 x 4 chunks, tp2, ep64:
    35% of the step idle with the moves, 26% without). The moves' split bounds both from below
    (it loads the busiest rank least), so the search's pruning still holds."""
    shared = shared or Shared(m, c, t)
    res = _simulated(m, c, t, p, shared)
    if not p.evened or (not res.fits and res.memory_gb <= 0):
        return res
    q = prepare(m, c, t, p.candidate, shared, splits=(False,))
    if not isinstance(q, Prepared) or q.parts == p.parts or (res.fits and q.bound >= res.step_time):
        return res  # the same split, or one whose busiest rank alone is no faster
    alt = _simulated(m, c, t, q, shared)
    return alt if keeps_other(res.fits, res.step_time, alt.fits, alt.step_time) else res


def keeps_other(fits: bool, step: float, other_fits: bool, other_step: float) -> bool:
    """Whether the split without the evening moves is kept over the evened one: where the
    evened one does not fit, or the other fits and is faster (``finish``; ``pipesim
    memory`` chooses its split by the same rule)."""
    return not fits or (other_fits and other_step < step)


def _simulated(m: Model, c: Cluster, t: Training, p: Prepared, shared: Shared) -> Result:
    """Past warm-up every schedule repeats itself, so for large M shorter runs are
    simulated and M's totals extrapolated (``extrapolated``; exactly: tests/test_planner.py
    checks it against full simulations)."""
    cand = p.candidate
    pp, M = cand.layout.pp, cand.microbatches
    costs = p.costs
    points = None if shared.exhaustive else sample_points(cand.schedule, pp, M, p.options)
    try:
        if points is None:
            if not REGISTRY[cand.schedule].periodic:  # built now: its memory is known before it is compiled
                sh = shared.shape(cand.schedule, pp, M, p.options)
                peaks = [x + a for x, a in zip(p.statics, memory_peaks(sh, p.memory))]
                r = over(peaks, p.budgets.bytes)
                if r is not None:
                    return refused(cand, "peak memory", peaks[r], r, p.budgets, memory_gb=peaks[r] / GB)
            x = measure(shared.program(cand.schedule, pp, M, p.options), costs, p.memory, p.step)
        else:
            x = extrapolated(
                lambda n: measure(shared.program(cand.schedule, pp, n, p.options), costs, p.memory, p.step), M, points
            )
    except PipesimError as e:
        return Result(cand, False, f"cannot run: {e}")
    # a fit's fullest rank and the one with the least room; a misfit's rank furthest over
    room = [b - peak for b, peak in zip(p.budgets.bytes, x.peak)]
    tight = min(range(pp), key=lambda r: (room[r], -x.peak[r]))
    r = over(list(x.peak), p.budgets.bytes)
    named = max(range(pp), key=lambda r: (x.peak[r], -room[r])) if r is None else r
    # the pipeline runs at the pace of the job's slowest GPU (``stragglers``): every
    # hand-off and collective waits for it
    makespan = x.makespan / slowest_share(c.gpus, c.gpu_speed_sd)
    # the gradient reduction and parameter gather as the timeline shows them, where timed (no less than
    # the floors ``p.sync`` counted them at: the bound holds)
    sync = p.sync if p.step is None else p.step.after(x.reduced, x.gathered)
    step = makespan + sync
    tokens = t.global_batch * t.seq
    return Result(
        cand,
        r is None,
        "" if r is None else refused(cand, "peak memory", x.peak[r], r, p.budgets).reason,
        step_time=step,
        makespan=makespan,
        dp_sync=sync,
        bubble=1 - sum(x.busy) / (pp * x.makespan),
        compute_utilization=sum(x.compute) / (pp * x.makespan),
        exposed_comm=max(x.exposed),
        memory_gb=x.peak[named] / GB,
        static_gb=max(x.static) / GB,
        tokens_per_s=tokens / step,
        mfu=model_flops_per_token(m, t.seq) * tokens / (c.gpus * c.bf16_tflops * 1e12 * step),
        gpu_hours_per_t=c.gpus * step / 3600 * 1e12 / tokens,
        params_gb=max(x.params) / GB,
        stage_layers=tuple(map(len, p.parts)),
        options=p.options,
        rank=named,
        usable=p.budgets.usable(named),
        room=(tight, x.peak[tight] / GB, p.budgets.bytes[tight] / GB) if r is None else None,
    )


def evaluate(m: Model, c: Cluster, t: Training, cand: Candidate, shared: Shared | None = None) -> Result:
    shared = shared or Shared(m, c, t)
    p = prepare(m, c, t, cand, shared)
    return p if isinstance(p, Result) else finish(m, c, t, p, shared)
