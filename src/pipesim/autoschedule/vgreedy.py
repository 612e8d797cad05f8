"""A round-based greedy for the V placement: the construction behind the Zero Bubble
authors' ZB-V generator (Qi et al. 2024), written afresh on pipesim's ``Problem``.

Each rank holds two *legs* of the V: leg 0 is chunk 0 on the way down (inputs come from
rank r-1), leg 1 chunk 1 on the way up (inputs from rank r+1). A backward runs the legs
the other way round: its leg 0 is chunk 1 (from rank r-1, starting at rank 0 after the
last forward), its leg 1 is chunk 0 (from rank r+1). Ops are placed one at a time at the
earliest time their rank and input allow; the time a rank waits once it has started is
its *bubble*.

1. Warm-up: every rank runs its first forward; then, from the last rank up, a rank runs
   more forwards of leg 0 (sweeping the ranks above it along) while they fit in memory,
   leaving room for the leg-1 forwards still to come, and end before its first leg-1
   input arrives; then its leg-1 forward. Lower ranks then catch up with forwards,
   alternating the legs, until no rank has run fewer than the one above it.
2. Rounds (2M of them): every rank places one backward (leg 1 when its input is there,
   else leg 0; leg-1 ranks from the bottom up, then leg-0 ranks top down), then one
   forward (leg 1 when its input is there, else leg 0). Before an op, deferred Ws fill
   the wait for its input while they end in time; one more W goes in when the wait
   would make the rank's bubble exceed what the others already have (``fill_b`` /
   ``fill_f`` say whether to do that before leg-0 backwards and before forwards);
   memory is made with Ws, for a forward and for a backward that adds memory (a W share
   above 1, ``Problem.deltas``); while no W is pending a forward leaves a backward's
   room (``Problem.b_room``), or that backward could never run.
3. The Ws left run at the end.

The pass is repeated with each rank allowed the bubble of the previous pass (so ranks
that had less may take more, which evens the spans) while the worst bubble shrinks, for
each of the four (fill_b, fill_f). The result is an order; ``evaluate.asap`` times it.
"""

from __future__ import annotations

from collections import deque

from .problem import B, F, Problem, W

Order = list[list[tuple[int, int, int]]]
EPS = 1e-9


