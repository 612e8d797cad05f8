"""The report's advice in plain words: whether DualPipe pays for itself, where combined
1F1B stands, whether the batch feeds the GPUs, and whether memory is tight."""

from __future__ import annotations

from ..schedules import REGISTRY
from ..schedules.combined import warmup
from .candidates import placement_chunks
from .memory_lines import usable_gb
from .naming import DUAL_FAMILY, layout_text, schedule_text
from .parallelism import batch_note
from .results import Plan
from .runnable import COMBINED, combined_problem
from .verdicts import family_verdicts, nowhere, rejection


def advice(plan: Plan) -> list[str]:
    best, m, c = plan.best, plan.model, plan.cluster
    out: list[str] = []
    if best is None:
        return ["Nothing fits: add GPUs, use a larger-memory GPU, or lower the global batch or sequence length."]
    dual = [plan.best_of(n) for n in DUAL_FAMILY if plan.best_of(n)]
    other = [r for r in plan.results if r.candidate.schedule not in DUAL_FAMILY]
    best_other = other[0] if other else None
    if best.candidate.schedule in DUAL_FAMILY:
        if best_other:
            out.append(dual_lead(plan, best_other))
        if best.candidate.schedule == "dualpipe" and m.moe:
            out.append(
                f"The two parameter copies cost {best.params_gb / 2:.1f} GB more weights per GPU (plus their gradients and optimizer "
                f"shards), which expert parallelism keeps small: each GPU holds 1/{best.candidate.layout.ep} of the routed experts."
            )
        elif best.candidate.schedule == "dualpipev":
            out.append("DualPipeV folds the model into a V on each rank: DualPipe's overlap with one copy of the parameters.")
        if m.moe:
            out.append(combined_advice(plan))
    elif plan.searched and not set(DUAL_FAMILY) & set(plan.searched):  # --schedules left them out: no verdict
        by = left_out_by(plan, DUAL_FAMILY)
        out.append(
            f"DualPipe and DualPipeV were not searched ({by}): "
            + (
                "a dense model has no expert all-to-all for them to hide."
                if m.moe is None
                else f"{_try_them(plan, by)} to see whether hiding the expert all-to-all pays here."
            )
        )
        if m.moe:
            out.append(combined_advice(plan))
    else:
        why = []
        if m.moe is None:
            why.append("a dense model has no expert all-to-all for DualPipe to hide")
        if not dual:
            why.append(f"neither DualPipe nor DualPipeV runs at any layout searched ({rejection(plan, 'dualpipe')})")
        else:
            d = min(dual, key=lambda r: r.step_time)
            why.append(
                f"its best ({d.candidate.label}, {layout_text(d, plan)}) is {d.step_time / best.step_time - 1:+.1%} per step"
            )
            two = plan.best_of("dualpipe")
            if two is None:
                why.append("DualPipe proper, with its two parameter copies, does not fit at all")
            elif two.candidate.recompute == "full" and best.candidate.recompute != "full":
                why.append(
                    f"DualPipe proper fits its two parameter copies only with full recomputation ({two.step_time / best.step_time - 1:+.1%})"
                )
        out.append(
            "DualPipe is overkill here: "
            + "; ".join(why)
            + f". {schedule_text(best)} with a {best.bubble:.1%} bubble is the better buy."
        )
        if m.moe:
            out.append(combined_advice(plan))
    lay = best.candidate.layout
    note = batch_note(c, plan.training, m.layers, lay.tp)
    if note:
        out.append(note)
    if lay.pp == 1:
        out.append(f"Pipeline parallelism is not needed: the model fits on each GPU {_without_pipeline(lay)}.")
    tight = tight_memory(plan)
    if tight:
        out.append(tight)
    return out


