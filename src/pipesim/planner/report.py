"""A plan as a Markdown report (for a design review) or as JSON.

The report gives the recommendation and its runners-up, what it saves against 1F1B over
the whole run, why each other schedule family lost, advice in plain words, and every
assumption the numbers rest on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, fields

from ..schedules import REGISTRY
from ..schedules.combined import warmup
from . import recipe
from .calibrate import RANGES, Uncertainty
from .candidates import SEARCHED_MAX_SLOTS, fixed_order_families, skipped_families
from .compute import (
    BACKWARD_SCORE_BYTES,
    FLASH_BACKWARD_SHARE,
    FORWARD_SCORE_BYTES,
    FP8_WGRAD_SHARE,
    gemm_efficiency,
    model_flops_per_token,
)
from .device_memory import usable_for
from .parallelism import batch_note, domain_text, layout_assumptions
from .params import active_params, total_params
from .results import Plan, Result
from .specs import Training

DUAL_FAMILY = ("dualpipe", "dualpipev")


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
        f"- **range {u.low:.2f}-{u.high:.2f} s per step** ({_fmt_hours(u.low * per_t)}-{_fmt_hours(u.high * per_t)} GPU-hours "
        f"per trillion tokens) with every assumption below at the ends of its stated range; uncalibrated, so read the "
        f"single figures as the middle of that range",
        f"- the assumption that moves it most: {u.biggest} ({lo:.2f}-{hi:.2f} s); "
        + "; ".join(f"{k} {a:.2f}-{b:.2f} s" for k, (a, b) in u.spans.items() if k != u.biggest)
        + ". Measure one layer (`pipesim profile` -> `--calibrate`) or one step (`--measured-step`) to narrow it",
    ]


def layout_text(r: Result, plan: Plan) -> str:
    lay, c = r.candidate.layout, plan.cluster
    parts = [f"pp{lay.pp}", f"dp{lay.dp}"] + ([f"tp{lay.tp}"] if lay.tp > 1 else []) + ([f"cp{lay.cp}"] if lay.cp > 1 else [])
    text = " x ".join(parts)
    if lay.ep > 1 or lay.etp > 1:
        where = lay.span("ep", c.domain).domains
        unit = "node" if c.domain == c.gpus_per_node else "NVLink domain"
        text += f", ep{lay.ep}" + (f" x etp{lay.etp}" if lay.etp > 1 else "") + f" ({where} {unit}{'s' if where > 1 else ''})"
    return text


def schedule_text(r: Result) -> str:
    if r.group_size is None:
        return r.candidate.label
    return r.candidate.label.removesuffix(")") + (", " if r.candidate.chunks else " (") + f"g={r.group_size})"


def hours_for_run(r: Result, t: Training) -> float:
    return r.gpu_hours_per_t * t.tokens / 1e12


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
        "tokens_per_second": r.tokens_per_s,
        "mfu": r.mfu,
        "gpu_hours_per_trillion_tokens": r.gpu_hours_per_t,
    }


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
            out[name] = "does not fit or cannot run: " + _rejection(plan, name)
            continue
        slower = mine.step_time / best.step_time - 1
        rank = plan.results.index(mine) + 1
        reasons = []
        bubble_gap = mine.bubble * mine.makespan - best.bubble * best.makespan
        comm_gap = mine.exposed_comm - best.exposed_comm
        if comm_gap > 0.02 * best.step_time:
            reasons.append(f"exposes {mine.exposed_comm:.2f} s of communication per step against {best.exposed_comm:.2f} s")
        if bubble_gap > 0.02 * best.step_time:
            reasons.append(f"bubble {mine.bubble:.1%} against {best.bubble:.1%}")
        if mine.candidate.recompute != best.candidate.recompute and mine.candidate.recompute == "full":
            reasons.append("it only fits with full recomputation")
        elif mine.candidate.layout.pp > best.candidate.layout.pp:
            reasons.append(f"memory pushes it to pp{mine.candidate.layout.pp}")
        if not reasons:
            reasons.append("a little more time per step at its best layout")
        out[name] = (
            f"#{rank} of {len(plan.results)}, {slower:+.1%} per step at {layout_text(mine, plan)}, "
            f"M={mine.candidate.microbatches}: " + "; ".join(reasons)
        )
    return out


def _rejection(plan: Plan, name: str) -> str:
    mine = [r for r in plan.rejected if r.candidate.schedule == name]
    if not mine:
        return "not searched"
    memory = [r for r in mine if r.static_gb or r.memory_gb]
    if memory:
        # the cheap checks give lower bounds (static memory, plus one micro-batch's
        # activations); the least of them alone reads like a near miss where every
        # order whose peak was computed needs far more
        least = min(memory, key=lambda r: r.memory_gb or r.static_gb)
        need = least.memory_gb or least.static_gb
        known = [r.memory_gb for r in memory if r.memory_gb and r.peak_known]
        text = f"needs at least {need:.0f} GB per GPU against {usable_gb(plan, least):.0f} GB usable"
        if known and min(known) >= need + 1:
            text += f"; its orders whose peak was computed need {min(known):.0f} GB or more"
        return text
    near = plan.best.candidate.layout.pp if plan.best else 0
    mine.sort(key=lambda r: abs(r.candidate.layout.pp - near))  # the example nearest the winner's layout
    cannot = [r.reason.removeprefix("cannot run: ") for r in mine if r.reason.startswith("cannot run: ")]
    if len(cannot) == len(mine):
        return f"its constraints fail at every layout searched (for example: {cannot[0]})"
    reason, n = Counter(r.reason for r in mine).most_common(1)[0]
    return reason if n == len(mine) else f"{reason} ({n} of {len(mine)} layouts; the others cannot run or do not fit)"


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
            gain = best_other.step_time / best.step_time - 1
            out.append(
                f"DualPipe pays for itself here: {best_other.candidate.label} at its best exposes {best_other.exposed_comm:.2f} s of "
                f"communication per step, and overlapping forward and backward chunks brings that to {best.exposed_comm:.2f} s; "
                f"steps are {gain:.1%} faster."
            )
        if best.candidate.schedule == "dualpipe" and m.moe:
            out.append(
                f"The two parameter copies cost {best.params_gb / 2:.1f} GB more weights per GPU (plus their gradients and optimizer "
                f"shards), which expert parallelism keeps small: each GPU holds 1/{best.candidate.layout.ep} of the routed experts."
            )
        elif best.candidate.schedule == "dualpipev":
            out.append("DualPipeV folds the model into a V on each rank: DualPipe's overlap with one copy of the parameters.")
        if m.moe:
            out.append(combined_advice(plan))
    else:
        why = []
        if m.moe is None:
            why.append("a dense model has no expert all-to-all for DualPipe to hide")
        if not dual:
            why.append(f"neither DualPipe nor DualPipeV runs at any layout searched ({_rejection(plan, 'dualpipe')})")
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
    if best.candidate.layout.pp == 1:
        out.append("Pipeline parallelism is not needed: the model fits on each GPU with data parallelism alone.")
    head = usable_gb(plan, best) - best.memory_gb
    if head < 0.05 * c.hbm_gb:
        out.append(
            f"Memory is tight: {best.memory_gb:.1f} GB of {c.hbm_gb:.0f} GB per GPU; fragmentation or a larger micro-batch may not fit."
        )
    return out


def usable_gb(plan: Plan, r) -> float:
    """GB a rank of result ``r``'s layout can fill (``device_memory``)."""
    cand = r.candidate
    return usable_for(plan.model, plan.cluster, plan.training, cand.layout, cand.recompute).bytes / 1e9


