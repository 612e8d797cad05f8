"""The Zero Bubble family's handcrafted schedules on a flat placement (Qi et al., 2024).

Splitting the backward into B (input gradient, on the critical path) and W (weight
gradient, deferrable) lets W fill the bubbles 1F1B leaves.
"""

from __future__ import annotations

from ..ir import Op, Placement, Schedule


def zb_h1(pp: int, microbatches: int) -> Schedule:
    """ZB-H1: 1F1B's memory (pp activations on every rank), bubble (pp-1)(F+B-W).

    Rank r warms up with pp-r forwards; then step k runs B_k, the W held back by r steps
    (W_{k-r}), and the next forward; the remaining Ws drain at the end. Delaying rank r's
    W by r steps is what lets the later ranks fill the cool-down with weight gradients.
    """
    M = microbatches
    ranks = []
    for r in range(pp):
        warm = min(pp - r, M)
        ops = [Op("F", 0, i) for i in range(warm)]
        w_next = 0
        for k in range(M):
            ops.append(Op("B", 0, k))
            if k >= r:
                ops.append(Op("W", 0, w_next))
                w_next += 1
            if warm + k < M:
                ops.append(Op("F", 0, warm + k))
        ops += [Op("W", 0, i) for i in range(w_next, M)]
        ranks.append(tuple(ops))
    return Schedule("zb-h1", pp, M, Placement.flat(pp, M), tuple(ranks))