def _without_pipeline(lay) -> str:
    """What a pp1 layout fits with: data parallelism alone only where it shards nothing
    else (gpt-oss-120b's 117B parameters need tp and ep to fit an 80 GB card at pp1)."""
    shards = [f"{name}{n}" for name, n in (("tp", lay.tp), ("cp", lay.cp), ("ep", lay.ep), ("etp", lay.etp)) if n > 1]
    if not shards:
        return "with data parallelism alone"
    return f"with {' x '.join(shards)} sharding it beside data parallelism"


def tight_memory(plan: Plan) -> str | None:
    """Where the recommendation leaves some rank under 5% of the card free, that rank: the
    one with the least room under its own usable memory (``Result.room``), each rank
    having been held to its own (``device_memory.usable_on_rank``). The fullest rank need
    not be it: the last stage's rank keeps the loss's transient and the logits, so it can
    have less room while holding a smaller peak. None where every rank has room."""
    best, c = plan.best, plan.cluster
    rank, peak, usable = best.room or (best.rank, best.memory_gb, usable_gb(plan, best))
    if usable - peak >= 0.05 * c.hbm_gb:  # measured against what the card leaves usable, as the fit was
        return None
    if best.candidate.layout.pp == 1:
        head = f"Memory is tight: {peak:.1f} GB of the {usable:.1f} GB usable per GPU"
    else:
        head = (
            f"Memory is tight on pipeline rank {rank}, the one with the least room under its own usable memory: "
            f"{peak:.1f} GB of its {usable:.1f} GB usable"
        )
    return head + f" (the card's {c.hbm_gb:.3g} GB); fragmentation or a larger micro-batch may not fit."


def dual_lead(plan: Plan, other) -> str:
    """Why the recommended DualPipe(V) leads ``other``, the best of the rest. Its overlap of
    forward and backward chunks is the reason only where it exposes less communication;
    elsewhere the line said the overlap "brings" the exposed time to more than the rival's
    (DeepSeek-V3 on 2048 H800s: 0.83 s to 1.09 s), and now says what the rival does better."""
    best = plan.best
    gain = other.step_time / best.step_time - 1
    if best.exposed_comm < other.exposed_comm:
        return (
            f"DualPipe pays for itself here: {other.candidate.label} at its best exposes {other.exposed_comm:.2f} s of "
            f"communication per step, and overlapping forward and backward chunks brings that to {best.exposed_comm:.2f} s; "
            f"steps are {gain:.1%} faster."
        )
    head = (
        f"DualPipe leads here, {gain:.1%} per step ahead of {schedule_text(other)} at its best "
        f"({layout_text(other, plan)}), but not by hiding communication: that one exposes {other.exposed_comm:.2f} s "
        f"of it per step against {best.exposed_comm:.2f} s"
    )
    if best.bubble < other.bubble:  # the schedule's smaller bubble, then
        return f"{head}; the lead is the smaller bubble, {best.bubble:.1%} against {other.bubble:.1%}."
    return (
        f"{head} and idles no more (bubble {other.bubble:.1%} against {best.bubble:.1%}), so the lead is in the "
        f"layout ({layout_text(best, plan)}), not the schedule."
    )


def _try_them(plan: Plan, by: str) -> str:
    """What would put families left out ``by`` a flag or rule into the search."""
    if by == (plan.named_by or "--schedules"):
        return "add them"
    return "drop the pin" if by.startswith("--") else "search deeper pipelines (--pp 2 or more)"


def left_out_by(plan: Plan, names) -> str:
    """The flag that kept every family of ``names`` out of the search: the schedules the
    user named (--schedules, --compare: ``Plan.named``), else a --chunks pin that none of
    them holds (``candidates.schedule_variants``: a family without a chunks option runs its
    placement's count alone, DualPipe's and a V's 2 a rank)."""
    if plan.named is not None and not set(names) & set(plan.named):
        return plan.named_by or "--schedules"
    n = plan.pins.chunks
    if n and all("chunks" not in REGISTRY[x].options and placement_chunks(x, None) != n for x in names):
        held = sorted({placement_chunks(x, None) for x in names})
        return f"--chunks {n}: they hold {' or '.join(map(str, held))} a rank"
    # a rule no layout searched could meet (runnable.py: more than one chunk a rank at pp1),
    # which a --pp 1 pin, or a search of pp1 alone, sets
    whys = [nowhere(plan, x) for x in names]
    if all(whys):
        why = whys[0].split(":")[0]
        return f"--pp {plan.pins.pp}: {why}" if plan.pins.pp else why
    return plan.named_by or "--schedules"


