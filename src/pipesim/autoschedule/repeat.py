"""A longer order from a short one whose steady state repeats: the V-shapes' (V-Half and
V-Min, ``schedules.v_shape``) and Chimera's (``schedules.chimera``), both at unit costs.

In a steady state op j + ``period`` of a rank is op j's pass ``shift`` micro-batches
later, ``period`` slots later (unit costs: a rank runs one op a slot). Cutting every rank
at one time T inside its steady state and running the period before T again, ``shift``
micro-batches later each time, adds ``shift`` micro-batches per copy; every op after T
moves up by as many. Whether that is the order a whole search at the larger size picks
is for each caller to show (tests/test_v_shape.py, tests/test_chimera.py and their
benchmarks check grids of sizes).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import RankTable
from .problem import Plan


def steady_run(ops, period: int, shift: int) -> tuple[int, int]:
    """(first, last) index of the longest run of ops j (the first such run among equals)
    whose op j + ``period`` is the same pass ``shift`` micro-batches and ``period``
    slots later; (0, -1) when there is none. ``ops`` are (kind, chunk, mb, start, ...)."""
    best, first = (0, -1), None
    for j in range(len(ops) - period):
        a, b = ops[j], ops[j + period]
        if a[0] == b[0] and a[1] == b[1] and b[2] == a[2] + shift and abs(b[3] - a[3] - period) < 1e-9:
            first = j if first is None else first
            if j - first > best[1] - best[0]:
                best = (first, j)
        else:
            first = None
    return best


def repeat_steady_state(
    plan: Plan, copies: int, period: int, shift: int, margin: int, first_mb=(0, 0), new_first_mb=(0, 0)
) -> RankTable | None:
    """``plan``'s orders with ``copies`` more periods, cut at one time T that has at least
    ``margin`` periods of every rank's steady state either side; None when the ranks share
    no such time. Micro-batch numbers count within each chunk from ``first_mb[chunk]``
    in ``plan`` (Chimera numbers its second pipeline's after the first's) and from
    ``new_first_mb[chunk]`` in the result."""
    ranks = [[(k, c, m - first_mb[c], s) for k, c, m, s, *_ in ops] for ops in plan.ranks]
    lo, hi = -math.inf, math.inf
    for ops in ranks:
        a, b = steady_run(ops, period, shift)
        if b - a < 2 * margin * period:
            return None
        lo, hi = max(lo, ops[a + margin * period][3]), min(hi, ops[b - margin * period][3])
    if lo > hi:
        return None
    cut = (lo + hi) / 2
    base_mb = np.array(new_first_mb, np.int32)
    code = plan.kind_codes()
    rows = []
    for ops in ranks:
        seq = np.array([op[:3] for op in ops], dtype=np.int32).reshape(len(ops), 3)
        p = int(np.searchsorted(np.array([op[3] for op in ops]), cut - 1e-9))
        repeated = np.tile(seq[p - period : p], (copies, 1))
        repeated[:, 2] += np.repeat(np.arange(1, copies + 1, dtype=np.int32) * shift, period)
        after = seq[p:].copy()
        after[:, 2] += copies * shift
        full = np.concatenate([seq[:p], repeated, after])
        rows.append((code[full[:, 0]], full[:, 1], full[:, 2] + base_mb[full[:, 1]]))
    return RankTable.stack(rows)
