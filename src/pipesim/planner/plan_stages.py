"""The stages of one plan of the ranking as the search split and simulated them: which
layers, the embedding, the output head and the multi-token-prediction (MTP) modules sit on
which stage and rank, each with its time per micro-batch; and the plan's op order and
placement built again, as the trainers' settings need them."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PipesimError
from ..ir import Op, Placement, Schedule
from ..schedules import REGISTRY, build
from .candidates import COST_OPTIONS
from .results import Plan, Result
from .split import ranges_of
from .stages import component_costs, stage_parts


@dataclass(frozen=True)
class Part:
    """One model stage: what it holds, where it lives, and its time per micro-batch."""

    stage: int
    ranks: tuple[int, ...]  # one per model copy that holds it (two for DualPipe)
    layers: range
    embedding: bool
    head: bool
    mtp: int
    seconds: float  # F + B + W of one micro-batch, compute and communication

    def to_dict(self) -> dict:
        return {
            "stage": self.stage,
            "ranks": list(self.ranks),
            "layers": [self.layers.start, self.layers.stop - 1] if self.layers else [],
            "embedding": self.embedding,
            "head": self.head,
            "mtp": self.mtp,
            "seconds_per_microbatch": self.seconds,
        }


def pick(plan: Plan, n: int = 1) -> Result:
    """The n-th plan of the ranking (1: the recommendation)."""
    if not plan.results:
        raise PipesimError("--layout: nothing fits, so there is no plan to run")
    if not 1 <= n <= len(plan.results):
        raise PipesimError(f"--layout {n}: choose 1 (the recommendation) to {len(plan.results)}, the plans that fit")
    return plan.results[n - 1]


def built_order(r: Result) -> Schedule | None:
    """The result's op order, built again with what the search built it with; None for
    a result made by hand of a family that orders by the candidate's costs (zb-auto)."""
    cand = r.candidate
    opts = r.options
    if opts is None:
        if set(COST_OPTIONS) <= REGISTRY[cand.schedule].options.keys():
            return None
        opts = {"chunks": cand.chunks} if cand.chunks is not None else {}
    return build(cand.schedule, cand.layout.pp, cand.microbatches, **opts)


def placement_of(r: Result) -> Placement:
    cand = r.candidate
    fam = REGISTRY[cand.schedule]
    chunks = cand.chunks or (2 if fam.placement in ("v", "dual") else fam.options.get("chunks", 1))
    return Placement.standard(fam.placement, cand.layout.pp, cand.microbatches, chunks)


def stage_split(plan: Plan, r: Result) -> list[Part]:
    """The model's stages for result ``r`` as the planner split and simulated them
    (``stages.stage_parts``: balanced over what each rank holds, or the same number of
    layers a stage with ``stage_split = "even"``), the embedding on the first stage, the
    output head and MTP modules on the last, each with its F + B + W per micro-batch
    under the same cost model."""
    m, c, t = plan.model, plan.cluster, plan.training
    lay, rc = r.candidate.layout, r.candidate.recompute
    pl = placement_of(r)
    if r.stage_layers is None:  # a result made by hand, not by the search
        parts = stage_parts(m, c, t, lay, pl.stages, rc, pl.held())
    else:
        parts = ranges_of(list(r.stage_layers))
    costs = component_costs(m, c, t, lay, pl.stages, rc, parts)
    holders = [tuple(sorted({route[s][0] for route in pl.routes})) for s in range(pl.stages)]
    out = []
    for s, (rng, ranks) in enumerate(zip(parts, holders)):
        last = s == pl.stages - 1
        seconds = sum(costs.op_time(Op(kind, 0, 0), s) for kind in "FBW")
        out.append(Part(s, ranks, rng, s == 0, last, m.mtp_layers if last else 0, seconds))
    return out
