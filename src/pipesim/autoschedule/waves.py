"""A wave scheduler for the flat placement: 1F1B's skeleton, with the Ws placed by timing.

Rank r runs ``warmup[r]`` forwards, then step k = 0, 1, ...: the backward of micro-batch
k and the next forward; the Ws are slotted in where they cost nothing. Micro-batch by
micro-batch ("waves": the backwards of step k from the last rank up, then the forwards
from the first rank down), every op is placed with its inputs' arrival times already
known, so a W goes where the rank would otherwise wait:

* whole Ws go into the wait before an op while they end before its input arrives;
* a W that would overrun the arrival goes in only when the wait left is at least
  ``partial`` times the W (0: always, large: never); it delays that op by the overrun;
* after its last forward the first rank fills every wait with a W (no other rank waits
  for it any more, so delaying its own B costs nothing and idling does);
* a forward that does not fit in memory runs the oldest Ws first, and so does a
  backward that adds more memory than the rank has room for (a W share above 1,
  ``Problem.deltas``); while no W is pending, a forward leaves a backward's room
  (``Problem.b_room``), or that backward could never run;
* the Ws left at the end run last.

Knobs are few (warm-up depth, ``partial``); ``best_waves`` tries a small grid and keeps
the order with the shortest longest span under the fast model of ``evaluate``.
"""

from __future__ import annotations

import math
import time
from collections import deque

from .problem import B, F, Plan, Problem, W

EPS = 1e-9


def warmups(prob: Problem, depth: float) -> list[int]:
    """Forwards before the first backward on each rank: ``depth`` forwards per rank still
    ahead (1F1B has pp - r, i.e. depth 1; ZB-H2 about 2(pp - r) - 1, depth 2), capped by
    the memory limit (``warmup_cap``) and M, and never more than the rank above (the waves
    need that)."""
    pl = prob.placement
    pp, M = pl.pp, pl.microbatches
    cap = warmup_cap(prob)
    out = []
    for r in range(pp):
        want = max(1, round(depth * (pp - r) - (depth - 1)))
        out.append(min(cap, want, out[-1] if out else M))
    return out


def warmup_cap(prob: Problem) -> int:
    """The most forwards a rank can run before its first backward: no W is pending yet,
    so they leave that backward's room (``Problem.b_room``); at least 1, at most M."""
    M = prob.placement.microbatches
    if prob.memory_limit is None:
        return M
    return max(1, min(M, math.floor(prob.memory_limit - prob.b_room + EPS)))


def timed_warmups(prob: Problem, overrun: bool) -> list[int]:
    """Warm-up depths from the costs rather than a ratio: rank r runs the forwards that
    fit between its first forward's arrival and its first backward's (the first
    micro-batch down to the last rank and back up to r), and with ``overrun`` one more
    that ends after it; capped like ``warmups``."""
    pl = prob.placement
    pp, M = pl.pp, pl.microbatches
    cap = warmup_cap(prob)
    start = [0.0] * pp
    for r in range(1, pp):
        start[r] = start[r - 1] + prob.f[r - 1] + prob.comm
    arrive = [0.0] * pp
    arrive[pp - 1] = start[pp - 1] + prob.f[pp - 1]
    for r in range(pp - 2, -1, -1):
        arrive[r] = arrive[r + 1] + prob.b[r + 1] + prob.comm
    out: list[int] = []
    for r in range(pp):
        k, end = 1, start[r] + prob.f[r]
        while k < M and (end < arrive[r] - EPS if overrun else end + prob.f[r] <= arrive[r] + EPS):
            k, end = k + 1, end + prob.f[r]
        out.append(min(cap, k, out[-1] if out else M))
    return out


