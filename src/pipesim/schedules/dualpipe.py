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
Deferred weight gradients are computed first in, first out. Built as arrays
(``RankTable``): the program is a few repeated patterns per rank.
"""

from __future__ import annotations

import numpy as np

from ..ir import Placement, RankTable, Schedule

F, B, W, BW = range(4)  # indices into ir.KINDS
ZB = 4  # a B whose W is deferred (a B in the result)


def _program(n: int, k: int, count: int, second: int, half: int) -> tuple[np.ndarray, ...]:
    """One rank's items as columns (kind, chunk, mb, kind2, chunk2, mb2). Phase p is
    chunk ``p ^ second``; the i-th micro-batch through chunk c is ``c * half + i``."""
    rest = n - k - 1
    steps = k + 1
    pieces: list[tuple[list[int], list[int], list[bool], int]] = []  # (kinds, phases, joins, repeats)

    def add(kinds, phases, joins, times):
        if times > 0:
            pieces.append((kinds, phases, joins, times))

    add([F], [0], [False], 2 * rest)  # 1: nF0
    add([F, F], [0, 1], [False, False], k + 1)  # 2: nF0F1
    add([ZB, W, F], [1, 1, 1], [False, False, False], rest)  # 3: nB1W1F1
    pairs = count - 2 * n + k + 1  # 4: nF0B1F1B0, in overlapped pairs
    if pairs > 0 and k == n - 1:
        # the middle (DualPipe) or last (DualPipeV) rank does not overlap its first F and
        # B: that shortens the bubble
        add([F, BW, F, BW], [0, 1, 1, 0], [False, False, False, True], 1)
        pairs -= 1
    add([F, BW, F, BW], [0, 1, 1, 0], [False, True, False, True], pairs)
    add([BW, F, BW], [1, 1, 0], [False, False, True], rest)  # 5: nB1F1B0
    # 6: nB1B0, switching to split backwards halfway (B1 a step later on even k)
    i = np.arange(steps)
    b1 = np.where((i > steps // 2) | ((i == steps // 2) & (k % 2 == 1)), ZB, BW)
    b0 = np.where(i >= steps // 2, ZB, BW)
    pieces.append((np.stack([b1, b0], axis=1).ravel(), [1, 0] * steps, [False] * (2 * steps), 1))
    add([W, ZB], [0, 0], [False, False], rest)  # 7: nWB0
    add([W], [0], [False], k + 1)  # 8: nW
    kind = np.concatenate([np.tile(np.asarray(x, np.int8), t) for x, _, _, t in pieces])
    chunk = np.concatenate([np.tile(np.asarray(p, np.int32), t) for _, p, _, t in pieces]) ^ second
    join = np.concatenate([np.tile(np.asarray(j, bool), t) for _, _, j, t in pieces])
    # micro-batches: forwards and backwards each in order per chunk; Ws first in, first out
    mb = np.zeros(len(kind), np.int32)
    back = (kind == ZB) | (kind == BW)
    for c in (0, 1):
        for sel in ((kind == F) & (chunk == c), back & (chunk == c)):
            mb[sel] = c * half + np.arange(int(sel.sum()))
    zb, w = np.flatnonzero(kind == ZB), np.flatnonzero(kind == W)
    chunk[w], mb[w] = chunk[zb], mb[zb]
    kind = np.where(kind == ZB, B, kind).astype(np.int8)
    # a joined op is the backward of the pair its previous op opens
    first = np.flatnonzero(~join)
    nxt = np.minimum(first + 1, len(kind) - 1)
    paired = join[nxt] & (nxt > first)
    kind2 = np.where(paired, kind[nxt], -1).astype(np.int8)
    return kind[first], chunk[first], mb[first], kind2, np.where(paired, chunk[nxt], 0), np.where(paired, mb[nxt], 0)


def dualpipe(pp: int, microbatches: int) -> Schedule:
    """DualPipe (DeepSeek-V3): needs an even pp and an even M >= 2pp."""
    M = microbatches  # even pp, even M >= 2pp: the registry's check
    half = M // 2
    ranks = []
    for r in range(pp):
        second = r >= pp // 2
        ranks.append(_program(pp // 2, min(r, pp - 1 - r), half, int(second), half))
    return Schedule("dualpipe", pp, M, Placement.dual(pp, M), RankTable.stack(ranks))


def dualpipev(pp: int, microbatches: int) -> Schedule:
    """DualPipeV (the "cut-in-half" DualPipe on a V placement): needs M >= 2pp."""
    M = microbatches  # M >= 2pp: the registry's check
    ranks = [_program(pp, r, M, 0, 0) for r in range(pp)]
    return Schedule("dualpipev", pp, M, Placement.v(pp, M), RankTable.stack(ranks))
