"""GPipe, 1F1B and Megatron's interleaved 1F1B: the schedules with a fused backward (BW)."""

from __future__ import annotations

from ..errors import PipesimError
from ..ir import Op, Placement, Schedule
from .torch_orders import interleaved


def gpipe(pp: int, microbatches: int) -> Schedule:
    """Every rank runs all forwards, then all backwards in micro-batch order."""
    M = microbatches
    ranks = tuple(tuple(Op("F", 0, i) for i in range(M)) + tuple(Op("BW", 0, i) for i in range(M)) for _ in range(pp))
    return Schedule("gpipe", pp, M, Placement.flat(pp, M), ranks)


def one_f_one_b(pp: int, microbatches: int) -> Schedule:
    """Rank r runs pp-r-1 warm-up forwards, then alternates forward and backward, then
    drains the backwards: at most pp-r activations alive."""
    M = microbatches
    ranks = []
    for r in range(pp):
        warm = min(pp - r - 1, M)
        ops = [Op("F", 0, i) for i in range(warm)]
        for i in range(M - warm):
            ops += [Op("F", 0, warm + i), Op("BW", 0, i)]
        ops += [Op("BW", 0, i) for i in range(M - warm, M)]
        ranks.append(tuple(ops))
    return Schedule("1f1b", pp, M, Placement.flat(pp, M), tuple(ranks))


def interleaved_1f1b(pp: int, microbatches: int, chunks: int = 2) -> Schedule:
    """Megatron-LM's interleaved 1F1B: each rank holds ``chunks`` model chunks (chunk c of
    rank r is stage c*pp + r) and walks them in groups of pp micro-batches, forwards in
    chunk order and backwards in reverse chunk order. For M not a multiple of pp, the
    order of PyTorch's Interleaved1F1B, which groups micro-batches in rounds of
    M // max(1, M // pp) (it refuses M that its rounds do not divide, and so does this)."""
    M, v = microbatches, chunks
    if not isinstance(v, int) or v < 1:
        # one chunk is allowed because PyTorch's Interleaved1F1B allows one stage per
        # rank: 1F1B with twice its warm-up forwards
        raise PipesimError(f"interleaved-1f1b needs --chunks >= 1, got {v}")
    if M % pp:  # PyTorch's generalisation: rounds of M // max(1, M // pp) micro-batches
        return interleaved("interleaved-1f1b", pp, M, v, zero_bubble=False)
    total = M * v

    def fwd(k: int) -> Op:
        return Op("F", (k // pp) % v, (k // (pp * v)) * pp + k % pp)

    def bwd(k: int) -> Op:
        return Op("BW", v - 1 - (k // pp) % v, (k // (pp * v)) * pp + k % pp)

    ranks = []
    for r in range(pp):
        warm = min((pp - r - 1) * 2 + (v - 1) * pp, total)
        ops = [fwd(k) for k in range(warm)]
        for i in range(total - warm):
            ops += [fwd(warm + i), bwd(i)]
        ops += [bwd(k) for k in range(total - warm, total)]
        ranks.append(tuple(ops))
    return Schedule("interleaved-1f1b", pp, M, Placement.interleaved(pp, M, v), tuple(ranks))
