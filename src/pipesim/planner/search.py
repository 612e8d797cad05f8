"""The search: every layout and schedule that fits, simulated, ranked by time per step.

Candidates are (pp, dp, tp, ep, micro-batch size, schedule, chunks, recomputation); any
of the layout's dimensions may be pinned (``Pins``). The schedules are the registry's
families (``pipesim.schedules.REGISTRY``), each with the options its ``Family`` entry
declares, so a family added there is searched without editing this file.

Each candidate is first checked against its family's constraints (the registry's
``Family.check``), its stage count and the GPU's memory from its static bytes, from its
placement alone (nothing is built for a candidate these rule out), and given a lower
bound on its step time: the busiest rank's summed item times plus the
gradient sync. Candidates are then simulated in order of their bound with the component
cost model; the search stops when the bounds prove the rest cannot enter the top rows or
beat their own family's best. Memory of the survivors is taken from their timelines.

What the candidates share is computed once: compiled programs (kept in a cache bounded
in bytes), per-rank item counts for the bounds, cost models (and, through
``pipesim.components``, the plans of their items).
"""

from __future__ import annotations

import inspect
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields

import numpy as np

from ..engine import BW, B, F, W, op_stages
from ..errors import PipesimError
from ..ir import KINDS, Op, Pair, Placement, Schedule
from ..memory import memory
from ..metrics import busy_and_span, stream_times
from ..schedules import REGISTRY, build, family
from ..schedules.classic import smallest_group
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

#: searched schedules (not periodic) are built only up to this many (rank, micro-batch)
#: slots, pp x M: each M is a search, a build and a simulation of its own
SEARCHED_MAX_SLOTS = 4096

#: ... and a family ordered under each candidate's own costs (zb-auto), whose build is a
#: search no other candidate shares, up to this many
COST_ORDERED_MAX_SLOTS = 1024

#: schedules, their shapes and compiled programs kept for reuse across candidates, in
#: bytes of their arrays (see _nbytes)
PROGRAM_CACHE_BYTES = 192 * 2**20

#: cost options a builder may take: such families are ordered under the candidate's costs
COST_OPTIONS = ("f", "b", "w")


@dataclass(frozen=True)
class Pins:
    """Dimensions of the search the user fixed; None: searched."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    chunks: int | None = None
    micro_batch: int | None = None
    microbatches: int | None = None

    def flags(self) -> str:
        names = {"micro_batch": "micro-batch-size"}
        return " ".join(f"--{names.get(f.name, f.name)} {getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


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
    stage_layers: tuple[int, ...] | None = None  # layers per model stage, as simulated
    options: dict | None = None  # what its order was built with (chunks, group size; zb-auto's costs)
    peak_known: bool = True  # memory_gb is the order's own peak, not a lower bound on it

    @property
    def group_size(self) -> int | None:
        """Megatron's group size its order was built with (``megatron_group``); None: the default."""
        return (self.options or {}).get("group_size")


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
    pins: Pins = field(default_factory=Pins)
    searched: tuple[str, ...] = ()  # the schedule families searched

    @property
    def best(self) -> Result | None:
        return self.results[0] if self.results else None

    def best_of(self, schedule: str) -> Result | None:
        return next((r for r in self.results if r.candidate.schedule == schedule), None)


# --------------------------------------------------------------------------------------
# what is searched


def _required(name: str) -> list[str]:
    """Options of a family's builder that have no default (the planner cannot guess them)."""
    fam = REGISTRY[name]
    return [k for k, v in fam.options.items() if v is inspect.Parameter.empty]


def skipped_families() -> dict[str, str]:
    """Registry families the planner cannot build on its own, with why."""
    return {
        n: f"its builder needs {', '.join('--' + k.replace('_', '-') for k in _required(n))}, which the planner cannot choose"
        for n in REGISTRY
        if _required(n)
    }


def fixed_order_families(names) -> list[str]:
    """Searched (not periodic) families whose builders take no costs: their orders are
    chosen at unit costs and then simulated under the candidate's."""
    return [n for n in names if not REGISTRY[n].periodic and not set(COST_OPTIONS) <= REGISTRY[n].options.keys()]


def placement_chunks(name: str, chunks: int | None) -> int:
    fam = REGISTRY[name]
    return Placement.standard(fam.placement, 2, 4, chunks or 1).chunks


def schedule_variants(names: list[str] | None, pins: Pins) -> list[tuple[str, int | None]]:
    """(family, chunks) pairs to search: a family whose builder takes ``chunks`` is tried at
    its default and twice that (or the pinned count); the others as they are, when their
    placement holds the pinned number of chunks per rank."""
    skipped = skipped_families()
    out = []
    for name in names or [n for n in REGISTRY if n not in skipped]:
        fam = family(name)
        if name in skipped:
            raise PipesimError(f"cannot search {name}: {skipped[name]}")
        default = fam.options.get("chunks")
        if isinstance(default, int):
            for ch in (pins.chunks,) if pins.chunks else (default, 2 * default):
                out.append((name, ch))
        elif pins.chunks is None or placement_chunks(name, None) == pins.chunks:
            out.append((name, None))
    if not out:
        raise PipesimError(
            f"--chunks {pins.chunks}: no schedule searched holds {pins.chunks} chunks per rank; "
            "interleaved schedules take any --chunks >= 2, V and dual placements hold 2, flat ones 1"
        )
    return out


