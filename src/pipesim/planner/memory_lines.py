"""The memory the report quotes beside a result's peak: the GB a rank of its layout can
fill, and what the card loses before tensors fill it (both from ``device_memory``)."""

from __future__ import annotations

from .device_memory import usable_for
from .results import Plan


def usable_gb(plan: Plan, r) -> float:
    """GB a rank of result ``r``'s layout can fill (``device_memory``)."""
    cand = r.candidate
    return usable_for(plan.model, plan.cluster, plan.training, cand.layout, cand.recompute).bytes / 1e9


def held_text(plan: Plan, r) -> str:
    """What the device's capacity loses before tensors fill it, for ``r``'s layout."""
    cand = r.candidate
    u = usable_for(plan.model, plan.cluster, plan.training, cand.layout, cand.recompute)
    parts = ", ".join(f"{name} {b / 1e9:.1f} GB" for name, b in u.held if b)
    return f"the card's {u.capacity / 1e9:.1f} GB less {parts}"
