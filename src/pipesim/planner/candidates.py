"""What is searched: the layouts, schedules and recomputation modes, and the pins that fix
some of them.

Candidates are (pp, dp, tp, ep, micro-batch size, schedule, chunks, recomputation); any
of the layout's dimensions may be pinned (``Pins``). The schedules are the registry's
families (``pipesim.schedules.REGISTRY``), each with the options its ``Family`` entry
declares, so a family added there is searched without editing this file. A candidate no
trainer runs (``runnable``: more than one chunk per rank at pp1, combined 1F1B where
Megatron refuses it) is left out."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

from ..errors import PipesimError
from ..inputs import divisors_text
from ..ir import Placement
from ..schedules import REGISTRY, family
from .layout import Layout, cp_problem, expert_problem, fold_problem, layout_problem, tp_problem
from .runnable import candidate_problem
from .specs import Cluster, Model, Training

#: searched schedules (not periodic) are built only up to this many (rank, micro-batch)
#: slots, pp x M: each M is a search, a build and a simulation of its own
SEARCHED_MAX_SLOTS = 4096


#: ... and a family ordered under each candidate's own costs (zb-auto), whose build is a
#: search no other candidate shares, up to this many
COST_ORDERED_MAX_SLOTS = 1024


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
    cp: int | None = None
    etp: int | None = None

    def flags(self) -> str:
        names = {"micro_batch": "micro-batch-size"}
        return " ".join(f"--{names.get(f.name, f.name)} {getattr(self, f.name)}" for f in fields(self) if getattr(self, f.name))

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


#: nothing pinned: the default of every search
NO_PINS = Pins()


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
    for name in ("tp", "pp", "dp", "cp"):
        v = getattr(pins, name)
        if v and g % v:
            raise PipesimError(
                f"--{name} {v} must divide the cluster's {g} GPUs: give --gpus a multiple of {v}, or another --{name}"
            )
    refused = (
        (tp_problem(m, pins.tp) if pins.tp else None)
        or (cp_problem(m, t, pins.cp, pins.tp or 1) if pins.cp else None)
        or expert_problem(m, pins.ep or 1, pins.etp or 1)
    )
    if refused:
        raise PipesimError(refused)
    if pins.pp and pins.pp > m.layers:
        raise PipesimError(
            f"--pp {pins.pp} exceeds {m.name}'s {m.layers} layers (one stage needs a layer): give --pp {m.layers} or less"
        )
    given = [(n, getattr(pins, n)) for n in ("tp", "cp", "pp", "dp") if getattr(pins, n)]
    product = math.prod(v for _, v in given)
    text = " x ".join(f"--{n} {v}" for n, v in given)
    if len(given) == 4 and product != g or product > g:
        raise PipesimError(f"{text} = {product} GPUs, but the cluster has {g}; tp x cp x pp x dp must be {g}")
    if len(given) >= 2 and g % product:
        # the last pin named, given the others (each of which divides g, so their product may)
        (last, v), others = given[-1], math.prod(v for _, v in given[:-1])
        rest = " x ".join(f"--{n} {x}" for n, x in given[:-1])
        hint = f": with {rest}, give --{last} {divisors_text(g // others, v)}" if g % others == 0 else ""
        raise PipesimError(f"{text} = {product} does not divide the cluster's {g} GPUs{hint}")
    if (pins.ep or pins.etp) and pins.tp and pins.dp and (pins.cp or pins.pp):
        cp = pins.cp or g // (pins.tp * pins.pp * pins.dp)  # the context ranks the other pins leave
        refused = fold_problem(Layout(pp=1, dp=pins.dp, tp=pins.tp, cp=cp, ep=pins.ep or 1, etp=pins.etp or 1))
        if refused:
            raise PipesimError(refused)
    elif pins.ep or pins.etp:  # a stage's tp x cp x dp is g / pp whatever splits it: the fold must divide that
        fold, stage = (pins.ep or 1) * (pins.etp or 1), g // (pins.pp or 1)
        if stage % fold:
            where = f"{g} GPUs / --pp {pins.pp}" if pins.pp else f"at most the cluster's {g}"
            raise PipesimError(
                f"--etp {pins.etp or 1} x --ep {pins.ep or 1} = {fold} must divide a pipeline stage's tp x cp x dp GPUs "
                f"({stage}: {where}); the experts fold over them (etp x ep x edp = tp x cp x dp)"
            )
    mb, M = pins.micro_batch, pins.microbatches
    for flag, v in (("--micro-batch-size", mb), ("--microbatches", M)):
        if v and t.global_batch % v:
            raise PipesimError(
                f"{flag} {v} must divide the global batch of {t.global_batch} sequences: give {flag} {divisors_text(t.global_batch, v)}"
            )
    if mb and M and t.global_batch % (mb * M):
        raise PipesimError(
            f"--micro-batch-size {mb} x --microbatches {M} must divide the global batch of {t.global_batch} sequences: "
            f"with --micro-batch-size {mb}, give --microbatches {divisors_text(t.global_batch // mb, M)}"
        )
    if mb and M and pins.dp and pins.dp * mb * M != t.global_batch:
        raise PipesimError(
            f"--dp {pins.dp} x --micro-batch-size {mb} x --microbatches {M} = {pins.dp * mb * M} sequences per step, "
            f"but the global batch is {t.global_batch}"
        )


def layouts(m: Model, c: Cluster, t: Training, pins: Pins = NO_PINS) -> Iterator[Layout]:
    """Every layout the pins allow: tp x cp x pp x dp over the GPUs; for a model with
    experts, ep x etp folded over each stage's tp x cp x dp GPUs (``expert_tensor_sizes``).
    Layouts ``layout_problem`` refuses are left out."""
    gpus = c.gpus
    free = tensor_sizes(m, c)
    tps = [pins.tp] if pins.tp else free
    for tp in tps:
        # starved at this tensor degree: no pipeline depth feeds its replicas without cp
        # (judged per tp: a larger tp feeding its fewer replicas says nothing of tp1's)
        starved = not any(fed(t, gpus // (tp * pp), pp) for pp in pipeline_sizes(gpus // tp))
        fed_cp = fed_context(c, tp, max(free, default=1))
        for pp in [pins.pp] if pins.pp else pipeline_sizes(gpus // tp):
            if pp > m.layers or (gpus // tp) % pp:
                continue
            if pins.cp:
                cps = [pins.cp]
            elif pins.dp:  # the context ranks the pinned data ranks leave
                cps = [gpus // (tp * pp * pins.dp)] if gpus % (tp * pp * pins.dp) == 0 else []
            else:
                cps = context_sizes(t, gpus // (tp * pp), starved, fed_cp)
            for cp in cps:
                if (gpus // (tp * pp)) % cp:
                    continue
                dp = gpus // (tp * pp * cp)
                if pins.dp and dp != pins.dp:
                    continue
                experts = []
                for etp in [pins.etp] if pins.etp else expert_tensor_sizes(m, tp):
                    folded = tp * cp * dp // etp
                    # a pinned etp with ep free: every ep the fold takes, not only ep = experts
                    # (the free search's rule for etp > 1), which left --etp 8 alone no layout
                    eps = [pins.ep] if pins.ep else expert_degrees(m, folded, 1 if pins.etp else etp) if m.moe else [1]
                    experts += [(ep, etp) for ep in eps]
                for ep, etp in experts:
                    for mb in [pins.micro_batch] if pins.micro_batch else t.micro_batch_sizes:
                        if t.global_batch % (dp * mb) == 0:
                            if pins.microbatches and t.global_batch // (dp * mb) != pins.microbatches:
                                continue
                            lay = Layout(pp=pp, dp=dp, tp=tp, ep=ep, micro_batch=mb, cp=cp, etp=etp)
                            if layout_problem(m, t, lay) is None:
                                yield lay


def tensor_sizes(m: Model, c: Cluster) -> list[int]:
    """The tp degrees the free search takes: 1 to 8, inside an NVLink domain, dividing the
    GPUs and the model's query and key/value heads."""
    return [x for x in (1, 2, 4, 8) if x <= c.domain and c.gpus % x == 0 and tp_problem(m, x) is None]


