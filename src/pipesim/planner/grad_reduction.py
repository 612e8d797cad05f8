"""The data-parallel gradient reduction as Megatron-Core overlaps it, one model chunk at a
time, priced on the simulated timeline.

With ``--overlap-grad-reduce`` Megatron-Core's DDP turns gradient sync on for a model
chunk only for that chunk's last micro-batch backward (NVIDIA/Megatron-LM d98e8a64,
megatron/core/pipeline_parallel/schedules.py: ``backward_step_helper_preprocess`` calls
``enable_grad_sync`` where ``is_last_microbatch_for_model_chunk``; the cool-down's end
launches any chunk not yet synchronized). Each parameter's hook then marks its gradient
ready (distributed/distributed_data_parallel.py ``_make_backward_post_hook``) and a
bucket's reduce-scatter or all-reduce starts as soon as all of its parameters are
(param_and_grad_buffer.py ``register_grad_ready``, ``start_grad_sync``); the buckets hold
the parameters in reverse order, the order the backward makes their gradients
(``_compute_default_per_buffer_param_layout``), so a chunk's reduction runs beside its own
last backward. Only ``finalize_model_grads`` waits for them, every chunk's
``finish_grad_sync`` before the optimizer (distributed/finalize_model_grads.py). Under
interleaved 1F1B, DualPipe or a V the chunks of one rank end their last backward at
different times, so the earlier chunks' reductions also run beside the backwards still
to come on that rank. The reductions of one rank share its data-parallel communicator,
whose collectives NCCL runs one after another in the order they are issued.

``tail_exposure`` prices this on one rank's simulated items (``step.reduction_floor`` is
what can be said before simulating, no more than it)."""

from __future__ import annotations

import math

import numpy as np

from ..ir import KINDS
from ..order_memo import per_table

#: the ops whose weight gradients are final for their micro-batch (a fused backward or a
#: split one's W); a chunk whose order has neither finishes its gradients in its B
_GRADS = (KINDS.index("BW"), KINDS.index("W"))
_B = (KINDS.index("B"),)


def tail_exposure(starts, ends, ready: list[int | None], reduce: tuple[float, ...], rate: float) -> float:
    """Seconds one rank's gradient reductions show past its last item.

    ``starts``, ``ends``: its items in order, as simulated (sequences or arrays);
    ``ready``: per chunk, the index of the item holding its last backward (None: it has
    none, and its reduction starts after the last item, as Megatron's cool-down end
    launches it); ``reduce``: per chunk, the reduction's seconds. The reductions run one
    after another in the order they become ready, each starting with its item (its
    buckets in the order of that backward). While one runs the items progress at ``rate``
    of their speed (``step.exposed``'s model, item by item): an item slowed ends later,
    and the next starts at its own simulated start or that end, whichever is later (what
    it waited for from other ranks comes when it came). What shows is the later of the
    last item's and the last reduction's ends, past the last item's simulated end."""
    n = len(ends)
    order = sorted((n if i is None else i, c) for c, i in enumerate(ready))
    if not order:
        return 0.0
    first = order[0][0]
    starts_, ends_ = np.asarray(starts, np.float64), np.asarray(ends, np.float64)
    st, en = starts_[first:].tolist(), ends_[first:].tolist()
    inside = sum(i < n for i, _ in order)  # reductions ready at an item
    queue: list[tuple[float, float]] = []  # the reductions' (start, end), one after another
    free = -math.inf  # when the communicator is next free
    late = 0.0  # how much later than simulated the previous item ended
    k = 0
    for j in range(len(st)):
        # an item runs no earlier than simulated, nor before its predecessor's (delayed) end
        wait = max(0.0, en[j - 1] + late - st[j]) if late > 0.0 else 0.0
        start = st[j] + wait
        while k < inside and order[k][0] == first + j:
            begin = max(start, free)
            free = begin + reduce[order[k][1]]
            queue.append((begin, free))
            k += 1
        late = wait + slowed(start, en[j] - st[j], queue, rate)
        if k == inside and start >= free:
            # no reduction runs from here on: the items after only pass the delay on,
            # each idle gap before one absorbing some of it
            gaps = float(np.sum(starts_[first + j + 1 :] - ends_[first + j : -1])) if late > 0.0 else 0.0
            late = max(0.0, late - gaps)
            break
    last = float(ends_[-1]) if n else 0.0
    end = last + late
    for _, c in order[k:]:  # chunks without a backward: after everything
        begin = max(end, free)
        free = begin + reduce[c]
    return max(late, free - last, 0.0)


