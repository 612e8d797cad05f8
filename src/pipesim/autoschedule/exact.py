"""Exact zero-bubble scheduling with OR-Tools CP-SAT (flat placement, split backward).

The model: one interval per op (F, B, W of every stage and micro-batch) on its rank,
no two on a rank at once; F after the previous stage's F plus the P2P latency, B after
the next stage's B plus the latency (the last stage's B after its own F), W after its B;
each kind in micro-batch order on a rank (micro-batches are interchangeable, so this
only removes symmetric copies); the rank's live activations (``Problem.deltas``: F start
+1, B end w_memory - 1, which adds memory when the W keeps more than the activation, W
end -w_memory) never above the limit, as a reservoir constraint: it holds at every
instant, so after each B too.

The objective is the longest per-rank span *as simulated*: rank r's first op (its first
F) starts, in an as-soon-as-possible run, exactly when the chain of first forwards
reaches it, ES_r; and a simulated run of any feasible order ends no later than the timed
solution. So minimising max_r(end of r's last W - ES_r) over timed solutions is the same
as minimising the simulated longest span over orders, and the solver's bound is a bound
on the latter.

Costs must be integers for CP-SAT: they are scaled by the smallest power of ten (up to
10^4) that makes every cost and the latency whole; if none does, by 10^4 with rounding,
and a result is then never called optimal (it is optimal for the rounded costs only).
ortools is imported here only, so the rest of pipesim runs without it.
"""

from __future__ import annotations

import math
import os
import time

from ..errors import PipesimError
from .evaluate import Index, asap
from .problem import B, F, Plan, Problem, W

MEMORY_UNIT = 1000  # memory levels are integers in thousandths of an activation


def integer_scale(values: list[float]) -> tuple[int, bool]:
    """(scale, exact): the smallest power of ten up to 10^4 making ``values`` whole."""
    for k in range(5):
        scale = 10**k
        if all(abs(v * scale - round(v * scale)) < 1e-6 for v in values):
            return scale, True
    return 10**4, False


def solve(prob: Problem, hint: Plan, time_limit: float, workers: int | None = None) -> Plan:
    """The best plan CP-SAT finds within ``time_limit`` seconds (never worse than
    ``hint``); ``optimal`` says whether it proved it, ``bound`` is its lower bound on the
    longest span."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise PipesimError("exact mode needs OR-Tools: pip install 'pipesim[exact]' (or pip install ortools)") from None
    if prob.placement.kind != "flat" or not prob.split:
        raise PipesimError("exact mode schedules the flat placement with split backwards (B and W) only")
    t0 = time.perf_counter()
    pl = prob.placement
    S, M = pl.stages, pl.microbatches
    scale, exact = integer_scale([*prob.f, *prob.b, *prob.w, prob.comm])
    dur = [[round(c * scale) for c in costs] for costs in (prob.f, prob.b, prob.w)]
    comm = round(prob.comm * scale)
    es = [0] * S  # ES_r: when the chain of first forwards reaches rank r
    for r in range(1, S):
        es[r] = es[r - 1] + dur[F][r - 1] + comm
    hint_end = max(ops[-1][4] for ops in hint.ranks)
    horizon = math.ceil((hint_end + hint.span) * scale) + sum(max(d) for d in dur) + 1

    m = cp_model.CpModel()
    start = {}
    per_rank: list[list] = [[] for _ in range(S)]
    for kind in (F, B, W):
        for s in range(S):
            for i in range(M):
                x = m.new_int_var(0, horizon, f"{'FBW'[kind]}{s}.{i}")
                start[kind, s, i] = x
                per_rank[s].append(m.new_fixed_size_interval_var(x, dur[kind][s], ""))

    def end(kind: int, s: int, i: int):
        return start[kind, s, i] + dur[kind][s]

    for s in range(S):
        m.add_no_overlap(per_rank[s])
        for i in range(M):
            if s > 0:
                m.add(start[F, s, i] >= end(F, s - 1, i) + comm)
            if s < S - 1:
                m.add(start[B, s, i] >= end(B, s + 1, i) + comm)
            m.add(start[B, s, i] >= end(F, s, i))
            m.add(start[W, s, i] >= end(B, s, i))
            if i > 0:
                for kind in (F, B, W):
                    m.add(start[kind, s, i] >= end(kind, s, i - 1))
    if prob.memory_limit is not None:
        # in thousandths, the B's and W's rounded together so that a micro-batch's
        # changes still sum to 0
        add_f, add_b, _ = (round(MEMORY_UNIT * d) for d in prob.deltas)
        for s in range(S):
            times, changes = [], []
            for i in range(M):
                times += [start[F, s, i], end(B, s, i), end(W, s, i)]
                changes += [add_f, add_b, -(add_f + add_b)]
            m.add_reservoir_constraint(times, changes, 0, math.floor(prob.memory_limit * MEMORY_UNIT + 1e-6))
    span = m.new_int_var(0, horizon, "span")
    for s in range(S):
        m.add(span >= end(W, s, M - 1) - es[s])
    m.minimize(span)
    for s, ops in enumerate(hint.ranks):
        for kind, _, i, st, _ in ops:
            m.add_hint(start[kind, s, i], round(st * scale))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.num_workers = workers or max(1, min(8, os.cpu_count() or 1))
    status = solver.solve(m)
    seconds = time.perf_counter() - t0
    info = {"status": solver.status_name(status), "scale": scale, "costs_exact": exact, "wall_s": seconds}
    bound = solver.best_objective_bound / scale if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None
    best = hint
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        order = []
        for s in range(S):
            # by start, then end (a zero-length op first), then kind
            ops = sorted((solver.value(start[k, s, i]), dur[k][s], k, i) for k in (F, B, W) for i in range(M))
            order.append([(k, 0, i) for _, _, k, i in ops])
        plan = asap(Index(prob), order)
        # the order's own count decides, as for every builder (a tie of zero-length ops
        # is one instant to the reservoir)
        if plan is not None and plan.span < hint.span - 1e-9 and all(prob.fits(k for k, _, _ in o) for o in order):
            best = plan
    proven = status == cp_model.OPTIMAL and exact
    if proven and bound is not None:
        bound = min(bound, best.span)
    return Plan(prob, best.ranks, "cp-sat", optimal=proven, bound=bound, seconds=seconds, info=info)
