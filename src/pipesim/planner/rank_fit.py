"""Each pipeline rank against its own usable memory (``device_memory.usable_on_rank``):
which rank is furthest over it, the refusal that names that rank, and of many refusals
the one least over its rank's memory (the closest miss, each family's verdict).

The last stage's rank holds the loss's transient and the logits, each rank its own
receive buffers and FSDP pools, so ranks differ in what they can fill: a verdict on the
largest peak against one budget would refuse layouts whose every rank fits its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .candidates import Candidate
from .device_memory import Usable
from .memory_lines import usable_gb
from .results import GB, Plan, Result


@dataclass(frozen=True, eq=False)
class Budgets:
    """Each rank's usable bytes for one placement, split and micro-batch count, with the
    rank's whole ``Usable`` (what was held back, and why) built only for a rank a verdict
    names: thousands of candidates are held to their budgets, a few hundred name a rank,
    and every rank's ``Usable`` kept with every candidate took tens of MB in a wide search."""

    bytes: list[float]
    usable: Callable[[int], Usable]  # rank -> its device_memory.usable_on_rank


def over(needs: list[float], budgets: list[float]) -> int | None:
    """The rank furthest over its own usable memory (``needs[r]`` against ``budgets[r]``,
    to rounding: 1e-9 of it), or None where every rank fits."""
    gaps = [n - b for n, b in zip(needs, budgets)]
    r = gaps.index(max(gaps))  # the first of the furthest over, as max by key would give
    return r if gaps[r] > 1e-9 * abs(budgets[r]) else None


def digits(need: float, usable: float) -> int:
    """The fewest decimals (up to 3) that show ``need`` over ``usable``: 80.4 against 80.1
    must not read 80 against 80, nor 79.24 against 79.18 read 79.2 against 79.2."""
    return next((d for d in range(3) if round(need, d) > round(usable, d)), 3)


def refused(cand: Candidate, what: str, need: float, r: int, budgets: Budgets, **kw) -> Result:
    """A candidate refused for rank ``r``, whose ``what`` needs ``need`` bytes against its
    own usable memory: the reason names the rank with both figures in as many digits as
    show the need over, the result holds the rank's usable memory."""
    n = digits(need / GB, budgets.bytes[r] / GB)
    why = f"{what} {need / GB:.{n}f} GB on rank {r} > {budgets.bytes[r] / GB:.{n}f} GB usable there"
    return Result(cand, False, why, rank=r, usable=budgets.usable(r), **kw)


def least_over(plan: Plan, refusals: list[Result]) -> tuple[Result, float, float] | None:
    """Of the refusals for memory, the one whose rank is the fewest bytes over its own
    usable memory, with its need and that memory in GB (``memory_lines.usable_gb``: a
    layout refused on its static floor is held to the most any of its ranks can fill);
    None where none was refused for memory.

    The overflow is absolute, not a share of the rank's budget: it is what a change has
    to free on that rank, and what the knobs free is bytes (a smaller micro-batch, more
    recomputation, more sharding), not a share of what is left. Ranks' budgets differ
    (the last stage's keeps the logits): 1 GB over a last rank's 14 GB is nearer to
    fitting than 3 GB over a first rank's 80, which a share would rank the other way.
    Not the least need either: a rank with little room can be far over with a small need.

    The most a layout's ranks can fill is computed once a layout and recomputation mode:
    a pinned search can refuse thousands of candidates on a few layouts' floors."""
    most: dict[tuple, float] = {}

    def usable(r: Result) -> float:
        if r.usable is not None:
            return usable_gb(plan, r)
        key = (r.candidate.layout, r.candidate.recompute)
        if key not in most:
            most[key] = usable_gb(plan, r)
        return most[key]

    memory = [(r, need, usable(r)) for r in refusals if (need := r.memory_gb or r.static_gb)]
    return min(memory, key=lambda x: x[1] - x[2], default=None)
