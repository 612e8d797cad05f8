"""``pipesim memory``: one layout's memory per GPU, schedule beside 1F1B, with what of the
card is usable and what one micro-batch keeps, layer kind by layer kind."""

from __future__ import annotations

import argparse

from ..errors import PipesimError
from ..family_names import takers
from ..inputs import work
from ..memory import memory
from ..output import console, emit_json
from ..schedules import build, family
from ..simulate import simulate
from ..theory import FORMS
from .activations import head_activation, head_saved, layer_activation, layer_saved
from .candidates import COST_OPTIONS, Candidate
from .device_memory import held_params, rank_usables
from .evaluate import Prepared, keeps_other, prepare
from .footprint import memory_model, stage_params
from .layout import Layout, layout_problem, local_training, with_default_ep
from .memory_lines import no_fit_line, usable_dict, usable_lines
from .naming import recompute_text, schedule_label
from .pipeline_layout import is_layout, stage_count
from .programs import megatron_group
from .runnable import candidate_problem
from .saved_widths import layer_mode
from .spec_args import specs_from
from .stages import component_costs, stage_parts
from .weight_grad_saved import layer_w_saved

GB = 1e9  # bytes of a decimal GB: the report speaks GB, as GPU data sheets do (not GiB)


def cmd_memory(args: argparse.Namespace) -> int:
    model, cluster, training = specs_from(args)
    pp, tp, cp = args.pp, args.tp, args.cp
    if cluster.gpus % (pp * tp * cp):
        # "or give --gpus" read oddly where --gpus was given: say which counts divide
        raise PipesimError(
            f"--pp {pp} x --tp {tp} x --cp {cp} = {pp * tp * cp} must divide the cluster's {cluster.gpus} GPUs: "
            f"give --gpus a multiple of {pp * tp * cp}, or another --pp, --tp or --cp"
        )
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
    if dp * lay.micro_batch > training.global_batch:
        # a replica with no sequence to train runs nothing: plan refuses such layouts, and
        # memory sized them (its optimizer shards split dp ways) as if they ran
        raise PipesimError(
            f"dp{dp} replicas of {lay.micro_batch}-sequence micro-batches need {dp * lay.micro_batch} sequences a step, "
            f"but the global batch is {training.global_batch}: give --global-batch {dp * lay.micro_batch} or more, "
            "or fewer replicas (--gpus, or a larger --pp, --tp or --cp)"
        )
    second = family(args.schedule or "dualpipe").name
    if args.chunks and "chunks" not in family(second).options:
        # set beside 1f1b by default, dualpipe refused --chunks with a hint to give
        # "--schedule 1f1b or another", which refuses it too: name those that take it
        default = ", the schedule memory sets beside 1f1b by default," if args.schedule is None else ""
        raise PipesimError(
            f"{second}{default} does not take --chunks: give --schedule one that does ({', '.join(takers('chunks'))}), "
            "or drop --chunks"
        )
    chunks = args.chunks or _split_chunks(second, pp, training.stage_split)
    M = args.microbatches or _default_microbatches(second, training, lay, chunks)
    work(pp, M, max(2, chunks or 2))  # the schedule set beside 1f1b may be a V or interleaved
    recompute = "selective" if training.recompute == "auto" else training.recompute
    opts = {} if second == "1f1b" else _options(second, pp, M, chunks)
    beside = _beside_1f1b(training.stage_split, second, pp, M, opts, args.schedule is None)
    rows = [memory_row(model, cluster, training, lay, "1f1b", M, recompute)] if beside else []
    if second != "1f1b":  # each row with its worst rank's usable
        try:
            # what no trainer runs, as plan leaves it out of its search (runnable.py): one
            # line. The registry answers both without a build: memory_row builds the
            # schedule, and a build here too made every order twice
            fam = family(second)
            if refused := fam.check(pp, M, **opts):
                raise PipesimError(refused)
            placed = fam.placement_of(pp, M, **opts).chunks
            if refused := candidate_problem(second, placed, pp, ep, recompute):
                raise PipesimError(f"{_label(second, placed, opts)} on pp{pp}: {refused}")
            rows.append(memory_row(model, cluster, training, lay, second, M, recompute, **opts))
        except PipesimError as e:
            if args.schedule:
                raise
            # the user asked for no dualpipe: say where it came from and how to set another
            raise PipesimError(
                f"{e} (dualpipe is the schedule memory sets beside 1f1b by default: give --schedule 1f1b or another)"
            ) from None
    # on one GPU, the one that decides the second schedule's fit (its worst rank): the two
    # schedules' worst ranks can be different GPUs, whose stages differ by more than the
    # second copy (1f1b's rank 0 holds the embedding); nothing to weigh without 1f1b
    extra_rank = rows[-1]["rank"] if beside else None
    extra = rows[-1]["static_per_rank_gb"][extra_rank] - rows[0]["static_per_rank_gb"][extra_rank] if beside else None
    # a full stage of middle layers, inside the model: from the middle it ran past the last
    # layer where a stage holds more than half of them (pp1: every layer; an IndexError)
    per_stage = -(-model.layers // pp)
    start = min(model.layers // 2, model.layers - per_stage)
    middle = range(start, start + per_stage)
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
        "extra_copy_rank": extra_rank,
        "extra_copy_share_of_hbm": None if extra is None else extra / cluster.hbm_gb,
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
        + f", ZeRO-{training.zero}, {recompute_text(recompute)}, M={M}; per GPU, worst rank:"
    )
    # the names in one column: "interleaved-1f1b (v=2)" ran past the ten characters of
    # the others and pushed its row's figures out of line with 1f1b's
    width = max(10, *(len(r["schedule"]) for r in rows))
    for r in rows:
        out.print(
            f"  {r['schedule']:{width}s} {r['copies']:g} cop{'y' if r['copies'] == 1 else 'ies'} of {r['params_per_copy'] / 1e9:.2f}B parameters: "
            f"weights {r['weights_gb']:.1f} + gradients {r['grads_gb']:.1f} + optimizer {r['optimizer_gb']:.1f} = {r['static_gb']:.1f} GB; "
            f"activations up to {r['activations_gb']:.1f} GB; peak {r['peak_gb']:.1f} GB"
            + ("" if r["fits"] else "  [red]does not fit[/]")
        )
    for line in usable_lines(rows, cluster.hbm_gb):
        out.print(line)
    unfit = next((r for r in rows if not r["fits"]), None)
    if unfit:
        out.print(no_fit_line(unfit, lay.micro_batch, recompute, experts=model.moe is not None))
    if not beside:
        out.print(
            f"1f1b is not set beside {rows[-1]['schedule']}: stage_split {training.stage_split!r} names "
            f"{stage_count(training.stage_split)} stages, pp{pp} x {rows[-1]['chunks']} chunks a rank, and 1f1b runs {pp} (one a rank)."
        )
    elif len(rows) > 1:
        out.print(
            f"{second}'s parameters, gradients and optimizer states take {extra:+.1f} GB beside 1f1b's on {second}'s "
            f"worst rank (rank {extra_rank}, the same GPU under both; {extra / cluster.hbm_gb:.0%} of {cluster.hbm_gb:.1f} GB)."
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


def _default_microbatches(name: str, training, lay: Layout, chunks: int | None) -> int:
    """4pp, past which most schedules' peak stops growing (``theory.FORMS``' closed-form
    peaks equal at 4pp and 8pp); a schedule whose peak keeps growing with M (GPipe, looped
    BFS: every micro-batch's forward before the backwards) runs the step's micro-batches,
    as plan prices it (the global batch over the replicas and micro-batch size), where
    they split whole: at 4pp its peak would be far below the plan's."""
    form, pp = FORMS.get(name), lay.pp
    # a family without chunks refuses --chunks later, in one line
    opts = {"chunks": chunks} if chunks and "chunks" in family(name).options else {}
    low, high = (form.peak(pp, k * pp, **opts) if form else None for k in (4, 8))
    per = lay.dp * lay.micro_batch
    if low and high and max(high) > max(low):
        if training.global_batch % per:
            # 4pp here sized a GPipe far below any step this layout runs, under a header
            # that gave no reason for its M
            raise PipesimError(
                f"{name}'s peak grows with the step's micro-batches, but the global batch of {training.global_batch} "
                f"sequences does not split over dp{lay.dp} x {lay.micro_batch}-sequence micro-batches: give --microbatches "
                f"(-m), or a --global-batch that {per} divides"
            )
        return training.global_batch // per
    return 4 * pp


def _split_chunks(name: str, pp: int, stage_split: str) -> int | None:
    """The chunks a rank a chunked family takes from a layout string of pp x v stages
    (v > 1), where --chunks is not given: the split names the virtual stages, as
    Megatron-Core reads ``--pipeline-model-parallel-layout`` (stage v x pp + r on rank r)."""
    if not is_layout(stage_split) or "chunks" not in family(name).options:
        return None
    n = stage_count(stage_split)
    return n // pp if n % pp == 0 and n > pp else None


def _beside_1f1b(stage_split: str, name: str, pp: int, M: int, options: dict, default: bool) -> bool:
    """Whether 1f1b is sized beside ``name``: always but where a layout string names the
    stages of ``name``'s placement and they are not pp (pp x v of a V or an interleaved
    placement; 1f1b runs one a rank), as the plan sizes each schedule only on a split of
    its own stage count (``evaluate``). A split that fits ``name`` in neither way is
    refused in one line."""
    if not is_layout(stage_split):
        return True
    n, fam = stage_count(stage_split), family(name)
    if fam.check(pp, M, **options) is not None:
        return n == pp  # the build refuses these sizes in one line, naming what is wrong
    placement = fam.placement_of(pp, M, **options)
    if n == placement.stages:
        return n == pp
    label = _label(name, placement.chunks, options)
    # --chunks only for a family that takes it: 1f1b or a V refuses it, so naming it
    # sent the user to a flag that the next run refused too
    said = " (dualpipe is the schedule memory sizes by default)" if default else ""
    if "chunks" in fam.options:
        runs = " (pp x chunks a rank)" if placement.stages != pp else ""
        flags = "a --pp, --schedule or --chunks"
    else:
        runs = ", one a rank" if placement.stages == pp else f", {placement.stages // pp} a rank"
        flags = "a --pp or --schedule"
        said = f" ({name}{', the schedule memory sizes by default,' if default else ''} takes no --chunks)"
    raise PipesimError(
        f"stage_split {stage_split!r} names {n} stages, but {label} on pp{pp} runs {placement.stages}{runs}: "
        f"give a split of {placement.stages} stages, or {flags} that runs {n}{said}"
    )


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


def _options(name: str, pp: int, M: int, chunks: int | None) -> dict:
    """The second schedule's options: its chunks, and Megatron's micro-batch group where
    M is not a multiple of pp, the smallest the plan gives it (``programs.megatron_group``):
    without it memory refused the plan's own interleaved-1f1b-overlap (g=...) layouts,
    naming a --group-size that memory does not take."""
    opts = {} if chunks is None else {"chunks": chunks}
    return opts | megatron_group(name, pp, M, opts)


def _label(name: str, chunks: int, options: dict) -> str:
    """A chunked family's name with its chunks per rank, as the plan writes it (v=4)."""
    return schedule_label(name, chunks, options.get("group_size")) if "chunks" in family(name).options else name


def memory_row(model, cluster, training, lay: Layout, name: str, M: int, recompute: str, **options) -> dict:
    s = build(name, lay.pp, M, **options)
    stages = s.placement.stages
    # as the planner splits (evaluate.finish): the evened split, or the one without its
    # moves where that differs and the evened one does not fit, or both fit and it is
    # faster; keeping the faster alone called a plan's fitting recommendation unfit
    held = s.placement.held()
    splits: dict[tuple, tuple[bool, list[range]]] = {}
    for e in (True, False):
        parts = stage_parts(model, cluster, training, lay, stages, recompute, held, e)
        splits.setdefault(tuple(map(len, parts)), (e, parts))
    rows = [
        _split_row(
            model,
            cluster,
            training,
            lay,
            _as_planned(model, cluster, training, lay, name, s, recompute, M, e, options),
            recompute,
            M,
            parts,
            _label(name, s.placement.chunks, options),
        )
        for e, parts in splits.values()
    ]
    (step, evened), (other_step, other) = rows[0], rows[-1]
    return other if keeps_other(evened["fits"], step, other["fits"], other_step) else evened


def _as_planned(model, cluster, training, lay: Layout, name: str, s, recompute: str, M: int, evened: bool, options: dict):
    """The schedule as the plan builds it on this split: a family that orders itself for
    the candidate's costs (zb-auto) gets the layout's own per-stage F/B/W, P2P latency and
    the room its ranks leave (``evaluate.builder_options``), not unit costs, whose order
    (and memory) differs from the plan's; ``s`` for the others, or where the plan would
    refuse the layout before building it."""
    if not set(COST_OPTIONS) <= family(name).options.keys():
        return s
    p = prepare(model, cluster, training, Candidate(lay, name, options.get("chunks"), recompute, M), splits=(evened,))
    return build(name, lay.pp, M, **p.options) if isinstance(p, Prepared) else s


def _split_row(model, cluster, training, lay: Layout, s, recompute: str, M: int, parts, label: str) -> tuple[float, dict]:
    """One stage split's makespan and memory row, the worst rank's."""
    stages, held = s.placement.stages, s.placement.held()
    tl = simulate(s, component_costs(model, cluster, training, lay, stages, recompute, parts))
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
    return tl.end - tl.start, {
        # an interleaved placement's chunks per rank, as the plan writes them (v=4)
        "schedule": label,
        "chunks": s.placement.chunks,
        "stage_layers": [len(p) for p in parts],  # layers per model stage, as simulated
        "copies": copies,
        "params_per_copy": n / copies,
        "weights_gb": mem.params[worst] / GB,
        "grads_gb": mem.grads[worst] / GB,
        "optimizer_gb": mem.optimizer[worst] / GB,
        "static_gb": mem.static[worst] / GB,
        "static_per_rank_gb": [x / GB for x in mem.static],  # every rank's, for the rank-by-rank comparison
        "activations_gb": mem.activation_peak[worst] / GB,
        "peak_gb": mem.peak[worst] / GB,
        "rank": worst,
        "usable": usable_dict(usables[worst], mem.peak[worst]),
        "rank_usable_bytes": [u.bytes for u in usables],
        "fits": mem.peak[worst] <= usables[worst].bytes,
    }
