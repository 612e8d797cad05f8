"""The search: every layout and schedule that fits, simulated, ranked by time per step.

Candidates (``candidates``) are checked and bounded from below (``evaluate.prepare``),
then simulated in order of their bound with the component cost model; the search stops
when the bounds prove the rest cannot enter the top rows or beat their own family's best.

What the candidates share is computed once (``shared.Shared``): compiled programs
(kept in a cache bounded in bytes, ``programs``), per-rank item counts for the bounds,
cost models (and, through ``pipesim.components``, the plans of their items).
"""

from __future__ import annotations

import gc
import heapq
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..errors import PipesimError
from ..schedules import REGISTRY
from .bounds import static_floor
from .candidates import NO_PINS, Candidate, Pins, candidates, check_pins
from .evaluate import Prepared, finish, prepare, too_many_slots
from .memory_lines import held_text
from .naming import recompute_text
from .rank_fit import least_over
from .results import GB, Plan, Result
from .shared import Shared
from .specs import Cluster, Model, Training

#: the search, and what its callers hold of it
__all__ = ["Candidate", "Pins", "Plan", "Result", "closest_miss", "search"]


def search(
    m: Model,
    c: Cluster,
    t: Training,
    schedules: list[str] | None = None,
    progress: Callable[[int, int, Plan], None] | None = None,
    keep: int = 10,
    pins: Pins = NO_PINS,
    exhaustive: bool = False,
) -> Plan:
    """Rank every candidate that fits. Candidates are simulated in order of their lower
    bound, and one is skipped when its bound cannot beat both its family's best and the
    ``keep``-th best so far: the winner, the runners-up and each family's best are exact.
    ``exhaustive`` simulates every candidate in full (no bound, extrapolation or shared
    programs): the slow oracle the tests hold the fast search to.

    ``progress(done, total, plan)`` is called as candidates are checked and simulated."""
    with _no_collections():
        return _search(m, c, t, schedules, progress, keep, pins, exhaustive)


#: whether the last search left what it kept in the collector's permanent generation
#: (``_no_collections``), to be given back at the next
_FROZEN: list[bool] = [False]


@contextmanager
def _no_collections():
    """Python's cycle collector off while a search runs (as it was before, after): the
    search keeps large caches alive (programs, plans, split and order tables) and makes
    no cycles, and each collection walks all of them again. At a twentieth of its
    usual pace it still took 1.0-1.1 s of the cold 13 s Qwen3-235B-A22B search on
    h800-2048 (243 young, 23 middle and 2 full collections); off, the peak memory rose
    from 311 to 315 MB. Reference counting frees everything else as it goes.

    On the way out, what the search left alive (1.25 M objects on that search) is frozen
    (``gc.freeze``) before the collector is back on: the allocations counted while it was
    off would otherwise start a young collection at once that walks every one of them
    (0.68 s of its 11 s), only to keep them all, and the interpreter's last collection on
    exit would walk them again (0.2 s). The next search gives them back to the oldest
    generation first, so no cycle they later join outlives two searches. Where something
    else froze objects already, the collector is left to run as it would."""
    was = gc.isenabled()
    if _FROZEN[0]:
        gc.unfreeze()
        _FROZEN[0] = False
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not gc.get_freeze_count():
                gc.freeze()
                _FROZEN[0] = True
            gc.enable()