def _pass(prob: Problem, fill_f: bool, fill_b: bool, allowed: list[float] | None) -> tuple[Order, list[float]] | None:
    pl = prob.placement
    pp, M = pl.pp, pl.microbatches
    S = 2 * pp
    limit = float("inf") if prob.memory_limit is None else prob.memory_limit + EPS
    comm = prob.comm
    fadd, badd, wadd = prob.deltas
    broom = prob.b_room
    # the costs by kind and the W costs, looked up once: ``put`` and ``fill`` run for
    # every op of every pass (tens of thousands at pp36 x 64)
    costs, wcost = (prob.f, prob.b, prob.w), prob.w
    free = [0.0] * pp
    live = [0.0] * pp
    bubble = [0.0] * pp
    worst = [0.0]  # max(bubble), kept as it grows: a bubble never shrinks
    count = [[[0, 0], [0, 0]] for _ in range(pp)]  # [rank][F or B][leg]
    end: dict[tuple[int, int, int, int], float] = {}  # (kind, leg, rank, mb) -> end
    pending: list[deque] = [deque() for _ in range(pp)]
    order: Order = [[] for _ in range(pp)]
    top = max(allowed) if allowed else 0.0

    def allowance(r: int) -> float:
        return max(worst[0], top - allowed[r] if allowed else 0.0)

    def arrival(r: int, kind: int, leg: int) -> float | None:
        """When the next op's input from another rank arrives; None if it has none; -1
        if it is not placed yet."""
        src = r - 1 if leg == 0 else r + 1  # the rank a leg's input comes from
        if not 0 <= src < pp:  # none: the turn of the V, on this rank
            return None
        e = end.get((kind, leg, src, count[r][kind][leg]))
        return -1.0 if e is None else e + comm

    def ready(r: int, kind: int, leg: int) -> bool:
        i = count[r][kind][leg]
        if i >= M:
            return False
        src = r - 1 if leg == 0 else r + 1  # the rank a leg's input comes from (``arrival``)
        if 0 <= src < pp:
            return (kind, leg, src, i) in end
        if kind == F:  # the bottom of the V: leg 1 after this rank's leg 0
            return leg == 0 or (F, 0, r, i) in end
        return (F, 1, r, i) in end if leg == 0 else (B, 0, r, i) in end

    def put(r: int, kind: int, leg: int) -> None:
        done = count[r][kind]
        i = done[leg]
        # its stage: chunk 1 (the V's way up) is a forward's leg 1 and a backward's leg 0
        chunk_one = leg == 1 if kind == F else leg == 0
        s = S - 1 - r if chunk_one else r
        start = free[r]
        a = arrival(r, kind, leg)
        if a is not None and a > start:  # max(start, a)
            start = a
        if count[r][F][0] > 0:
            bubble[r] += start - free[r]
            if bubble[r] > worst[0]:
                worst[0] = bubble[r]
        free[r] = start + costs[kind][s]
        end[(kind, leg, r, i)] = free[r]
        done[leg] += 1
        order[r].append((kind, 1 if chunk_one else 0, i))
        if kind == F:
            live[r] += fadd
        else:
            live[r] += badd
            pending[r].append((s, i))

    def put_w(r: int) -> None:
        s, i = pending[r].popleft()  # a W never waits: its B ran on this rank
        free[r] += wcost[s]
        live[r] += wadd
        order[r].append((W, 1 if s >= pp else 0, i))

    def fits_f(r: int, more: float = 0.0) -> bool:
        """Does a forward fit on ``r`` (with ``more`` activations still to come), leaving
        a backward's room while no W is pending?"""
        return live[r] + fadd + more + (0.0 if pending[r] else broom) <= limit

    def make_room(r: int, need: float) -> bool:
        """Run ``r``'s oldest Ws until ``need`` more fits; False if they cannot make it."""
        while live[r] + need > limit:
            if not pending[r]:
                return False
            put_w(r)
        return True

    def fill(r: int, kind: int, leg: int, extra: bool) -> None:
        a = arrival(r, kind, leg)
        if a is None or a < 0:
            return
        while pending[r] and a + EPS >= free[r] + wcost[pending[r][0][0]]:
            put_w(r)
        if extra and pending[r] and a - free[r] > allowance(r) - bubble[r] + EPS:
            put_w(r)

    # 1. warm-up
    for r in range(pp):
        put(r, F, 0)
    for r in reversed(range(pp)):
        if r < pp - 1:
            target = end[(F, 1, r + 1, 0)] + comm
            while fits_f(r, 1 + 2 * r) and free[r] + prob.cost(F, r) <= target + EPS and count[r][F][0] < M:
                for j in range(r + 1):
                    if ready(j, F, 0):
                        put(j, F, 0)
        if ready(r, F, 1):
            put(r, F, 1)
    leg = 0
    for r in range(1, pp):
        while sum(count[r][F]) < sum(count[r - 1][F]) or count[r][F][1] <= count[r - 1][F][1] < M:
            moved = False
            for j in reversed(range(r, pp)):
                if ready(j, F, leg) and fits_f(j):
                    put(j, F, leg)
                    moved = True
            leg = 1 - leg
            if not moved and not any(ready(j, F, leg) and fits_f(j) for j in range(r, pp)):
                break

    # 2. rounds
    for _ in range(2 * M):
        first, second = [], []
        for r in range(pp):
            b0, b1 = count[r][B]
            if b1 >= b0:
                first.append(r)
            elif r == pp - 1 or (B, 1, r + 1, b1) in end or b0 >= M:
                second.append(r)
            else:
                first.append(r)
        for r, leg in [(r, 1) for r in reversed(second)] + [(r, 0) for r in first]:
            if not ready(r, B, leg):
                continue
            if not make_room(r, badd):
                return None
            fill(r, B, leg, leg == 1 or fill_b)
            put(r, B, leg)
        for r in range(pp):
            f0, f1 = count[r][F]
            if f1 >= M:
                continue
            if f1 >= f0 or not (r == pp - 1 or ready(r, F, 1)):
                leg = 0 if f0 < M and ready(r, F, 0) else None
            else:
                leg = 1
            if leg is None or not ready(r, F, leg):
                continue
            if not make_room(r, fadd) or not fits_f(r):
                return None
            fill(r, F, leg, fill_f)
            put(r, F, leg)

    # 3. the Ws left
    for r in range(pp):
        while pending[r]:
            put_w(r)
    if any(len(o) != 6 * M for o in order):
        return None
    return order, bubble


def v_greedy_orders(prob: Problem, rounds: int = 6) -> list[Order]:
    """The orders of every (fill_b, fill_f) after the allowance passes."""
    out = []
    for fill_b in (True, False):
        for fill_f in (True, False):
            got = _pass(prob, fill_f, fill_b, None)
            if got is None:
                continue
            best = got
            for _ in range(rounds):
                nxt = _pass(prob, fill_f, fill_b, best[1])
                if nxt is None or max(nxt[1]) >= max(best[1]) - EPS:
                    break
                best = nxt
            out.append(best[0])
    return out