def expert_tensor_sizes(m: Model, tp: int) -> list[int]:
    """The etp degrees searched beside a tensor-parallel degree tp: 1 (MoE parallel
    folding's usual choice: whole experts, no all-gather of token copies; Megatron-Bridge's
    Qwen3 and DeepSeek-V3 recipes run ETP1 under TP2) and tp itself (Megatron-LM's default
    when --expert-tensor-parallel-size is not given: experts sharded like the dense
    layers), where it divides the expert width (``expert_degrees`` says with which ep).
    Other degrees can be pinned (--etp)."""
    if m.moe is None:
        return [1]
    return [1] + ([tp] if tp > 1 and expert_problem(m, 1, tp) is None else [])


def expert_degrees(m: Model, folded: int, etp: int) -> list[int]:
    """The ep degrees searched over ``folded`` = tp x cp x dp / etp GPUs: every power of two
    up to the experts at etp1; with etp > 1 only ep = the experts. Sharding each expert
    etp ways costs an all-gather of token copies and narrower GEMMs, and shards the
    expert weights no further than spreading whole experts over etp times more ranks
    would; it pays only where ep cannot grow, every expert already on a rank of its own."""
    top = min(folded, m.moe.experts)
    if etp == 1:
        return _powers(top)
    return [m.moe.experts] if top == m.moe.experts else []


