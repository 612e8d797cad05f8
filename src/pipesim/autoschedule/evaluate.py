"""The schedulers' own fast model: per-rank op orders in, as-soon-as-possible times out.

The search tries thousands of orders, so it cannot afford to build ``Schedule`` objects
and run ``pipesim.simulate`` for each; this is the same semantics on plain integers (each
op starts when its rank is free and its inputs have arrived, plus the P2P latency when
they come from another rank). The tests check it against ``simulate``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from itertools import chain
from operator import itemgetter

import numpy as np

from .. import kernel
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
        self.stages = np.array(self.stage, np.int64)  # the same table as an array, for the C timing (``_compiled``)


def asap(index: Index, orders: Order) -> Plan | None:
    """Times of ``orders`` (None if they deadlock)."""
    got = timed(index, orders)
    return None if got is None else got[0]


class Timed(tuple):
    """A timed order as ``timed`` returns it: (plan, the end of each F and B by
    ``stage * M + mb``, Bs after the Fs), the state a re-timing resumes from."""

    def places(self, index: Index) -> tuple[list[list[int]], list[list[float]], list[list[int]]]:
        """Per rank, the ends table's place of each of its Fs and Bs in order, their
        ends, and at each place of its order how many Fs and Bs come before: what a
        re-timing from this one copies or clears of the ends table, without reading its
        ops one by one each time (a search re-times one base thousands of times)."""
        got = self.__dict__.get("_places")
        if got is None:
            SM, M = index.S * index.M, index.M
            keys, ends, before = [], [], []
            for r, ops in enumerate(self[0].ranks):
                stage_r = index.stage[r]
                k_r, e_r, b_r = [], [], [0]
                for kind, c, i, _, end in ops:
                    if kind != 2:
                        k_r.append((SM if kind == B else 0) + stage_r[c][i] * M + i)
                        e_r.append(end)
                    b_r.append(len(k_r))
                keys.append(k_r)
                ends.append(e_r)
                before.append(b_r)
            got = self.__dict__["_places"] = (keys, ends, before)
        return got


def timed(
    index: Index,
    orders: Order,
    base: Timed | None = None,
    rank: int = 0,
    since: int = 0,
    cap: float = math.inf,
    spans: bool = False,
    same_from: int | None = None,
    rest: Sequence[Sequence[float]] | None = None,
    tails: tuple[list[float], list[float]] | None = None,
) -> Timed | None:
    """``asap``, with the ends table beside the plan. Given ``base``, the timing of
    orders that differ from these only on ``rank`` from position ``since`` on, only what
    can have changed is timed again: an op that started before the end of ``rank``'s op
    ``since - 1`` in ``base`` depends on nothing after it there (what it waits for ends no
    later than it starts), so it keeps its time, and the ops after it are resumed from
    there as the full pass would have timed them.

    With ``cap``, None as soon as an op ends past it (from its rank's first start with
    ``spans``, from 0 without): the orders' makespan (or longest span) is then past it
    too, whatever the ops not yet timed do. A search that only keeps orders scoring
    below ``cap`` stops timing the others there (most of its trials). With ``rest`` (per
    rank, at each place of its order no more than the cost of the ops after it there:
    ``rest_of``), an op that ends within ``cap`` but whose rank's ops after it cannot
    also stops it, long before the rank gets there. With ``tails`` (``tails_of`` base,
    and ``same_from``; makespan only), so does an op that starts in ``base`` after the ops
    ``rank``'s moved (its base's place ``same_from - 1`` and before) end there, and whose
    longest path to the end in ``base`` would take its end past ``cap``: no such path
    reaches the ops that moved (it would in ``base`` too, which runs them before the op),
    so the path is there as it was.

    With ``same_from`` (``rank``'s orders hold the ops of ``base``'s at the same places
    from there on, as every other rank's do), timing stops once what is left must time as
    in ``base``: each rank's last op timed ends as the op at its place in ``base`` (and
    ``rank`` is past ``same_from``), and every F or B timed whose end differs from
    ``base``'s has fed the op it feeds. Every op left then starts when its rank's previous
    op and its input end, as in ``base``, so it keeps ``base``'s time (by induction along
    the order they would be timed in); its place in ``base`` holds it. A move in the
    warm-up otherwise times every op after it again, though most settle within a few."""
    if base is None and cap == math.inf and rest is None and tails is None:
        got = _compiled(index, orders)
        if got is not True:
            return got
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
        keys, ends, before = base.places(index)
        cut = [b[k] for b, k in zip(before, ptr)]
        again = sum(map(len, keys)) - 2 * sum(cut)
        if again < 0:
            done = list(kept)
            for k_r, c_r in zip(keys, cut):
                for key in k_r[c_r:]:
                    done[key] = -1.0
        else:
            done = [-1.0] * (2 * SM)
            for k_r, e_r, c_r in zip(keys, ends, cut):
                for key, end in zip(k_r[:c_r], e_r[:c_r]):
                    done[key] = end
    if rest is None:
        rest = [[0.0] * len(seq) for seq in orders] if cap < math.inf else ()
    parked: dict[int, list[int]] = {}
    ready = deque(range(n))
    settle = base is not None and same_from is not None
    if tails is not None:
        tail, base_start = tails
        moved_end = plan.ranks[rank][same_from - 1][4]  # the last of the ops that moved, as base ran them
    if settle:
        base_ranks, base_done, start = plan.ranks, kept, list(ptr)
        differ: set[int] = set()  # Fs and Bs timed whose end differs from base's, their feed not yet timed
        unlike = {rank}  # ranks whose last op timed ends otherwise than its place in base
    while ready:
        r = ready.popleft()
        seq = orders[r]
        p = ptr[r]
        t_free = free[r]
        row = out[r]
        append = row.append
        stage_r = stage[r]
        n_ops = len(seq)
        # where this rank's ops may end: from its first start with ``spans`` (not yet
        # known when it has timed none, so the first op looks again)
        lim = (row[0][3] + cap if row else -math.inf) if spans else cap
        rest_r = rest[r] if rest else None
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
                    if settle:
                        differ.discard(own - M)
                    e += f_lat[own]
                    t = e if e > t_free else t_free
            elif kind == B:
                key = own if s == last else SM + own + M
                e = done[key]
                if e < 0:
                    parked.setdefault(key, []).append(r)
                    break
                if settle:
                    differ.discard(key)
                e += b_lat[own]
                t = e if e > t_free else t_free
            else:
                if done[SM + own] < 0:
                    parked.setdefault(SM + own, []).append(r)
                    break
                t = t_free
            end = t + costs[kind][s]
            if rest_r is not None and end + rest_r[p] > lim:
                lim = t + cap if spans and not row else lim
                if end + rest_r[p] > lim:
                    return None
            elif tails is not None and end + tail[kind * SM + own] > cap and base_start[kind * SM + own] > moved_end:
                return None
            append((kind, c, i, t, end))
            t_free = end
            p += 1
            if kind != 2:
                key = SM + own if kind == B else own
                done[key] = end
                if settle and end != base_done[key] and (kind == F or s):  # B of stage 0 feeds no other rank
                    differ.add(key)
                if parked:
                    waiting = parked.pop(key, None)
                    if waiting:
                        ready.extend(waiting)
        ptr[r] = p
        free[r] = t_free
        if settle:
            if (r != rank or p >= same_from) and (t_free == base_ranks[r][p - 1][4] if p else True):
                unlike.discard(r)
            else:
                unlike.add(r)
            if not differ and not unlike:
                return _settled(index, base_ranks, base_done, start, ptr, out)
    if any(ptr[r] < len(orders[r]) for r in range(n)):
        return None
    return Timed((Plan(prob, tuple(tuple(x) for x in out), "asap"), done))


def _compiled(index: Index, orders: Order) -> Timed | None | bool:
    """``timed`` without a base or a cap, the loop in C (``kernel.asap``): the same times
    (each op's start the later of its rank's previous end and its input's end plus its
    latency: sums in the same order), or True without the C loops."""
    lens = [len(seq) for seq in orders]
    if not sum(lens):
        return True
    ops = np.fromiter(chain.from_iterable(chain.from_iterable(orders)), np.int64, 3 * sum(lens)).reshape(-1, 3)
    rank = np.repeat(np.arange(len(lens)), lens)
    stage = index.stages[rank, ops[:, 1], ops[:, 2]]
    if stage.min() < 0 or ops[:, 0].min() < 0 or ops[:, 0].max() > 2:
        return True
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    cols = [np.ascontiguousarray(x, np.int32) for x in (ops[:, 0], stage, ops[:, 2])]
    prob = index.prob
    got = kernel.asap(index.S, index.M, offsets, *cols, (prob.f, prob.b, prob.w), index.f_lat, index.b_lat)
    if got is None:  # no C loops: the Python times them
        return True
    if got is False:  # the orders deadlock
        return None
    start, end, done = got
    kinds, chunks, mbs = ops.T.tolist()
    st, en = start.tolist(), end.tolist()
    ranks = tuple(
        tuple(zip(kinds[a:z], chunks[a:z], mbs[a:z], st[a:z], en[a:z]))
        for a, z in zip(offsets[:-1].tolist(), offsets[1:].tolist())
    )
    return Timed((Plan(prob, ranks, "asap"), done.tolist()))


def _settled(index: Index, base_ranks, base_done: list[float], start: list[int], ptr: list[int], out: list[list]) -> Timed:
    """``timed`` once what is left keeps ``base``'s times: each rank's ops timed so far,
    then ``base``'s from there; the ends table ``base``'s but for the ops timed again."""
    SM, M, stage = index.S * index.M, index.M, index.stage
    done = list(base_done)
    for r, row in enumerate(out):
        stage_r = stage[r]
        for kind, c, i, _, end in row[start[r] :]:
            if kind != 2:
                done[(SM if kind == B else 0) + stage_r[c][i] * M + i] = end
    ranks = tuple(tuple(row) + ops[k:] for row, ops, k in zip(out, base_ranks, ptr))
    return Timed((Plan(index.prob, ranks, "asap"), done))


def tails_of(index: Index, plan: Plan) -> tuple[list[float], list[float]] | None:
    """Per op (by ``kind * S * M + stage * M + mb``), its longest path in ``plan`` from
    its end to the end of the last op (each later op's cost, and the P2P latency of the
    inputs it passes), and its start there: ``timed``'s ``tails``. None where an op costs
    nothing (the start order that this reads the ops in then need not follow the paths)."""
    prob = index.prob
    costs = (prob.f, prob.b, prob.w)
    if min(min(prob.f), min(prob.b), min(prob.w)) <= 0:
        return None
    S, M = index.S, index.M
    SM = S * M
    stage, f_lat, b_lat = index.stage, index.f_lat, index.b_lat
    tail = [0.0] * (3 * SM)
    start = [0.0] * (3 * SM)
    ops = sorted(((op[3], r, k) for r, row in enumerate(plan.ranks) for k, op in enumerate(row)), reverse=True)
    for t, r, k in ops:  # every later op (on a path from this one) first
        row = plan.ranks[r]
        kind, c, i, _, _ = row[k]
        s = stage[r][c][i]
        own = s * M + i
        best = 0.0
        if k + 1 < len(row):  # the next op on the rank
            nk, nc, ni, _, _ = row[k + 1]
            ns = stage[r][nc][ni]
            best = costs[nk][ns] + tail[nk * SM + ns * M + ni]
        if kind == F or (kind == B and s > 0):  # the pass its output feeds
            nk, ns = (F, s + 1) if kind == F and s < S - 1 else (B, S - 1 if kind == F else s - 1)
            nown = ns * M + i
            via = (f_lat if nk == F else b_lat)[nown] + costs[nk][ns] + tail[nk * SM + nown]
            best = via if via > best else best
        tail[kind * SM + own] = best
        start[kind * SM + own] = t
    return tail, start


def rest_of(index: Index, seq: Sequence[tuple[int, int, int]], rank: int) -> list[float]:
    """The cost of the ops after each place of ``rank``'s order (``timed``'s ``rest``)."""
    costs, stage_r = (index.prob.f, index.prob.b, index.prob.w), index.stage[rank]
    out = [0.0] * len(seq)
    total = 0.0
    for p in range(len(seq) - 1, -1, -1):
        out[p] = total
        kind, c, i = seq[p]
        total += costs[kind][stage_r[c][i]]
    return out


_start = itemgetter(3)  # an op's start (C-level: bisect calls it at every step)


def orders_of(plan: Plan) -> list[list[tuple[int, int, int]]]:
    return [[(k, c, i) for k, c, i, _, _ in ops] for ops in plan.ranks]
