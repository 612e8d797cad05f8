"""Cost models: how long an op, an overlapped pair or a transfer takes.

A cost model is any object with the three methods of ``CostModel``. ``Costs`` covers the
two simple levels of the design: uniform costs (the papers' closed forms live there) and
per-stage costs (stragglers, embedding and head stages), where each of F, B, W may be one
number or one number per model stage. Stage indices are positions along a route, so they
mean the same layers on every route.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Protocol

from .errors import PipesimError
from .inputs import MAX_VALUE, number
from .ir import Op, Pair
from .schedule_checks import shown

PerStage = float | Sequence[float]


def at_stage(v: PerStage, stage: int, what: str) -> float:
    """``v`` at ``stage``: one number serves every stage, a sequence gives one per stage."""
    # the planner's memory and cost models hold tuples of plain floats, read about a
    # million times a search: those are answered without the general checks below
    # (the same float: ``float`` of a float is itself)
    if type(v) is tuple and 0 <= stage < len(v):
        x = v[stage]
        if type(x) is float:
            return x
    if isinstance(v, (int, float)):
        return float(v)
    if stage >= len(v):
        raise PipesimError(f"{what} list {len(v)} stages, but the schedule has a stage {stage}")
    return float(v[stage])


def _cost(value: object, name: str) -> float:
    """One cost, checked as the --f flag is: a finite number from 0 to ``MAX_VALUE``.
    numpy's numbers count (a per-stage list may be an array's). A Python value that is no
    number is said with its type, as build() says pp=True ("got true" read like a file's
    word; zb-auto's costs come here too)."""
    if isinstance(value, Real) and not isinstance(value, (bool, int, float)):
        value = float(value)
    return number(value, f"Costs {name}", 0, MAX_VALUE, show=shown)


class CostModel(Protocol):
    def op_time(self, op: Op, stage: int) -> float: ...

    def pair_time(self, pair: Pair, f_stage: int, b_stage: int) -> float: ...

    def p2p_time(self, src: int, dst: int) -> float: ...

    def to_dict(self) -> dict: ...

    def describe(self) -> str: ...

    def scaled(self, k: float) -> CostModel: ...


def item_time(costs: CostModel, placement, rank: int, item: Op | Pair) -> float:
    """Seconds ``costs`` give ``item`` on ``rank`` under ``placement``: an op at its
    stage, a pair at its forward's and its backward's (what a synthetic run sleeps, and
    what its report sets against the time each item took)."""
    if isinstance(item, Pair):
        f, b = item.forward, item.backward
        return costs.pair_time(item, placement.stage_of(rank, f.chunk, f.mb), placement.stage_of(rank, b.chunk, b.mb))
    return costs.op_time(item, placement.stage_of(rank, item.chunk, item.mb))


def chunk_costs(costs: CostModel, schedule, per: str = "chunk") -> CostModel:
    """The cost model for ``schedule``'s chunks. ``per="chunk"``: the costs are given per
    chunk, whatever its size (the papers' convention). ``per="stage"``: they are given per
    1F1B stage (1/pp of the model), and a chunk holding 1/stages of the model costs
    pp/stages of that; so V and interleaved schedules compare with 1F1B on the same model.
    Communication between ranks does not shrink with the chunk."""
    if per not in ("chunk", "stage"):
        raise PipesimError(f"costs are per chunk or per stage, got {per!r}")
    stages = schedule.placement.stages
    if isinstance(costs, Costs):
        costs.check_stages(stages, schedule.name)
    if per == "stage" and stages != schedule.pp:
        return costs.scaled(schedule.pp / stages)
    return costs


@dataclass(frozen=True)
class Costs:
    """F, B (input gradient), W (weight gradient) per chunk, each uniform or per stage.

    ``bw`` is the fused backward (default B + W). ``pair`` is the time of an overlapped
    F&B pair (default: no overlap, the sum of its halves). ``comm`` is the latency of one
    point-to-point transfer between two ranks; it delays the receiver without occupying
    either rank.
    """

    f: PerStage = 1.0
    b: PerStage = 1.0
    w: PerStage = 1.0
    comm: float = 0.0
    bw: PerStage | None = None
    pair: float | None = None

    def __post_init__(self) -> None:
        # each value as the --f flag's check takes it (inputs.number): finite, 0 to
        # MAX_VALUE, no bools or strings. NaN and inf ran to NaN or inf times, True as 1,
        # 1e308 summed past the largest float, and f="1" met a TypeError in a comparison
        for name in ("f", "b", "w", "bw", "comm", "pair"):
            v = getattr(self, name)
            if v is None and name in ("bw", "pair"):
                continue
            if name in ("comm", "pair") or isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
                x = _cost(v, name)
                if not isinstance(v, (int, float)):  # numpy's: stored as the float the methods read
                    object.__setattr__(self, name, x)
                continue
            vals = tuple(_cost(x, name) for x in v)
            if not vals:
                raise PipesimError(f"Costs {name} lists no values; give one number, or one per stage")
            object.__setattr__(self, name, vals)

    @staticmethod
    def _at(v: PerStage, stage: int) -> float:
        return at_stage(v, stage, "per-stage costs")

    def check_stages(self, stages: int, what: str) -> None:
        """A per-stage list gives one value a stage: a longer one would be cut unseen, a
        shorter one fail mid-simulation."""
        for name in ("f", "b", "w", "bw"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, (int, float)) and len(v) != stages:
                raise PipesimError(
                    f"--{name} lists {len(v)} values, but {what} has {stages} stages: give one value, or one per stage"
                )

    def op_time(self, op: Op, stage: int) -> float:
        if op.kind == "F":
            return self._at(self.f, stage)
        if op.kind == "B":
            return self._at(self.b, stage)
        if op.kind == "W":
            return self._at(self.w, stage)
        if self.bw is not None:
            return self._at(self.bw, stage)
        return self._at(self.b, stage) + self._at(self.w, stage)

    def pair_time(self, pair: Pair, f_stage: int, b_stage: int) -> float:
        if self.pair is not None:
            return float(self.pair)
        return self.op_time(pair.forward, f_stage) + self.op_time(pair.backward, b_stage)

    def p2p_time(self, src: int, dst: int) -> float:
        return float(self.comm)

    @property
    def uniform(self) -> bool:
        return all(isinstance(getattr(self, n), (int, float)) or getattr(self, n) is None for n in ("f", "b", "w", "bw"))

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.to_dict().items())

    def scaled(self, k: float) -> Costs:
        """Every compute time times ``k`` (the P2P latency unchanged)."""

        def mul(v):
            if v is None:
                return None
            return v * k if isinstance(v, (int, float)) else tuple(x * k for x in v)

        return Costs(f=mul(self.f), b=mul(self.b), w=mul(self.w), comm=self.comm, bw=mul(self.bw), pair=mul(self.pair))

    def to_dict(self) -> dict:
        def plain(v):
            return list(v) if isinstance(v, tuple) else v

        d = {"f": plain(self.f), "b": plain(self.b), "w": plain(self.w), "comm": self.comm}
        if self.bw is not None:
            d["bw"] = plain(self.bw)
        if self.pair is not None:
            d["pair"] = self.pair
        return d