#: context parallelism is searched down to chunks of this many tokens (2cp chunks of a
#: sequence; below this the blockwise attention's blocks are too small to hide the ring)
MIN_CP_CHUNK = 512

#: ... and, on a short sequence (under ``LONG_SEQ``) whose GPUs the global batch already
#: feeds, down to chunks of this many (``fed_context`` says beside which tp): the
#: published runs that split such a sequence, Llama 3.1 405B at 8192 tokens on CP2 (2 x 2
#: chunks of 2048 tokens), run it beside TP8 on H100, the cp ring across two 8-GPU nodes:
#: Megatron-Bridge 25.09 and 25.11's recipe (TP8 PP8 VPP8 CP2, ../shared/PUBLISHED_RUNS.md),
#: NVIDIA's MLPerf Training v5.0 submission (training_results_v5.0, read in the fork
#: prishajain1/training_results_v5.0 at 0fdc28f: NVIDIA/benchmarks/llama31_405b/.../
#: config_DGXH100_64x8x288xtp8pp8cp2.sh) and NVIDIA/dgxc-benchmarking's llama3.1 405B
#: recipe (H100 TP8 PP8 CP2, seq 8192); and beside TP4 on GB200 NVL72, the tp x cp group
#: of 8 inside the 72-GPU NVLink domain (the same submission's
#: config_GB200_384x4x48xtp4pp8cp2.sh: TP4 PP8 CP2). None splits a sequence shorter than
#: 8192 tokens. Beside a smaller tp on an 8-GPU node it is left out, for plan speed: beside
#: tp4 and tp8 the cold plan of llama3-405b on b200 took 9.3 s CPU (6.7 s without cp2,
#: same run), beside every tp 10.2 s (6.4 s), past the 10 s target of
#: benchmarks/plan_speed.py; beside the largest tp alone, 7.5-7.9 s (5.9-6.3 s).
FED_CP_CHUNK = 2048

#: sequences this long or longer search every cp down to ``MIN_CP_CHUNK``, where
#: activations crowd memory (the published CP rows of torchtitan and Llama 3 run 64K to
#: 256K tokens)
LONG_SEQ = 16384


def fed(t: Training, replicas: int, pp: int) -> bool:
    """Whether ``replicas`` data-parallel pipelines of pp stages each get whole sequences and
    at least 2pp micro-batches of one, enough to keep the pipeline full."""
    return replicas <= t.global_batch and t.global_batch % replicas == 0 and t.global_batch // replicas >= 2 * pp


def fed_context(c: Cluster, tp: int, widest: int) -> int | None:
    """The cp searched beside tp on a fed short sequence (``FED_CP_CHUNK``): at the
    ``widest`` tp searched every cp the chunks allow (None: tp cannot grow, cp is the next
    split of a sequence, its ring across nodes if it must be, as the H100 runs have it);
    beside a smaller tp, the cp whose tp x cp group is as wide as the widest tp's,
    where whole such groups sit inside an NVLink domain larger than a node (the GB200
    NVL72 runs' TP4 CP2: eight GPUs split four ways by tensor and two by context, ring
    and tensor collectives on NVLink); elsewhere 1, no cp (on a node of 8, tp4 x cp2
    would send the ring over the network). Narrower groups (tp2 x cp2, tp1 x cp2) are
    left out for plan speed: with them the cold plan of llama3-70b on gb200-nvl72 took
    10.3-10.5 s CPU (8.7-8.9 s without, 9.4-9.7 s with tp4 x cp2 alone), past the 10 s
    target of benchmarks/plan_speed.py."""
    if tp >= widest:
        return None
    if c.domain <= c.gpus_per_node or c.domain % widest or widest % tp:
        return 1
    return widest // tp


