"""A step's time as GPU-hours per million training tokens, the unit budgets are kept in.

One pipeline of ``gpus`` GPUs (pp ranks, each ``tp`` GPUs wide) runs M micro-batches of
``micro_batch_size`` sequences of ``seq`` tokens per step. Data-parallel replicas
multiply both the GPUs and the tokens, so they cancel: the figure depends on one
pipeline alone. The cost model's time unit is given in seconds (``SECONDS``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PipesimError

SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
HOURS = "GPU-h per 1M tokens"  # the table's column


@dataclass(frozen=True)
class PerToken:
    seq: int  # tokens per sequence
    micro_batch_size: int  # sequences per micro-batch
    seconds_per_unit: float  # one cost-model time unit, in seconds
    gpus: int  # GPUs of one pipeline (pp x tp)

    def __post_init__(self) -> None:
        for name in ("seq", "micro_batch_size", "gpus"):
            if getattr(self, name) < 1:
                raise PipesimError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.seconds_per_unit > 0:
            raise PipesimError(f"the time unit must be > 0 seconds, got {self.seconds_per_unit}")

    def tokens_per_step(self, microbatches: int) -> int:
        return microbatches * self.micro_batch_size * self.seq

    def gpu_hours_per_million_tokens(self, makespan: float, microbatches: int) -> float:
        """GPU-hours one million tokens take at ``makespan`` (cost-model units) per step."""
        hours = self.gpus * makespan * self.seconds_per_unit / 3600
        return hours / self.tokens_per_step(microbatches) * 1e6

    def table(self, makespans: list[tuple[str, float]], microbatches: int) -> dict[str, dict[str, float]]:
        """Per schedule (name, makespan), in order: GPU-hours per million tokens and the
        difference against the first."""
        out: dict[str, dict[str, float]] = {}
        for name, makespan in makespans:
            h = self.gpu_hours_per_million_tokens(makespan, microbatches)
            first = out[makespans[0][0]][HOURS] if out else h
            out[name] = {HOURS: h, f"vs {makespans[0][0]}": h - first}
        return out

    def describe(self, table: dict[str, dict[str, float]], microbatches: int) -> str:
        """One line: the step in tokens and GPUs, and each schedule against the first."""
        head = (
            f"per million tokens: {self.tokens_per_step(microbatches)} tokens a step (M={microbatches} x "
            f"{self.micro_batch_size} x {self.seq}) on {self.gpus} GPUs a pipeline, one time unit = {self.seconds_per_unit:g} s"
        )
        names = list(table)
        if len(names) < 2:
            return head
        first, base = names[0], table[names[0]][HOURS]
        diffs = ", ".join(f"{n} {table[n][f'vs {first}']:+.4g} GPU-h ({table[n][f'vs {first}'] / base:+.1%})" for n in names[1:])
        return f"{head}; against {first}: {diffs}"

    def to_dict(self, microbatches: int) -> dict:
        return {
            "seq": self.seq,
            "micro_batch_size": self.micro_batch_size,
            "seconds_per_unit": self.seconds_per_unit,
            "gpus_per_pipeline": self.gpus,
            "tokens_per_step": self.tokens_per_step(microbatches),
        }