def check_pins(m: Model, c: Cluster, t: Training, pins: Pins) -> None:
    """One line naming the pin that cannot hold, before anything is searched."""
    g = c.gpus
    kv = m.attention.kv_heads or m.heads
    for name in ("tp", "pp", "dp"):
        v = getattr(pins, name)
        if v and g % v:
            raise PipesimError(f"--{name} {v} must divide the cluster's {g} GPUs (or give --gpus)")
    if pins.tp and (m.heads % pins.tp or kv % pins.tp):
        raise PipesimError(f"--tp {pins.tp} must divide {m.name}'s {m.heads} attention heads and {kv} key/value heads")
    if pins.pp and pins.pp > m.layers:
        raise PipesimError(f"--pp {pins.pp} exceeds {m.name}'s {m.layers} layers (one stage needs a layer)")
    given = [(n, getattr(pins, n)) for n in ("tp", "pp", "dp") if getattr(pins, n)]
    product = math.prod(v for _, v in given)
    text = " x ".join(f"--{n} {v}" for n, v in given)
    if len(given) == 3 and product != g:
        raise PipesimError(f"{text} = {product} GPUs, but the cluster has {g}; tp x pp x dp must be {g}")
    if len(given) == 2 and g % product:
        raise PipesimError(f"{text} = {product} does not divide the cluster's {g} GPUs")
    if pins.ep:
        if m.moe is None:
            raise PipesimError(f"{m.name} has no experts; drop --ep")
        if m.moe.experts % pins.ep:
            raise PipesimError(f"--ep {pins.ep} must divide {m.name}'s {m.moe.experts} experts")
        if pins.dp and pins.dp % pins.ep:
            raise PipesimError(f"--ep {pins.ep} must divide --dp {pins.dp} (experts are sharded over data-parallel ranks)")
    mb, M = pins.micro_batch, pins.microbatches
    for flag, v in (("--micro-batch-size", mb), ("--microbatches", M)):
        if v and t.global_batch % v:
            raise PipesimError(f"{flag} {v} must divide the global batch of {t.global_batch} sequences")
    if mb and M and t.global_batch % (mb * M):
        raise PipesimError(
            f"--micro-batch-size {mb} x --microbatches {M} must divide the global batch of {t.global_batch} sequences"
        )
    if mb and M and pins.dp and pins.dp * mb * M != t.global_batch:
        raise PipesimError(
            f"--dp {pins.dp} x --micro-batch-size {mb} x --microbatches {M} = {pins.dp * mb * M} sequences per step, "
            f"but the global batch is {t.global_batch}"
        )


