"""Each pipeline rank against its own usable memory (``device_memory.usable_on_rank``):
which rank is furthest over it, and the refusal that names that rank.

The last stage's rank holds the loss's transient and the logits, each rank its own
receive buffers and FSDP pools, so ranks differ in what they can fill: a verdict on the
largest peak against one budget would refuse layouts whose every rank fits its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .candidates import Candidate
from .device_memory import Usable
from .results import GB, Result


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
    r = max(range(len(needs)), key=lambda r: needs[r] - budgets[r])
    return r if needs[r] - budgets[r] > 1e-9 * abs(budgets[r]) else None


def refused(cand: Candidate, need: str, r: int, budgets: Budgets, **kw) -> Result:
    """A candidate refused for rank ``r``, which needs ``need`` against its own usable
    memory: the reason names the rank, the result holds its usable memory."""
    why = f"{need} on rank {r} > {budgets.bytes[r] / GB:.0f} GB usable there"
    return Result(cand, False, why, rank=r, usable=budgets.usable(r), **kw)
