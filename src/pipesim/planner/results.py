"""What a search answers: one result per candidate and the plan that ranks them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .candidates import Candidate, Pins
from .specs import Cluster, Model, Training

GB = 1e9


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
    # each pipeline rank is held to its own usable memory (device_memory.usable_on_rank):
    # ``rank`` is the one memory_gb (static_gb for a refusal of static bytes) is of, and
    # ``usable`` its device_memory.Usable: a fit's fullest rank, a refusal's rank furthest
    # over its own; ``room``: a fit's rank with the least room, (rank, peak GB, usable GB)
    rank: int | None = None
    usable: object | None = None
    room: tuple[int, float, float] | None = None

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
    # the families the user named (--schedules, --compare) and by which flags; None: every one
    named: tuple[str, ...] | None = None
    named_by: str = ""

    @property
    def best(self) -> Result | None:
        return self.results[0] if self.results else None

    def best_of(self, schedule: str) -> Result | None:
        return next((r for r in self.results if r.candidate.schedule == schedule), None)
