"""Which layers each pipeline stage holds: an even count, or balanced by each layer's work
over what each rank holds."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..components import LayerCosts
from ..errors import PipesimError
from .pipeline_layout import is_layout, stage_count

#: stages an even split may have beyond the model's layers: the end stages then hold no
#: layer, only the embedding and the output head. The Zero Bubble authors' Megatron-LM
#: fork (sail-sg/zero-bubble-pipeline-parallelism at 77b9eed9, --allow-padding-num-layers)
#: pads the layer count up to a multiple of the stages and takes the padding off the last
#: chunk, then the first (transformer.py ``get_offset``, ``range(-1, num_padding - 1)``),
#: an empty chunk running a no-op layer; its paper's interleaved runs (one layer per
#: virtual stage, 3 or 4 x pp - 2 layers) have two such chunks. Two keeps the empty
#: stages at the ends, where the fork puts them and where ``partition`` puts the fewer.
PADDED_STAGES = 2


def most_stages(layers: int, stage_split: str) -> int:
    """The most stages ``layers`` layers split into: one layer each when balanced by
    cost, ``PADDED_STAGES`` more under an even split, and a Megatron layout's own count
    (it may leave stages empty: ``E|(t|)*22,L`` is the fork's padding written out)."""
    if is_layout(stage_split):
        return stage_count(stage_split)
    return layers + (PADDED_STAGES if stage_split == "even" else 0)


def partition(layers: int, stages: int, padded: bool = False) -> list[range]:
    """Split layers over stages as evenly as possible; when uneven, the first and last
    stages (which also hold the embedding and the output head) get the fewer layers;
    ``padded`` (an even split, ``most_stages``), none when there are more stages than
    layers."""
    if stages > most_stages(layers, "even" if padded else "balanced"):
        least = stages - PADDED_STAGES if padded else stages
        raise PipesimError(f"{stages} stages need at least {least} layers, the model has {layers}")
    base, extra = divmod(layers, stages)
    sizes = [base] * stages
    order = sorted(range(stages), key=lambda s: (s in (0, stages - 1), s))  # middle stages first
    for s in order[:extra]:
        sizes[s] += 1
    return ranges_of(sizes)


def ranges_of(sizes) -> list[range]:
    """Consecutive layer ranges of the given sizes, from layer 0."""
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out


#: loads within this share of the total work are equal. Splits equal in exact arithmetic
#: (layers of one kind hold equal work, so many splits load the busiest rank alike) differ
#: by rounding, about 1e-16 of the total, and which one wins must not turn on it: ``plan
#: --measured-step`` scales every layer's cost by one factor, and on llama3-8b pp2 x dp8
#: interleaved v4 that chose another of three tied splits at x0.9995 and x0.994 (90.81 s,
#: 90.19 s, 91.34 s simulated). Splits that truly differ differ by a share of a layer.
TIE = 1e-9


def work(c: LayerCosts) -> float:
    """A layer's compute for one micro-batch, forward and backward: what balances stages."""
    return c.forward_compute + c.backward_compute + c.weight_compute


def balanced_partition(
    layer_work: tuple[float, ...],
    first: float,
    last: float,
    stages: int,
    ranks: tuple[tuple[int, ...], ...] | None = None,
    even_out: bool = True,
) -> list[range]:
    """Contiguous layers per stage, at least one each, where the first stage also carries
    ``first`` (the embedding) and the last ``last`` (the output head, the loss and any MTP
    modules): the end stages take fewer layers (Llama 3 drops one from each for this
    reason) and the middle ones share the rest evenly. The end sizes chosen minimise the
    busiest rank's work, a rank holding the stages ``ranks`` lists (one stage each by
    default; DualPipe's rank 0 holds both ends). Then, unless ``even_out`` is off, single
    layers move to even out the ranks (``_even_out_ranks``).

    A search asks for the same split many times: layouts whose layers cost the same, and
    each placement with and without the moves. The splits are kept by their inputs (a few
    thousand; they are small), so each is worked out once."""
    n = len(layer_work)
    if stages > n:
        raise PipesimError(f"{stages} stages need at least {stages} layers, the model has {n}")
    groups = tuple(map(tuple, ranks)) if ranks else tuple((s,) for s in range(stages))
    args = (tuple(layer_work), first, last, stages, groups)
    return ranges_of(_evened(*args) if even_out else _end_sizes(*args))


@lru_cache(maxsize=4096)
def _evened(layer_work: tuple[float, ...], first: float, last: float, stages: int, groups) -> tuple[int, ...]:
    """``_end_sizes`` with single layers moved to even out the ranks."""
    return tuple(_even_out_ranks(list(_end_sizes(layer_work, first, last, stages, groups)), layer_work, first, last, groups))


@lru_cache(maxsize=4096)
def _end_sizes(layer_work: tuple[float, ...], first: float, last: float, stages: int, groups) -> tuple[int, ...]:
    """The layers per stage with the end stages' sizes that load the busiest rank least
    and the middle stages even (``balanced_partition``)."""
    options, starts, ends = _options(len(layer_work), stages)
    # every option at once (a deep model on few stages has thousands): stage loads from
    # prefix sums, rank loads through which stages each rank holds
    prefix = np.concatenate(([0.0], np.cumsum(layer_work)))
    loads = prefix[ends] - prefix[starts]
    loads[:, 0] += first
    loads[:, -1] += last
    holds = _holds(groups, stages)
    rank_loads = loads if holds is None else loads @ holds
    # the busiest rank, then the slowest stage, then the most even ranks (the sum of squared
    # rank loads, over the total to keep it a load), each within TIE of the total; of splits
    # equal in all three the first listed: the fewest layers on the first stage (which keeps
    # the most micro-batches' activations in the 1F1B family), then on the last. Tied splits
    # do simulate apart, with no rule of their sizes that orders them: llama3-8b above has 171
    # that run, at 89.8-97.9 s (median 90.8 s; this rule's 90.76 s); choosing among them
    # would take the simulator.
    scale = prefix[-1] + first + last
    keep = np.ones(len(options), dtype=bool)
    keys = (
        lambda: rank_loads.max(axis=1),
        lambda: loads.max(axis=1),
        lambda: np.square(rank_loads).sum(axis=1) / scale,
    )
    for key_of in keys:  # each worked out only while splits are still tied (one left stays)
        key = key_of()
        keep &= key <= key[keep].min() + TIE * scale
        if np.count_nonzero(keep) == 1:
            break
    return options[int(np.flatnonzero(keep)[0])]


@lru_cache(maxsize=256)
def _holds(groups: tuple[tuple[int, ...], ...], stages: int) -> np.ndarray | None:
    """Per stage and rank, how many copies of the stage the rank holds: what turns stage
    loads into rank loads. None where each rank holds its own one stage (the default):
    the loads are the rank loads, the same floats the product gives (each adds only
    zeros), without the product the search would make for every split it asks about."""
    if groups == tuple((st,) for st in range(stages)):
        return None
    holds = np.zeros((stages, len(groups)))
    for r, g in enumerate(groups):
        for st in g:
            holds[st, r] += 1
    holds.setflags(write=False)  # shared by every call: read only
    return holds


@lru_cache(maxsize=256)
def _options(n: int, stages: int) -> tuple[tuple[tuple[int, ...], ...], np.ndarray, np.ndarray]:
    """The splits ``_end_sizes`` chooses among for n layers on ``stages`` stages (the end
    stages' sizes, the middle even), and per split and stage the first layer and the one
    past the last: the same for every layout of a model."""
    if stages <= 2:
        options = [(k, n - k) for k in range(1, n)] if stages == 2 else [(n,)]
    else:
        top = min(n - stages + 2, -(-n // stages) + 1)  # an end stage never needs more than the mean
        ends = [(a, b) for a in range(1, top + 1) for b in range(1, top + 1) if n - a - b >= stages - 2]
        middle = {k: [len(r) for r in partition(k, stages - 2)] for k in {n - a - b for a, b in ends}}  # by layers shared
        options = [(a, *middle[n - a - b], b) for a, b in ends]
    sizes = np.array(options)
    stops = np.cumsum(sizes, axis=1)
    starts = stops - sizes
    for a in (starts, stops):
        a.setflags(write=False)  # shared by every call: read only
    return tuple(options), starts, stops


def _even_out_ranks(sizes: list[int], layer_work, first: float, last: float, groups) -> list[int]:
    """Move single layers across stage boundaries while that lowers the busiest rank's
    work, or keeps it and evens the ranks out (the sum of squared rank loads). A rank runs
    every stage it holds, so on a loop or a V (DeepSeek-V3 at pp8 with 4 chunks: rank 7
    holds stages 7, 15, 23 and the head's and MTP's 31) the busiest rank's total bounds
    the pace, and the even middle above cannot see that; for the same reason layers of
    unequal work (dense and MoE) move where the even count put too many. It only bounds
    it: under a fixed order the slowest stage of each slot sets that slot's pace, so the
    planner simulates this split and the one without the moves and keeps the faster
    (``evaluate.finish``). The
    moves that only even out let a layer travel through ranks already at the top load.
    No move raises the top load and each lowers it or the sum of squares, so it ends. Memory is
    not looked at: the planner falls back to the split without these moves where this one
    does not fit (``evaluate.prepare``)."""
    sizes = list(sizes)
    k = len(sizes)
    if k < 2:
        return sizes
    eps = TIE * (sum(layer_work) + first + last)  # equal loads stay equal under rounding
    moves = _moves(tuple(map(tuple, groups)), k)
    starts = [0]
    for n in sizes[:-1]:
        starts.append(starts[-1] + n)
    stage = [sum(layer_work[a : a + n]) for a, n in zip(starts, sizes)]
    stage[0] += first
    stage[-1] += last
    load = [sum(stage[st] for st in g) for g in groups]
    for _ in range(k * len(layer_work)):  # far more moves than a split takes: a guard against a hang
        move = _better_move(sizes, starts, load, layer_work, moves, eps)
        if move is None:
            break
        st, to, moved = move
        sizes[st] -= 1
        sizes[to] += 1
        if to < st:
            starts[st] += 1
        else:
            starts[to] -= 1
        for q, v in moved.items():
            load[q] = v
    return sizes


@lru_cache(maxsize=256)
def _moves(groups: tuple[tuple[int, ...], ...], k: int) -> tuple[tuple[int, int, tuple[tuple[int, int], ...]], ...]:
    """Each single-layer move between neighbouring stages, in the order ``_better_move``
    tries them: (from stage, to stage, the ranks holding either with how many more of
    their stages gain the layer than lose it), the same for every split of a placement."""
    held_by: list[list[int]] = [[] for _ in range(k)]
    for r, g in enumerate(groups):
        for st in g:
            held_by[st].append(r)
    out = []
    for st in range(k):
        for to in (st - 1, st + 1):
            if 0 <= to < k:
                gain = {q: groups[q].count(to) - groups[q].count(st) for q in {*held_by[st], *held_by[to]}}
                out.append((st, to, tuple(gain.items())))
    return tuple(out)


def _better_move(sizes, starts, load, layer_work, moves, eps: float):
    """The first single-layer move (of ``_moves``) that lowers the busiest rank's load, or
    keeps it and lowers the sum of squared rank loads: (from stage, to stage, new loads of
    the ranks it changes), or None."""
    top = max(load)
    # the ranks from the most loaded down: the most any rank a move leaves alone holds is
    # the load of the first of them the move does not change (a few steps, not a max over
    # every other rank for each move tried)
    busiest = sorted(range(len(load)), key=load.__getitem__, reverse=True)
    for st, to, gain in moves:
        if sizes[st] == 1:
            continue
        x = layer_work[starts[st]] if to < st else layer_work[starts[st] + sizes[st] - 1]
        moved = [load[q] + x * d for q, d in gain]
        peak = max(moved)
        if peak > top + eps:
            continue
        changed = [q for q, _ in gain]
        rest = next((load[q] for q in busiest if q not in changed), -math.inf)
        new_top = max(peak, rest)
        squares = sum(v * v - load[q] * load[q] for q, v in zip(changed, moved))
        if new_top < top - eps or squares < -eps * top:
            return st, to, dict(zip(changed, moved))
    return None