def combined_advice(plan: Plan) -> str:
    """Where Megatron's combined 1F1B, which overlaps the same all-to-all as DualPipe with
    one copy of the parameters, stands against the recommendation, and why."""
    best = plan.best
    head = "Combined 1F1B (Megatron-LM's --overlap-moe-expert-parallel-comm) hides the all-to-all in F&B pairs"
    if best.candidate.schedule in COMBINED:
        rivals = [r for r in plan.results if r.candidate.schedule not in COMBINED]
        line = f"{head} with one copy of the parameters and wins here"
        if rivals:
            r = rivals[0]
            line += (
                f": the best other schedule, {schedule_text(r)} on {layout_text(r, plan)}, exposes {r.exposed_comm:.2f} s "
                f"of communication per step against {best.exposed_comm:.2f} s, bubble {r.bubble:.1%} against {best.bubble:.1%}"
            )
            if r.exposed_comm <= best.exposed_comm:  # it hid no more than the rival: not what won
                line += "; so its lead is not the all-to-all it hides"
        return line + "."
    head += ", as DualPipe does, with one copy of the parameters"
    found = [r for r in plan.results if r.candidate.schedule in COMBINED]
    if plan.searched and not set(COMBINED) & set(plan.searched):
        # left out by --schedules, or by a rule of Megatron's that refuses it at every expert
        # degree searched (chunks per rank are the search's to choose, so not that rule)
        # (ep1 refuses it at every degree only where the widest is 1; recomputation at all)
        eps = {r.candidate.layout.ep for r in (*plan.results, *plan.rejected)}
        why = combined_problem(max(eps), plan.training.recompute) if eps else None
        return f"{head}; it was not searched ({why or left_out_by(plan, COMBINED)})."
    if not found:
        return f"{head}; it fits at no layout searched ({rejection(plan, 'interleaved-1f1b-overlap')})."
    c = found[0]
    lay, v, M = c.candidate.layout, c.candidate.chunks or 1, c.candidate.microbatches
    g = c.group_size or lay.pp
    pairs = [v * M - warmup(lay.pp, r, M, v, g) for r in range(lay.pp)]
    text = (
        f"{head}. Its best, {schedule_text(c)}, is {family_verdicts(plan)[c.candidate.schedule]}. Megatron's warm-up "
        f"(2(pp-r-1) + (v-1)g + 1 forwards on rank r, g the micro-batch group) leaves {_range(pairs)} of each "
        f"rank's {v * M} forwards to pair with a backward"
    )
    fewer = [
        r
        for r in plan.rejected
        if r.candidate.schedule in COMBINED
        and r.candidate.layout == lay
        and (r.candidate.chunks or 1) < v
        and r.memory_gb
        and r.candidate.recompute == c.candidate.recompute
    ]
    if fewer:
        f = min(fewer, key=lambda r: r.memory_gb)
        text += (
            f"; it holds that warm-up plus the pair's forward, 2(pp-r-1) + (v-1)g + 2 chunk activations (DualPipe pp+1 "
            f"stages, DualPipeV 2pp+1 chunks), so at pp{lay.pp} it fits only with {v} chunks per rank ({schedule_text(f)} "
            f"needs {f.memory_gb:.0f} GB against {usable_gb(plan, f):.0f} GB usable), "
            f"which cuts {plan.model.layers} layers into {lay.pp * v} stages"
        )
    return text + "."


def _range(values: list[int]) -> str:
    """ "111-113", or one figure where every rank has it (pp1 printed "29-29")."""
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"
