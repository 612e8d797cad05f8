"""The memory the plan report and ``pipesim memory`` quote beside a peak: the GB a rank of
its layout can fill, what the card loses before tensors fill it and where each part held
back comes from (all from ``device_memory``), and what to change where a rank overflows."""

from __future__ import annotations

from .device_memory import Usable, roomiest
from .results import Plan

GB = 1e9


def _usable(plan: Plan, r) -> Usable:
    """The usable memory result ``r``'s memory was held to: its rank's own
    (``Result.rank``, ``device_memory.usable_on_rank``), or where no rank is named (a
    layout refused on its static floor) the most any rank of the layout has."""
    if r.usable is not None:
        return r.usable
    cand = r.candidate
    return roomiest(plan.model, plan.cluster, plan.training, cand.layout, cand.recompute)


def usable_gb(plan: Plan, r) -> float:
    """GB the rank whose memory result ``r`` quotes can fill (``_usable``)."""
    return _usable(plan, r).bytes / 1e9


def held_text(plan: Plan, r) -> str:
    """What the device's capacity loses before tensors fill it, on the rank whose memory
    result ``r`` quotes (``_usable``)."""
    u = _usable(plan, r)
    parts = ", ".join(f"{name} {b / 1e9:.1f} GB" for name, b in u.held if b)
    where = "" if r.rank is None or r.candidate.layout.pp == 1 else f"on pipeline rank {r.rank}, "
    return f"{where}the card's {u.capacity / 1e9:.1f} GB less {parts}"


def usable_dict(u, peak: float) -> dict:
    """A rank's usable memory, what was held back and why, and the room its ``peak`` leaves."""
    held = [{"what": what, "bytes": b, "source": src} for (what, b), src in zip(u.held, u.sources)]
    return {
        "capacity_bytes": u.capacity,
        "held_bytes": dict(u.held),
        "held": held,
        "usable_bytes": u.bytes,
        "room_bytes": u.bytes - peak,
    }


def usable_lines(rows: list[dict], hbm_gb: float) -> list[str]:
    """What each row's worst rank can fill (one line where every rank of every row has
    the same), which rank that is, and where each part held back comes from."""
    same = len({r["usable"]["usable_bytes"] for r in rows} | {b for r in rows for b in r["rank_usable_bytes"]}) == 1
    lines = []
    for r in rows[:1] if same else rows:
        u = r["usable"]
        held = ", ".join(f"{h['what']} {h['bytes'] / GB:.1f}" for h in u["held"] if h["bytes"])
        where = "" if same else f" on {r['schedule']}'s rank {r['rank']}"
        lines.append(f"  usable {u['usable_bytes'] / GB:.1f} GB of the card's {hbm_gb:.1f} GB{where} (less {held} GB)")
    sources = {h["what"].split(" (")[0]: h["source"] for r in rows for h in r["usable"]["held"] if h["bytes"]}
    lines += [f"    {what}: {source}" for what, source in sources.items()]
    ranks = ", ".join(
        f"{r['schedule']} rank {r['rank']} ({r['peak_gb']:.1f} of {r['usable']['usable_bytes'] / GB:.1f} GB)" for r in rows
    )
    lines.append(f"  worst rank, the least room under its own usable memory: {ranks}")
    return lines


def no_fit_line(row: dict, micro_batch: int, recompute: str, experts: bool = True) -> str:
    """What does not fit, and which knobs shrink the part that overflows (only those not
    at their end already: no smaller micro-batch than one sequence, nothing past full;
    --ep only for a model with ``experts``, which memory refuses for a dense one)."""
    usable_gb = row["usable"]["usable_bytes"] / GB
    head = (
        f"{row['schedule']} does not fit: its worst rank (rank {row['rank']}) needs {row['peak_gb']:.1f} GB, "
        f"{usable_gb:.1f} GB usable there; "
    )
    if usable_gb <= 0:
        return head + "what the card holds back (listed above) takes all of it: shrink the largest part held back"
    if row["static_gb"] > usable_gb:
        return head + (
            f"its parameters, gradients and optimizer states alone take {row['static_gb']:.1f} GB: "
            f"shard them over more GPUs (--pp, --tp, {'--ep, ' if experts else ''}or --zero with more --dp)"
        )
    knobs = ["lower --micro-batch-size"] if micro_batch > 1 else []
    knobs += ["lower --seq"] + (["recompute more (--recompute full)"] if recompute != "full" else [])
    knobs += ["split the sequence (--cp) or the layers (--pp, --tp)"]
    return head + f"its activations take {row['activations_gb']:.1f} GB: {', '.join(knobs[:-1])}, or {knobs[-1]}"
