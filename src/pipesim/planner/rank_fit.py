"""Each pipeline rank against its own usable memory (``device_memory.usable_on_rank``):
which rank is furthest over it, and the refusal that names that rank.

The last stage's rank holds the loss's transient and the logits, each rank its own
receive buffers and FSDP pools, so ranks differ in what they can fill: a verdict on the
largest peak against one budget would refuse layouts whose every rank fits its own."""

from __future__ import annotations

from .candidates import Candidate
from .device_memory import Usable
from .results import GB, Result


def over(needs: list[float], budgets: list[float]) -> int | None:
    """The rank furthest over its own usable memory (``needs[r]`` against ``budgets[r]``,
    to rounding: 1e-9 of it), or None where every rank fits."""
    r = max(range(len(needs)), key=lambda r: needs[r] - budgets[r])
    return r if needs[r] - budgets[r] > 1e-9 * abs(budgets[r]) else None


def refused(cand: Candidate, need: str, r: int, usables: tuple[Usable, ...], **kw) -> Result:
    """A candidate refused for rank ``r``, which needs ``need`` against its own usable
    memory: the reason names the rank, the result holds its usable memory."""
    return Result(
        cand, False, f"{need} on rank {r} > {usables[r].bytes / GB:.0f} GB usable there", rank=r, usable=usables[r], **kw
    )
