"""Lower bounds on a candidate's step time from its placement and item counts, without
simulating it."""

from __future__ import annotations

import math

from ..components import COMPUTE_PARTS
from ..ir import Op, Pair, Placement
from .footprint import memory_model
from .layout import Layout
from .programs import Shape
from .specs import Model, Training


def _ends(f, shapes: list[Shape], arg) -> tuple:
    """f at the first and last sample point (the same when M is simulated itself: then
    computed once)."""
    first = f(shapes[0], arg)
    return first, (first if len(shapes) == 1 else f(shapes[-1], arg))


def affine(a: float, b: float, k: float) -> float:
    """a + k (b - a): a total at M from two sample points (see ``sample_points``)."""
    return a + k * (b - a)


def rank_stages(pl: Placement) -> list[set[int]]:
    """Per rank, the stages (positions along the routes that carry micro-batches) it runs."""
    out: list[set[int]] = [set() for _ in range(pl.pp)]
    for ri in set(pl.route_of):
        for st, (r, _) in enumerate(pl.routes[ri]):
            out[r].add(st)
    return out


def static_bytes(held: tuple[tuple[int, ...], ...], mm) -> list[float]:
    """Per rank, its parameters, gradients and optimizer states: the model stages it holds
    (``Placement.held``), chunk by chunk; without the gradients where a stage holds them
    from its first backward to its last only (``MemoryModel.grads_in_backward``: the
    activation side's ``programs.memory_peaks`` floors them)."""
    keep = 0.0 if mm.grads_in_backward else 1.0
    return [sum(p + keep * g + o for p, g, o in map(mm.stage_bytes, stages)) for stages in held]


#: the ops and pairs the bounds ask a cost model about, made once: a plan asks for
#: hundreds of thousands (an Op is a frozen dataclass, a microsecond each to make)
_OPS = {(k, ch): Op(k, ch, 0) for k in ("F", "B", "W", "BW") for ch in range(2)}
_PAIRS = {k: Pair(_OPS["F", 0], Op(k, 0, 1)) for k in ("B", "BW")}
_LONE = {k: op for (k, ch), op in _OPS.items() if ch == 0}  # by kind alone: ``item_time``'s


def _op(kind: str, chunk: int = 0) -> Op:
    return _OPS.get((kind, chunk)) or Op(kind, chunk, 0)


def item_time(key: tuple, costs) -> float:
    if key[0] == "pair":  # ("pair", backward kind, f stage, b stage)
        pair = _PAIRS.get(key[1]) or Pair(_op("F"), Op(key[1], 0, 1))
        return costs.pair_time(pair, key[2], key[3])
    return costs.op_time(_LONE.get(key[0]) or _op(key[0]), key[1])


def rank_work(counts: list[dict], costs, times: dict | None = None) -> tuple[list[float], list[float]]:
    """Per rank, the summed time of its items, and of its lone W items among them
    (``times``: item times of this cost model already known, and filled in)."""
    times = {} if times is None else times
    known = times.get  # one look-up a key: the search sums hundreds of thousands
    busy, w = [], []
    for rank in counts:
        total = weights = 0.0
        for key, n in rank.items():
            x = known(key)
            if x is None:
                x = times[key] = item_time(key, costs)
            total += n * x
            if key[0] == "W":
                weights += n * x
        busy.append(total)
        w.append(weights)
    return busy, w


#: what the floors below give up against the exact sums, relatively: more than their
#: rounding (1e-16 a term) can take, so a floor never passes the bound it stands for
SLACK = 1e-9


def compute_floor(costs, kind: str, stage: int) -> float | None:
    """Seconds of compute in one op (F, B or the fused BW) on one stage of a component
    cost model (``ComponentCosts.compute_time``), or None for another cost model. An item
    holding the op lasts at least that: its compute stream runs the op's compute parts
    one after another at no more than full rate (``components.run_streams``), an
    overlapped pair's parts too."""
    compute = getattr(costs, "compute_time", None)
    if compute is None or kind not in COMPUTE_PARTS:
        return None
    return compute(kind, stage)


def work_floor(shapes: list[Shape], k: float, costs, times: dict, floors: dict) -> tuple[list[float], list[float]] | None:
    """Per rank, a floor under ``rank_work``'s busy time at M (the affine line through the
    sample points, per key) and a ceiling over its lone W time, without the plans of
    overlapped pairs: a pair costs at least its two ops' compute (``compute_floor``),
    lone items their exact times (``times``: this cost model's, filled in); None when
    the order has no pairs (then the exact sums cost no more) or the model is not
    componentwise. ``floors`` keeps compute floors per (kind, stage), and per pair key the
    sum of its two."""
    first, last = shapes[0].counts, shapes[-1].counts
    if not any(key[0] == "pair" for rank in last for key in rank):
        return None
    busy, w = [], []
    known = times.get  # one look-up a key: the search sums hundreds of thousands
    for c1, c2 in zip(first, last):
        total = weights = 0.0
        for key in [*c2, *(x for x in c1 if x not in c2)]:
            a = c1.get(key, 0)
            n = a + k * (c2.get(key, 0) - a)  # ``affine``, written out: called for every key
            if key[0] == "pair":  # ("pair", backward kind, f stage, b stage)
                pair = floors.get(key)  # its two ops' floors summed, kept beside them
                if pair is None:
                    for part in (("F", key[2]), (key[1], key[3])):
                        if part not in floors:
                            floors[part] = compute_floor(costs, *part)
                        if floors[part] is None:
                            return None
                    pair = floors[key] = floors["F", key[2]] + floors[key[1], key[3]]
                total += n * pair
                continue
            x = known(key)
            if x is None:
                x = times[key] = item_time(key, costs)
            total += n * x
            if key[0] == "W":
                weights += n * x
        busy.append(total * (1 - SLACK))
        w.append(weights * (1 + SLACK))
    return busy, w


