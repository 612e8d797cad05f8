"""A list scheduler: simulate the ranks in time order and, whenever one is idle, pick
what it runs next.

The default choice, in order: a backward whose input has arrived (backwards are on the
critical path); else a forward whose input has arrived and that fits in memory; else a
deferred W (it fills time and frees memory); else wait. Policy knobs steer the rest:

* ``fill``: a forward or W started while a backward is on its way delays that backward
  unless it ends before the backward arrives. It runs anyway if it overruns the
  arrival by at most ``fill`` times its own length (0: never delay a backward; large:
  never wait idle while there is work).
* ``late_first``: with two ready forwards (V and dual placements), run the one at the
  later stage first (it reaches a backward, which frees memory, sooner) or the earlier.
* ``b_first``: False puts a ready forward ahead of a ready backward (forwards feed the
  whole pipeline downstream).
* ``unblock``: run a W ahead of a backward when a forward that is ready, or due before
  the W would end, waits for the memory it frees.
* ``w_first``: run a pending W before any forward (a W right after its B, as in 1F1B
  with the backward split).
* ``banker``: admit a micro-batch to a rank only if the rank can hold every forward it
  still owes there (always deadlock-free); otherwise one free slot is kept for the owed
  forwards unless a pending W or ready B can free one, which on a V placement keeps a
  rank from filling with chunk-0 activations that leave no room for chunk 1.

The times this produces are as-soon-as-possible for the order it produces (a rank never
idles while its chosen op is ready), so they equal what ``pipesim.simulate`` gives for
the same order; the tests check that.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass

from .problem import B, F, Plan, Problem, W

INF = math.inf
EPS = 1e-9


@dataclass(frozen=True)
class Policy:
    fill: float = INF
    late_first: bool = True
    banker: bool = False
    b_first: bool = True
    unblock: bool = False
    w_first: bool = False

    def __str__(self) -> str:
        flags = [f"fill={self.fill:g}", "late-first" if self.late_first else "early-first"]
        flags += [name for name, on in (("banker", self.banker), ("f-first", not self.b_first)) if on]
        flags += [name for name, on in (("unblock", self.unblock), ("w-first", self.w_first)) if on]
        return ",".join(flags)


POLICIES = tuple(
    Policy(fill, late, banker, bf)
    for bf in (True, False)
    for banker in (False, True)
    for fill in (INF, 1.0, 0.5, 0.0)
    for late in (True, False)
)


def list_schedule(prob: Problem, pol: Policy = Policy(), bound: float = INF) -> Plan | None:
    """One greedy pass; None if memory admission got stuck (a limit too tight for it), or
    as soon as a rank's span is sure to pass ``bound`` (the caller's best so far): its
    span so far plus the work it has left."""
    t0 = time.perf_counter()
    pl = prob.placement
    pp, S, M, C = pl.pp, pl.stages, pl.microbatches, pl.chunks
    split = prob.split
    comm = prob.comm
    wmem = prob.w_memory if split else 1.0
    bfree = 1.0 - wmem if split else 1.0
    limit = INF if prob.memory_limit is None else prob.memory_limit + EPS

    # slots[r][c]: the (mb, stage) passing through (rank r, chunk c), in micro-batch order
    slots: list[list[list[tuple[int, int]]]] = [[[] for _ in range(C)] for _ in range(pp)]
    where = [[(0, 0)] * S for _ in range(M)]  # (rank, chunk) of each (mb, stage)
    visits = [[0] * M for _ in range(pp)]  # forwards mb runs on rank r
    left = [0.0] * pp  # work not yet started, per rank
    for i in range(M):
        for s, (r, c) in enumerate(pl.routes[pl.route_of[i]]):
            slots[r][c].append((i, s))
            where[i][s] = (r, c)
            visits[r][i] += 1
            left[r] += prob.f[s] + prob.b[s] + (prob.w[s] if split else 0.0)
    fend = [[INF] * S for _ in range(M)]
    bend = [[INF] * S for _ in range(M)]
    fptr = [[0] * C for _ in range(pp)]
    bptr = [[0] * C for _ in range(pp)]
    wq: list[deque] = [deque() for _ in range(pp)]
    live = [0.0] * pp
    reserved = [0] * pp  # forwards still owed to micro-batches already on the rank
    fdone = [[0] * M for _ in range(pp)]
    free = [0.0] * pp
    out: list[list[tuple[int, int, int, float, float]]] = [[] for _ in range(pp)]
    remaining = M * S * (3 if split else 2)
    heap = [(0.0, r) for r in range(pp)]
    first = [INF] * pp  # start of each rank's first op
    over = False

    def arrival(r_from: int, r_to: int, end: float) -> float:
        return end + comm if r_from != r_to else end

    def start(r: int, t: float, kind: int, c: int, i: int, s: int) -> None:
        nonlocal remaining, over
        d = prob.cost(kind, s)
        end = t + d
        out[r].append((kind, c, i, t, end))
        free[r] = end
        if t < first[r]:
            first[r] = t
        left[r] -= d
        if end - first[r] + left[r] > bound:
            over = True  # the rest of the rank's work comes after this op
        remaining -= 1
        heapq.heappush(heap, (end, r))
        if kind == F:
            fend[i][s] = end
            fptr[r][c] += 1
            live[r] += 1
            if fdone[r][i] == 0:
                reserved[r] += visits[r][i] - 1
            else:
                reserved[r] -= 1
            fdone[r][i] += 1
            if s + 1 < S:
                r2 = where[i][s + 1][0]
                if r2 != r:
                    heapq.heappush(heap, (end + comm, r2))
        elif kind == B:
            bend[i][s] = end
            bptr[r][c] += 1
            live[r] -= bfree
            if split:
                wq[r].append((c, i, s))
            if s > 0:
                r2 = where[i][s - 1][0]
                if r2 != r:
                    heapq.heappush(heap, (end + comm, r2))
        else:
            live[r] -= wmem

    while heap and not over:
        t, r = heapq.heappop(heap)
        if free[r] > t + EPS:
            continue
        t = max(t, free[r])
        # what could run next on rank r, and when its input arrives
        best_b = None  # (arrival, -stage, c, i, s)
        next_b = INF
        best_f = None
        next_f = INF
        blocked = False
        for c in range(C):
            k = bptr[r][c]
            if k < fptr[r][c]:
                i, s = slots[r][c][k]
                a = fend[i][s] if s == S - 1 else arrival(where[i][s + 1][0], r, bend[i][s + 1])
                if a <= t + EPS:
                    key = (-s, i)
                    if best_b is None or key < best_b[0]:
                        best_b = (key, c, i, s)
                else:
                    next_b = min(next_b, a)
        # A micro-batch entering the rank must leave room for the forwards it still owes
        # here, unless a pending W or a ready B (whose W follows) can free it later.
        relief = bool(wq[r]) or best_b is not None
        for c in range(C):
            sl = slots[r][c]
            k = fptr[r][c]
            if k >= len(sl):
                continue
            i, s = sl[k]
            a = 0.0 if s == 0 else arrival(where[i][s - 1][0], r, fend[i][s - 1])
            need = 1.0
            if not fdone[r][i]:
                owed = reserved[r] + visits[r][i] - 1
                need += owed if pol.banker else (0 if relief else min(owed, 1))
            fits = live[r] + need <= limit
            if a <= t + EPS:
                if fits:
                    key = (-s if pol.late_first else s, i)
                    if best_f is None or key < best_f[0]:
                        best_f = (key, c, i, s)
                else:
                    blocked = True
            else:
                next_f = min(next_f, a)
                # a forward due before a W could finish, and short of memory
                if pol.unblock and not fits and wq[r] and a <= t + prob.w[wq[r][0][2]] + EPS:
                    blocked = True
        if pol.w_first and wq[r] and best_b is None:
            c, i, s = wq[r].popleft()
            start(r, t, W, c, i, s)
            continue
        if best_f is not None and not pol.b_first:
            _, c, i, s = best_f
            start(r, t, F, c, i, s)
            continue
        if pol.unblock and blocked and best_f is None and wq[r]:
            # free memory for a forward that waits for it, ahead of a backward
            c, i, s = wq[r].popleft()
            start(r, t, W, c, i, s)
            continue
        if best_b is not None:
            _, c, i, s = best_b
            start(r, t, B, c, i, s)
            continue
        if best_f is not None:
            _, c, i, s = best_f
            d = prob.f[s]
            if t + d <= next_b + pol.fill * d + EPS:
                start(r, t, F, c, i, s)
                continue
        if wq[r]:
            c, i, s = wq[r][0]
            d = prob.w[s]
            # a W is forced when a forward waits for the memory it frees
            if t + d <= next_b + pol.fill * d + EPS or (blocked and best_f is None and next_b == INF):
                wq[r].popleft()
                start(r, t, W, c, i, s)
                continue
        wake = min(next_b, next_f)
        if wake < INF:
            heapq.heappush(heap, (wake, r))
    if remaining or over:
        return None
    return Plan(prob, tuple(tuple(o) for o in out), f"greedy({pol})", seconds=time.perf_counter() - t0)