def slowed(start: float, work: float, queue: list[tuple[float, float]], rate: float) -> float:
    """How much longer than ``work`` an item starting at ``start`` takes, progressing at
    ``rate`` while a reduction in ``queue`` runs and at full speed otherwise."""
    t, left, lost = start, work, 0.0
    for a, b in queue:
        if b <= t:
            continue
        if a > t:  # full speed until the reduction starts
            if left <= a - t:
                return lost
            left -= a - t
            t = a
        if rate * (b - t) >= left:  # ends beside it
            return lost + left / rate - left if left > 0.0 else lost
        left -= rate * (b - t)
        lost += (1.0 - rate) * (b - t)
        t = b
    return lost


def reduction_tails(tl, reduce: tuple[tuple[float, ...], ...], rate: float) -> tuple[float, ...]:
    """Per rank, ``tail_exposure`` of its reductions (``reduce``: per rank, per chunk,
    seconds) on the simulated timeline ``tl``: each chunk ready at the item holding its
    last W or BW (a pair's backward half counts), or its last B where it has neither."""
    t = tl.table
    off = t.offsets
    chunks = max((len(x) for x in reduce), default=0)
    # the order's alone: worked out once a table (the planner prices each under many cost models)
    last = per_table(t, ("reductions", chunks), lambda: _ready_items(t, chunks))
    out = []
    for r, per_chunk in enumerate(reduce):
        a, b = int(off[r]), int(off[r + 1])
        ready = [None if x < 0 else x - a for x in last[r, : len(per_chunk)].tolist()]
        out.append(tail_exposure(tl.starts[a:b], tl.ends[a:b], ready, per_chunk, rate))
    return tuple(out)


def _ready_items(t, chunks: int) -> np.ndarray:
    """[rank, local chunk]: the item holding the chunk's last W or BW, or its last B where
    it has neither (-1: none)."""
    last = _last_items(t, chunks, _GRADS)
    if (last < 0).any():
        last = np.where(last < 0, _last_items(t, chunks, _B), last)
    return last


def _last_items(t, chunks: int, kinds: tuple[int, ...]) -> np.ndarray:
    """[rank, local chunk]: the index (into the table) of the last item holding an op of
    ``kinds`` of that chunk, -1 where none does."""
    pp = len(t.offsets) - 1
    out = np.full(pp * chunks, -1, np.int64)
    rank = np.repeat(np.arange(pp), np.diff(t.offsets))
    for kind, chunk in ((t.kind, t.chunk), (t.kind2, t.chunk2)):
        mask = kind == kinds[0]
        for k in kinds[1:]:
            mask |= kind == k
        hit = np.flatnonzero(mask)
        if len(hit):
            np.maximum.at(out, rank[hit] * chunks + chunk[hit], hit)
    return out.reshape(pp, chunks)


def order_ends(shapes, held, routes: int) -> tuple[tuple[bool, ...], tuple[int | None, ...], list[set]]:
    """What the reduction's floor may assume of each rank's order before it is simulated
    (``step.StepSync.ordered``), from the order's item counts (``shapes``: its
    ``programs.Shape`` at the sampled micro-batch counts; ``held``: per rank, its chunks'
    model stages; ``routes``: the placement's routes):

    - whether the rank has overlapped pairs, in one of which its last backward may end;
    - the local chunk whose backward ends the rank's, where that is known: with one route,
      no deferred W and no pairs, every micro-batch's backward reaches the rank's lowest
      stage after its others (None elsewhere);
    - its pair items, the longest of which bounds a paired rank's last item."""
    counts = [[key for sh in shapes for key in sh.counts[r]] for r in range(len(held))]
    paired = tuple(any(key[0] == "pair" for key in keys) for keys in counts)
    split = [any(key[0] == "W" for key in keys) for keys in counts]
    last = tuple(
        None if routes > 1 or split[r] or paired[r] else min(range(len(h)), key=h.__getitem__) for r, h in enumerate(held)
    )
    pairs = [{key for key in keys if key[0] == "pair"} for keys in counts]
    return paired, last, pairs