def unpaired_work(pl: Placement, costs) -> tuple[list[float], list[float]]:
    """Per rank, the forward and backward (B + W, or the fused BW if shorter) of all the
    micro-batches its chunks serve, and no W counted as deferrable: the work of a schedule
    without overlapped pairs, from its placement alone."""
    per_route = [pl.route_of.count(ri) for ri in range(len(pl.routes))]
    work = [0.0] * pl.pp
    for ri, route in enumerate(pl.routes):
        for st, (r, ch) in enumerate(route):
            t = {k: costs.op_time(_op(k, ch), st) for k in ("F", "B", "W", "BW")}
            work[r] += per_route[ri] * (t["F"] + min(t["B"] + t["W"], t["BW"]))
    return work, work


def stage_passes(costs, stages: int) -> tuple[list[float], list[float]]:
    """Per stage, its forward and its shortest backward (B, or the fused BW if shorter):
    what ``pipeline_bound`` fills and drains with, the same for every placement of a cost
    model (the search computes them once per cost model)."""
    every = getattr(costs, "pass_times", None)  # a component model's, every stage at once
    got = every(stages) if every is not None else None
    if got is not None:
        return got
    f, b, bw = _op("F"), _op("B"), _op("BW")
    fwd = [costs.op_time(f, s) for s in range(stages)]
    bwd = [min(costs.op_time(b, s), costs.op_time(bw, s)) for s in range(stages)]
    return fwd, bwd


def pipeline_bound(
    pl: Placement, costs, busy: list[float], w: list[float], passes: tuple | None = None, ends: tuple | None = None
) -> float:
    """No schedule on this placement is shorter: for each rank, the fill before its first
    item, its busy time, and the drain after its last backward.

    A rank's first item holds a forward of the first stage it serves on some route (any
    other op waits for one of its own), so it starts no earlier than the forwards of the
    route's earlier stages, all on other ranks, and their P2P hops. Its last item holding a
    backward is at that first stage too (the backward runs back through the rank's later
    stages first), and the backward must still run through the earlier stages: a drain,
    less the lone W items that may run after it. An item holding an op lasts at least the
    op alone: a pair runs each of its ops' parts in sequence at no more than full rate.
    ``ends``: ``fill_drain`` of the placement, where the caller keeps it."""
    fill, drain = ends or fill_drain(pl, costs, passes)
    # max(0.0, x) written out: this runs for every rank of every bound
    return max(f + b + (d - x if d - x > 0.0 else 0.0) for f, b, d, x in zip(fill, busy, drain, w) if f < math.inf)


def fill_drain(pl: Placement, costs, passes: tuple | None = None) -> tuple[list[float], list[float]]:
    """Per rank, ``pipeline_bound``'s fill before its first item and drain after its last
    backward: the same for every order on the placement under one cost model."""
    fwd, bwd = passes or stage_passes(costs, pl.stages)
    fill = [math.inf] * pl.pp
    drain = [math.inf] * pl.pp
    used = set(pl.route_of)
    for ri, route in enumerate(pl.routes):
        if ri not in used:
            continue
        f = b = 0.0
        seen: set[int] = set()
        for st, (r, _) in enumerate(route):
            if r not in seen:
                seen.add(r)
                fill[r], drain[r] = min(fill[r], f), min(drain[r], b)
            nxt = route[st + 1][0] if st + 1 < len(route) else r
            f += fwd[st] + (costs.p2p_time(r, nxt) if nxt != r else 0.0)
            b += bwd[st] + (costs.p2p_time(nxt, r) if nxt != r else 0.0)
    return fill, drain


def static_floor(m: Model, t: Training, lay: Layout) -> float:
    """Bytes of parameters, gradients and optimizer states the fullest rank of this layout
    holds at least, whatever the stage split and schedule: the layout's stages together
    hold the whole model's (each layer's bytes and the embedding's and head's are the same
    wherever they sit; a placement holding a stage twice only adds), and some one of the
    pp ranks holds at least their mean. A layout whose floor exceeds the usable memory is
    refused before any of its candidates builds a cost model."""
    mm = memory_model(m, t, lay, lay.pp, "none")
    return sum(static_bytes(tuple((s,) for s in range(len(mm.params))), mm)) / lay.pp