def _search(
    m: Model,
    c: Cluster,
    t: Training,
    schedules: list[str] | None,
    progress: Callable[[int, int, Plan], None] | None,
    keep: int,
    pins: Pins,
    exhaustive: bool,
) -> Plan:
    check_pins(m, c, t, pins)
    cands = list(candidates(m, c, t, schedules, pins))
    if not cands:
        if pins:
            raise PipesimError(
                f"no layout with {pins.flags()} divides {c.gpus} GPUs and {t.global_batch} sequences per step "
                "into whole pipelines and micro-batches; change or drop a pin"
            )
        raise PipesimError(
            f"no layout divides {c.gpus} GPUs and {t.global_batch} sequences into whole pipelines and micro-batches; "
            "change --gpus or --global-batch"
        )
    shared = Shared(m, c, t, exhaustive=exhaustive)
    plan = Plan(m, c, t, considered=len(cands), top=keep, pins=pins, searched=tuple(dict.fromkeys(x.schedule for x in cands)))
    total = 2 * len(cands)
    tick = progress or (lambda done, total, plan: None)
    tick(0, total, plan)
    prepared: list[Prepared] = []
    floors: dict = {}
    for i, cand in enumerate(cands):
        refused = None if exhaustive else _over_floor(m, t, cand, floors, shared)
        p = refused or too_many_slots(cand) or prepare(m, c, t, cand, shared)
        (plan.rejected.append(p) if isinstance(p, Result) else prepared.append(p))
        if i % 16 == 0:
            tick(i + 1, total, plan)
    remaining = Counter(p.candidate.schedule for p in prepared)
    family_best: dict[str, float] = {}
    best_times: list[float] = []  # the keep fastest so far, sorted
    done = len(cands) + len(plan.rejected)
    for i, p in enumerate(_by_bound(prepared)):
        fam = p.candidate.schedule
        remaining[fam] -= 1
        kth = best_times[keep - 1] if len(best_times) >= keep else math.inf
        if exhaustive or p.bound < max(kth, family_best.get(fam, math.inf)):
            res = finish(m, c, t, p, shared)
            if res.fits:
                plan.results.append(res)
                family_best[fam] = min(family_best.get(fam, math.inf), res.step_time)
                best_times = sorted([*best_times, res.step_time])[:keep]
            else:
                plan.rejected.append(res)
        else:
            plan.skipped += 1
            # sorted by bound: once no family left can still improve, the rest cannot win
            if p.bound >= kth and all(family_best.get(f, math.inf) <= p.bound for f, n in remaining.items() if n):
                plan.skipped += len(prepared) - i - 1
                break
        done += 1
        tick(done, total, plan)
    plan.results.sort(key=rank_key)
    plan.results = without_twins(plan.results)
    tick(total, total, plan)
    if pins and plan.best is None:
        raise PipesimError(f"the pinned layout ({pins.flags()}) does not fit or cannot run: {closest_miss(plan)}")
    return plan


#: the families from the simplest to run to the most involved: 1F1B first, which every
#: framework runs (Megatron-LM has no GPipe), then as registered (GPipe, interleaved, ...)
SIMPLEST_FIRST = {name: i for i, name in enumerate(["1f1b", *(n for n in REGISTRY if n != "1f1b")])}


def rank_key(r: Result) -> tuple:
    """A result's place in the ranking: its step, then its memory, then the simpler family.
    Steps equal to 12 significant digits tie: schedules that run the same ops (every one
    at pp1, where a rank's F and B follow each other whatever the family) sum their times
    in another order and differ in the last bits, which must not hand the recommendation
    to the most involved of them (zb-auto, for which no framework has a flag)."""
    return (float(f"{r.step_time:.12g}"), r.memory_gb, SIMPLEST_FIRST.get(r.candidate.schedule, len(SIMPLEST_FIRST)))


def without_twins(results: list[Result]) -> list[Result]:
    """The results less each one without recomputation whose selective twin (same
    layout, schedule and micro-batches) takes the same step in no more memory: the
    candidates keep both for families whose order depends on the memory room
    (``candidates``), and where selective recomputes nothing the twin without it is the
    same plan holding more, a runner-up that says nothing."""
    selective = {
        (r.candidate.layout, r.candidate.schedule, r.candidate.chunks, r.candidate.microbatches): r
        for r in results
        if r.candidate.recompute == "selective"
    }

    def twin(r: Result) -> bool:
        c = r.candidate
        s = selective.get((c.layout, c.schedule, c.chunks, c.microbatches))
        return c.recompute == "none" and s is not None and s.step_time == r.step_time and s.memory_gb <= r.memory_gb

    return [r for r in results if not twin(r)]


