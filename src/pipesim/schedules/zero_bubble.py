"""The Zero Bubble family's handcrafted schedules on a flat placement (Qi et al., 2024).

Splitting the backward into B (input gradient, on the critical path) and W (weight
gradient, deferrable) lets W fill the bubbles 1F1B leaves.
"""

from __future__ import annotations

from ..costs import Costs
from ..ir import Op, Placement, Schedule
from .cache import cached


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


@cached("zb-h2")  # searched once per (pp, M), then read from the cache file
def zb_h2(pp: int, microbatches: int) -> Schedule:
    """ZB-H2: up to 2pp activations per rank buy a zero span bubble when F = B = W
    (and M >= 2pp - 1): extra warm-up forwards fill what 1F1B leaves idle before the
    first backward, and deferred Ws fill the cool-down.

    This is the automatic scheduler at F = B = W = 1 with a 2pp limit (as the Zero Bubble
    repository derives it), so its order is fixed: other costs simulate the same order.
    """
    from ..autoschedule.problem import Problem
    from ..autoschedule.search import heuristic

    prob = Problem.of(Placement.flat(pp, microbatches), Costs(), memory_limit=2 * pp)
    return heuristic(prob).schedule("zb-h2")
