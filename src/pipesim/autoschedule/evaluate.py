"""The schedulers' own fast model: per-rank op orders in, as-soon-as-possible times out.

The search tries thousands of orders, so it cannot afford to build ``Schedule`` objects
and run ``pipesim.simulate`` for each; this is the same semantics on plain integers (each
op starts when its rank is free and its inputs have arrived, plus the P2P latency when
they come from another rank). The tests check it against ``simulate``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence

from .problem import B, F, Plan, Problem, input_latencies

Order = Sequence[Sequence[tuple[int, int, int]]]  # per rank: (kind, chunk, mb)


class Index:
    """Lookup tables of a problem: the stage of (rank, chunk, mb), the rank of (mb,
    stage) and the P2P latency each pass's input pays. Built once per problem and shared
    by every evaluation."""

    def __init__(self, prob: Problem):
        pl = prob.placement
        self.prob = prob
        self.S, self.M = pl.stages, pl.microbatches
        S, M = self.S, self.M
        self.stage = [[[-1] * M for _ in range(pl.chunks)] for _ in range(pl.pp)]
        self.rank_of = [[0] * S for _ in range(M)]
        for i in range(M):
            for s, (r, c) in enumerate(pl.routes[pl.route_of[i]]):
                self.stage[r][c][i] = s
                self.rank_of[i][s] = r
        # input_latencies', flat by s * M + i as the timing loop indexes them
        prev, after = input_latencies(prob, self.rank_of)
        self.f_lat = [prev[i][s] for s in range(S) for i in range(M)]
        self.b_lat = [after[i][s] for s in range(S) for i in range(M)]


def asap(index: Index, orders: Order) -> Plan | None:
    """Times of ``orders`` (None if they deadlock)."""
    got = timed(index, orders)
    return None if got is None else got[0]


class Timed(tuple):
    """A timed order as ``timed`` returns it: (plan, the end of each F and B by
    ``stage * M + mb``, Bs after the Fs), the state a re-timing resumes from."""


def timed(index: Index, orders: Order, base: Timed | None = None, rank: int = 0, since: int = 0) -> Timed | None:
    """``asap``, with the ends table beside the plan. Given ``base``, the timing of
    orders that differ from these only on ``rank`` from position ``since`` on, only what
    can have changed is timed again: an op that started before the end of ``rank``'s op
    ``since - 1`` in ``base`` depends on nothing after it there (what it waits for ends no
    later than it starts), so it keeps its time, and the ops after it are resumed from
    there as the full pass would have timed them."""
    prob = index.prob
    S, M = index.S, index.M
    stage, f_lat, b_lat = index.stage, index.f_lat, index.b_lat
    costs = (prob.f, prob.b, prob.w)
    last = S - 1
    n = len(orders)
    SM = S * M
    out: list[list[tuple[int, int, int, float, float]]]
    if base is None:
        done = [-1.0] * (2 * SM)  # end of F (0..SM-1) and B (SM..2SM-1); -1 when not yet
        free = [0.0] * n
        ptr = [0] * n
        out = [[] for _ in range(n)]
    else:
        plan, kept = base
        after = plan.ranks[rank][since - 1][4] if since else 0.0
        ptr = [bisect_left(ops, after, key=_start) for ops in plan.ranks]
        free = [ops[k - 1][4] if k else 0.0 for ops, k in zip(plan.ranks, ptr)]
        out = [list(ops[:k]) for ops, k in zip(plan.ranks, ptr)]
        # the ends of what keeps its time: base's, less what is timed again, or (where
        # fewer ops keep their time than not) those ops' own
        again = sum(len(ops) for ops in plan.ranks) - 2 * sum(ptr)
        done = list(kept) if again < 0 else [-1.0] * (2 * SM)
        for r, ops in enumerate(plan.ranks):
            stage_r = stage[r]
            for kind, c, i, _, end in ops[ptr[r] :] if again < 0 else ops[: ptr[r]]:
                if kind != 2:
                    done[(SM if kind == B else 0) + stage_r[c][i] * M + i] = -1.0 if again < 0 else end
    parked: dict[int, list[int]] = {}
    ready = deque(range(n))
    while ready:
        r = ready.popleft()
        seq = orders[r]
        p = ptr[r]
        t_free = free[r]
        row = out[r]
        append = row.append
        stage_r = stage[r]
        n_ops = len(seq)
        while p < n_ops:
            kind, c, i = seq[p]
            s = stage_r[c][i]
            own = s * M + i
            if kind == F:
                if s == 0:
                    t = t_free
                else:
                    e = done[own - M]
                    if e < 0:
                        parked.setdefault(own - M, []).append(r)
                        break
                    e += f_lat[own]
                    t = e if e > t_free else t_free
            elif kind == B:
                key = own if s == last else SM + own + M
                e = done[key]
                if e < 0:
                    parked.setdefault(key, []).append(r)
                    break
                e += b_lat[own]
                t = e if e > t_free else t_free
            else:
                if done[SM + own] < 0:
                    parked.setdefault(SM + own, []).append(r)
                    break
                t = t_free
            end = t + costs[kind][s]
            append((kind, c, i, t, end))
            t_free = end
            p += 1
            if kind != 2:
                key = SM + own if kind == B else own
                done[key] = end
                if parked:
                    waiting = parked.pop(key, None)
                    if waiting:
                        ready.extend(waiting)
        ptr[r] = p
        free[r] = t_free
    if any(ptr[r] < len(orders[r]) for r in range(n)):
        return None
    return Timed((Plan(prob, tuple(tuple(x) for x in out), "asap"), done))


def _start(op: tuple[int, int, int, float, float]) -> float:
    return op[3]


def orders_of(plan: Plan) -> list[list[tuple[int, int, int]]]:
    return [[(k, c, i) for k, c, i, _, _ in ops] for ops in plan.ranks]
