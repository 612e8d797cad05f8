"""The search: every layout and schedule that fits, simulated, ranked by time per step.

Candidates are (pp, dp, tp, ep, micro-batch size, schedule, chunks, recomputation). Each
is first checked against the GPU's memory from its static bytes and its schedule's peak
live activations (cheap); the survivors are simulated with the component cost model, and
their memory is then taken from the simulated timeline.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from functools import lru_cache

from ..errors import PipesimError
from ..ir import Op, Pair, Placement
from ..memory import memory
from ..metrics import summarize
from ..schedules import REGISTRY, build
from ..simulate import Program, compile, simulate
from .estimate import (
    Layout,
    component_costs,
    memory_model,
    model_flops_per_token,
    stage_parts,
    step_overhead,
    tied_embedding_sync,
)
from .specs import Cluster, Model, Training

GB = 1e9

#: schedules the planner tries, with the chunk counts for families that take them
SEARCHED = {"interleaved-1f1b": (2, 4)}
SKIPPED = {"zb-auto": "built from one cost set at a time; compare it by hand with pipesim simulate"}


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    schedule: str
    chunks: int | None
    recompute: str
    microbatches: int

    @property
    def label(self) -> str:
        name = self.schedule if self.chunks is None else f"{self.schedule} (v={self.chunks})"
        return name


@dataclass
class Result:
    candidate: Candidate
    fits: bool
    reason: str = ""  # why it does not fit, or why it could not run
    step_time: float = math.inf  # seconds
    makespan: float = math.inf
    dp_sync: float = 0.0  # exposed data-parallel (and tied-embedding) collectives and the optimizer step, seconds
    bubble: float = 0.0
    compute_utilization: float = 0.0
    exposed_comm: float = 0.0  # seconds per step, worst rank
    memory_gb: float = 0.0  # peak over ranks
    static_gb: float = 0.0
    tokens_per_s: float = 0.0
    mfu: float = 0.0
    gpu_hours_per_t: float = math.inf  # GPU-hours per 10^12 tokens
    params_gb: float = 0.0  # parameter bytes per GPU (all copies)


@dataclass
class Plan:
    model: Model
    cluster: Cluster
    training: Training
    results: list[Result] = field(default_factory=list)  # simulated, fitting, best first
    rejected: list[Result] = field(default_factory=list)  # did not fit or could not run
    considered: int = 0
    skipped: int = 0  # fitted, but provably slower than what was kept
    top: int = 10  # rows the report shows
    model_published: dict | None = None  # a published cost of this model, from its preset

    @property
    def best(self) -> Result | None:
        return self.results[0] if self.results else None

    def best_of(self, schedule: str) -> Result | None:
        return next((r for r in self.results if r.candidate.schedule == schedule), None)


def layouts(m: Model, c: Cluster, t: Training) -> Iterator[Layout]:
    gpus = c.gpus
    kv = m.attention.kv_heads or m.heads
    tps = [1] if m.moe else [x for x in (1, 2, 4, 8) if x <= c.gpus_per_node and m.heads % x == 0 and kv % x == 0]
    for tp in tps:
        for pp in _powers(gpus // tp):
            if pp > m.layers or (gpus // tp) % pp:
                continue
            dp = gpus // (tp * pp)
            eps = [e for e in _powers(min(dp, m.moe.experts)) if dp % e == 0 and m.moe.experts % e == 0] if m.moe else [1]
            for ep in eps:
                for mb in t.micro_batch_sizes:
                    if t.global_batch % (dp * mb) == 0:
                        yield Layout(pp=pp, dp=dp, tp=tp, ep=ep, micro_batch=mb)


def _powers(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def candidates(m: Model, c: Cluster, t: Training, schedules: list[str] | None = None) -> Iterator[Candidate]:
    names = schedules or [n for n in REGISTRY if n not in SKIPPED]
    recomputes = ("none", "selective", "full") if t.recompute == "auto" else (t.recompute,)
    for lay in layouts(m, c, t):
        M = t.global_batch // (lay.dp * lay.micro_batch)
        for name in names:
            for chunks in SEARCHED.get(name, (None,)):
                for rc in recomputes:
                    yield Candidate(lay, name, chunks, rc, M)


@lru_cache(maxsize=256)
def _program(name: str, pp: int, M: int, chunks: int | None) -> tuple[Program, dict]:
    """The compiled schedule, and per rank how often each cost key occurs in it (so a
    rank's busy time under any costs is a short sum)."""
    opts = {"chunks": chunks} if chunks else {}
    prog = compile(build(name, pp, M, **opts))
    counts: list[Counter] = [Counter() for _ in range(pp)]
    for st in prog.steps:
        what = ("pair", st.item.backward.kind) if isinstance(st.item, Pair) else st.item.kind
        counts[st.rank][(what, st.stages)] += 1
    return prog, counts


@dataclass
class Prepared:
    """A candidate that passed the cheap checks, with what its simulation needs."""

    candidate: Candidate
    costs: object
    memory: object
    budget: float
    sync: float  # exposed data-parallel (and tied-embedding) collectives and the optimizer step, seconds
    bound: float  # no step can be shorter: the busiest rank's summed item times + sync


#: searched schedules are built only up to this many (rank, micro-batch) slots, pp x M:
#: they are not periodic, so each M is a search, a build and a simulation of its own
SEARCHED_MAX_SLOTS = 4096


def prepare(m: Model, c: Cluster, t: Training, cand: Candidate) -> Prepared | Result:
    """Check the candidate against its schedule's constraints and the GPU's memory, and
    bound its step time from below, without simulating it."""
    lay, M = cand.layout, cand.microbatches
    fam = REGISTRY[cand.schedule]
    points = sample_points(cand.schedule, lay.pp, M)
    counts = None
    try:
        if not fam.periodic:
            if M * lay.pp > SEARCHED_MAX_SLOTS:
                return Result(
                    cand, False, f"a searched schedule, built for pp x M up to {SEARCHED_MAX_SLOTS}, not {lay.pp} x {M}"
                )
            pl = Placement.standard(fam.placement, lay.pp, M, 2 if fam.placement == "v" else 1)
        elif points is None:
            prog, counts = _program(cand.schedule, lay.pp, M, cand.chunks)
            pl = prog.schedule.placement
        else:  # a rank's op counts grow affinely with M, as its busy time does
            prog, c1 = _program(cand.schedule, lay.pp, points[0], cand.chunks)
            c2 = _program(cand.schedule, lay.pp, points[1], cand.chunks)[1]
            k = (M - points[0]) / (points[1] - points[0])
            counts = [
                {key: a.get(key, 0) + k * (b.get(key, 0) - a.get(key, 0)) for key in a.keys() | b.keys()} for a, b in zip(c1, c2)
            ]
            pl = prog.schedule.placement
    except PipesimError as e:
        return Result(cand, False, f"cannot run: {e}")
    stages = pl.stages
    if stages > m.layers:
        return Result(cand, False, f"needs {stages} stages, the model has {m.layers} layers")
    budget = c.hbm_gb * GB * t.memory_headroom
    held = tuple(tuple(pl.model_stage(r, ch) for ch in range(pl.chunks)) for r in range(lay.pp))
    parts = stage_parts(m, c, t, lay, stages, cand.recompute, held)
    mm = memory_model(m, t, lay, stages, cand.recompute, parts)
    static = max(sum(sum(mm.stage_bytes(pl.model_stage(r, ch))) for ch in range(pl.chunks)) for r in range(lay.pp))
    if static > budget:
        return Result(
            cand,
            False,
            f"parameters, gradients and optimizer states need {static / GB:.0f} GB > {budget / GB:.0f} GB usable",
            static_gb=static / GB,
        )
    costs = component_costs(m, c, t, lay, stages, cand.recompute, parts)
    sync = sum(step_overhead(c, t, lay, pl, mm, costs, M))  # exposed data-parallel collectives + optimizer step
    sync += tied_embedding_sync(m, c, t, lay)
    bound = busiest_rank(counts, costs) if counts is not None else unpaired_work(pl, costs)
    return Prepared(cand, costs, mm, budget, sync, bound + sync)


def busiest_rank(counts: list[dict], costs) -> float:
    """The longest summed item time of a rank: no step can be shorter."""

    def time(key) -> float:
        what, stages = key
        if isinstance(what, tuple):  # a pair: ("pair", its backward's kind)
            return costs.pair_time(Pair(Op("F", 0, 0), Op(what[1], 0, 1)), *stages)
        return costs.op_time(Op(what, 0, 0), stages[0])

    return max(sum(n * time(k) for k, n in c.items()) for c in counts)


def unpaired_work(pl: Placement, costs) -> float:
    """The busiest rank's F, B and W over all micro-batches its chunks serve: the step
    time bound of a schedule without overlapped pairs, from its placement alone."""
    per_route = [pl.route_of.count(ri) for ri in range(len(pl.routes))]
    work = [0.0] * pl.pp
    for ri, route in enumerate(pl.routes):
        for st, (r, ch) in enumerate(route):
            work[r] += per_route[ri] * sum(costs.op_time(Op(k, ch, 0), st) for k in ("F", "B", "W"))
    return max(work)


@dataclass(frozen=True)
class Measured:
    """What a simulation says of a candidate, as totals that grow affinely with M."""

    makespan: float
    busy: tuple[float, ...]  # per rank
    compute: tuple[float, ...]  # compute-stream busy time per rank
    exposed: tuple[float, ...]  # communication with compute idle, per rank
    peak: tuple[float, ...]  # memory, bytes per rank
    static: tuple[float, ...]
    params: tuple[float, ...]

    def toward(self, other: Measured, k: float) -> Measured:
        """self + k * (other - self), field by field: the affine extrapolation in M."""

        def line(x, y):
            if isinstance(x, tuple):
                return tuple(u + k * (v - u) for u, v in zip(x, y))
            return x + k * (y - x)

        return Measured(*(line(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)))


def measure(prog: Program, costs, mm) -> Measured:
    tl = simulate(prog, costs)
    rep = summarize(prog.schedule, tl)
    mem = memory(prog.schedule, tl, mm)
    compute = tuple(u * rep.makespan for u in rep.compute_utilization)
    return Measured(
        rep.makespan, tuple(rep.busy), compute, tuple(rep.exposed_comm), tuple(mem.peak), tuple(mem.static), tuple(mem.params)
    )


def sample_points(name: str, pp: int, M: int) -> tuple[int, int] | None:
    """Two micro-batch counts past warm-up (from 2pp on a periodic schedule repeats itself
    every 2pp micro-batches under equal stage costs; the end stages' embedding and head
    make the warm-up last up to a period longer, so sampling starts at 4pp), congruent to
    M modulo 2pp so the schedule's constraints still hold, from which M's totals follow
    affinely; None when M must be simulated itself: the schedule is searched rather than
    periodic, or M is as cheap."""
    if not REGISTRY[name].periodic:
        return None
    q = 2 * pp
    m1 = 2 * q + (M - q) % q
    return (m1, m1 + q) if M > m1 + 2 * q else None


def finish(m: Model, c: Cluster, t: Training, p: Prepared) -> Result:
    """Simulate a prepared candidate and measure it. Past warm-up every schedule repeats
    itself, so for large M two shorter runs are simulated and M's totals extrapolated
    (exactly: tests/test_planner.py checks it against full simulations)."""
    cand = p.candidate
    points = sample_points(cand.schedule, cand.layout.pp, cand.microbatches)
    if points is None:
        x = measure(_program(cand.schedule, cand.layout.pp, cand.microbatches, cand.chunks)[0], p.costs, p.memory)
    else:
        m1, m2 = points
        a = measure(_program(cand.schedule, cand.layout.pp, m1, cand.chunks)[0], p.costs, p.memory)
        b = measure(_program(cand.schedule, cand.layout.pp, m2, cand.chunks)[0], p.costs, p.memory)
        x = a.toward(b, (cand.microbatches - m1) / (m2 - m1))
    pp = cand.layout.pp
    peak = max(x.peak)
    step = x.makespan + p.sync
    tokens = t.global_batch * t.seq
    return Result(
        cand,
        peak <= p.budget,
        "" if peak <= p.budget else f"peak memory {peak / GB:.0f} GB > {p.budget / GB:.0f} GB usable",
        step_time=step,
        makespan=x.makespan,
        dp_sync=p.sync,
        bubble=1 - sum(x.busy) / (pp * x.makespan),
        compute_utilization=sum(x.compute) / (pp * x.makespan),
        exposed_comm=max(x.exposed),
        memory_gb=peak / GB,
        static_gb=max(x.static) / GB,
        tokens_per_s=tokens / step,
        mfu=model_flops_per_token(m, t.seq) * tokens / (c.gpus * c.bf16_tflops * 1e12 * step),
        gpu_hours_per_t=c.gpus * step / 3600 * 1e12 / tokens,
        params_gb=max(x.params) / GB,
    )


def evaluate(m: Model, c: Cluster, t: Training, cand: Candidate) -> Result:
    p = prepare(m, c, t, cand)
    return p if isinstance(p, Result) else finish(m, c, t, p)


def search(
    m: Model,
    c: Cluster,
    t: Training,
    schedules: list[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    keep: int = 10,
) -> Plan:
    """Rank every candidate that fits. Candidates are simulated in order of their lower
    bound, and one is skipped when its bound cannot beat both its family's best and the
    ``keep``-th best so far: the winner, the runners-up and each family's best are exact."""
    cands = list(candidates(m, c, t, schedules))
    if not cands:
        raise PipesimError(
            f"no layout divides {c.gpus} GPUs and {t.global_batch} sequences into whole pipelines and micro-batches; "
            "change --gpus or --global-batch"
        )
    plan = Plan(m, c, t, considered=len(cands), top=keep)
    total = 2 * len(cands)
    prepared: list[Prepared] = []
    for i, cand in enumerate(cands):
        p = prepare(m, c, t, cand)
        (plan.rejected.append(p) if isinstance(p, Result) else prepared.append(p))
        if progress:
            progress(i + 1, total)
    prepared.sort(key=lambda p: p.bound)
    family_best: dict[str, float] = {}
    done = len(cands) + len(plan.rejected)
    for p in prepared:
        fam = p.candidate.schedule
        times = sorted(r.step_time for r in plan.results)
        limit = max(times[keep - 1] if len(times) >= keep else math.inf, family_best.get(fam, math.inf))
        if p.bound < limit:
            res = finish(m, c, t, p)
            if res.fits:
                plan.results.append(res)
                family_best[fam] = min(family_best.get(fam, math.inf), res.step_time)
            else:
                plan.rejected.append(res)
        else:
            plan.skipped += 1
        done += 1
        if progress:
            progress(done, total)
    plan.results.sort(key=lambda r: (r.step_time, r.memory_gb))
    return plan
