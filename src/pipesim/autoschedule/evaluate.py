"""The schedulers' own fast model: per-rank op orders in, as-soon-as-possible times out.

The search tries thousands of orders, so it cannot afford to build ``Schedule`` objects
and run ``pipesim.simulate`` for each; this is the same semantics on plain integers (each
op starts when its rank is free and its inputs have arrived, plus the P2P latency when
they come from another rank). The tests check it against ``simulate``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from .problem import B, F, Plan, Problem

Order = Sequence[Sequence[tuple[int, int, int]]]  # per rank: (kind, chunk, mb)


class Index:
    """Lookup tables of a problem: the stage of (rank, chunk, mb) and the rank of
    (mb, stage). Built once per problem and shared by every evaluation."""

    def __init__(self, prob: Problem):
        pl = prob.placement
        self.prob = prob
        self.S, self.M = pl.stages, pl.microbatches
        self.stage = [[[-1] * self.M for _ in range(pl.chunks)] for _ in range(pl.pp)]
        self.rank_of = [[0] * self.S for _ in range(self.M)]
        for i in range(self.M):
            for s, (r, c) in enumerate(pl.routes[pl.route_of[i]]):
                self.stage[r][c][i] = s
                self.rank_of[i][s] = r


def asap(index: Index, orders: Order) -> Plan | None:
    """Times of ``orders`` (None if they deadlock)."""
    prob = index.prob
    S, M = index.S, index.M
    stage, rank_of = index.stage, index.rank_of
    comm = prob.comm
    costs = (prob.f, prob.b, prob.w)
    last = S - 1
    n = len(orders)
    done = [0.0] * (2 * S * M)  # end of F (0..SM-1) and B (SM..2SM-1); -1 when not yet
    for k in range(len(done)):
        done[k] = -1.0
    SM = S * M
    free = [0.0] * n
    ptr = [0] * n
    out: list[list[tuple[int, int, int, float, float]]] = [[] for _ in range(n)]
    parked: dict[int, list[int]] = {}
    ready = deque(range(n))
    count = 0
    while ready:
        r = ready.popleft()
        seq = orders[r]
        p = ptr[r]
        t_free = free[r]
        row = out[r]
        while p < len(seq):
            kind, c, i = seq[p]
            s = stage[r][c][i]
            if kind == F:
                if s == 0:
                    t = t_free
                else:
                    key = (s - 1) * M + i
                    e = done[key]
                    if e < 0:
                        parked.setdefault(key, []).append(r)
                        break
                    if rank_of[i][s - 1] != r:
                        e += comm
                    t = e if e > t_free else t_free
            elif kind == B:
                own = s * M + i
                if s == last:
                    e = done[own]
                    if e < 0:
                        parked.setdefault(own, []).append(r)
                        break
                else:
                    key = SM + (s + 1) * M + i
                    e = done[key]
                    if e < 0:
                        parked.setdefault(key, []).append(r)
                        break
                    if rank_of[i][s + 1] != r:
                        e += comm
                t = e if e > t_free else t_free
            else:
                key = SM + s * M + i
                if done[key] < 0:
                    parked.setdefault(key, []).append(r)
                    break
                t = t_free
            end = t + costs[kind][s]
            row.append((kind, c, i, t, end))
            t_free = end
            p += 1
            count += 1
            if kind != 2:
                key = (SM if kind == B else 0) + s * M + i
                done[key] = end
                waiting = parked.pop(key, None)
                if waiting:
                    ready.extend(waiting)
        ptr[r] = p
        free[r] = t_free
    if any(ptr[r] < len(orders[r]) for r in range(n)):
        return None
    return Plan(prob, tuple(tuple(x) for x in out), "asap")


def orders_of(plan: Plan) -> list[list[tuple[int, int, int]]]:
    return [[(k, c, i) for k, c, i, _, _ in ops] for ops in plan.ranks]
