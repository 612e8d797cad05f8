"""A list scheduler: simulate the ranks in time order and, whenever one is idle, pick
what it runs next.

The default choice, in order: a backward whose input has arrived (backwards are on the
critical path), or the oldest deferred W when that backward would add more memory than
the rank has room for (``Problem.deltas``: a W share above 1); else a forward whose input
has arrived and that fits in memory, leaving room for a backward's growth (``b_room``)
while no W is pending; else a deferred W (it fills time and frees memory); else wait.
Policy knobs steer the rest:

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

import numpy as np

from .. import kernel
from .problem import B, F, Plan, Problem, W, input_latencies

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
    costs = (prob.f, prob.b, prob.w)
    fcost, wcost = prob.f, prob.w
    fadd, badd, wadd = prob.deltas
    broom = prob.b_room
    limit = INF if prob.memory_limit is None else prob.memory_limit + EPS
    fill, late_first, banker, b_first = pol.fill, pol.late_first, pol.banker, pol.b_first
    unblock, w_first = pol.unblock, pol.w_first

    # slots[r][c]: the (mb, stage) passing through (rank r, chunk c), in micro-batch order
    slots: list[list[list[tuple[int, int]]]] = [[[] for _ in range(C)] for _ in range(pp)]
    rank_of = [[0] * S for _ in range(M)]  # rank of each (mb, stage)
    visits = [[0] * M for _ in range(pp)]  # forwards mb runs on rank r
    left = [0.0] * pp  # work not yet started, per rank
    for i in range(M):
        for s, (r, c) in enumerate(pl.routes[pl.route_of[i]]):
            slots[r][c].append((i, s))
            rank_of[i][s] = r
            visits[r][i] += 1
            left[r] += prob.f[s] + prob.b[s] + (prob.w[s] if split else 0.0)
    # the P2P latency an input of (mb, stage) pays from the stage before / after it
    lat_prev, lat_next = input_latencies(prob, rank_of)
    lib = kernel.compiled()
    if lib is not None:
        plan = _compiled(lib, prob, pol, bound, slots, rank_of, visits, left, lat_prev, lat_next)
        return None if plan is None else Plan(prob, plan, f"greedy({pol})", seconds=time.perf_counter() - t0)
    chunks = range(C)
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
    push, pop = heapq.heappush, heapq.heappop
    last_idle = None  # the (time, rank) just popped that started nothing
    while heap:
        entry = pop(heap)
        if entry == last_idle:
            continue  # the same wake-up again, with nothing changed since: the same nothing
        t, r = entry
        if free[r] > t + EPS:
            continue
        if free[r] > t:
            t = free[r]
        # what could run next on rank r, and when its input arrives
        best_b = None  # (key, c, i, s)
        next_b = INF
        best_f = None
        next_f = INF
        blocked = False
        slots_r, fptr_r, bptr_r, wq_r = slots[r], fptr[r], bptr[r], wq[r]
        live_r, fdone_r = live[r], fdone[r]
        for c in chunks:
            k = bptr_r[c]
            if k < fptr_r[c]:
                i, s = slots_r[c][k]
                a = fend[i][s] if s == S - 1 else bend[i][s + 1] + lat_next[i][s]
                if a <= t + EPS:
                    if best_b is None or (-s, i) < best_b[0]:
                        best_b = ((-s, i), c, i, s)
                elif a < next_b:
                    next_b = a
        # A backward that adds memory waits for a W to make its room (a W is pending:
        # forwards leave a backward's room while none is)
        b_short = best_b is not None and live_r + badd > limit
        # A micro-batch entering the rank must leave room for the forwards it still owes
        # here, unless a pending W or a ready B (whose W follows) can free it later.
        relief = bool(wq_r) or best_b is not None
        room = 0.0 if wq_r else broom
        for c in chunks:
            sl = slots_r[c]
            k = fptr_r[c]
            if k >= len(sl):
                continue
            i, s = sl[k]
            a = 0.0 if s == 0 else fend[i][s - 1] + lat_prev[i][s]
            need = fadd + room
            if not fdone_r[i]:
                owed = reserved[r] + visits[r][i] - 1
                need += owed if banker else (0 if relief else min(owed, 1))
            fits = live_r + need <= limit
            if a <= t + EPS:
                if fits:
                    key = (-s if late_first else s, i)
                    if best_f is None or key < best_f[0]:
                        best_f = (key, c, i, s)
                else:
                    blocked = True
            else:
                if a < next_f:
                    next_f = a
                # a forward due before a W could finish, and short of memory
                if unblock and not fits and wq_r and a <= t + wcost[wq_r[0][2]] + EPS:
                    blocked = True
        # the op to start: (kind, chunk, mb, stage), or None to wait
        if (w_first and wq_r and best_b is None) or (b_short and wq_r):
            kind, (c, i, s) = W, wq_r.popleft()
        elif best_f is not None and not b_first:
            kind, c, i, s = F, *best_f[1:]
        elif unblock and blocked and best_f is None and wq_r:
            # free memory for a forward that waits for it, ahead of a backward
            kind, (c, i, s) = W, wq_r.popleft()
        elif best_b is not None and not b_short:
            kind, c, i, s = B, *best_b[1:]
        else:
            kind = None
            if best_f is not None:
                _, c, i, s = best_f
                d = fcost[s]
                if t + d <= next_b + fill * d + EPS:
                    kind = F
            if kind is None and wq_r:
                c, i, s = wq_r[0]
                d = wcost[s]
                # a W is forced when a forward waits for the memory it frees, and when
                # the rank's next backward, which adds memory, cannot run without it (it
                # would run right before that backward anyway: now the rank idles less)
                forced = (blocked and best_f is None and next_b == INF) or live_r + badd > limit
                if t + d <= next_b + fill * d + EPS or forced:
                    wq_r.popleft()
                    kind = W
        if kind is None:
            last_idle = entry
            wake = next_b if next_b < next_f else next_f
            if wake < INF:
                push(heap, (wake, r))
            continue
        last_idle = None
        d = costs[kind][s]
        end = t + d
        out[r].append((kind, c, i, t, end))
        free[r] = end
        if t < first[r]:
            first[r] = t
        left[r] -= d
        if end - first[r] + left[r] > bound:
            return None  # the rest of the rank's work comes after this op: past the bound
        remaining -= 1
        push(heap, (end, r))
        if kind == F:
            fend[i][s] = end
            fptr_r[c] += 1
            live[r] += fadd
            if fdone_r[i] == 0:
                reserved[r] += visits[r][i] - 1
            else:
                reserved[r] -= 1
            fdone_r[i] += 1
            if s + 1 < S:
                r2 = rank_of[i][s + 1]
                if r2 != r:
                    push(heap, (end + comm, r2))
        elif kind == B:
            bend[i][s] = end
            bptr_r[c] += 1
            live[r] += badd
            if split:
                wq_r.append((c, i, s))
            if s > 0:
                r2 = rank_of[i][s - 1]
                if r2 != r:
                    push(heap, (end + comm, r2))
        else:
            live[r] += wadd
    if remaining:
        return None
    return Plan(prob, tuple(tuple(o) for o in out), f"greedy({pol})", seconds=time.perf_counter() - t0)


def _compiled(lib, prob: Problem, pol: Policy, bound: float, slots, rank_of, visits, left, lat_prev, lat_next):
    """``list_schedule``'s loop in C (``kernel``, ``_engine.c``): the same steps on the
    same tables, as arrays. Per rank its ops (kind, chunk, mb, start, end), or None."""
    pl = prob.placement
    pp, S, M, C = pl.pp, pl.stages, pl.microbatches, pl.chunks
    split = prob.split
    per_rank = [sum(len(x) for x in slots[r]) for r in range(pp)]  # (mb, stage) slots of each rank
    slot_off = np.zeros(pp * C + 1, np.int64)
    np.cumsum([len(x) for row in slots for x in row], out=slot_off[1:])
    flat = [p for row in slots for x in row for p in x]
    slot_i = np.array([i for i, _ in flat], np.int32)
    slot_s = np.array([s for _, s in flat], np.int32)
    rank_start = np.zeros(pp + 1, np.int64)
    np.cumsum(per_rank, out=rank_start[1:])
    out_off = rank_start[:-1] * (3 if split else 2)
    total = int(rank_start[-1]) * (3 if split else 2)
    limit = INF if prob.memory_limit is None else prob.memory_limit + EPS
    dp = np.array([prob.comm, *prob.deltas, prob.b_room, limit, pol.fill, bound], np.float64)
    flags = (split, pol.late_first, pol.banker, pol.b_first, pol.unblock, pol.w_first)
    costs = [np.array(x, np.float64) for x in (prob.f, prob.b, prob.w)]
    tables = (
        slot_off,
        slot_i,
        slot_s,
        np.array(rank_of, np.int32).reshape(-1),
        np.array(visits, np.int32).reshape(-1),
        None,  # each rank's work left: the loop takes it down, so a fresh copy each try
        np.array(lat_prev, np.float64).reshape(-1),
        np.array(lat_next, np.float64).reshape(-1),
        out_off,
    )
    cap = 4 * total + pp + 16  # wake-ups waiting at once: each op pushes at most two, an idle rank one
    while True:
        out = [np.empty(total, t) for t in (np.int32, np.int32, np.int32, np.float64, np.float64)]
        out_n = np.zeros(pp, np.int64)
        wq = np.empty(3 * max(1, int(rank_start[-1])), np.int32)
        wq_head, wq_tail = rank_start[:-1].copy(), rank_start[:-1].copy()
        heap = (np.empty(cap, np.float64), np.empty(cap, np.int32))
        state = (
            np.full(M * S, INF),
            np.full(M * S, INF),
            np.zeros(pp * C, np.int64),
            np.zeros(pp * C, np.int64),
            np.zeros(pp),
            np.zeros(pp, np.int64),
            np.zeros(pp * M, np.int32),
            np.zeros(pp),
            np.full(pp, INF),
        )
        ip = np.array([pp, S, M, C, *map(int, flags), cap], np.int64)
        work = (*tables[:5], np.array(left, np.float64), *tables[6:])
        arrays = (ip, dp, *costs, *work, *out, out_n, wq, wq_head, wq_tail, *heap, *state)
        code = lib.pipesim_list_schedule(*(a.ctypes.data for a in arrays))
        if code != 2:
            break
        cap *= 2  # the heap ran out of room: again, with twice as much
    if code:
        return None
    cols = [x.tolist() for x in out]
    return tuple(tuple(zip(*(col[a : a + k] for col in cols))) for a, k in zip(out_off.tolist(), out_n.tolist()))
