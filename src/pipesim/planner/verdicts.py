"""Why each schedule family other than the winner's lost: slower at its best layout, and
by what (exposed communication, bubble, recomputation, pipeline depth), or why it fits or
runs nowhere."""

from __future__ import annotations

import re
from collections import Counter

from ..schedules import REGISTRY
from .candidates import placement_chunks, skipped_families
from .memory_lines import held_text
from .naming import layout_text
from .rank_fit import digits, least_over
from .results import Plan
from .runnable import candidate_problem
from .search import rank_key


def rank_text(plan: Plan, rank: int) -> str:
    """``#rank of N`` where that rank is exact; past ``--top`` where the search skipped some
    candidates, the words say so. The search simulates every candidate that could enter
    its top rows, but past them it skips what provably cannot (``search``: a bound above
    the top-th step and its own family's best), so the results ahead of a later one are
    only those simulated: Llama 3 8B on 16 H100s kept to one row called v-min's best "#33
    of 48", which every candidate simulated puts at #164 of 516."""
    n = len(plan.results)
    if rank <= plan.top or not plan.skipped:
        return f"#{rank} of {n}"
    return f"past the top {plan.top} (#{rank} of the {n} simulated)"


def family_verdicts(plan: Plan) -> dict[str, str]:
    """Why each family other than the winner's lost, in one sentence."""
    best = plan.best
    out = {}
    names = {r.candidate.schedule for r in plan.results + plan.rejected}
    skipped = skipped_families()
    whole = names >= set(REGISTRY) - set(skipped)  # every family but the skipped was searched
    for name in REGISTRY:
        if name in skipped and whole:
            out[name] = f"not searched: {skipped[name]}"
        if name not in names or (best and name == best.candidate.schedule):
            continue
        mine = plan.best_of(name)
        if mine is None:
            out[name] = "does not fit or cannot run: " + rejection(plan, name)
            continue
        slower = mine.step_time / best.step_time - 1
        rank = plan.results.index(mine) + 1
        if rank_key(mine)[0] == rank_key(best)[0]:
            # the same step to 12 digits (every family at pp1 runs the same ops): "-0.0%
            # per step ... a little more time" said it lost on time, which it did not
            why = (
                f"for its memory ({mine.memory_gb:.1f} GB against {best.memory_gb:.1f})"
                if mine.memory_gb > best.memory_gb
                else "as ties go (the less memory, then 1f1b and the registry's order: search.rank_key)"
            )
            out[name] = (
                f"{rank_text(plan, rank)}, the same step time at {layout_text(mine, plan)}, "
                f"M={mine.candidate.microbatches}: a tie, ranked after the recommendation {why}"
            )
            continue
        reasons = []
        bubble_gap = mine.bubble * mine.makespan - best.bubble * best.makespan
        comm_gap = mine.exposed_comm - best.exposed_comm
        if comm_gap > 0.02 * best.step_time:
            reasons.append(f"exposes {mine.exposed_comm:.2f} s of communication per step against {best.exposed_comm:.2f} s")
        if bubble_gap > 0.02 * best.step_time:
            reasons.append(f"bubble {mine.bubble:.1%} against {best.bubble:.1%}")
        if mine.candidate.recompute != best.candidate.recompute and mine.candidate.recompute == "full":
            # only where no layout of it fits with less: zb-auto fits Llama 3 405B on 1024
            # H100s with selective recomputation too, and is fastest with full
            mine_all = [r for r in plan.results if r.candidate.schedule == name]
            reasons.append(
                "it recomputes in full (no layout of it simulated fits with less)"
                if all(r.candidate.recompute == "full" for r in mine_all)
                else "its best recomputes in full"
            )
        elif mine.candidate.layout.pp > best.candidate.layout.pp and _pushed_deeper(plan, mine):
            reasons.append(f"memory pushes it to pp{mine.candidate.layout.pp}")
        if not reasons:
            reasons.append("a little more time per step at its best layout")
        out[name] = (
            f"{rank_text(plan, rank)}, {slower:+.1%} per step at {layout_text(mine, plan)}, "
            f"M={mine.candidate.microbatches}: " + "; ".join(reasons)
        )
    return out