def held_text(plan: Plan, r) -> str:
    """What the device's capacity loses before tensors fill it, for ``r``'s layout."""
    cand = r.candidate
    u = usable_for(plan.model, plan.cluster, plan.training, cand.layout, cand.recompute)
    parts = ", ".join(f"{name} {b / 1e9:.1f} GB" for name, b in u.held if b)
    return f"the card's {u.capacity / 1e9:.1f} GB less {parts}"


def combined_advice(plan: Plan) -> str:
    """Where Megatron's combined 1F1B, which overlaps the same all-to-all as DualPipe with
    one copy of the parameters, stands against the recommendation, and why."""
    best = plan.best
    head = "Combined 1F1B (Megatron-LM's --overlap-moe-expert-parallel-comm) hides the all-to-all in F&B pairs"
    if best.candidate.schedule in recipe.COMBINED:
        rivals = [r for r in plan.results if r.candidate.schedule not in recipe.COMBINED]
        line = f"{head} with one copy of the parameters and wins here"
        if rivals:
            r = rivals[0]
            line += (
                f": the best other schedule, {schedule_text(r)} on {layout_text(r, plan)}, exposes {r.exposed_comm:.2f} s "
                f"of communication per step against {best.exposed_comm:.2f} s, bubble {r.bubble:.1%} against {best.bubble:.1%}"
            )
        return line + "."
    head += ", as DualPipe does, with one copy of the parameters"
    found = [r for r in plan.results if r.candidate.schedule in recipe.COMBINED]
    if not found:
        return f"{head}; it fits at no layout searched ({_rejection(plan, 'interleaved-1f1b-overlap')})."
    c = found[0]
    lay, v, M = c.candidate.layout, c.candidate.chunks or 1, c.candidate.microbatches
    g = c.group_size or lay.pp
    pairs = [v * M - warmup(lay.pp, r, M, v, g) for r in range(lay.pp)]
    text = (
        f"{head}. Its best, {schedule_text(c)}, is {family_verdicts(plan)[c.candidate.schedule]}. Megatron's warm-up "
        f"(2(pp-r-1) + (v-1)g + 1 forwards on rank r, g the micro-batch group) leaves {min(pairs)}-{max(pairs)} of each "
        f"rank's {v * M} forwards to pair with a backward"
    )
    fewer = [
        r
        for r in plan.rejected
        if r.candidate.schedule in recipe.COMBINED
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
    for i, r in enumerate(plan.results, 1):
        c = r.candidate
        if (c.schedule, c.layout.pp, c.layout.ep) == want:
            return (
                f"The authors' own choice ({want[0]}, pp{want[1]}, ep{want[2]}) ranks #{i} of {len(plan.results)} here, "
                f"{r.step_time / plan.best.step_time - 1:+.1%} per step against the recommendation."
            )
    return f"The authors' own choice ({want[0]}, pp{want[1]}, ep{want[2]}) did not fit or was not searched here."


def assumptions(plan: Plan) -> list[tuple[str, str]]:
    t, c = plan.training, plan.cluster
    rows = [(f.name, str(getattr(t, f.name))) for f in fields(Training)]
    bf16, fp8 = gemm_efficiency(c, t, False), gemm_efficiency(c, t, True)
    rows[rows.index(("compute_efficiency", str(t.compute_efficiency)))] = (
        "compute_efficiency",
        f"{bf16:g} of BF16 peak"
        + (f", {fp8:g} of FP8 peak ({t.fp8_scaling}-scaled)" if c.fp8_tflops else "")
        + " on large matrix multiplies",
    )
    rows += [
        ("gpu", f"{c.gpu}: {c.bf16_tflops:g} BF16 / {c.fp8_tflops:g} FP8 dense TFLOP/s, {c.hbm_gb:.3g} GB at {c.hbm_tbps:g} TB/s"),
        ("links", f"NVLink {c.nvlink_gbps:g} GB/s, network {c.network_gbps:g} GB/s per GPU, one way, achieved"),
        (
            "usable memory",
            (held_text(plan, plan.best) + "; " if plan.best else "")
            + f"CUDA context {c.cuda_context_mib:g} MiB, NCCL {c.nccl_mib_per_group:g} MiB per communicator, "
            f"allocator_fragmentation {t.allocator_fragmentation:g} of the rest, the full-recompute transient "
            "(device_memory.py names the measurements)",
        ),
        (
            "activations",
            "each tensor PyTorch and the fused kernels save, norm outputs, flash's fp32 logsumexp, dropout masks, MoE "
            "routing and combine state and the head's loss softmax included (activations.py; held within 1% of real "
            "PyTorch blocks by tests/test_activations_torch.py)",
        ),
        (
            "small kernels",
            f"a kernel at least kernel_floor_us {t.kernel_floor_us:g} us, a layer's pass at least its kernels times "
            f"host_us_per_kernel {t.host_us_per_kernel:g} us" + (" (one graph launch under cuda_graphs)" if t.cuda_graphs else ""),
        ),
        (
            "stragglers",
            f"a step runs at the slowest of its {c.gpus} GPUs: speeds spread by gpu_speed_sd {c.gpu_speed_sd:g} "
            "(Sinha et al. SC'22), the expected slowest of N normal draws",
        ),
        ("nodes", domain_text(c)),
        (
            "flops",
            "matrix multiplies 2nm; B and W each as the forward's multiplies; causal attention scores heads*seq/2*(qk+v)*2",
        ),
        (
            "matrix multiplies",
            "one curve: FLOPs at the efficiency above times the wave quantization of 128x128 output tiles over the SMs, "
            "or bytes at HBM bandwidth if longer (thin shards and few tokens per expert fall below peak); "
            + (
                "per-tensor FP8 weight gradients at the forward's rate"
                if t.fp8_scaling == "tensor"
                else f"block-scaled FP8 weight gradients at {FP8_WGRAD_SHARE:g} of the forward's rate plus their operand casts"
            )
            + (f"; plus gemm_tile_fill_us {c.gemm_tile_fill_us:g} per output tile" if c.gemm_tile_fill_us else ""),
        ),
        (
            "attention",
            f"flash: forward at attention_efficiency of BF16 peak, backward 2.5x the FLOPs at {FLASH_BACKWARD_SHARE:g} of that "
            f"rate; unfused: the whole score square as multiplies, {FORWARD_SCORE_BYTES} bytes per score through HBM "
            f"forward and {BACKWARD_SCORE_BYTES} backward for the softmax and dropout (Megatron-LM 2021's kernels)",
        ),
        (
            "memory-bound kernels",
            "norms, residual adds, rotary, activations, MoE routing permutes and FP8 casts priced by their bytes at "
            "hbm_efficiency of HBM bandwidth (backward twice the forward's bytes), "
            + (
                "as fused kernels"
                if t.fused_elementwise
                else "as PyTorch's eager ops (fp32 RMSNorm chain, complex rotary, repeat_kv copies: torchtitan's model code)"
            )
            + (
                "; hidden dropout's one-byte masks, written forward and read backward (Megatron-LM's --hidden-dropout)"
                if t.hidden_dropout
                else ""
            ),
        ),
        (
            "stage imbalance",
            f"the embedding on the first stage, the output head and loss ({t.logit_bytes:g} bytes a logit at HBM bandwidth) "
            + ("and the MTP modules " if plan.model.mtp_layers else "")
            + "on the last; "
            + (
                "the same number of layers on every stage (stage_split = even, as Megatron-LM 2021 and DeepSpeed split them)"
                if t.stage_split == "even"
                else "layers split so that the busiest rank carries the least"
            ),
        ),
        (
            "tensor parallelism",
            "an all-reduce (or, with sequence parallelism, all-gather + reduce-scatter) of the hidden states after "
            "attention and after the MLP, forward and backward, and at the model's ends (the embedding's lookup forward, the "
            "head's input gradient backward; with sequence parallelism both ways at both), over NVLink; "
            + ("overlapped with the multiplies around it" if t.tp_overlap else "exposed"),
        ),
        (
            "all-to-all",
            "a token crosses the network once per destination node (node-limited routing caps them), then NVLink; the "
            "slower link sets the time; overlapped only inside DualPipe's F&B pairs, whose all-to-all kernels "
            + (
                f"hold {t.comm_sms} of the {c.sms} SMs for the whole pair (DeepSeek-V3 section 3.2.2; its training "
                "profile's pair within 1%)"
                if t.comm_held_in_pairs
                else f"take {t.comm_sms} of the {c.sms} SMs while they move data"
            ),
        ),
        ("p2p", "each activation and its gradient between stages: latency plus its bytes (1/tp per shard) at network bandwidth"),
        (
            "data parallelism",
            "gradients reduce-scattered (ZeRO >= 1) or all-reduced, parameters all-gathered back, behind the last backward "
            "and the first forward (dp_overlap of those windows); ZeRO-3 per micro-batch, or with pipeline parallelism "
            "once a step per stage, its parameters kept gathered from the first forward to the last backward (fsdp_reshard "
            f"= {plan.training.fsdp_reshard}), each gather copied out on the compute stream (FSDP2); NVLink inside a "
            "node, else one network interface per member of the ring in a node (NCCL's channels), at most NVLink",
        ),
        (
            "gradient accumulation",
            "fused into the weight-gradient multiply"
            if not t.grad_accumulation_bytes
            else f"{t.grad_accumulation_bytes:g} bytes a parameter a micro-batch at HBM bandwidth on the W part "
            "(an unfused add into the accumulated gradients)",
        ),
        ("optimizer", "Adam step over the local shard: gradients, master weights and moments read and written at HBM bandwidth"),
        ("not modelled", "load imbalance between experts, stragglers and jitter, kernel launch gaps, data loading, restarts"),
    ]
    return rows + layout_assumptions(plan) + search_assumptions(plan)


def search_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """What the search fixed or left out: pins, and the searched orders not chosen for
    the candidate's own costs."""
    rows = [("pinned", plan.pins.flags())] if plan.pins else []
    fixed = fixed_order_families(plan.searched)
    if fixed:
        rows.append(
            (
                "searched orders",
                f"{', '.join(fixed)}: orders chosen at F = B = W = 1 by their builders, which take no costs, then simulated "
                "under each candidate's costs (a conservative verdict on them); zb-auto is ordered under each candidate's "
                f"own per-stage F/B/W and memory; searched orders are built for pp x M up to {SEARCHED_MAX_SLOTS}",
            )
        )
    return rows


def to_dict(plan: Plan, compare: tuple[str, str] | None = None, notes: Notes | None = None, layout: int = 1) -> dict:
    best = plan.best
    d = {
        "model": plan.model.name,
        "cluster": plan.cluster.name,
        "gpus": plan.cluster.gpus,
        "parameters": total_params(plan.model),
        "active_parameters": active_params(plan.model),
        "training": asdict(plan.training),
        "candidates": plan.considered,
        "fitting": len(plan.results),
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


def compare_dict(plan: Plan, a: str, b: str) -> dict:
    ra, rb = plan.best_of(a), plan.best_of(b)
    out = {"baseline": a, "candidate": b, a: result_row(ra, plan) if ra else None, b: result_row(rb, plan) if rb else None}
    if ra and rb:
        out["gpu_hours_recovered_per_million_tokens"] = (ra.gpu_hours_per_t - rb.gpu_hours_per_t) / 1e6
    return out


def _fmt_hours(h: float) -> str:
    return f"{h / 1e6:.2f}M" if h >= 1e6 else f"{h / 1e3:.0f}K" if h >= 1e3 else f"{h:.0f}"


def markdown(plan: Plan, compare: tuple[str, str] | None = None, notes: Notes | None = None, layout: int = 1) -> str:
    m, c, t, best = plan.model, plan.cluster, plan.training, plan.best
    lines = [f"# Pipeline plan: {m.name} on {c.name} ({c.gpus} x {c.gpu})", ""]
    lines.append(
        f"{m.name}: {total_params(m) / 1e9:.0f}B parameters ({active_params(m) / 1e9:.0f}B active per token), {m.layers} layers. "
        f"Training: {t.global_batch} sequences of {t.seq} tokens per step, {t.precision}, ZeRO-{t.zero}, "
        f"{t.tokens / 1e12:g}T tokens in all. Searched {plan.considered} candidate layouts and schedules; "
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
        f"**{schedule_text(best)} on {layout_text(best, plan)}**, {cand.microbatches} micro-batches of {cand.layout.micro_batch} x {t.seq} tokens "
        f"per pipeline per step, {cand.recompute} recomputation.",
        "",
        f"- time per step: {best.step_time:.2f} s (pipeline {best.makespan:.2f} s + exposed data-parallel communication and "
        f"optimizer step {best.dp_sync:.2f} s)",
        f"- bubble {best.bubble:.1%}; compute utilization {best.compute_utilization:.1%}; exposed communication {best.exposed_comm:.2f} s per step",
        f"- memory per GPU: {best.memory_gb:.1f} GB of {usable_gb(plan, best):.1f} GB usable ({best.static_gb:.1f} GB parameters, "
        f"gradients and optimizer states; {held_text(plan, best)})",
        f"- {best.tokens_per_s:,.0f} tokens/s; MFU {best.mfu:.1%} of BF16 peak",
        f"- **{_fmt_hours(best.gpu_hours_per_t)} GPU-hours per trillion tokens**; {_fmt_hours(hours_for_run(best, t))} GPU-hours "
        f"({hours_for_run(best, t) / c.gpus / 24:.0f} days on {c.gpus} GPUs) for {t.tokens / 1e12:g}T tokens",
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
            f"Published: {_fmt_hours(ref['gpu_hours_per_trillion_tokens'])} {ref['gpu']} GPU-hours per trillion tokens "
            f"({ref['source']}). This estimate: {_fmt_hours(best.gpu_hours_per_t)}, ratio {ratio:.2f}. The published figure "
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
            f"The best 1F1B plan ({layout_text(one, plan)}, {one.step_time:.2f} s per step) needs {_fmt_hours(one.gpu_hours_per_t)} "
            f"GPU-hours per trillion tokens. The recommendation recovers **{_fmt_hours(saved)} GPU-hours** over the whole run "
            f"of {t.tokens / 1e12:g}T tokens ({saved / hours_for_run(one, t):.1%}).",
            "",
        ]
    if compare:
        d = compare_dict(plan, *compare)
        a, b = compare
        lines += [f"## {b} against {a}", ""]
        if "gpu_hours_recovered_per_million_tokens" in d:
            ra, rb = plan.best_of(a), plan.best_of(b)
            lines.append(
                f"Best {a}: {layout_text(ra, plan)}, {ra.step_time:.2f} s per step. Best {b}: {layout_text(rb, plan)}, "
                f"{rb.step_time:.2f} s per step. {b} recovers **{d['gpu_hours_recovered_per_million_tokens']:.3f} GPU-hours per "
                f"million tokens** ({_fmt_hours(d['gpu_hours_recovered_per_million_tokens'] * t.tokens / 1e6)} over the run)."
            )
        else:
            missing = a if d[a] is None else b
            lines.append(f"{missing} has no plan that fits: {_rejection(plan, missing)}.")
        lines.append("")
    verdicts = family_verdicts(plan)
    if verdicts:
        lines += ["## Why the other schedules lost", "", "| schedule | verdict |", "|---|---|"]
        lines += [f"| {n} | {v} |" for n, v in verdicts.items()]
        lines.append("")
    lines += ["## Advice", ""] + [f"- {a}" for a in advice(plan)] + [""]
    lines += ["## Assumptions", "", "| name | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in assumptions(plan)] + [""]
    lines += [f"Model FLOPs per token: {model_flops_per_token(m, t.seq) / 1e9:.0f} GFLOP (training, no recomputation).", ""]
    return "\n".join(lines)


def _table(plan: Plan, rows: list[Result]) -> str:
    head = "| # | layout | schedule | M x mb | recompute | step (s) | bubble | utilization | memory/GPU (GB) | tokens/s | MFU | GPU-h / 1T tokens |"
    out = [head, "|---" * 12 + "|"]
    for i, r in enumerate(rows, 1):
        c = r.candidate
        out.append(
            f"| {i} | {layout_text(r, plan)} | {schedule_text(r)} | {c.microbatches} x {c.layout.micro_batch} | {c.recompute} | "
            f"{r.step_time:.2f} | {r.bubble:.1%} | {r.compute_utilization:.1%} | {r.memory_gb:.1f} | {r.tokens_per_s:,.0f} | "
            f"{r.mfu:.1%} | {_fmt_hours(r.gpu_hours_per_t)} |"
        )
    return "\n".join(out)
