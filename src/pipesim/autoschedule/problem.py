"""The scheduling problem the automatic schedulers solve, and the plan they return.

A ``Problem`` is plain data: where each stage lives (a ``Placement``), what each op costs
per stage, the P2P latency, whether the backward is split into B and W, and the memory
model. Memory is counted in chunk-activations (one micro-batch through one chunk): an F
adds 1, a B adds ``w_memory - 1`` and its W frees ``w_memory`` (the Zero Bubble paper's
M_B and M_W); a fused BW frees all of it. A ``w_memory`` above 1 is a B that adds memory:
under tensor and sequence parallelism the W keeps each weighted multiply's input and
output gradient, more than the activation (``memory.MemoryModel.w_share``,
``planner.weight_grad_saved``). ``memory_limit`` caps what a rank may hold at every point
of its order: after each F, and after each B too. ``Problem.deltas`` is the one count
every builder, the peak and the exact model read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..costs import Costs
from ..errors import PipesimError
from ..ir import KINDS, Op, Placement, RankTable, Schedule

F, B, W = 0, 1, 2
KIND = ("F", "B", "W")


@dataclass(frozen=True)
class Problem:
    placement: Placement
    f: tuple[float, ...]  # per stage
    b: tuple[float, ...]  # per stage: B when split, the fused BW otherwise
    w: tuple[float, ...]  # per stage (unused when not split)
    comm: float = 0.0
    split: bool = True
    memory_limit: float | None = None  # per rank, in chunk-activations; None: no limit
    w_memory: float = 1.0  # what the W keeps from its B to its end, in activations (above 1: B adds memory)

    @classmethod
    def of(
        cls,
        placement: Placement,
        costs: Costs,
        split: bool = True,
        memory_limit: float | None = None,
        w_memory: float = 1.0,
    ) -> Problem:
        """Read per-stage costs off a ``Costs`` (uniform or per stage)."""
        S = placement.stages

        def per_stage(kind: str) -> tuple[float, ...]:
            return tuple(costs.op_time(Op(kind, 0, 0), s) for s in range(S))

        b = per_stage("B") if split else per_stage("BW")
        return cls(placement, per_stage("F"), b, per_stage("W"), float(costs.comm), split, memory_limit, w_memory)

    @property
    def deltas(self) -> tuple[float, float, float]:
        """What an F, a B and a W add to their rank's live activations: the F its
        activation (+1, at its start), the B ``w_memory - 1`` at its end (it frees the
        activation but for what the W keeps, and adds what the W keeps beyond it), the W
        ``-w_memory`` at its end; without the split, the fused BW -1 (and no W). This is
        the Zero Bubble fork's own count: its timer measures the bytes an F and a B
        allocate and books the W as freeing the rest (sail-sg/zero-bubble-pipeline-
        parallelism 39f2c186, runtime.py:505 and :587, timer.py:33), and its scheduler
        holds a B, with whatever it measured, under the cap as it does an F, running Ws
        first (scheduler/zb.py:259-264)."""
        if not self.split:
            return (1.0, -1.0, 0.0)
        return (1.0, self.w_memory - 1.0, -self.w_memory)

    @property
    def b_room(self) -> float:
        """The room a B needs above what its rank holds: what it adds, 0 when it frees.
        A rank must keep it free whenever no W of its own is pending (a W frees
        ``w_memory``, at least the B's growth), or its next B could never run."""
        return max(0.0, self.deltas[B])

    def peak_of(self, kinds, limit: float = float("inf")) -> float:
        """The most live activations one rank's order (its op kinds in turn) holds,
        counted after every op: an F's +1 at its start, a B's and a W's change at their
        ends, which on one rank come in the order's turn. Stops early once above
        ``limit`` (returning that first excess)."""
        d = self.deltas
        live = peak = 0.0
        for kind in kinds:
            live += d[kind]
            if live > peak:
                peak = live
                if peak > limit:
                    break
        return peak

    def fits(self, kinds) -> bool:
        """Does one rank's order (its op kinds in turn) stay within ``memory_limit``?"""
        if self.memory_limit is None:
            return True
        limit = self.memory_limit + 1e-9
        return self.peak_of(kinds, limit) <= limit

    def cost(self, kind: int, stage: int) -> float:
        return (self.f, self.b, self.w)[kind][stage]

    def works(self) -> list[float]:
        """Total compute of each rank: a lower bound on its span. One pass over every
        micro-batch's route for all ranks (each rank's sum in the same order as its own
        pass would take), not one pass a rank: pp x M x stages steps for ZB-V at pp32."""
        pl = self.placement
        totals = [0.0] * pl.pp
        for mb in range(pl.microbatches):
            for s, (r, _) in enumerate(pl.routes[pl.route_of[mb]]):
                totals[r] += self.f[s] + self.b[s] + (self.w[s] if self.split else 0.0)
        return totals


def input_latencies(prob: Problem, rank_of: list[list[int]]) -> tuple[list[list[float]], list[list[float]]]:
    """The P2P latency the input of each (mb, stage) pays, by ``[mb][stage]`` (``rank_of``
    gives each one's rank): a forward's from stage s - 1 and a backward's from s + 1; none
    from the same rank, none at either end."""
    S, comm = prob.placement.stages, prob.comm
    prev = [[0.0 if s == 0 or row[s - 1] == row[s] else comm for s in range(S)] for row in rank_of]
    after = [[0.0 if s == S - 1 or row[s + 1] == row[s] else comm for s in range(S)] for row in rank_of]
    return prev, after


@dataclass(frozen=True)
class Plan:
    """A searched schedule: per rank, (kind, chunk, mb, start, end) in execution order,
    with how it was found. ``optimal`` is True only when a solver proved it; ``bound`` is
    the best proven lower bound on the longest span, when known."""

    problem: Problem
    ranks: tuple[tuple[tuple[int, int, int, float, float], ...], ...]
    method: str
    optimal: bool | None = None
    bound: float | None = None
    seconds: float = 0.0
    info: dict = field(default_factory=dict, compare=False)

    @property
    def spans(self) -> list[float]:
        return [(ops[-1][4] - ops[0][3]) if ops else 0.0 for ops in self.ranks]

    @property
    def span(self) -> float:
        return max(self.spans, default=0.0)

    def peak_memory(self) -> list[float]:
        """Most chunk-activations held at once per rank (``Problem.peak_of``)."""
        return [self.problem.peak_of(op[0] for op in ops) for ops in self.ranks]

    def kind_codes(self) -> np.ndarray:
        """The plan's kinds (F, B, W) as indices into ``ir.KINDS``: B is the fused BW
        where the backward is not split."""
        return np.array([KINDS.index("F"), KINDS.index("B" if self.problem.split else "BW"), KINDS.index("W")], np.int8)

    def schedule(self, name: str) -> Schedule:
        """The order as a schedule, in the array form (``RankTable``): a searched order
        has up to hundreds of thousands of ops, and an Op object each cost more than the
        rest of turning it into a program."""
        code = self.kind_codes()
        rows = []
        for ops in self.ranks:
            cols = np.array([op[:3] for op in ops], np.int32).reshape(len(ops), 3)
            rows.append((code[cols[:, 0]], cols[:, 1], cols[:, 2]))
        pl = self.problem.placement
        return Schedule(name, pl.pp, pl.microbatches, pl, RankTable.stack(rows))


def check_memory_limit(limit: float | None, needed: int, what: str) -> None:
    if limit is not None and limit < needed:
        raise PipesimError(f"{what} needs a memory limit of at least {needed} activations per rank, got {limit:g}")