def _pushed_deeper(plan: Plan, mine) -> bool:
    """Whether memory, not speed, put a family's best at its depth: none of its layouts at
    a shallower pipeline fit, and some there were refused for memory. A family may fit
    shallower and simply run faster deeper (Mixtral 8x22B on 1024 B200s: zb-v fits at pp8,
    1.369 s, and is best at pp16, 1.349 s), which the verdict called memory's doing."""
    name, pp = mine.candidate.schedule, mine.candidate.layout.pp
    if any(r.candidate.schedule == name and r.candidate.layout.pp < pp for r in plan.results):
        return False
    return any(
        r.candidate.schedule == name and r.candidate.layout.pp < pp and not r.reason.startswith("cannot run")
        for r in plan.rejected
    )


def nowhere(plan: Plan, name: str) -> str | None:
    """Why no layout and recomputation the search looked at could run ``name``, or None
    where one could (``runnable``: combined 1F1B for a dense model, chunked orders where
    every layout is pp1): such a family was left out by no flag."""
    default = REGISTRY[name].options.get("chunks")
    held = placement_chunks(name, default if isinstance(default, int) else None)
    why = None
    for r in plan.results + plan.rejected:
        lay = r.candidate.layout
        why = candidate_problem(name, held, lay.pp, lay.ep, r.candidate.recompute)
        if why is None:
            return None
    return why


def rejection(plan: Plan, name: str) -> str:
    mine = [r for r in plan.rejected if r.candidate.schedule == name]
    if not mine:
        return f"not searched: {why}" if (why := nowhere(plan, name)) else "not searched"
    least = least_over(plan, mine)  # the refusal nearest to fitting, as the closest miss names it
    if least is not None:
        # the cheap checks give lower bounds (static memory, plus one micro-batch's
        # activations); the least of them alone reads like a near miss where every
        # order whose peak was computed needs far more
        r, need, usable = least
        if usable <= 0:  # no figure to be over: say what took the card
            return f"no rank has room for its parameters: {held_text(plan, r)}"
        known = [x.memory_gb for x in mine if x.memory_gb and x.peak_known]
        n = digits(need, usable)
        where = f"on rank {r.rank} against {usable:.{n}f} GB usable there"
        if r.rank is None:  # refused on its layout's static floor, held to the roomiest rank's
            where = f"on some rank against at most {usable:.{n}f} GB usable on any"
        text = f"needs at least {need:.{n}f} GB per GPU {where}"
        if known and min(known) >= need + 1:
            text += f"; its orders whose peak was computed need {min(known):.0f} GB or more"
        return text
    near = plan.best.candidate.layout.pp if plan.best else 0
    mine.sort(key=lambda r: abs(r.candidate.layout.pp - near))  # the example nearest the winner's layout
    cannot = [r.reason.removeprefix("cannot run: ") for r in mine if r.reason.startswith("cannot run: ")]
    if len(cannot) == len(mine):
        return f"its constraints fail at every layout searched (for example: {searched_words(cannot[0])})"
    reason, n = Counter(searched_words(r.reason) for r in mine).most_common(1)[0]
    return reason if n == len(mine) else f"{reason} ({n} of {len(mine)} layouts; the others cannot run or do not fit)"


#: a family's refusal names the command-line flags (schedules' ``check``: "needs an even
#: --pp, got 9"); in a plan's verdict the search chose those values, not the user
SEARCHED = {"--pp": "pp", "--microbatches": "M", "--chunks": "chunks"}


def searched_words(reason: str) -> str:
    """A family's refusal worded for a value the search chose: "needs an even pp, got 9"."""
    return re.sub(r"--(pp|microbatches|chunks)\b", lambda m: SEARCHED[m.group(0)], reason)
