"""A plan as a Markdown report (for a design review) or as JSON.

The report gives the recommendation and its runners-up, what it saves against 1F1B over
the whole run, why each other schedule family lost (verdicts.py), advice in plain words
(advice.py), how to run it (recipe.py), and every assumption the numbers rest on
(assumptions.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..schedules import REGISTRY
from . import recipe
from .advice import advice
from .assumptions import assumptions
from .calibrate import RANGES, Uncertainty
from .candidates import skipped_families
from .compute import model_flops_per_token
from .memory_lines import held_text, usable_gb
from .naming import (
    fmt_hours,
    fmt_params,
    fmt_tokens,
    hours_for_run,
    layout_text,
    moe_layers_text,
    recompute_text,
    schedule_text,
    wall_clock,
)
from .params import published_active_params, total_params
from .results import Plan, Result
from .specs import Cluster
from .verdicts import family_verdicts, nowhere, rank_text, rejection


@dataclass(frozen=True)
class Notes:
    """What the report says beside the plan: the calibration applied, or (without one)
    the range of the recommendation's step over the assumptions' stated ranges."""

    calibration: str | None = None
    uncertainty: Uncertainty | None = None


def range_lines(plan: Plan, u: Uncertainty) -> list[str]:
    best = plan.best
    per_t = best.gpu_hours_per_t / best.step_time
    lo, hi = u.spans[u.biggest]
    return [
        f"- **range {u.low:.2f}-{u.high:.2f} s per step** ({fmt_hours(u.low * per_t)}-{fmt_hours(u.high * per_t)} GPU-hours "
        f"per trillion tokens) with every assumption below at the ends of its stated range; uncalibrated, so read the "
        f"single figures as the middle of that range",
        f"- the assumption that moves it most: {u.biggest} ({lo:.2f}-{hi:.2f} s); "
        + "; ".join(f"{k} {a:.2f}-{b:.2f} s" for k, (a, b) in u.spans.items() if k != u.biggest)
        + ". Measure one layer (`pipesim profile` -> `--calibrate`) or one step (`--measured-step`) to narrow it",
    ]


def result_row(r: Result, plan: Plan) -> dict:
    c = r.candidate
    return {
        "layout": layout_text(r, plan),
        "pp": c.layout.pp,
        "dp": c.layout.dp,
        "tp": c.layout.tp,
        "ep": c.layout.ep,
        "cp": c.layout.cp,
        "etp": c.layout.etp,
        "edp": c.layout.edp,
        "schedule": c.schedule,
        "chunks": c.chunks,
        "group_size": r.group_size,
        "microbatches": c.microbatches,
        "micro_batch_size": c.layout.micro_batch,
        "recompute": c.recompute,
        "step_seconds": r.step_time,
        "bubble_ratio": r.bubble,
        "compute_utilization": r.compute_utilization,
        "exposed_comm_seconds": r.exposed_comm,
        "memory_gb": r.memory_gb,
        # the pipeline rank memory_gb is of (the fullest) and what that rank can fill: each
        # rank is held to its own (device_memory.usable_on_rank)
        "memory_rank": r.rank,
        "usable_gb": r.usable.bytes / 1e9 if r.usable is not None else None,
        "tokens_per_second": r.tokens_per_s,
        "mfu": r.mfu,
        "gpu_hours_per_trillion_tokens": r.gpu_hours_per_t,
    }


def published(plan: Plan) -> dict | None:
    """A published GPU-hours figure for this model on this GPU, if the preset has one."""
    ref = plan.model_published
    if ref and ref.get("gpu") == plan.cluster.gpu:
        return ref
    return None


def _published_choice(plan: Plan, ref: dict) -> str | None:
    """Where the layout the model's authors chose ranks in this search."""
    if not {"schedule", "pp", "ep"} <= ref.keys():
        return None
    want = (ref["schedule"], ref["pp"], ref["ep"])
    theirs = f"The authors' own choice ({want[0]}, pp{want[1]}, ep{want[2]})"
    for i, r in enumerate(plan.results, 1):
        c = r.candidate
        if (c.schedule, c.layout.pp, c.layout.ep) == want:
            return (
                f"{theirs} ranks {rank_text(plan, i)} here, "
                f"{r.step_time / plan.best.step_time - 1:+.1%} per step against the recommendation."
            )
    if plan.skipped:  # a layout that fits may be among those skipped as slower than the top rows
        return (
            f"{theirs} is not among the {len(plan.results)} simulated here: it did not fit, was not searched, "
            f"or cannot reach the top {plan.top} (the search skips such candidates unsimulated)."
        )
    return f"{theirs} did not fit or was not searched here."