def layouts(m: Model, c: Cluster, t: Training, pins: Pins = Pins()) -> Iterator[Layout]:
    gpus = c.gpus
    kv = m.attention.kv_heads or m.heads
    if pins.tp:
        tps = [pins.tp]
    else:
        tps = [1] if m.moe else [x for x in (1, 2, 4, 8) if x <= c.gpus_per_node and m.heads % x == 0 and kv % x == 0]
    for tp in tps:
        for pp in [pins.pp] if pins.pp else _powers(gpus // tp):
            if pp > m.layers or (gpus // tp) % pp:
                continue
            dp = gpus // (tp * pp)
            if pins.dp and dp != pins.dp:
                continue
            if m.moe:
                eps = [pins.ep] if pins.ep else _powers(min(dp, m.moe.experts))
                eps = [e for e in eps if dp % e == 0 and m.moe.experts % e == 0]
            else:
                eps = [1]
            for ep in eps:
                for mb in [pins.micro_batch] if pins.micro_batch else t.micro_batch_sizes:
                    if t.global_batch % (dp * mb) == 0:
                        if pins.microbatches and t.global_batch // (dp * mb) != pins.microbatches:
                            continue
                        yield Layout(pp=pp, dp=dp, tp=tp, ep=ep, micro_batch=mb)


def _powers(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def candidates(m: Model, c: Cluster, t: Training, schedules: list[str] | None = None, pins: Pins = Pins()) -> Iterator[Candidate]:
    variants = schedule_variants(schedules, pins)
    recomputes = ("none", "selective", "full") if t.recompute == "auto" else (t.recompute,)
    for lay in layouts(m, c, t, pins):
        M = t.global_batch // (lay.dp * lay.micro_batch)
        for name, chunks in variants:
            for rc in recomputes:
                yield Candidate(lay, name, chunks, rc, M)


# --------------------------------------------------------------------------------------
# what candidates share


class ProgramCache:
    """Schedules by (family, pp, M, options), each with its Shape and, once simulated, its
    compiled program; least recently used dropped first once their bytes pass ``limit``.
    A schedule is kept as its arrays (``RankTable``), not as the Op objects a builder may
    have made: ten times smaller, so what a search needs again is still there."""

    def __init__(self, limit: int = PROGRAM_CACHE_BYTES):
        self.limit = limit
        self.bytes = 0
        self.kept: OrderedDict[tuple, list] = OrderedDict()  # key -> [schedule, shape, program, bytes]

    def _entry(self, name: str, pp: int, M: int, options: dict) -> list:
        key = (name, pp, M, tuple(sorted(options.items())))
        hit = self.kept.get(key)
        if hit is not None:
            self.kept.move_to_end(key)
            return hit
        s = build(name, pp, M, **options)
        s = Schedule(s.name, s.pp, s.microbatches, s.placement, s.table, s.info)
        entry = self.kept[key] = [s, None, None, 0]
        self._grow(entry, _nbytes(s.table))
        return entry

    def _grow(self, entry: list, size: int) -> None:
        entry[3] += size
        self.bytes += size
        while self.bytes > self.limit and len(self.kept) > 1:
            _, dropped = self.kept.popitem(last=False)
            self.bytes -= dropped[3]

    def shape(self, name: str, pp: int, M: int, options: dict) -> Shape:
        e = self._entry(name, pp, M, options)
        if e[1] is None:  # made when first asked for: a candidate ruled out by its placement needs none
            e[1] = shape(e[0])
            self._grow(e, _nbytes(e[1]))
        return e[1]

    def program(self, name: str, pp: int, M: int, options: dict) -> Program:
        e = self._entry(name, pp, M, options)
        if e[2] is None:
            e[2] = compile(e[0])
            self._grow(e, _nbytes(e[2]))
        return e[2]


def _nbytes(x) -> int:
    """The bytes of the arrays an object holds (a program's, a shape's, a rank table's;
    a broadcast column holds one number), and a few hundred for the rest."""
    arrays = [v for v in (getattr(x, k, None) for k in getattr(x, "__slots__", ())) if isinstance(v, np.ndarray)]
    arrays += [v for v in getattr(x, "__dict__", {}).values() if isinstance(v, np.ndarray)]
    keys = sum(map(len, getattr(x, "counts", ())))  # a shape's counts: a dict entry and a key tuple each
    return 512 + 200 * keys + sum(a.nbytes for a in arrays if 0 not in a.strides)


@dataclass(frozen=True)
class Shape:
    """What a schedule's order says without costs, per rank: how often each cost key occurs
    (so a rank's busy time under any costs is a short sum): ("F", stage) for a lone op,
    ("pair", backward kind, f stage, b stage), in the order they first occur; and the
    activations live right after each forward starts (so peak memory under any sizes is a
    max of short sums), as arrays with one row per item that starts a forward: ``u`` the
    whole ones and ``v`` the ones kept for W alone, per column, where column j of rank r is
    stage ``cols[r, j]`` (ascending; -1 pads); ``rows[r]:rows[r + 1]`` are rank r's rows."""

    counts: list[dict]
    cols: np.ndarray  # int, ranks x columns
    rows: np.ndarray  # int64, ranks + 1
    u: np.ndarray  # int64, rows x columns
    v: np.ndarray  # int64, rows x columns


def shape(s: Schedule) -> Shape:
    """A rank runs its items one after another, so the order alone fixes its activation
    peak: a forward adds its activation when its item starts, B frees the share W does not
    need, W the rest, BW all of it, when their item ends (``pipesim.memory``'s model).
    From the schedule's arrays: running sums per (rank, stage) over each rank's items."""
    t, pl = s.table, s.placement
    n, pp, S = t.items, s.pp, pl.stages
    rank = t.ranks_of_items()
    o_item, o_kind, o_chunk, o_mb = t.ops()
    o_stage = op_stages(pl, rank[o_item], o_chunk, o_mb).astype(np.int64)
    stage2 = np.full(n, -1, np.int64)
    stage2[t.kind2 >= 0] = o_stage[n:]
    # counts: one key per (rank, kinds, stages), numbered in order of first occurrence
    key = ((t.kind.astype(np.int64) * S + o_stage[:n]) * 5 + (t.kind2 + 1)) * (S + 1) + (stage2 + 1)
    uniq, first, many = np.unique(rank.astype(np.int64) * (4 * S * 5 * (S + 1)) + key, return_index=True, return_counts=True)
    counts: list[dict] = [{} for _ in range(pp)]
    for i, c in zip(np.sort(first).tolist(), many[np.argsort(first)].tolist()):
        k, x, k2, x2 = int(t.kind[i]), int(o_stage[i]), int(t.kind2[i]), int(stage2[i])
        counts[int(rank[i])][("pair", KINDS[k2], x, x2) if k2 >= 0 else (KINDS[k], x)] = c
    del uniq
    # activations: each op's column among its rank's stages
    o_rank = rank[o_item].astype(np.int64)
    held, col = np.unique(o_rank * S + o_stage, return_inverse=True)
    held_rank = held // S
    col = col - np.searchsorted(held_rank, held_rank)[col]
    K = int(col.max()) + 1 if len(col) else 0
    cols = np.full((pp, K), -1, np.int64)
    cols[held_rank, np.arange(len(held)) - np.searchsorted(held_rank, held_rank)] = held % S
    cell = o_item.astype(np.int64) * K + col
    size = n * K

    def per_cell(weights) -> np.ndarray:
        return np.bincount(cell, weights, size).astype(np.int64).reshape(n, K)

    isf = o_kind == F
    start_u = per_cell(isf)
    end_u = per_cell(-((o_kind == B) | (o_kind == BW)).astype(np.float64))
    end_v = per_cell((o_kind == B).astype(np.float64) - (o_kind == W))
    first_item = t.offsets[:-1][rank] if n else np.zeros(0, np.int64)

    def before(delta: np.ndarray) -> np.ndarray:  # summed over the rank's earlier items
        c = np.cumsum(delta, axis=0) - delta
        return c - c[first_item]

    fwd = np.unique(o_item[isf])
    u = (before(start_u + end_u) + start_u)[fwd]
    v = before(end_v)[fwd]
    rows = np.searchsorted(fwd, t.offsets).astype(np.int64)
    return Shape(counts, cols, rows, u, v)


def activation_peaks(sh: Shape, mm) -> list[float]:
    """Per rank, the most activation bytes live at once (summed stage by stage in
    ascending order, as a plain sum over the rank's stages would)."""
    w = mm.w_share
    pp, K = sh.cols.shape
    per_stage = {x: mm.activation_bytes(x) for x in set(sh.cols[sh.cols >= 0].tolist())}
    size = np.array([[per_stage.get(x, 0.0) for x in row] for row in sh.cols.tolist()], np.float64).reshape(pp, K)
    row_rank = np.repeat(np.arange(pp), np.diff(sh.rows))
    total = np.zeros(len(row_rank))
    for j in range(K):
        total = total + size[row_rank, j] * (sh.u[:, j] + w * sh.v[:, j])
    out = [0.0] * pp
    has = np.flatnonzero(np.diff(sh.rows) > 0)
    if len(has):
        for r, x in zip(has.tolist(), np.maximum.reduceat(total, sh.rows[has]).tolist()):
            out[r] = x
    return out


class Shared:
    """What one search computes once: programs, item counts, cost models."""

    def __init__(
        self,
        m: Model,
        c: Cluster,
        t: Training,
        cache_bytes: int = PROGRAM_CACHE_BYTES,
        exhaustive: bool = False,
        programs: ProgramCache | None = None,
    ):
        self.m, self.c, self.t = m, c, t
        self.exhaustive = exhaustive
        # programs do not depend on the cluster or training costs: searches of one model
        # under varied assumptions may share them
        self.programs = programs or ProgramCache(0 if exhaustive else cache_bytes)
        self.costs: OrderedDict[tuple, object] = OrderedDict()
        self.splits: dict[tuple, list[range]] = {}  # stage splits: small, all kept

    def program(self, name: str, pp: int, M: int, options: dict) -> Program:
        return self.programs.program(name, pp, M, options)

    def shape(self, name: str, pp: int, M: int, options: dict) -> Shape:
        """A built schedule's shape."""
        return self.programs.shape(name, pp, M, options)

    def cost_model(self, lay: Layout, stages: int, recompute: str, held: tuple, even_out: bool = True):
        """The candidate's stage split, component costs, memory model and per rank static
        bytes; candidates of one layout and placement (``held``: the model stages each
        rank holds, which the split balances) share them (a few are kept: a deep model's
        plans are large, and rebuilding one from its parts is cheap). The split with and
        without evening out the ranks is often the same: then so is the rest."""

        def make():
            key = (lay, stages, recompute, held, even_out)
            parts = self.splits.get(key)
            if parts is None:
                parts = self.splits[key] = stage_parts(self.m, self.c, self.t, lay, stages, recompute, held, even_out)
            other = self.costs.get((lay, stages, recompute, held, not even_out))
            if other is not None and other[0] == parts:
                return other
            costs = component_costs(self.m, self.c, self.t, lay, stages, recompute, parts)
            mm = memory_model(self.m, self.t, lay, stages, recompute, parts)
            return parts, costs, mm, static_bytes(held, mm)

        if self.exhaustive:
            return make()
        key = (lay, stages, recompute, held, even_out)
        hit = self.costs.get(key)
        if hit is None:
            hit = self.costs[key] = make()
            if len(self.costs) > 16:
                self.costs.popitem(last=False)
        else:
            self.costs.move_to_end(key)
        return hit


# --------------------------------------------------------------------------------------
# one candidate: checks and bound, then simulation


@dataclass
class Prepared:
    """A candidate that passed the cheap checks, with what its simulation needs."""

    candidate: Candidate
    stages: int
    parts: list[range]  # the model's layers on each stage
    options: dict  # for its builder
    costs: object  # its component cost model (shared with candidates of its layout and placement)
    memory: object
    budget: float
    statics: list[float]  # per rank, bytes of parameters, gradients and optimizer states
    sync: float  # exposed data-parallel (and tied-embedding) collectives and the optimizer step, seconds
    bound: float  # no step can be shorter: the busiest rank's summed item times + sync
    evened: bool = True  # the split evens out the ranks (estimate._even_out_ranks)


def sample_points(name: str, pp: int, M: int, options: dict | None = None) -> tuple[int, int] | None:
    """Two micro-batch counts past warm-up (from 2pp on a periodic schedule repeats itself
    every 2pp micro-batches under equal stage costs; the end stages' embedding and head
    make the warm-up last up to a period longer, so sampling starts at 4pp), congruent to
    M modulo 2pp so the schedule's constraints still hold, from which M's totals follow
    affinely; None when M must be simulated itself: the schedule is searched rather than
    periodic, it is built with a Megatron group size (its order repeats every g
    micro-batches, not 2pp), or M is as cheap."""
    if not REGISTRY[name].periodic or "group_size" in (options or {}):
        return None
    q = 2 * pp
    m1 = 2 * q + (M - q) % q
    return (m1, m1 + q) if M > m1 + 2 * q else None


def megatron_group(name: str, pp: int, M: int, options: dict) -> dict:
    """Megatron's group size where a family needs one at M: a builder that takes
    ``group_size`` and refuses M with its default of pp (combined 1F1B at M not a multiple
    of pp; plain interleaved 1F1B runs PyTorch's rounds there, and needs a group only where
    they refuse M) gets the smallest g Megatron accepts. A larger g only turns pairs into
    lone F+BW passes and adds warm-up activations (theory: ((v-1)g + pp)(F+BW) +
    (vM - (v-1)g - 1)F&B, peak 2(pp-r-1) + (v-1)g + 2), so the smallest is the one to
    search. Its order repeats every g micro-batches, not 2pp: such candidates are
    simulated whole (``sample_points``)."""
    fam = REGISTRY[name]
    if "group_size" not in fam.options or not M % pp or fam.check(pp, M, **options) is None:
        return {}
    g = smallest_group(pp, M)
    return {} if g is None else {"group_size": g}


def builder_options(cand: Candidate, costs, mm, room: float, stages: int) -> dict:
    """The options the candidate's family is built with: its chunks, and for a family whose
    builder takes costs (zb-auto), the candidate's own per-stage F/B/W, P2P latency and
    the activation memory left on the GPU (at most 2pp activations: ZB-2p's room)."""
    fam = REGISTRY[cand.schedule]
    takes = fam.options
    opts: dict = {}
    if cand.chunks is not None:
        opts["chunks"] = cand.chunks
    if not set(COST_OPTIONS) <= takes.keys():
        return opts
    for k in COST_OPTIONS:
        opts[k] = tuple(costs.op_time(Op(k.upper(), 0, 0), s) for s in range(stages))
    if "comm" in takes:
        opts["comm"] = costs.p2p_time(0, 1)
    if {"memory_limit", "activation_bytes"} <= takes.keys():
        unit = max(mm.activation_bytes(s) for s in range(stages))
        opts["activation_bytes"] = unit
        opts["memory_limit"] = min(room, 2 * cand.layout.pp * unit)
    if "w_memory" in takes:
        opts["w_memory"] = mm.w_share
    return opts


def prepare(
    m: Model, c: Cluster, t: Training, cand: Candidate, shared: Shared | None = None, splits: tuple[bool, ...] = (True, False)
) -> Prepared | Result:
    """Check the candidate against its schedule's constraints and the GPU's memory, and
    bound its step time from below, without simulating it. The layers are split over the
    stages evening out the ranks' work, or where that split's memory does not fit, without
    those moves (``splits``: which to try, in order)."""
    shared = shared or Shared(m, c, t)
    lay, M = cand.layout, cand.microbatches
    fam = REGISTRY[cand.schedule]
    limit = COST_ORDERED_MAX_SLOTS if set(COST_OPTIONS) <= fam.options.keys() else SEARCHED_MAX_SLOTS
    if not fam.periodic and M * lay.pp > limit:
        return Result(cand, False, f"a searched schedule, built for pp x M up to {limit}, not {lay.pp} x {M}")
    chunks = {"chunks": cand.chunks} if cand.chunks is not None else {}
    group = megatron_group(cand.schedule, lay.pp, M, chunks)
    chunks |= group
    points = None if shared.exhaustive else sample_points(cand.schedule, lay.pp, M, chunks)
    # the registry's constraints, at each M that is built, and the placement, without
    # building: most candidates are ruled out by what follows, before any build
    for x in points or (M,):
        refused = fam.check(lay.pp, x, **chunks)
        if refused is not None:
            return Result(cand, False, f"cannot run: {refused}")
    pl = fam.placement_of(lay.pp, x, **chunks)
    k = (M - points[0]) / (points[1] - points[0]) if points else 0.0
    stages = pl.stages
    if stages > m.layers:
        return Result(cand, False, f"needs {stages} stages, the model has {m.layers} layers")
    tried = []
    for evened in splits:
        model = shared.cost_model(lay, stages, cand.recompute, pl.held(), evened)
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
    ``Shared.cost_model``): memory, then the bound."""
    lay, M, fam = cand.layout, cand.microbatches, REGISTRY[cand.schedule]
    stages = pl.stages
    budget = c.hbm_gb * GB * t.memory_headroom
    parts, costs, mm, statics = model
    static = max(statics)
    if static > budget:
        return Result(
            cand,
            False,
            f"parameters, gradients and optimizer states need {static / GB:.0f} GB > {budget / GB:.0f} GB usable",
            static_gb=static / GB,
        )
    opts = builder_options(cand, costs, mm, budget - static, stages) | group
    if "memory_limit" in opts and opts["memory_limit"] < opts["activation_bytes"]:
        return Result(
            cand,
            False,
            f"static memory {static / GB:.0f} GB leaves no room for one micro-batch's activations "
            f"({opts['activation_bytes'] / GB:.1f} GB) in {budget / GB:.0f} GB usable",
            static_gb=static / GB,
        )
    one = max(statics[r] + max(mm.activation_bytes(x) for x in held) for r, held in enumerate(rank_stages(pl)) if held)
    if one > budget * (1 + 1e-9):  # every rank holds at least one forward's activation
        return Result(
            cand,
            False,
            f"static memory and one micro-batch's activations need {one / GB:.0f} GB > {budget / GB:.0f} GB usable",
            memory_gb=one / GB,
            peak_known=False,
        )
    if fam.periodic:  # the exact activation peak, from the order: what does not fit is not simulated
        shapes = [shared.shape(cand.schedule, lay.pp, x, chunks) for x in points or (M,)]
        peak = max(
            affine(statics[r] + a, statics[r] + b, k) for r, (a, b) in enumerate(zip(*_ends(activation_peaks, shapes, mm)))
        )
        if peak > budget * (1 + 1e-9):
            return Result(cand, False, f"peak memory {peak / GB:.0f} GB > {budget / GB:.0f} GB usable", memory_gb=peak / GB)
        (b1, w1), (b2, w2) = _ends(lambda sh, c: rank_work(sh.counts, c), shapes, costs)
        busy, w = [affine(x, y, k) for x, y in zip(b1, b2)], [affine(x, y, k) for x, y in zip(w1, w2)]
    else:
        busy, w = unpaired_work(pl, costs)
    bound = pipeline_bound(pl, costs, busy, w)
    sync = sum(step_overhead(c, t, lay, pl, mm, costs, M))  # exposed data-parallel collectives + optimizer step
    sync += tied_embedding_sync(m, c, t, lay)
    return Prepared(cand, stages, parts, opts, costs, mm, budget, statics, sync, bound + sync, evened)


def _ends(f, shapes: list[Shape], arg) -> tuple:
    """f at the first and last sample point (the same when M is simulated itself)."""
    return f(shapes[0], arg), f(shapes[-1], arg)


def affine(a: float, b: float, k: float) -> float:
    """a + k (b - a): a total at M from two sample points (see ``sample_points``)."""
    return a + k * (b - a)


def rank_stages(pl: Placement) -> list[set[int]]:
    """Per rank, the stages (positions along the routes that carry micro-batches) it runs."""
    out: list[set[int]] = [set() for _ in range(pl.pp)]
    for ri in set(pl.route_of):
        for st, (r, _) in enumerate(pl.routes[ri]):
            out[r].add(st)
    return out


def static_bytes(held: tuple[tuple[int, ...], ...], mm) -> list[float]:
    """Per rank, its parameters, gradients and optimizer states: the model stages it holds
    (``Placement.held``), chunk by chunk."""
    return [sum(sum(mm.stage_bytes(x)) for x in stages) for stages in held]


def item_time(key: tuple, costs) -> float:
    if key[0] == "pair":  # ("pair", backward kind, f stage, b stage)
        return costs.pair_time(Pair(Op("F", 0, 0), Op(key[1], 0, 1)), key[2], key[3])
    return costs.op_time(Op(key[0], 0, 0), key[1])


def rank_work(counts: list[dict], costs) -> tuple[list[float], list[float]]:
    """Per rank, the summed time of its items, and of its lone W items among them."""
    times: dict = {}
    busy, w = [], []
    for rank in counts:
        total = weights = 0.0
        for key, n in rank.items():
            if key not in times:
                times[key] = item_time(key, costs)
            total += n * times[key]
            if key[0] == "W":
                weights += n * times[key]
        busy.append(total)
        w.append(weights)
    return busy, w


def unpaired_work(pl: Placement, costs) -> tuple[list[float], list[float]]:
    """Per rank, the forward and backward (B + W, or the fused BW if shorter) of all the
    micro-batches its chunks serve, and no W counted as deferrable: the work of a schedule
    without overlapped pairs, from its placement alone."""
    per_route = [pl.route_of.count(ri) for ri in range(len(pl.routes))]
    work = [0.0] * pl.pp
    for ri, route in enumerate(pl.routes):
        for st, (r, ch) in enumerate(route):
            t = {k: costs.op_time(Op(k, ch, 0), st) for k in ("F", "B", "W", "BW")}
            work[r] += per_route[ri] * (t["F"] + min(t["B"] + t["W"], t["BW"]))
    return work, work


def pipeline_bound(pl: Placement, costs, busy: list[float], w: list[float]) -> float:
    """No schedule on this placement is shorter: for each rank, the fill before its first
    item, its busy time, and the drain after its last backward.

    A rank's first item holds a forward of the first stage it serves on some route (any
    other op waits for one of its own), so it starts no earlier than the forwards of the
    route's earlier stages, all on other ranks, and their P2P hops. Its last item holding a
    backward is at that first stage too (the backward runs back through the rank's later
    stages first), and the backward must still run through the earlier stages: a drain,
    less the lone W items that may run after it. An item holding an op lasts at least the
    op alone: a pair runs each of its ops' parts in sequence at no more than full rate."""
    fwd = [costs.op_time(Op("F", 0, 0), s) for s in range(pl.stages)]
    bwd = [min(costs.op_time(Op("B", 0, 0), s), costs.op_time(Op("BW", 0, 0), s)) for s in range(pl.stages)]
    fill = [math.inf] * pl.pp
    drain = [math.inf] * pl.pp
    used = set(pl.route_of)
    for ri, route in enumerate(pl.routes):
        if ri not in used:
            continue
        f = b = 0.0
        seen: set[int] = set()
        for st, (r, _) in enumerate(route):
            if r not in seen:
                seen.add(r)
                fill[r], drain[r] = min(fill[r], f), min(drain[r], b)
            nxt = route[st + 1][0] if st + 1 < len(route) else r
            f += fwd[st] + (costs.p2p_time(r, nxt) if nxt != r else 0.0)
            b += bwd[st] + (costs.p2p_time(nxt, r) if nxt != r else 0.0)
    return max(fill[r] + busy[r] + max(0.0, drain[r] - w[r]) for r in range(pl.pp) if fill[r] < math.inf)


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
    makespan = tl.end - tl.start
    busy, _ = busy_and_span(tl)
    streams = stream_times(tl)  # the component cost model always sees inside ops
    # compute as summarize's utilization times the makespan gives it (the same floats)
    compute = tuple((c / makespan if makespan > 0 else 0.0) * makespan for c, _ in streams)
    mem = memory(prog.schedule, tl, mm)
    return Measured(
        makespan, tuple(busy), compute, tuple(x for _, x in streams), tuple(mem.peak), tuple(mem.static), tuple(mem.params)
    )


def finish(m: Model, c: Cluster, t: Training, p: Prepared, shared: Shared | None = None) -> Result:
    """Simulate a prepared candidate and measure it; where the split that evens out the
    ranks turns out not to fit, the split without those moves is tried too."""
    shared = shared or Shared(m, c, t)
    res = _simulated(m, c, t, p, shared)
    if not res.fits and res.memory_gb > 0 and p.evened:
        q = prepare(m, c, t, p.candidate, shared, splits=(False,))
        if isinstance(q, Prepared) and q.parts != p.parts:
            return _simulated(m, c, t, q, shared)
    return res


def _simulated(m: Model, c: Cluster, t: Training, p: Prepared, shared: Shared) -> Result:
    """Past warm-up every schedule repeats itself, so for large M two shorter runs are
    simulated and M's totals extrapolated (exactly: tests/test_planner.py checks it
    against full simulations)."""
    cand = p.candidate
    pp, M = cand.layout.pp, cand.microbatches
    costs = p.costs
    points = None if shared.exhaustive else sample_points(cand.schedule, pp, M, p.options)
    try:
        if points is None:
            if not REGISTRY[cand.schedule].periodic:  # built now: its memory is known before it is compiled
                sh = shared.shape(cand.schedule, pp, M, p.options)
                peak = max(x + a for x, a in zip(p.statics, activation_peaks(sh, p.memory)))
                if peak > p.budget * (1 + 1e-9):
                    return Result(
                        cand, False, f"peak memory {peak / GB:.0f} GB > {p.budget / GB:.0f} GB usable", memory_gb=peak / GB
                    )
            x = measure(shared.program(cand.schedule, pp, M, p.options), costs, p.memory)
        else:
            m1, m2 = points
            a = measure(shared.program(cand.schedule, pp, m1, p.options), costs, p.memory)
            b = measure(shared.program(cand.schedule, pp, m2, p.options), costs, p.memory)
            x = a.toward(b, (M - m1) / (m2 - m1))
    except PipesimError as e:
        return Result(cand, False, f"cannot run: {e}")
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
        stage_layers=tuple(map(len, p.parts)),
        options=p.options,
    )


