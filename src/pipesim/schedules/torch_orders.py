"""The orders of PyTorch 2.13's pipeline schedule classes, as pipesim generators.

torchtitan users pick a schedule by its ``torch.distributed.pipelining`` name; for what
they simulate to be what torchtitan runs, each name must give the class's order op for
op. Written here from the algorithms the classes implement (tests/test_torch_orders.py
compares every one with the class itself over many sizes):

* ``Interleaved1F1B`` and ``InterleavedZeroBubble`` share one walk (``interleaved``):
  micro-batches go in *rounds* of ``M // max(1, M // pp)``; rank r runs a warm-up of
  forwards, then alternates a forward with a backward, then drains the backwards.
  Forwards visit the chunks in order a round at a time, backwards in reverse order.
  Interleaved1F1B warms up ``(v-1) * round + 2(pp-1-r)`` forwards and runs fused
  backwards; InterleavedZeroBubble (the paper's ZB-1P on looped stages) warms up
  ``(v-1) * round + (pp-1-r)``, splits each backward into B and W and, after its first r
  steady backwards, follows every B with the oldest pending W. With M a multiple of pp
  the rounds are pp micro-batches and Interleaved1F1B is Megatron's interleaved 1F1B.
* ``LoopedBFS``: every forward of chunk 0, then of chunk 1, ...; then the backwards in
  reverse chunk order, each chunk's micro-batches last to first.
* ``ZBVZeroBubble``: ZB-V's hand-written pattern on a V (chunk 0 of rank r is stage r,
  chunk 1 stage 2pp-1-r), laid out for ``max(M, 2pp-1)`` micro-batches with the ones
  beyond M left out (``v_shape.zbv_pattern``). pipesim's ``zb-v`` is this order from
  M = 2pp-1 on, where it has no bubble, and searched below.

``GPipe``, ``1F1B`` and ``DualPipeV`` need nothing here: pipesim's ``gpipe``, ``1f1b``
and ``dualpipev`` already give those classes' orders (for ``1F1B``, the order its runtime
executes; the order its ``pipeline_order`` displays is wrong on the last rank).
"""

from __future__ import annotations

from collections import deque

from ..ir import Op, Placement, Schedule

#: PyTorch's names (as ``get_schedule_class`` spells them) -> the registry's name
TORCH_NAMES = {
    "GPipe": "gpipe",
    "1F1B": "1f1b",
    "Interleaved1F1B": "interleaved-1f1b",
    "LoopedBFS": "looped-bfs",
    "InterleavedZeroBubble": "interleaved-zb",
    "ZBVZeroBubble": "zbv-torch",
    "DualPipeV": "dualpipev",
}


def rounds_refused(name: str, pp: int, microbatches: int) -> str | None:
    """Why PyTorch's interleaved classes refuse M: it is not a multiple of their number of
    rounds, max(1, M // pp) (the registry's check for the families built on ``interleaved``)."""
    n = max(1, microbatches // pp)
    if microbatches % n:
        ok = [m for m in range(max(1, microbatches - pp), microbatches + pp + 1) if m % max(1, m // pp) == 0]
        near = ", ".join(str(m) for m in ok if m != microbatches)[:60]
        return (
            f"{name} needs --microbatches a multiple of its {n} rounds (max(1, M // pp), as PyTorch's), got {microbatches}; "
            f"nearby that work: {near}"
        )
    return None


def interleaved(name: str, pp: int, microbatches: int, chunks: int, zero_bubble: bool) -> Schedule:
    """PyTorch's Interleaved1F1B (``zero_bubble=False``) or InterleavedZeroBubble, for M
    that ``rounds_refused`` accepts: micro-batches in rounds of M // max(1, M // pp)."""
    per_round = microbatches // max(1, microbatches // pp)
    ranks = tuple(_interleaved_rank(pp, microbatches, chunks, r, per_round, zero_bubble) for r in range(pp))
    return Schedule(name, pp, microbatches, Placement.interleaved(pp, microbatches, chunks), ranks)


def _interleaved_rank(pp: int, M: int, v: int, r: int, per_round: int, zero_bubble: bool) -> tuple[Op, ...]:
    warm = min((v - 1) * per_round + (pp - 1 - r) * (1 if zero_bubble else 2), M * v)
    nf, nb = [0] * v, [0] * v  # next micro-batch per chunk
    pending: deque[Op] = deque()  # W of a B that ran, oldest first
    ops: list[Op] = []
    for step in range(M * v + warm):
        if step < M * v:  # forwards walk the chunks in order, a round at a time
            c = (step // per_round) % v
            ops.append(Op("F", c, nf[c]))
            nf[c] += 1
        if step >= warm:  # backwards walk them in reverse, from the end of the warm-up
            c = v - 1 - ((step - warm) // per_round) % v
            if zero_bubble:
                ops.append(Op("B", c, nb[c]))
                pending.append(Op("W", c, nb[c]))
                if step - warm >= r:  # the first r steady backwards leave their W for later
                    ops.append(pending.popleft())
            else:
                ops.append(Op("BW", c, nb[c]))
            nb[c] += 1
    return tuple(ops) + tuple(pending)


def interleaved_zb(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """PyTorch's InterleavedZeroBubble: ZB-1P on looped stages (see the module's text)."""
    return interleaved("interleaved-zb", pp, microbatches, chunks, zero_bubble=True)


def looped_bfs(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """PyTorch's LoopedBFS (Lamy-Poirier 2023, breadth-first): each chunk's forwards for
    every micro-batch before the next chunk's; backwards in reverse, last micro-batch first."""
    M, v = microbatches, chunks
    ops = tuple(Op("F", c, i) for c in range(v) for i in range(M))
    ops += tuple(Op("BW", c, i) for c in reversed(range(v)) for i in reversed(range(M)))
    return Schedule("looped-bfs", pp, M, Placement.interleaved(pp, M, v), (ops,) * pp)


def zbv_torch(pp: int, microbatches: int) -> Schedule:
    """PyTorch's ZBVZeroBubble order: ZB-V's hand-written pattern (see the module's text)."""
    from .v_shape import zbv_pattern  # the pattern lives with the ZB-V family

    return Schedule("zbv-torch", pp, microbatches, Placement.v(pp, microbatches), zbv_pattern(pp, microbatches))
