"""What is searched: the layouts, schedules and recomputation modes, and the pins that fix
some of them.

Candidates are (pp, dp, tp, ep, micro-batch size, schedule, chunks, recomputation); any
of the layout's dimensions may be pinned (``Pins``). The schedules are the registry's
families (``pipesim.schedules.REGISTRY``), each with the options its ``Family`` entry
declares, so a family added there is searched without editing this file."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass, fields

from ..errors import PipesimError
from ..ir import Placement
from ..schedules import REGISTRY, family
from .layout import Layout
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


def layouts(m: Model, c: Cluster, t: Training, pins: Pins = NO_PINS) -> Iterator[Layout]:
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


def candidates(m: Model, c: Cluster, t: Training, schedules: list[str] | None = None, pins: Pins = NO_PINS) -> Iterator[Candidate]:
    variants = schedule_variants(schedules, pins)
    recomputes = ("none", "selective", "full") if t.recompute == "auto" else (t.recompute,)
    for lay in layouts(m, c, t, pins):
        M = t.global_batch // (lay.dp * lay.micro_batch)
        for name, chunks in variants:
            for rc in recomputes:
                yield Candidate(lay, name, chunks, rc, M)