def context_sizes(t: Training, replicas: int, starved: bool, fed_cp: int | None = None) -> list[int]:
    """The cp degrees searched for ``replicas`` = cp x dp GPUs per pipeline stage and tensor
    rank: 1, and the powers of two the sequence splits into 2cp chunks of at least
    ``MIN_CP_CHUNK`` tokens where context parallelism is needed to feed or fit the GPUs:
    a long sequence (``LONG_SEQ`` or more, where activations crowd memory), fewer
    sequences in the global batch than replicas to feed, or a cluster ``starved`` of
    sequences (no pipeline depth searched gets 2pp micro-batches per replica without
    it: ``fed``). Elsewhere chunks of at least ``FED_CP_CHUNK`` tokens (cp2 at 8K tokens,
    none at 4K), each of them where ``fed_cp`` is None, else ``fed_cp`` alone
    (``fed_context``: beside a tp smaller than the widest), where published runs trade
    data-parallel replicas for context ranks to halve each rank's activations and double
    each pipeline's micro-batches."""
    if t.seq < LONG_SEQ and replicas <= t.global_batch and not starved:
        top = t.seq // (2 * FED_CP_CHUNK)
        if fed_cp is not None:
            return [1] + ([fed_cp] if 1 < fed_cp <= min(top, replicas) and t.seq % (2 * fed_cp) == 0 else [])
    else:
        top = t.seq // (2 * MIN_CP_CHUNK)
    return [1] + [x for x in _powers(min(top, replicas))[1:] if t.seq % (2 * x) == 0]


def pipeline_sizes(n: int) -> list[int]:
    """Pipeline depths searched over ``n`` GPUs a tensor group: the powers of two dividing
    it, and where n has an odd factor (72-GPU NVL72 racks make it 9), those times it, so
    that the data-parallel degree left can be a power of two dividing the global batch."""
    if n < 1:
        return []
    odd = n // (n & -n)
    out = [p for p in _powers(n) if n % p == 0]
    return out + [p * odd for p in out if n % (p * odd) == 0] if odd > 1 else out


def _powers(limit: int) -> list[int]:
    return [2**k for k in range(int(math.log2(limit)) + 1)] if limit >= 1 else []


def candidates(
    m: Model, c: Cluster, t: Training, schedules: list[str] | None = None, pins: Pins = NO_PINS
) -> Iterator[Candidate]:
    from .stages import selective_changes_nothing  # costs sit above the search space

    variants = [(name, ch, placement_chunks(name, ch)) for name, ch in schedule_variants(schedules, pins)]
    recomputes = ("none", "selective", "full") if t.recompute == "auto" else (t.recompute,)
    # what no trainer runs (``runnable``): why, the families, the first layout; said only
    # where nothing else is left, in place of "no layout divides"
    unrunnable: dict[str, tuple[list[str], Layout]] = {}
    found = False
    for lay in layouts(m, c, t, pins):
        M = t.global_batch // (lay.dp * lay.micro_batch)
        # no recomputation where selective costs nothing more is the same step with more
        # memory: left out, but for families ordered under the candidate's own memory room
        twin = "selective" in recomputes and "none" in recomputes and selective_changes_nothing(m, c, t, lay)
        for name, chunks, held in variants:
            cost_ordered = set(COST_OPTIONS) <= REGISTRY[name].options.keys()
            for rc in recomputes:
                if twin and rc == "none" and not cost_ordered:
                    continue
                if refused := candidate_problem(name, held, lay.pp, lay.ep, rc):
                    names = unrunnable.setdefault(refused, ([], lay))[0]
                    names += [name] if name not in names else []
                    continue
                found = True
                yield Candidate(lay, name, chunks, rc, M)
    if unrunnable and not found:
        why, (names, lay) = next(iter(unrunnable.items()))
        raise PipesimError(f"no candidate searched can run: {', '.join(names)} on {lay}, for one: {why}")