def placement(c: Cluster) -> dict:
    """Where the job's GPUs sit, as the report's "nodes" line says in words: nodes, and the
    NVLink domains the job spans with its GPUs in each (``Cluster.domain``)."""
    return {
        "gpus_per_node": c.gpus_per_node,
        "nodes": c.nodes,
        "nvlink_domain": c.nvlink_domain or c.gpus_per_node,
        "gpus_per_domain": c.domain,
        "domains": max(1, c.gpus // c.domain),
    }


def to_dict(plan: Plan, compare: tuple[str, str] | None = None, notes: Notes | None = None, layout: int = 1) -> dict:
    best = plan.best
    d = {
        "model": plan.model.name,
        "cluster": plan.cluster.name,
        "gpus": plan.cluster.gpus,
        "placement": placement(plan.cluster),
        "parameters": total_params(plan.model),
        "active_parameters": published_active_params(plan.model),  # as the maker counts them
        "layers": plan.model.layers,
        "moe_layers": list(plan.model.moe_layers),  # from 0; the others have a dense MLP (the text says it in words)
        "training": asdict(plan.training),
        "candidates": plan.considered,
        "fitting": len(plan.results),  # simulated to the end
        "fitting_not_simulated": plan.skipped,  # fit, but provably could not win (the Markdown says both)
        "recommendation": result_row(best, plan) if best else None,
        "runners_up": [result_row(r, plan) for r in plan.results[1 : plan.top]],
        "families": family_verdicts(plan) if best else {},
        "advice": advice(plan),
        "assumptions": dict(assumptions(plan)),
    }
    one = plan.best_of("1f1b")
    if best and one:
        d["versus_1f1b"] = {
            "step_seconds_1f1b": one.step_time,
            "gpu_hours_recovered_whole_run": hours_for_run(one, plan.training) - hours_for_run(best, plan.training),
            "tokens": plan.training.tokens,
        }
    ref = published(plan)
    if best and ref:
        d["published"] = {**ref, "ratio": best.gpu_hours_per_t / ref["gpu_hours_per_trillion_tokens"]}
    if compare:
        d["compare"] = compare_dict(plan, *compare)
    if best:  # how to run it (planner/recipe.py)
        d["recipe"] = recipe.recipe(plan, layout)
    if notes and notes.calibration:
        d["calibration"] = notes.calibration
    if notes and notes.uncertainty and best:
        u = notes.uncertainty
        d["range"] = {
            "step_seconds": [u.low, u.high],
            "gpu_hours_per_trillion_tokens": [x * best.gpu_hours_per_t / best.step_time for x in (u.low, u.high)],
            "moves_most": u.biggest,
            "per_assumption": {k: list(v) for k, v in u.spans.items()},
            "factors": {k: [lo, hi] for k, (_, lo, hi) in RANGES.items()},
        }
    return d


def _cell(text: str) -> str:
    """A Markdown table cell: a Megatron layout's bars ("Et*3|(t*4|)*6t*5L", a stage_split)
    escaped, which otherwise split the row into columns of their own."""
    return text.replace("|", "\\|")


def _three_figures(x: float) -> str:
    """``x`` to three significant figures in plain decimals (0.00206, 0.0000433, 12.3)."""
    return f"{x:.{max(0, 2 - math.floor(math.log10(x)))}f}" if x > 0 else "0"


def compare_dict(plan: Plan, a: str, b: str) -> dict:
    ra, rb = plan.best_of(a), plan.best_of(b)
    out = {"baseline": a, "candidate": b, a: result_row(ra, plan) if ra else None, b: result_row(rb, plan) if rb else None}
    if ra and rb:
        out["gpu_hours_recovered_per_million_tokens"] = (ra.gpu_hours_per_t - rb.gpu_hours_per_t) / 1e6
    return out


def markdown(plan: Plan, compare: tuple[str, str] | None = None, notes: Notes | None = None, layout: int = 1) -> str:
    m, c, t, best = plan.model, plan.cluster, plan.training, plan.best
    lines = [f"# Pipeline plan: {m.name} on {c.name} ({c.gpus} x {c.gpu})", ""]
    moe_text = f" ({said})" if (said := moe_layers_text(m)) else ""
    lines.append(
        f"{m.name}: {fmt_params(total_params(m))} parameters ({fmt_params(published_active_params(m))} active per token), {m.layers} layers{moe_text}. "
        f"Training: {t.global_batch} sequences of {t.seq} tokens per step, {t.precision}, ZeRO-{t.zero}, "
        f"{fmt_tokens(t.tokens)} in all. Searched {plan.considered} candidate layouts and schedules{_only(plan)}; "
        f"{len(plan.results)} fit and were simulated to the end, {plan.skipped} more fit but provably could not win."
    )
    lines.append("")
    if best is None:
        lines += ["## Recommendation", "", "Nothing fits. " + advice(plan)[0], ""]
        return "\n".join(lines)
    cand = best.candidate
    lines += [
        "## Recommendation",
        "",
        f"**{schedule_text(best)} on {layout_text(best, plan)}**, {cand.microbatches} micro-batch{'es' if cand.microbatches != 1 else ''} of {cand.layout.micro_batch} x {t.seq} tokens "
        f"per pipeline per step, {recompute_text(cand.recompute)}.",
        "",
        f"- time per step: {best.step_time:.2f} s (pipeline {best.makespan:.2f} s + exposed data-parallel communication and "
        f"optimizer step {best.dp_sync:.2f} s)",
        f"- bubble {best.bubble:.1%}; compute utilization {best.compute_utilization:.1%}; exposed communication {best.exposed_comm:.2f} s per step",
        f"- memory per GPU: {best.memory_gb:.1f} GB of {usable_gb(plan, best):.1f} GB usable (parameters, gradients "
        f"and optimizer states up to {best.static_gb:.1f} GB a rank; {held_text(plan, best)}){_least_room(best)}",
        f"- {best.tokens_per_s:,.0f} tokens/s; MFU {best.mfu:.1%} of BF16 peak",
        f"- **{fmt_hours(best.gpu_hours_per_t)} GPU-hours per trillion tokens**; {fmt_hours(hours_for_run(best, t))} GPU-hours "
        f"({wall_clock(hours_for_run(best, t) / c.gpus)} on {c.gpus} GPU{'s' if c.gpus > 1 else ''}) for {fmt_tokens(t.tokens)}",
    ]
    if notes and notes.uncertainty:
        lines += range_lines(plan, notes.uncertainty)
    if notes and notes.calibration:
        lines.append(f"- {notes.calibration}; the search above ran on the fitted efficiencies")
    lines.append("")
    ref = published(plan)
    if ref:
        ratio = best.gpu_hours_per_t / ref["gpu_hours_per_trillion_tokens"]
        lines += [
            f"Published: {fmt_hours(ref['gpu_hours_per_trillion_tokens'])} {ref['gpu']} GPU-hours per trillion tokens "
            f"({ref['source']}). This estimate: {fmt_hours(best.gpu_hours_per_t)}, ratio {ratio:.2f}. The published figure "
            "is a whole-run average (batch ramp, restarts); the estimate is a steady-state step at the assumptions below "
            "(benchmarks/published_runs.py predicts the whole run, ramp included).",
            "",
        ]
        theirs = _published_choice(plan, ref)
        if theirs:
            lines += [theirs, ""]
    lines += ["## Runners-up", "", _table(plan, plan.results[: plan.top]), ""]
    lines += recipe.markdown(plan, layout)  # how to run it (planner/recipe.py)
    one = plan.best_of("1f1b")
    if one and one is not best:
        saved = hours_for_run(one, t) - hours_for_run(best, t)
        lines += [
            "## Against 1F1B",
            "",
            f"The best 1F1B plan ({layout_text(one, plan)}, {one.step_time:.2f} s per step) needs {fmt_hours(one.gpu_hours_per_t)} "
            f"GPU-hours per trillion tokens. The recommendation recovers **{fmt_hours(saved)} GPU-hours** over the whole run "
            f"of {fmt_tokens(t.tokens)} ({saved / hours_for_run(one, t):.1%}).",
            "",
        ]
    if compare:
        d = compare_dict(plan, *compare)
        a, b = compare
        lines += [f"## {b} against {a}", ""]
        if "gpu_hours_recovered_per_million_tokens" in d:
            ra, rb = plan.best_of(a), plan.best_of(b)
            saved = d["gpu_hours_recovered_per_million_tokens"]
            # three significant figures: on fast clusters a million tokens costs hundredths of
            # a GPU-hour, and a fixed three decimals read 0.002 (or -0.000 for a loss)
            verb = "recovers" if saved >= 0 else "costs"
            lines.append(
                f"Best {a}: {layout_text(ra, plan)}, {ra.step_time:.2f} s per step. Best {b}: {layout_text(rb, plan)}, "
                f"{rb.step_time:.2f} s per step. {b} {verb} **{_three_figures(abs(saved))} GPU-hours per million tokens** "
                f"({abs(saved) * 1e6 / ra.gpu_hours_per_t:.1%} of {a}'s; {fmt_hours(abs(saved) * t.tokens / 1e6)} over the run)."
            )
        else:
            missing = a if d[a] is None else b
            lines.append(f"{missing} has no plan that fits: {rejection(plan, missing)}.")
        lines.append("")
    verdicts = family_verdicts(plan)
    if verdicts:
        lines += ["## Why the other schedules lost", "", "| schedule | verdict |", "|---|---|"]
        lines += [f"| {n} | {_cell(v)} |" for n, v in verdicts.items()]
        lines.append("")
    lines += ["## Advice", ""] + [f"- {a}" for a in advice(plan)] + [""]
    lines += (
        ["## Assumptions", "", "| name | value |", "|---|---|"] + [f"| {k} | {_cell(v)} |" for k, v in assumptions(plan)] + [""]
    )
    lines += [f"Model FLOPs per token: {model_flops_per_token(m, t.seq) / 1e9:.0f} GFLOP (training, no recomputation).", ""]
    return "\n".join(lines)


def _only(plan: Plan) -> str:
    """Which schedules, where --schedules, --compare or a pin (--chunks) left some out: the
    recommendation is the best of those alone (--compare 1f1b,dualpipe on Llama 3 70B
    recommended 1f1b, a zb-v plan being faster), and the report must say so."""
    every = [n for n in REGISTRY if n not in skipped_families() and nowhere(plan, n) is None]
    if not plan.searched or set(every) <= set(plan.searched):
        return ""
    return f" of {', '.join(plan.searched)} alone (the recommendation is the best of these, not of every schedule)"


def _least_room(r: Result) -> str:
    """Where another rank than the fullest has the least room under its own usable
    memory (the last stage's rank holds the loss's transient and logits), that one too:
    each rank was held to its own."""
    if r.room is None or r.room[0] == r.rank:
        return ""
    rank, peak, usable = r.room
    return f"; the least room is rank {rank}'s, {peak:.1f} of its own {usable:.1f} GB usable"


def _table(plan: Plan, rows: list[Result]) -> str:
    head = "| # | layout | schedule | M x mb | recompute | step (s) | bubble | utilization | memory/GPU (GB) | tokens/s | MFU | GPU-h / 1T tokens |"
    out = [head, "|---" * 12 + "|"]
    for i, r in enumerate(rows, 1):
        c = r.candidate
        out.append(
            f"| {i} | {layout_text(r, plan)} | {schedule_text(r)} | {c.microbatches} x {c.layout.micro_batch} | {c.recompute} | "
            f"{r.step_time:.2f} | {r.bubble:.1%} | {r.compute_utilization:.1%} | {r.memory_gb:.1f} | {r.tokens_per_s:,.0f} | "
            f"{r.mfu:.1%} | {fmt_hours(r.gpu_hours_per_t)} |"
        )
    return "\n".join(out)
