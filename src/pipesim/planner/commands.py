"""The planner's commands: ``pipesim plan`` and ``pipesim memory``."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields, replace

from ..costfile import load_cost_file
from ..errors import PipesimError
from ..files import json_text, write_text_atomic
from ..inputs import work
from ..memory import memory
from ..options import positive_float, positive_int, whole_number
from ..output import console, emit_json
from ..schedules import build, family
from ..simulate import simulate
from . import calibrate
from .activations import head_activation, head_saved, layer_activation, layer_saved
from .candidates import Pins
from .device_memory import held_params, rank_usables
from .footprint import memory_model, stage_params
from .layout import Layout, default_ep, layout_problem, local_training
from .memory_lines import no_fit_line, usable_dict, usable_lines
from .naming import layout_text
from .pipeline_layout import is_layout, stage_count
from .saved_widths import layer_mode
from .search import search
from .specs import (
    CP_COMMS,
    TP_OVERLAPS,
    load_cluster,
    load_model,
    load_training,
    model_published,
    model_training,
    preset_names,
)
from .stages import component_costs, stage_parts
from .weight_grad_saved import layer_w_saved

GB = 1e9  # bytes of a decimal GB: the report speaks GB, as GPU data sheets do (not GiB)


def add_commands(command) -> None:
    c = command("plan", cmd_plan, "recommend a pipeline strategy for a model on a cluster, as a Markdown report")
    add_specs(c)
    c.add_argument(
        "--schedules",
        help="search only these (comma-separated; default: every schedule of 'pipesim schedules' the planner can build)",
    )
    c.add_argument("--compare", metavar="A,B", help="GPU-hours per million tokens that B recovers against A (e.g. 1f1b,dualpipe)")
    c.add_argument("--top", type=positive_int, default=10, help="runners-up to show (default 10)")
    c.add_argument(
        "--layout",
        type=positive_int,
        default=1,
        metavar="N",
        help="how to run plan #N of the ranking (default 1: the recommendation)",
    )
    c.add_argument("--output", "-o", help="write the report here (.md, or .json for the JSON form)")
    c.add_argument("--json", action="store_true", help="print the plan as JSON")
    g = c.add_argument_group("pins (each fixes one dimension of the search; the rest is searched)")
    for flag, pin, what in (
        ("--tp", "tp", "tensor-parallel shards"),
        ("--pp", "pp", "pipeline ranks"),
        ("--dp", "dp", "data-parallel replicas"),
        ("--ep", "ep", "expert-parallel degree (MoE)"),
        ("--chunks", "chunks", "chunks per rank (interleaved schedules take any; V and dual placements hold 2, flat 1)"),
        ("--micro-batch-size", "micro_batch", "sequences per micro-batch"),
        ("--microbatches", "microbatches", "micro-batches per pipeline per step"),
        ("--cp", "cp", "context-parallel ranks (each holds 1/cp of every sequence)"),
        ("--etp", "etp", "expert tensor-parallel shards (MoE; experts fold over tp x cp x dp: etp x ep x edp)"),
    ):
        g.add_argument(flag, type=positive_int, dest="pin_" + pin, metavar="N", help=what)
    g = c.add_argument_group("calibration (fit the efficiencies to a measurement, then re-rank)")
    g.add_argument("--calibrate", metavar="COSTS.toml", help="a component cost file measured on --measured-on (pipesim profile)")
    g.add_argument("--measured-step", type=positive_float, metavar="SECONDS", help="the measured step time of --measured-on")
    g.add_argument("--measured-on", metavar="LAYOUT", help="the layout measured, e.g. pp16,dp128,ep64,mb1,dualpipe (v2: chunks)")

    c = command(
        "memory",
        cmd_memory,
        "memory per GPU of a layout for a model: parameters, activations, what of the card is usable, what a second "
        "parameter copy costs",
    )
    add_specs(c, cluster_default="h100")
    c.add_argument("--pp", type=positive_int, required=True, help="pipeline ranks")
    c.add_argument("--schedule", "-s", help="schedule (default dualpipe), set beside 1f1b")
    c.add_argument("--dp", type=positive_int, help="data-parallel replicas (default: the cluster's GPUs / pp / tp / cp)")
    c.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel shards (default 1)")
    c.add_argument(
        "--ep",
        type=positive_int,
        help="expert-parallel degree (MoE; default the largest up to min(64, dp, experts) the layout takes)",
    )
    c.add_argument(
        "--cp", type=positive_int, default=1, help="context-parallel ranks (each holds 1/cp of every sequence; default 1)"
    )
    c.add_argument(
        "--etp",
        type=positive_int,
        default=1,
        help="expert tensor-parallel shards (MoE; experts fold over tp x cp x dp: etp x ep x edp)",
    )
    c.add_argument(
        "--chunks", type=positive_int, help="chunks per rank of the schedule set beside 1f1b (interleaved: virtual stages)"
    )
    c.add_argument("--micro-batch-size", type=positive_int, default=1, help="sequences per micro-batch (default 1)")
    c.add_argument(
        "--microbatches", "-m", type=positive_int, help="micro-batches (default 4pp: past 2pp the peak no longer grows)"
    )
    c.add_argument("--json", action="store_true", help="print the rows, the usable memory and the per-layer activations as JSON")


def add_specs(c: argparse.ArgumentParser, cluster_default: str | None = None) -> None:
    c.add_argument(
        "--model",
        required=True,
        help=f"a model preset ({', '.join(preset_names('model'))}), a TOML file or a HuggingFace config.json (or its folder)",
    )
    # the presets as shipped, so that a new one (gb200-nvl72, gb300-nvl72) is offered where it is asked for
    clusters = ", ".join(preset_names("cluster"))
    if cluster_default:
        c.add_argument(
            "--cluster", default=cluster_default, help=f"a cluster preset ({clusters}) or TOML file (default {cluster_default})"
        )
    else:
        c.add_argument("--cluster", required=True, help=f"a cluster preset ({clusters}) or TOML file")
    c.add_argument("--gpus", type=positive_int, help="resize the cluster to this many GPUs")
    g = c.add_argument_group("training (default: the model preset's [training], else pipesim's defaults)")
    g.add_argument("--training", metavar="FILE.toml", help="training spec file")
    g.add_argument("--seq", type=positive_int, help="tokens per sequence (pipesim's default 4096)")
    g.add_argument("--global-batch", type=positive_int, help="sequences per step (pipesim's default 1024)")
    g.add_argument("--precision", choices=("bf16", "fp8"), help="the multiplies' precision (pipesim's default bf16)")
    g.add_argument("--zero", type=whole_number(0, 3), choices=(0, 1, 2, 3), help="ZeRO stage (pipesim's default 1)")
    g.add_argument(
        "--recompute",
        choices=("none", "selective", "full", "auto"),
        help="activation recomputation (pipesim's default auto: plan searches it, memory takes selective; "
        "a training file also takes op and every-N)",
    )
    g.add_argument("--tokens", type=positive_float, help="tokens of the whole run, for its GPU-hours (pipesim's default 1e12)")
    g.add_argument("--cp-comm", choices=CP_COMMS, help="context parallelism's key/value exchange (default p2p)")
    g.add_argument(
        "--tp-overlap",
        choices=TP_OVERLAPS,
        help="which tensor-parallel collectives run beside a multiply: none, the backward's (Megatron-LM's default), "
        "all (--tp-comm-overlap, AsyncTP; pipesim's default) or micro_pipeline (AsyncTP as torch.compile's "
        "micro-pipeline pass runs it: the backward's input-gradient reduce-scatters exposed)",
    )
    g.add_argument(
        "--stage-split",
        metavar="RULE|LAYOUT",
        help="layers per pipeline stage: balanced (pipesim's default: the busiest rank carries the least), even "
        "(layers / stages each, Megatron-Core's default), or a Megatron --pipeline-model-parallel-layout string "
        "such as 'Et|(tt|)*30mL' (then only layouts with that many stages are considered)",
    )


def specs_from(args: argparse.Namespace):
    model = load_model(args.model)
    cluster = load_cluster(args.cluster, args.gpus)
    training = load_training(
        args.training,
        base=model_training(args.model),
        seq=args.seq,
        global_batch=args.global_batch,
        precision=args.precision,
        zero=args.zero,
        recompute=args.recompute,
        tokens=args.tokens,
        cp_comm=args.cp_comm,
        tp_overlap=args.tp_overlap,
        stage_split=args.stage_split,
    )
    if training.comm_sms >= cluster.sms:  # the compute kernels would get no SMs
        raise PipesimError(
            f"{args.cluster}: sms = {cluster.sms} leaves none for compute beside the training's comm_sms = {training.comm_sms}; "
            f"give sms from {training.comm_sms + 1} up (or a training file with a smaller comm_sms)"
        )
    return model, cluster, training


def cmd_plan(args: argparse.Namespace) -> int:
    from . import report
    from .plan_stages import pick

    model, cluster, training = specs_from(args)
    schedules = _names(args.schedules) if args.schedules else None
    compare = None
    if args.compare:
        pair = _names(args.compare)
        if len(pair) != 2:
            raise PipesimError(f"--compare takes two schedules, like 1f1b,dualpipe; got {args.compare!r}")
        compare = (pair[0], pair[1])
        schedules = sorted(set(schedules or []) | set(pair)) if schedules else list(pair)
    out = None if args.output == "-" else args.output  # -: the report on stdout
    if out and not out.endswith((".md", ".json")):
        raise PipesimError(f"--output must end in .md or .json, got {out!r}")
    calibration = _calibration(args, model, cluster, training)
    fitted = calibration.text(cluster, training) if calibration else None
    if calibration:
        cluster, training = calibrate.scaled(cluster, training, calibration.compute, calibration.links)
    pins = Pins(**{f.name: getattr(args, "pin_" + f.name) for f in fields(Pins)})
    plan = search(model, cluster, training, schedules, ProgressLine(sys.stderr), keep=args.top, pins=pins)
    plan.model_published = model_published(args.model)
    notes = report.Notes(
        calibration=fitted,
        uncertainty=calibrate.uncertainty(model, cluster, training, plan.best) if plan.best and not calibration else None,
    )
    as_json = args.json or (out or "").endswith(".json")
    if plan.best is None:  # a failed search is an answer the user must act on, not a report
        raise PipesimError(
            f"nothing fits {model.name} on {cluster.name} ({cluster.hbm_gb:.3g} GB per GPU) among {plan.considered} layouts: "
            "add GPUs (--gpus), use a larger-memory GPU, or lower the global batch or sequence length"
        )
    pick(plan, args.layout)  # a --layout beyond the ranking: one line, nothing written
    text = (
        json_text(report.to_dict(plan, compare, notes, args.layout))
        if as_json
        else report.markdown(plan, compare, notes, args.layout)
    )
    if out:
        write_text_atomic(out, text)
        best = plan.best
        summary = (
            f"{best.candidate.label} on {layout_text(best, plan)}: {best.step_time:.2f} s per step" if best else "nothing fits"
        )
        print(f"wrote {out}: {summary}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _calibration(args, model, cluster, training):
    """The fit ``--calibrate`` or ``--measured-step`` asks for, on ``--measured-on``."""
    if not (args.calibrate or args.measured_step is not None):
        if args.measured_on:
            raise PipesimError("--measured-on names the layout of a measurement: give --calibrate or --measured-step with it")
        return None
    if args.calibrate and args.measured_step is not None:
        raise PipesimError("give --calibrate or --measured-step, not both")
    if not args.measured_on:
        raise PipesimError("calibration needs the layout it was measured on: add --measured-on, e.g. pp16,dp128,ep64,dualpipe")
    lay = calibrate.parse_layout(args.measured_on)
    if args.calibrate:
        costs, _ = load_cost_file(args.calibrate)
        return calibrate.from_components(model, cluster, training, lay, costs, args.calibrate)
    return calibrate.from_step(model, cluster, training, lay, args.measured_step)


def _names(text: str) -> list[str]:
    # the registry's spelling (PyTorch's names and any case are accepted); unknown names:
    # one clear line
    return [family(n.strip()).name for n in text.split(",") if n.strip()]


#: seconds between progress lines
PROGRESS_EVERY = 2.0


class ProgressLine:
    """The search's progress on stderr every few seconds: one line rewritten in place on
    a terminal, plain lines otherwise (logs, CI), so a long search never looks hung."""

    def __init__(self, stream, every: float | None = None):
        self.stream = stream
        self.every = PROGRESS_EVERY if every is None else every
        self.tty = stream.isatty()
        self.start = self.last = time.monotonic()
        self.shown = False
        self.width = 0

    def __call__(self, done: int, total: int, plan) -> None:
        now = time.monotonic()
        final = done >= total
        # quiet for a search that answers at once; once shown, the last line says it ended
        if (final and not self.shown) or (not final and now - self.last < self.every):
            return
        self.last, self.shown = now, True
        best = plan.best if final else min(plan.results, key=lambda r: r.step_time, default=None)
        line = (
            f"pipesim plan: {'searched' if final else 'searching'} {plan.considered} candidates, "
            f"{len(plan.results)} simulated that fit, {plan.skipped} skipped by bound"
            + (f", best {best.step_time:.2f} s per step ({best.candidate.label}, {layout_text(best, plan)})" if best else "")
            + f"; {now - self.start:.0f} s"
        )
        if self.tty:
            self.stream.write("\r" + line.ljust(self.width) + ("\n" if final else ""))
            self.width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def cmd_memory(args: argparse.Namespace) -> int:
    model, cluster, training = specs_from(args)
    pp, tp, cp = args.pp, args.tp, args.cp
    if cluster.gpus % (pp * tp * cp):
        raise PipesimError(f"--pp {pp} x --tp {tp} x --cp {cp} must divide the cluster's {cluster.gpus} GPUs (or give --gpus)")
    dp = args.dp or cluster.gpus // (pp * tp * cp)
    if pp * tp * cp * dp != cluster.gpus:  # as plan's pins: the layout is the whole cluster
        raise PipesimError(
            f"--pp {pp} x --tp {tp} x --cp {cp} x --dp {dp} = {pp * tp * cp * dp} GPUs, but {cluster.name} has "
            f"{cluster.gpus}: give --gpus {pp * tp * cp * dp} or --dp {cluster.gpus // (pp * tp * cp)}"
        )
    # the experts fold over the attention's tp x cp x dp GPUs of a stage (MoE parallel
    # folding), so ep need not divide dp: layout_problem states what must hold
    lay = Layout(pp=pp, dp=dp, tp=tp, ep=args.ep or 1, micro_batch=args.micro_batch_size, cp=cp, etp=args.etp)
    if not args.ep:
        lay = with_default_ep(model, training, lay)
    ep = lay.ep
    refused = layout_problem(model, training, lay)
    if refused:
        raise PipesimError(refused)
    M = args.microbatches or 4 * pp
    work(pp, M, max(2, args.chunks or 2))  # the schedule set beside 1f1b may be a V or interleaved
    recompute = "selective" if training.recompute == "auto" else training.recompute
    # --chunks goes to the schedule set beside 1f1b (a family without chunks refuses it in one line)
    second = family(args.schedule or "dualpipe").name
    if second == "1f1b" and args.chunks:
        build(second, pp, M, chunks=args.chunks)  # refuses --chunks in one line
    if is_layout(training.stage_split) and stage_count(training.stage_split) != pp:
        raise PipesimError(
            f"stage_split {training.stage_split!r} names {stage_count(training.stage_split)} stages, but memory sets every "
            f"schedule beside 1f1b, which runs {pp} (one a rank): pipesim plan with the same pins and --schedules gives "
            "this split's memory"
        )
    options = [("1f1b", {})] + ([] if second == "1f1b" else [(second, _chunks(args.chunks))])
    rows = [_memory_row(model, cluster, training, lay, "1f1b", M, recompute)]  # each with its worst rank's usable
    for name, opts in options[1:]:
        try:
            rows.append(_memory_row(model, cluster, training, lay, name, M, recompute, **opts))
        except PipesimError as e:
            if args.schedule:
                raise
            # the user asked for no dualpipe: say where it came from and how to set another
            raise PipesimError(
                f"{e} (dualpipe is the schedule memory sets beside 1f1b by default: give --schedule 1f1b or another)"
            ) from None
    extra = rows[-1]["static_gb"] - rows[0]["static_gb"]
    middle = range(model.layers // 2, model.layers // 2 + -(-model.layers // pp))  # a full stage of middle layers
    per_gpu = sum(stage_params(model, middle, False, False, lay))
    whole = sum(stage_params(model, middle, False, False, Layout(pp=pp, dp=1)))
    data = {
        "model": model.name,
        "cluster": cluster.name,
        "layout": {
            "pp": pp,
            "dp": dp,
            "tp": tp,
            "ep": ep,
            "cp": cp,
            "etp": lay.etp,
            "edp": lay.edp,
            "micro_batch": lay.micro_batch,
        },
        "microbatches": M,
        "recompute": recompute,
        "schedules": rows,
        "extra_copy_gb": extra,
        "extra_copy_share_of_hbm": extra / cluster.hbm_gb,
        "stage_parameters": whole,
        "stage_parameters_per_gpu": per_gpu,
        # the usable memory of the rank with the least room of all the rows' worst ranks
        "usable": min((r["usable"] for r in rows), key=lambda u: u["room_bytes"]),
        "activations_per_layer": _activation_rows(model, training, lay, recompute),
    }
    if args.json:
        emit_json(data)
        return 0
    out = console()
    out.print(
        f"[bold]{model.name}[/] on {cluster.gpu} ({cluster.hbm_gb:.1f} GB), pp{pp} x dp{dp}"
        + (f" x tp{tp}" if tp > 1 else "")
        + (f" x cp{cp}" if cp > 1 else "")
        + (f", ep{ep}" if ep > 1 else "")
        + (f" x etp{lay.etp}" if lay.etp > 1 else "")
        + (f", {lay.micro_batch} sequences a micro-batch" if lay.micro_batch > 1 else "")
        + f", ZeRO-{training.zero}, {recompute} recomputation, M={M}; per GPU, worst rank:"
    )
    for r in rows:
        out.print(
            f"  {r['schedule']:10s} {r['copies']:g} cop{'y' if r['copies'] == 1 else 'ies'} of {r['params_per_copy'] / 1e9:.2f}B parameters: "
            f"weights {r['weights_gb']:.1f} + gradients {r['grads_gb']:.1f} + optimizer {r['optimizer_gb']:.1f} = {r['static_gb']:.1f} GB; "
            f"activations up to {r['activations_gb']:.1f} GB; peak {r['peak_gb']:.1f} GB"
            + ("" if r["fits"] else "  [red]does not fit[/]")
        )
    for line in usable_lines(rows, cluster.hbm_gb):
        out.print(line)
    unfit = next((r for r in rows if not r["fits"]), None)
    if unfit:
        out.print(no_fit_line(unfit, lay.micro_batch, recompute))
    if len(rows) > 1:
        out.print(
            f"{second}'s parameters, gradients and optimizer states take {extra:+.1f} GB per GPU beside 1f1b's "
            f"({extra / cluster.hbm_gb:.0%} of {cluster.hbm_gb:.1f} GB)."
        )
    if rows[-1]["copies"] < 2:  # no second copy: nothing below to explain
        return 0
    if model.moe and ep > 1:
        out.print(
            # true however large the copy is: it says what sets its size, not that it is small
            f"What sets its size for {model.name}: a pp{pp} stage holds {whole / 1e9:.1f}B parameters, but with ep={ep} a GPU "
            f"keeps only {per_gpu / 1e9:.2f}B of them (each routed expert lives on one of {ep} GPUs), so the second copy "
            f"doubles {per_gpu / 1e9:.2f}B, not {whole / 1e9:.1f}B. A dense model has nothing to shard that way: each GPU "
            "doubles its whole stage."
        )
    elif model.moe:
        out.print(
            f"With ep=1 every GPU keeps all {model.moe.experts} routed experts of its stage ({per_gpu / 1e9:.2f}B parameters), "
            "so the second copy doubles all of them; expert parallelism (--ep > 1) would shard them."
        )
    return 0


def with_default_ep(model, training, lay: Layout) -> Layout:
    """``lay`` with the largest expert degree up to ``default_ep``'s that the layout
    takes (``layout_problem``): 72 GPUs a stage take no ep64 of 256 experts, but ep8."""
    for e in range(default_ep(model, lay.dp), 1, -1):
        if not layout_problem(model, training, replace(lay, ep=e)):
            return replace(lay, ep=e)
    return replace(lay, ep=1)


def _activation_rows(model, training, lay: Layout, recompute: str) -> list[dict]:
    """Bytes one micro-batch keeps on one GPU for each kind of layer (dense, MoE; under
    every-N, checkpointed or not) and for the output head, tensor by tensor (a
    context-parallel rank's 1/cp of each sequence, as the planner's footprint counts it)."""
    training = local_training(training, lay)
    tokens = lay.micro_batch * training.seq
    kinds: dict[tuple[bool, str], list[int]] = {}
    for i in range(model.layers):
        kinds.setdefault((model.is_moe_layer(i), layer_mode(recompute, i)), []).append(i)
    rows = []
    for (moe, mode), layers in sorted(kinds.items(), key=lambda kv: kv[1][0]):  # in the model's order
        i = layers[0]
        saved = layer_saved(model, i, training, lay.tp, recompute)
        total, w_share = layer_activation(model, i, training, lay, recompute)
        rows.append(
            {
                "layer": "moe" if moe else "dense",
                "first_layer": i,
                "layers": len(layers),
                "recompute": mode,
                "bytes": total,
                "w_share": w_share,
                "tensors": {k: v * tokens for k, v in saved.items()},
                # what a split backward's W keeps from its B (inputs and output gradients)
                "w_tensors": {k: v * tokens for k, v in layer_w_saved(model, i, training, lay.tp, recompute).items()},
            }
        )
    head = head_saved(model, training, lay.tp)
    rows.append(
        {"layer": "head", "bytes": head_activation(model, training, lay), "tensors": {k: v * tokens for k, v in head.items()}}
    )
    return rows


def _chunks(chunks: int | None) -> dict:
    return {} if chunks is None else {"chunks": chunks}


def _memory_row(model, cluster, training, lay: Layout, name: str, M: int, recompute: str, **options) -> dict:
    s = build(name, lay.pp, M, **options)
    stages = s.placement.stages
    # as the planner splits (evaluate.finish): the evened split and the one without its
    # moves, where they differ, the faster of the two kept
    held = s.placement.held()
    splits = {
        tuple(map(len, p)): p
        for p in (stage_parts(model, cluster, training, lay, stages, recompute, held, e) for e in (True, False))
    }
    runs = [(simulate(s, component_costs(model, cluster, training, lay, stages, recompute, p)), p) for p in splits.values()]
    tl, parts = min(runs, key=lambda x: x[0].end - x[0].start)
    mm = memory_model(model, training, lay, stages, recompute, parts)
    mem = memory(s, tl, mm)
    pl = s.placement
    copies = pl.parameter_copies
    # each rank against its own usable memory: only the last stage's holds the loss's
    # transient and logits, each stage's its own receive buffers and FSDP pools
    usables = rank_usables(model, cluster, training, lay, recompute, held, stages, M, mm)
    # the worst rank: the least room under its own usable memory (the highest peak on a tie)
    worst = min(range(s.pp), key=lambda r: (usables[r].bytes - mem.peak[r], -mem.peak[r]))
    n = held_params(mm, held[worst])  # the worst rank's parameters, every copy
    return {
        # an interleaved placement's chunks per rank, as the plan writes them (v=4)
        "schedule": name + (f" (v={s.placement.chunks})" if "chunks" in family(name).options else ""),
        "chunks": s.placement.chunks,
        "stage_layers": [len(p) for p in parts],  # layers per model stage, as simulated
        "copies": copies,
        "params_per_copy": n / copies,
        "weights_gb": mem.params[worst] / GB,
        "grads_gb": mem.grads[worst] / GB,
        "optimizer_gb": mem.optimizer[worst] / GB,
        "static_gb": mem.static[worst] / GB,
        "activations_gb": mem.activation_peak[worst] / GB,
        "peak_gb": mem.peak[worst] / GB,
        "rank": worst,
        "usable": usable_dict(usables[worst], mem.peak[worst]),
        "rank_usable_bytes": [u.bytes for u in usables],
        "fits": mem.peak[worst] <= usables[worst].bytes,
    }
