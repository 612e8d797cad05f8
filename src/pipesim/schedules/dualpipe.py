"""DualPipe and DualPipeV, op for op as DeepSeek's reference implementation orders them.

Both run the same eight-step program per rank (``_program``); they differ in its sizes
and in which chunk a "phase" means:

* DualPipe (pp even): two copies of the model in opposite directions; rank r and rank
  pp-1-r run mirror images of one program, with ``k = min(r, pp-1-r)`` and ``n = pp/2``
  ranks per half, over ``M/2`` micro-batches per direction. On the second half of the
  ranks, phase 0 is chunk 1 (the direction entered there).
* DualPipeV: one model folded into a V over pp ranks (DualPipe cut in half): ``k = r``,
  ``n = pp``, all M micro-batches through both chunks.

The program (names as in the reference: nF0 is "n forwards of phase 0"):
  1 nF0   2 nF0F1   3 nB1W1F1 (zero bubble)   4 nF0B1F1B0 (overlapped pairs, the steady
  state)   5 nB1F1B0   6 nB1B0 (the second half with B and W split)   7 nWB0   8 nW.
Deferred weight gradients are computed first in, first out.
"""

from __future__ import annotations

from collections import deque

from ..errors import PipesimError
from ..ir import Item, Op, Pair, Placement, Schedule


def _program(n: int, k: int, count: int, chunk_of, mb_of) -> tuple[Item, ...]:
    """One rank's items. ``chunk_of(phase)`` maps a phase to this rank's chunk and
    ``mb_of(chunk, i)`` the i-th micro-batch through that chunk to its global id."""
    items: list[Item] = []
    nf = [0, 0]  # next forward, per chunk
    nb = [0, 0]  # next backward, per chunk
    wq: deque[Op] = deque()

    def f(phase: int) -> Op:
        c = chunk_of(phase)
        op = Op("F", c, mb_of(c, nf[c]))
        nf[c] += 1
        return op

    def b(phase: int, zb: bool = False) -> Op:
        c = chunk_of(phase)
        mb = mb_of(c, nb[c])
        nb[c] += 1
        if zb:
            wq.append(Op("W", c, mb))
            return Op("B", c, mb)
        return Op("BW", c, mb)

    def pair(pf: int, pb: int) -> Pair:
        return Pair(f(pf), b(pb))

    rest = n - k - 1
    items += [f(0) for _ in range(2 * rest)]  # 1: nF0
    for _ in range(k + 1):  # 2: nF0F1
        items += [f(0), f(1)]
    for _ in range(rest):  # 3: nB1W1F1
        items.append(b(1, zb=True))
        items.append(wq.popleft())
        items.append(f(1))
    for i in range(count - 2 * n + k + 1):  # 4: nF0B1F1B0
        if i == 0 and k == n - 1:
            # the middle (DualPipe) or last (DualPipeV) rank does not overlap its first
            # F and B: that shortens the bubble
            items += [f(0), b(1)]
        else:
            items.append(pair(0, 1))
        items.append(pair(1, 0))
    for _ in range(rest):  # 5: nB1F1B0
        items.append(b(1))
        items.append(pair(1, 0))
    zb = False
    steps = k + 1
    for i in range(steps):  # 6: nB1B0, switching to split backwards halfway
        if i == steps // 2 and k % 2 == 1:
            zb = True
        items.append(b(1, zb))
        if i == steps // 2 and k % 2 == 0:
            zb = True
        items.append(b(0, zb))
    for _ in range(rest):  # 7: nWB0
        items.append(wq.popleft())
        items.append(b(0, zb=True))
    items += [wq.popleft() for _ in range(k + 1)]  # 8: nW
    return tuple(items)


def dualpipe(pp: int, microbatches: int) -> Schedule:
    """DualPipe (DeepSeek-V3): needs an even pp and an even M >= 2pp."""
    M = microbatches
    if pp % 2:
        raise PipesimError(f"dualpipe needs an even --pp, got {pp}")
    if M % 2:
        raise PipesimError(f"dualpipe needs an even --microbatches (half enter at each end), got {M}")
    if M < 2 * pp:
        raise PipesimError(f"dualpipe needs --microbatches >= 2 * --pp = {2 * pp}, got {M}")
    half = M // 2
    ranks = []
    for r in range(pp):
        second = r >= pp // 2
        ranks.append(
            _program(
                pp // 2,
                min(r, pp - 1 - r),
                half,
                chunk_of=lambda phase, s=second: phase ^ s,
                mb_of=lambda c, i: c * half + i,
            )
        )
    return Schedule("dualpipe", pp, M, Placement.dual(pp, M), tuple(ranks))


def dualpipev(pp: int, microbatches: int) -> Schedule:
    """DualPipeV (the "cut-in-half" DualPipe on a V placement): needs M >= 2pp."""
    M = microbatches
    if M < 2 * pp:
        raise PipesimError(f"dualpipev needs --microbatches >= 2 * --pp = {2 * pp}, got {M}")
    ranks = tuple(_program(pp, r, M, chunk_of=lambda phase: phase, mb_of=lambda c, i: i) for r in range(pp))
    return Schedule("dualpipev", pp, M, Placement.v(pp, M), ranks)
