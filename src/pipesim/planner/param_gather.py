"""The distributed optimizer's parameter all-gather as Megatron-Core overlaps it
(``--overlap-param-gather``), one model chunk at a time, priced on the simulated timeline.

What the code does (NVIDIA/Megatron-LM d98e8a64):

- Nothing gathers in the optimizer step: ``DistributedOptimizer.step_with_ready_grads``
  gathers there only without ``overlap_param_gather`` (optimizer/distrib_optimizer.py);
  ``finish_grad_sync`` marks every bucket group undispatched for the next step
  (distributed/param_and_grad_buffer.py).
- Every module has a forward pre-hook (distributed_data_parallel.py ``_make_forward_pre_hook``)
  that calls ``finish_param_sync`` on the bucket group of each of its parameters: it
  dispatches the group's gather if nothing has, and makes the compute stream wait for it.
  A chunk's first forward can therefore start no earlier than the gather of (its first
  bucket of) the chunk ends.
- Buckets: only the first model chunk of pipeline rank 0 is split into buckets;
  ``DistributedDataParallel.__init__`` sets ``bucket_size = None`` (one bucket) on every
  pipeline rank but the first, and ``training.get_model`` disables bucketing for every
  chunk after the first (``per_chunk_disable_bucketing``). In the bucketed chunk the
  gathers go in forward order and each layer waits only for its own bucket, so the gather
  runs beside that chunk's first forward (``step.exposed``'s shape); elsewhere the whole
  chunk's gather must end before its first forward starts.
- ``align_param_gather`` (Megatron-LM's default, arguments.py ``--no-align-param-gather``;
  Megatron-Bridge's with pp > 1 and VPP > 1, comm_overlap.py ``_get_optimizer_overlap_cfgs``)
  is forced off without virtual pipeline stages (arguments.py: "non-interleaved schedule
  does not support ... aligned param AG"). With it, ``training.py`` hands each chunk's
  ``start_param_sync`` to the interleaved schedule as ``param_sync_func``, and
  ``forward_backward_pipelining_with_interleaving`` (pipeline_parallel/schedules.py)
  launches chunks 0 and 1 before its loop and chunk j >= 2 in the preprocessing of the
  forward whose virtual micro-batch id plus the pipeline rank is chunk j - 1's first
  micro-batch ("launch asynchronous communication at the same time across the
  pipeline-parallel group"). A chunk never reached so (a rank past that id) is dispatched
  by its own pre-hook. Without it (one chunk a rank: 1F1B) the first pre-hook of the
  rank's first forward dispatches the gather, after that forward's input has arrived
  (``forward_backward_pipelining_without_interleaving`` receives before ``forward_step``;
  p2p_communication.py ``_communicate`` waits on the receive and, with the default
  ``batch_p2p_sync``, synchronizes; NCCL's stream waits for the compute stream at
  dispatch anyway), so on every rank but the first the whole gather shows,
  and each rank's wait delays the inputs of the ranks after it.

A rank's gathers share its data-parallel communicator, whose collectives NCCL runs one
after another in the order they are issued; compute beside one keeps ``dp_overlap`` of
its speed (``grad_reduction.slowed``). ``head_exposure`` prices one rank's gathers on its
simulated items; ``gather_heads`` does it for every rank of a timeline; ``combined`` puts
the ranks together. ``step.gather_floor`` is what can be said before simulating."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import KINDS
from ..order_memo import per_table
from .grad_reduction import slowed

_F = KINDS.index("F")


def launches(first: Sequence[int | None], rank: int) -> list[int | None]:
    """Per chunk, the index into the rank's forwards at whose start its gather is
    dispatched; None: before the schedule's first item (the step's start).

    ``first``: per chunk (Megatron's model chunk, stage ``chunk * pp + rank`` under
    interleaving), the index of its first forward among the rank's forwards (Megatron's
    virtual micro-batch ids index the same sequence). One chunk: at its first forward (the
    pre-hook; ``align_param_gather`` is off). More: chunks 0 and 1 before the loop, chunk
    j >= 2 at forward ``first[j - 1] - rank``, or at its own first forward where that is
    before the first (the pre-hook dispatches it)."""
    if len(first) == 1:
        return [first[0]]
    out: list[int | None] = [None] * min(len(first), 2)
    for j in range(2, len(first)):
        prev, own = first[j - 1], first[j]
        k = -1 if prev is None else prev - rank
        out.append(k if k >= 0 and (own is None or k <= own) else own)
    return out


def head_exposure(
    starts,
    ends,
    first: Sequence[int | None],
    launch: Sequence[int | None],
    gather: Sequence[float],
    rate: float,
    bucketed: int | None = None,
    origin: float = 0.0,
) -> float:
    """Seconds one rank's parameter gathers delay its items.

    ``starts``, ``ends``: its items in order, as simulated; ``first``: per chunk, the index
    of the item holding its first forward (None: none on this rank); ``launch``: per chunk,
    the index of the item at whose start its gather is dispatched (None: at ``origin``, the
    step's start); ``gather``: per chunk, seconds; ``bucketed``: the chunk whose gather
    runs beside its first forward bucket by bucket (Megatron: pipeline rank 0's chunk 0).

    The gathers run one after another in the order dispatched (among those dispatched
    together, the order the rank first runs them: Megatron's chunk order under
    interleaving). An item starts at its simulated start plus the delay so far; a
    chunk's first forward no earlier than its gather ends (the bucketed one ends no
    earlier instead); while a gather runs an item progresses at ``rate`` of its speed. The
    delay is not given back in later idle gaps: what a rank waits for comes from ranks its
    delayed forwards feed, so the pipeline carries it (as ``step.exposed`` added the
    gather's exposure to the step)."""
    n = len(ends)
    todo = [c for c in range(len(gather)) if first[c] is not None and gather[c] > 0.0]
    if not todo or n == 0:
        return 0.0
    starts, ends = np.asarray(starts, np.float64), np.asarray(ends, np.float64)
    at: dict[int, list[int]] = {}
    for c in sorted(todo, key=lambda c: first[c]):  # dispatched together: in the order first run
        at.setdefault(-1 if launch[c] is None else launch[c], []).append(c)
    queue: list[tuple[float, float]] = []
    done: dict[int, float] = {}  # chunk -> when its gather ends
    free = -float("inf")

    def dispatch(key: int, when: float) -> None:
        nonlocal free
        for c in at.get(key, ()):
            begin = max(when, free)
            free = begin + gather[c]
            queue.append((begin, free))
            done[c] = free

    dispatch(-1, origin)
    firsts = {first[c]: c for c in todo}
    last_needed = max(max(firsts), max((k for k in at if k >= 0), default=0))
    # the items up to the last first forward as Python floats (the loop rarely goes much
    # further); any after, one at a time
    st, en = starts[: last_needed + 1].tolist(), ends[: last_needed + 1].tolist()
    late = 0.0
    for j in range(n):
        if j == len(st):
            st.append(float(starts[j]))
            en.append(float(ends[j]))
        start = st[j] + late
        if j in at:
            dispatch(j, start)
        c = firsts.get(j)
        if c is not None and c != bucketed:
            start = max(start, done[c])
        work = en[j] - st[j]
        end = start + work + (slowed(start, work, queue, rate) if free > start else 0.0)
        if c is not None and c == bucketed:
            end = max(end, done[c])
        late = end - en[j]
        if j >= last_needed and end >= free:
            break  # every gather dispatched, ended and waited for: the delay is final
    return max(late, 0.0)


def gather_heads(tl, gather: tuple[tuple[float, ...], ...], rate: float) -> tuple[float, ...]:
    """Per rank, ``head_exposure`` of its gathers (``gather``: per rank, per chunk, seconds)
    on the simulated timeline ``tl``, launched by ``launches``' rules, the step's start
    the timeline's."""
    t = tl.table
    off = t.offsets
    origin = tl.start
    # where each rank's gathers launch and wait depends on the order alone: worked out
    # once a table (the planner prices each order under many cost models)
    plans = per_table(t, ("gathers", tuple(map(len, gather))), lambda: _launch_plans(t, gather))
    out = []
    for r, (per_chunk, (first, launch, opener)) in enumerate(zip(gather, plans)):
        a, b = int(off[r]), int(off[r + 1])
        # Megatron buckets only where the gather is on the critical path, pipeline rank 0's
        # first chunk (DDP: "data-parallel communication on these stages is not on the
        # critical path"): the chunk that opens the step; so here the first chunk of any
        # rank whose first item is a forward at the step's start (rank 0 alone under
        # Megatron's orders; DualPipe's last rank too)
        bucketed = opener if opener is not None and float(tl.starts[a]) <= origin else None
        out.append(head_exposure(tl.starts[a:b], tl.ends[a:b], first, launch, per_chunk, rate, bucketed, origin))
    return tuple(out)


def _launch_plans(t, gather) -> list[tuple[list, list, int | None]]:
    """Per rank of the rank table ``t`` (``gather``'s lengths: its chunks), ``head_exposure``'s
    ``first`` and ``launch``, and the chunk its first item opens where that is a forward
    (None otherwise)."""
    off = t.offsets
    out = []
    for r, per_chunk in enumerate(gather):
        a, b = int(off[r]), int(off[r + 1])
        n = len(per_chunk)
        fwd = np.flatnonzero(t.kind[a:b] == _F)
        chunks = t.chunk[a:b][fwd]
        at: list[int | None] = [None] * n  # per chunk: its first forward, among the rank's forwards
        for c in range(n):
            hit = chunks == c
            p = int(hit.argmax())
            at[c] = p if hit[p] else None
        # the rule's "chunk j" is the j-th the rank runs: Megatron's chunk j under
        # interleaving; where an order starts a rank on a later chunk (DualPipe's last
        # rank, a V's), that one is "chunk 0"
        ranked = sorted(range(n), key=lambda c: (at[c] is None, at[c] or 0, c))
        by_rank = launches([at[c] for c in ranked], r)
        launch: list[int | None] = [None] * n
        for k, c in zip(by_rank, ranked):
            launch[c] = None if k is None else int(fwd[k])
        first = [None if p is None else int(fwd[p]) for p in at]
        opens = len(fwd) > 0 and fwd[0] == 0
        out.append((first, launch, ranked[0] if opens else None))
    return out


def combined(heads: Sequence[float], chunks: int) -> float:
    """What the ranks' delays add to the step: with one chunk a rank each rank's gather is
    launched only once its input has come, after the ranks before it waited for theirs, so
    the delays add up along the pipeline; with more (aligned) every rank launches at the
    step's start and a delay upstream leaves the ranks after it more time: the largest."""
    if chunks == 1:
        return float(sum(heads))
    return max(heads, default=0.0)
