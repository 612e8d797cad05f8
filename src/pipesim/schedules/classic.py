"""GPipe, 1F1B and Megatron's interleaved 1F1B: the schedules with a fused backward (BW).

Built as arrays (``RankTable``): at pp=64, M=1024 a Python object per op would cost more
than simulating them."""

from __future__ import annotations

import numpy as np

from ..ir import Placement, RankTable, Schedule
from .torch_orders import interleaved

F, BW = 0, 3  # indices into ir.KINDS


def gpipe(pp: int, microbatches: int) -> Schedule:
    """Every rank runs all forwards, then all backwards in micro-batch order."""
    M = microbatches
    kind = np.repeat(np.array([F, BW], np.int8), M)
    mb = np.tile(np.arange(M, dtype=np.int32), 2)
    row = (kind, np.zeros(2 * M, np.int32), mb)
    return Schedule("gpipe", pp, M, Placement.flat(pp, M), RankTable.stack([row] * pp))


def warm_then_alternate(warm: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """A rank that runs ``warm`` forwards, then alternates a forward and a backward, then
    drains the backwards: per item, (is it a forward, its index among the forwards or
    among the backwards)."""
    j = np.arange(2 * total)
    steady_end = 2 * total - warm
    d = j - warm
    fwd = (j < warm) | ((j < steady_end) & (d % 2 == 0))
    k = np.where(j < warm, j, np.where(j < steady_end, np.where(fwd, warm + d // 2, d // 2), j - total))
    return fwd, k


def one_f_one_b(pp: int, microbatches: int) -> Schedule:
    """Rank r runs pp-r-1 warm-up forwards, then alternates forward and backward, then
    drains the backwards: at most pp-r activations alive."""
    M = microbatches
    rows = []
    for r in range(pp):
        fwd, k = warm_then_alternate(min(pp - r - 1, M), M)
        rows.append((np.where(fwd, F, BW), np.zeros(len(k), np.int32), k))
    return Schedule("1f1b", pp, M, Placement.flat(pp, M), RankTable.stack(rows))


def interleaved_1f1b(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Megatron-LM's interleaved 1F1B: each rank holds ``chunks`` model chunks (chunk c of
    rank r is stage c*pp + r) and walks them in groups of pp micro-batches, forwards in
    chunk order and backwards in reverse chunk order. For M not a multiple of pp, the
    order of PyTorch's Interleaved1F1B, which groups micro-batches in rounds of
    M // max(1, M // pp) (it refuses M that its rounds do not divide, and so does this)."""
    M, v = microbatches, chunks
    if M % pp:  # PyTorch's generalisation: rounds of M // max(1, M // pp) micro-batches
        return interleaved("interleaved-1f1b", pp, M, v, zero_bubble=False)
    total = M * v
    rows = []
    for r in range(pp):
        fwd, k = warm_then_alternate(min((pp - r - 1) * 2 + (v - 1) * pp, total), total)
        group = (k // pp) % v  # the k-th forward runs chunk group, the k-th backward chunk v-1-group
        rows.append((np.where(fwd, F, BW), np.where(fwd, group, v - 1 - group), (k // (pp * v)) * pp + k % pp))
    return Schedule("interleaved-1f1b", pp, M, Placement.interleaved(pp, M, v), RankTable.stack(rows))