def evaluate(m: Model, c: Cluster, t: Training, cand: Candidate, shared: Shared | None = None) -> Result:
    shared = shared or Shared(m, c, t)
    p = prepare(m, c, t, cand, shared)
    return p if isinstance(p, Result) else finish(m, c, t, p, shared)


# --------------------------------------------------------------------------------------
# the search


def search(
    m: Model,
    c: Cluster,
    t: Training,
    schedules: list[str] | None = None,
    progress: Callable[[int, int, Plan], None] | None = None,
    keep: int = 10,
    pins: Pins = Pins(),
    exhaustive: bool = False,
) -> Plan:
    """Rank every candidate that fits. Candidates are simulated in order of their lower
    bound, and one is skipped when its bound cannot beat both its family's best and the
    ``keep``-th best so far: the winner, the runners-up and each family's best are exact.
    ``exhaustive`` simulates every candidate in full (no bound, extrapolation or shared
    programs): the slow oracle the tests hold the fast search to.

    ``progress(done, total, plan)`` is called as candidates are checked and simulated."""
    check_pins(m, c, t, pins)
    cands = list(candidates(m, c, t, schedules, pins))
    if not cands:
        if pins:
            raise PipesimError(
                f"no layout with {pins.flags()} divides {c.gpus} GPUs and {t.global_batch} sequences per step "
                "into whole pipelines and micro-batches; change or drop a pin"
            )
        raise PipesimError(
            f"no layout divides {c.gpus} GPUs and {t.global_batch} sequences into whole pipelines and micro-batches; "
            "change --gpus or --global-batch"
        )
    shared = Shared(m, c, t, exhaustive=exhaustive)
    plan = Plan(m, c, t, considered=len(cands), top=keep, pins=pins, searched=tuple(dict.fromkeys(x.schedule for x in cands)))
    total = 2 * len(cands)
    tick = progress or (lambda done, total, plan: None)
    tick(0, total, plan)
    prepared: list[Prepared] = []
    for i, cand in enumerate(cands):
        p = prepare(m, c, t, cand, shared)
        (plan.rejected.append(p) if isinstance(p, Result) else prepared.append(p))
        if i % 16 == 0:
            tick(i + 1, total, plan)
    prepared.sort(key=lambda p: p.bound)
    remaining = Counter(p.candidate.schedule for p in prepared)
    family_best: dict[str, float] = {}
    best_times: list[float] = []  # the keep fastest so far, sorted
    done = len(cands) + len(plan.rejected)
    for i, p in enumerate(prepared):
        fam = p.candidate.schedule
        remaining[fam] -= 1
        kth = best_times[keep - 1] if len(best_times) >= keep else math.inf
        if exhaustive or p.bound < max(kth, family_best.get(fam, math.inf)):
            res = finish(m, c, t, p, shared)
            if res.fits:
                plan.results.append(res)
                family_best[fam] = min(family_best.get(fam, math.inf), res.step_time)
                best_times = sorted([*best_times, res.step_time])[:keep]
            else:
                plan.rejected.append(res)
        else:
            plan.skipped += 1
            # sorted by bound: once no family left can still improve, the rest cannot win
            if p.bound >= kth and all(family_best.get(f, math.inf) <= p.bound for f, n in remaining.items() if n):
                plan.skipped += len(prepared) - i - 1
                break
        done += 1
        tick(done, total, plan)
    plan.results.sort(key=lambda r: (r.step_time, r.memory_gb))
    tick(total, total, plan)
    if pins and plan.best is None:
        raise PipesimError(f"the pinned layout ({pins.flags()}) does not fit or cannot run: {closest_miss(plan)}")
    return plan


def closest_miss(plan: Plan) -> str:
    """Why the candidate that came nearest to fitting did not."""
    if not plan.rejected:
        return "every candidate was skipped"
    memory = [r for r in plan.rejected if r.memory_gb or r.static_gb]
    if memory:
        r = min(memory, key=lambda r: r.memory_gb or r.static_gb)
    else:
        r = plan.rejected[0]
    return f"{r.candidate.label} at {r.candidate.layout}, {r.candidate.recompute} recomputation: {r.reason}"
