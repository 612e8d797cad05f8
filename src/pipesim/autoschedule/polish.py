"""Local search over op orders: move one op a few places earlier on its rank, keep the
move when the order still runs, still fits in memory and scores better.

Only the first and last ``window`` ops of each rank are tried: the steady state of a
pipeline is already tight, and its warm-up and cool-down are where orders differ. The
search is first-improvement hill climbing with a budget of evaluations, so it is
deterministic and bounded.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .evaluate import Index, orders_of, rest_of, tails_of, timed
from .problem import B, F, Plan, W

Key = Callable[[Plan], tuple]


def makespan_key(plan: Plan) -> tuple:
    ends = [ops[-1][4] for ops in plan.ranks if ops]
    return (round(max(ends), 9), round(sum(plan.spans), 9))


def span_key(plan: Plan) -> tuple:
    return (round(plan.span, 9), round(sum(plan.spans), 9))


def span_makespan_key(plan: Plan) -> tuple:
    return (round(plan.span, 9),) + makespan_key(plan)


#: what the first term of each key is: the longest span (True) or the makespan (False),
#: so that ``timed`` can stop a trial once an op ends past the best key's first term
_SPANS = {makespan_key: False, span_key: True, span_makespan_key: True}

# the keys round to 9 digits: an op ending this far past a key's first term (rounded)
# puts the trial's first term past it too
_CAP_MARGIN = 1e-6


def fits(index: Index, seq: list[tuple[int, int, int]]) -> bool:
    """Does one rank's order stay within the memory limit (``Problem.fits``)?"""
    return index.prob.fits(op[0] for op in seq)


def _room(index: Index, seq: list[tuple[int, int, int]]) -> tuple[list[float], list[float], list[float]]:
    """One rank's live activations after each op of its order (``Problem.peak_of``'s
    count), and their running maxima from the start (from 0) and from the end: what
    ``_moved_fits`` reads."""
    d = index.prob.deltas
    live, head, tail = [], [], []
    now = top = 0.0
    for op in seq:
        now += d[op[0]]
        top = now if now > top else top
        live.append(now)
        head.append(top)
    top = -math.inf
    for now in reversed(live):
        top = now if now > top else top
        tail.append(top)
    tail.reverse()
    return live, head, tail


def _moved_fits(index: Index, room: tuple[list[float], list[float], list[float]], op: int, q: int, p: int) -> bool:
    """``fits`` of the order ``room`` counts with its op at ``p`` (of kind ``op``) moved to
    ``q`` < ``p``: the ops before q and after p hold what they held, the moved op and
    those it passed its change more. Read off ``_room`` in a few steps, not counted over
    the whole order again at each of a search's thousands of trials; the same sums where
    every change is a whole number of activations (exact in any order), as ``polish``
    uses it."""
    live, head, tail = room
    before = live[q - 1] if q else 0.0
    shifted = max(before, *live[q:p]) + index.prob.deltas[op]
    peak = max(head[q - 1] if q else 0.0, shifted, tail[p + 1] if p + 1 < len(live) else -math.inf)
    return peak <= index.prob.memory_limit + 1e-9


def _fed_by(index: Index, rank: int, op: tuple[int, int, int], ops: list[tuple[int, int, int]]) -> bool:
    """Is ``op``'s input (the W's B, the previous stage's F, the next stage's B or, at the
    last stage, the F) among ``ops`` of ``rank``?"""
    kind, c, i = op
    stage_r = index.stage[rank]
    s = stage_r[c][i]
    if kind == W:
        want_kind, want = B, s
    elif kind == F:
        want_kind, want = F, s - 1
    else:
        want_kind, want = (F, s) if s == index.S - 1 else (B, s + 1)
    return any(k == want_kind and m == i and stage_r[ch][m] == want for k, ch, m in ops)


def polish(index: Index, plan: Plan, key: Key, window: int, shift: int = 6, budget: int = 4000) -> Plan:
    orders: list[list[tuple[int, int, int]]] = orders_of(plan)
    best, best_key = plan, key(plan)
    # the current orders' own times: a trial differs from them on one rank from the
    # spot it moves an op to, and only what can have changed is timed again
    base = timed(index, orders)
    # a trial is kept only below best_key: one whose first term passes it cannot be
    spans = _SPANS.get(key)
    cap = best_key[0] + _CAP_MARGIN if spans is not None else math.inf
    spans = bool(spans)
    # per rank, the cost of its ops after each place of its order: an op's end plus that
    # is a bound on the rank's end, so a trial stops as soon as one passes ``cap``
    rest = [rest_of(index, seq, r) for r, seq in enumerate(orders)] if cap < math.inf else None
    # and (makespan first) each op's longest path to the end
    tails = tails_of(index, base[0]) if cap < math.inf and not spans else None
    # with whole-number changes (the V searches' unit memory) a trial's fit is read off
    # each rank's counts (``_moved_fits``), remade only when a move is kept
    prob = index.prob
    whole = prob.memory_limit is not None and all(float(x).is_integer() for x in prob.deltas)
    rooms = [_room(index, seq) for seq in orders] if whole else None
    evals = 0
    improved = True
    while improved and evals < budget:
        improved = False
        for r, seq in enumerate(orders):
            n = len(seq)
            spots = sorted(set(range(1, min(window, n))) | set(range(max(1, n - window), n)))
            for p in spots:
                op = seq[p]
                for q in range(p - 1, max(-1, p - 1 - shift), -1):
                    other = seq[q]
                    if other[0] == op[0] and other[1] == op[1]:
                        break  # keep each kind in micro-batch order per chunk
                    if evals >= budget:
                        break
                    trial = seq[:q] + [op] + seq[q:p] + seq[p + 1 :]
                    if not (_moved_fits(index, rooms[r], op[0], q, p) if rooms is not None else fits(index, trial)):
                        continue
                    evals += 1
                    if _fed_by(index, r, op, seq[q:p]):
                        continue  # it would wait for an op now after it on its own rank: a deadlock
                    orders[r] = trial
                    if rest is not None:
                        # after any place of q..p no less than after p: what was after p still is
                        kept_rest = rest[r]
                        rest[r] = kept_rest[:q] + [kept_rest[p]] * (p - q + 1) + kept_rest[p + 1 :]
                    got = timed(index, orders, base, r, q, cap, spans, same_from=p + 1, rest=rest, tails=tails)
                    if rest is not None:
                        rest[r] = kept_rest
                    if got is not None:
                        k = key(got[0])
                        if k < best_key:
                            (best, _), base, best_key, seq = got, got, k, trial
                            if rooms is not None:
                                rooms[r] = _room(index, trial)
                            cap = best_key[0] + _CAP_MARGIN if cap < math.inf else cap
                            if rest is not None:
                                rest[r] = rest_of(index, trial, r)
                            if tails is not None:
                                tails = tails_of(index, best)
                            improved = True
                            break
                    orders[r] = seq
    return Plan(best.problem, best.ranks, plan.method + "+polish", seconds=plan.seconds)
