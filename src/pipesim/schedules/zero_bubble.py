"""The Zero Bubble family's handcrafted schedules on a flat placement (Qi et al., 2024).

Splitting the backward into B (input gradient, on the critical path) and W (weight
gradient, deferrable) lets W fill the bubbles 1F1B leaves.
"""

from __future__ import annotations

import numpy as np

from ..costs import Costs
from ..ir import Placement, RankTable, Schedule
from .cache import cached

F, B, W = 0, 1, 2  # indices into ir.KINDS


def zb_h1(pp: int, microbatches: int) -> Schedule:
    """ZB-H1: 1F1B's memory (pp activations on every rank), bubble (pp-1)(F+B-W).

    Rank r warms up with pp-r forwards; then step k runs B_k, the W held back by r steps
    (W_{k-r}), and the next forward; the remaining Ws drain at the end. Delaying rank r's
    W by r steps is what lets the later ranks fill the cool-down with weight gradients.
    """
    M = microbatches
    k = np.arange(M)
    rows = []
    for r in range(pp):
        warm = min(pp - r, M)
        # step k: B_k, then W_{k-r} from step r on, then F_{warm+k} while forwards remain
        kind = np.broadcast_to(np.array([B, W, F], np.int8), (M, 3))
        mb = np.stack([k, k - r, warm + k], axis=1)
        keep = np.stack([np.ones(M, bool), k >= r, warm + k < M], axis=1)
        drained = np.arange(max(0, M - r), M)  # the Ws not yet run
        rows.append(
            (
                np.concatenate([np.full(warm, F), kind[keep], np.full(len(drained), W)]),
                np.zeros(warm + int(keep.sum()) + len(drained), np.int32),
                np.concatenate([np.arange(warm), mb[keep], drained]),
            )
        )
    return Schedule("zb-h1", pp, M, Placement.flat(pp, M), RankTable.stack(rows))


def zb_h2(pp: int, microbatches: int) -> Schedule:
    """ZB-H2: up to 2pp activations per rank buy a zero span bubble when F = B = W
    (and M >= 2pp - 1): extra warm-up forwards fill what 1F1B leaves idle before the
    first backward, and deferred Ws fill the cool-down.

    The order is the automatic scheduler's at F = B = W = 1 with a 2pp limit (as the Zero
    Bubble repository derives it), so it is fixed: other costs simulate the same order.
    From M = 2pp - 1 on, the scheduler's winner is its wave construction with 2(pp-r)-1
    warm-up forwards on rank r and every wait filled with Ws, which reaches both lower
    bounds (span 3M, makespan 3M + pp - 1): it is built directly, one pass over the ops.
    """
    if microbatches >= 2 * pp - 1:
        from ..autoschedule.problem import Problem
        from ..autoschedule.waves import warmups, wave_schedule

        prob = Problem.of(Placement.flat(pp, microbatches), Costs(), memory_limit=2 * pp)
        plan = wave_schedule(prob, warmups(prob, 2.0), 0.0)
        # as arrays: the planner builds it on every run, and an Op per op cost ten times
        # the construction (its kinds F, B, W are ir.KINDS' first three)
        rows = [np.array([op[:3] for op in ops], np.int32).reshape(-1, 3).T for ops in plan.ranks]
        return Schedule("zb-h2", pp, microbatches, prob.placement, RankTable.stack(rows))
    return zb_h2_searched(pp, microbatches)


@cached("zb-h2")  # searched once per (pp, M), then read from the cache file
def zb_h2_searched(pp: int, microbatches: int) -> Schedule:
    """ZB-H2 by search: the sizes too short for the warm-up to fill every bubble."""
    from ..autoschedule.problem import Problem
    from ..autoschedule.search import heuristic

    prob = Problem.of(Placement.flat(pp, microbatches), Costs(), memory_limit=2 * pp)
    return heuristic(prob).schedule("zb-h2")