def wave_schedule(
    prob: Problem, warm: list[int], partial: float, bound: float = math.inf, ratios: list[float] | None = None
) -> Plan | None:
    """Place every op as described in the module docstring; None when memory cannot be
    met with this warm-up (a forward needs room that no W can free), or as soon as a
    rank's span is sure to pass ``bound`` (the caller's best so far: this order cannot
    win): its span so far plus the work it has left.

    ``ratios`` collects the wait / W ratio of every decision ``partial`` took: another
    ``partial`` that splits those ratios the same way gives this same order."""
    t0 = time.perf_counter()
    pl = prob.placement
    pp, M = pl.pp, pl.microbatches
    comm = prob.comm
    fadd, badd, wadd = prob.deltas
    broom = prob.b_room
    limit = math.inf if prob.memory_limit is None else prob.memory_limit + EPS
    cost = (prob.f, prob.b, prob.w)
    fcost, bcost, wcost = cost
    left = [M * (prob.f[r] + prob.b[r] + prob.w[r]) for r in range(pp)]  # work still to place
    fend = [[0.0] * M for _ in range(pp)]
    bend = [[0.0] * M for _ in range(pp)]
    free = [0.0] * pp
    live = [0.0] * pp
    wq: list[deque] = [deque() for _ in range(pp)]
    out: list[list[tuple[int, int, int, float, float]]] = [[] for _ in range(pp)]
    nf = [0] * pp  # forwards placed per rank

    def run(r: int, kind: int, i: int, at: float) -> float:
        d = cost[kind][r]
        end = at + d
        out[r].append((kind, 0, i, at, end))
        free[r] = end
        left[r] -= d
        return end

    def fill(r: int, arrive: float) -> None:
        """Ws into the wait before an op whose input arrives at ``arrive``."""
        q = wq[r]
        if not q:  # no W pending: nothing to place
            return
        w = wcost[r]
        while q and free[r] + w <= arrive + EPS:
            run(r, W, q.popleft(), free[r])
            live[r] += wadd
        wait = arrive - free[r]
        if q and wait > EPS and r == 0 and nf[0] >= M:
            # after its last forward nothing waits for the first rank: a W in the wait
            # only delays its own B, which frees the next W sooner than idling would
            run(r, W, q.popleft(), free[r])
            live[r] += wadd
        elif q and wait > EPS:
            if ratios is not None:
                ratios.append(wait / w)  # w > wait > 0 here: the loop above left this W
            if wait >= partial * w:
                run(r, W, q.popleft(), free[r])
                live[r] += wadd

    def make_room(r: int, need: float) -> bool:
        """Run the oldest Ws until ``need`` more fits; False if they cannot make it."""
        while live[r] + need > limit:
            if not wq[r]:
                return False
            run(r, W, wq[r].popleft(), free[r])
            live[r] += wadd
        return True

    # ``forward`` and ``backward`` run for every op of every construction (the heuristic
    # makes hundreds): ``make_room`` is asked only where the op does not fit as it is,
    # and the op placed in place, as ``run`` would place it
    def forward(r: int, i: int) -> bool:
        arrive = 0.0 if r == 0 else fend[r - 1][i] + comm
        if (live[r] + fadd > limit and not make_room(r, fadd)) or (not wq[r] and live[r] + fadd + broom > limit):
            return False
        fill(r, arrive)
        at = arrive if arrive > free[r] else free[r]  # max(free[r], arrive)
        d = fcost[r]
        end = fend[r][i] = free[r] = at + d
        out[r].append((F, 0, i, at, end))
        left[r] -= d
        live[r] += fadd
        return True

    def backward(r: int, i: int) -> bool:
        arrive = fend[r][i] if r == pp - 1 else bend[r + 1][i] + comm
        if live[r] + badd > limit and not make_room(r, badd):
            return False
        fill(r, arrive)
        at = arrive if arrive > free[r] else free[r]  # max(free[r], arrive)
        d = bcost[r]
        end = bend[r][i] = free[r] = at + d
        out[r].append((B, 0, i, at, end))
        left[r] -= d
        live[r] += badd
        wq[r].append(i)
        return True

    for r in range(pp):
        for _ in range(warm[r]):
            if not forward(r, nf[r]):
                return None
            nf[r] += 1
    for k in range(M):
        for r in reversed(range(pp)):
            if not backward(r, k):
                return None
        for r in range(pp):
            if nf[r] < M:
                if not forward(r, nf[r]):
                    return None
                nf[r] += 1
        if any(free[r] - out[r][0][3] + left[r] > bound for r in range(pp)):
            return None  # the rest of the rank's work comes after free[r]: this order loses
    for r in range(pp):
        while wq[r]:
            run(r, W, wq[r].popleft(), free[r])
    return Plan(prob, tuple(tuple(o) for o in out), f"waves(warm={warm},partial={partial:g})", seconds=time.perf_counter() - t0)