def _by_bound(prepared: list[Prepared]) -> Iterator[Prepared]:
    """The candidates in order of their bounds (ties in the order given, as a stable sort
    would), each priced only when its floor reaches the front: a priced candidate leaves
    the queue once no floor or bound before it is lower, and a floor is never above its
    bound, so none priced later could have come first. Those left when the caller stops
    are never priced."""
    queue = [(p.floor, n, p) for n, p in enumerate(prepared)]
    heapq.heapify(queue)
    while queue:
        _, n, p = heapq.heappop(queue)
        if p.priced:
            yield p
        else:
            heapq.heappush(queue, (p.bound, n, p))


def _over_floor(m: Model, t: Training, cand: Candidate, floors: dict, shared: Shared) -> Result | None:
    """The candidate refused without a cost model when its layout's static floor
    (``bounds.static_floor``, computed once a layout: some rank holds at least that)
    exceeds the most any rank of the layout can fill (``Shared.most_usable``): then that
    rank fits on no placement, and nothing that fits is refused."""
    lay = cand.layout
    if lay not in floors:
        floors[lay] = static_floor(m, t, lay)
    floor, most = floors[lay], shared.most_usable(lay, cand.recompute)
    if floor <= most:
        return None
    why = (
        f"parameters, gradients and optimizer states need at least {floor / GB:.0f} GB on some rank > "
        f"{most / GB:.0f} GB usable on any"
    )
    if most <= 0:  # what every rank holds back passes the card alone (a long sequence's loss transient)
        why = (
            f"no rank has room for its parameters, gradients and optimizer states ({floor / GB:.0f} GB or more on "
            "some rank): what every rank holds back passes the card"
        )
    return Result(cand, False, why, static_gb=floor / GB)


def closest_miss(plan: Plan) -> str:
    """Why the candidate that came nearest to fitting did not: of the refusals for memory,
    the one least over its own rank's usable memory (``rank_fit.least_over``), named with
    that rank and both figures."""
    if not plan.rejected:
        return "every candidate was skipped"
    least = least_over(plan, plan.rejected)
    if least is None:
        r = plan.rejected[0]
        return f"{r.candidate.label} at {r.candidate.layout}, {recompute_text(r.candidate.recompute)}: {r.reason}"
    r, need, usable = least
    if usable <= 0:  # no figure to be over: say what took the card
        return (
            f"{r.candidate.label} at {r.candidate.layout}, {recompute_text(r.candidate.recompute)}, the least over its "
            f"memory: {r.reason} ({held_text(plan, r)})"
        )
    over = f"{need - usable:.1f} GB over"
    said = _FIGURES.fullmatch(r.reason)
    if said:  # the refusal names both figures already: once, to the tenth, with how far over
        head, at_least, where, there = said.groups()
        why = f"{head} {at_least or ''}{need:.1f} GB {where} > {usable:.1f} GB usable {there} ({over})"
    else:
        against = (
            f"rank {r.rank}'s {usable:.1f} GB usable" if r.rank is not None else f"at most {usable:.1f} GB usable on any rank"
        )
        why = f"{r.reason} ({need:.1f} GB against {against}: {over})"
    return (
        f"{r.candidate.label} at {r.candidate.layout}, {recompute_text(r.candidate.recompute)}, the least over its memory: {why}"
    )


#: a refusal that reads "<what> <need> GB on rank R > <usable> GB usable there" (rank_fit.refused)
#: or "... at least <need> GB on some rank > <usable> GB usable on any" (_over_floor): the closest
#: miss said both figures twice ("913 GB on some rank > 82 GB usable on any (913.2 GB against
#: at most 82.0 GB usable on any rank: ...)")
_FIGURES = re.compile(r"(.*?) (at least )?[\d.]+ GB (on rank \d+|on some rank) > [\d.]+ GB usable (there|on any)")
