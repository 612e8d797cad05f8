"""``pipesim compare``: several schedules side by side, priced by the cost flags or by a
model on a cluster (the planner's estimate), with the memory/bubble trade-off and
per-token figures."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from ..cost_flags import add_costs, cost_flags_given, costs_from, refuse_costs_none_use
from ..errors import PipesimError
from ..inputs import divisors_text
from ..options import (
    COLUMNS_HELP,
    add_shape,
    columns,
    counted_chunks,
    list_work,
    listed_files,
    positive_float,
    positive_int,
    refuse_options_none_take,
    schedule_names,
    schedules_help,
    shape,
)
from ..output import console, emit_json, num, pct, share
from ..pertoken import SECONDS, PerToken

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from ..comparison import Row
    from ..costs import CostModel
    from ..ir import Schedule

# the comparison, the builders and the terminal timeline import numpy: imported in the
# functions that use them, so that --help (the parser alone) does without


def add_commands(command) -> None:
    c = command("compare", cmd_compare, "simulate several schedules side by side")
    add_shape(c)
    add_costs(c)
    c.add_argument("--schedules", help=schedules_help())
    c.add_argument(
        "--memory-limit",
        type=positive_float,
        help="drop schedules whose peak activation memory (in 1F1B stages) exceeds this; zb-auto is searched under it",
    )
    c.add_argument("--timelines", action="store_true", help="also draw each schedule's timeline")
    c.add_argument("--json", action="store_true", help="print each schedule's metrics as JSON")
    g = c.add_argument_group(
        "per million tokens (GPU-hours, and the difference against the first schedule): --seq, --micro-batch-size "
        "and --time-unit with the cost flags, or --model and --cluster presets whose costs are in seconds"
    )
    g.add_argument("--seq", type=positive_int, help="tokens per sequence (with --model: default the preset's)")
    g.add_argument("--micro-batch-size", type=positive_int, help="sequences per micro-batch (with --model: default 1)")
    g.add_argument("--time-unit", choices=tuple(SECONDS), help="what one cost-model time unit is")
    g.add_argument(
        "--model",
        help="a model preset (deepseek-v3, llama3-70b, ...), TOML file or HuggingFace config.json: costs from the planner's "
        "model, on one layout (tp1, every other GPU data-parallel, the model's default ep; pipesim plan searches layouts)",
    )
    g.add_argument("--cluster", help="a cluster preset (h800-2048, h100, ...) or TOML file, with --model")
    c.add_argument("--width", type=columns, help=COLUMNS_HELP)


def pareto(rows: list[Row]) -> set[str]:
    """The rows (by name, as listed) of the schedules no other one beats on both peak
    activation memory and bubble. By the listed name, not the report's: a PyTorch name
    (1F1B) is reported as pipesim's (1f1b), and lost its mark."""
    points = {r.name: (max(r.report.peak_activation_memory), r.report.bubble_ratio) for r in rows if r.report}
    return {name for name, (m, b) in points.items() if not any(o[0] <= m and o[1] <= b and o != (m, b) for o in points.values())}


@dataclass
class CompareCosts:
    """What a comparison is priced with: ``costs`` for every schedule, or ``costs_for``
    one (a model's costs depend on the schedule's stage count); ``per_token`` states the
    result per million tokens when asked for; ``text`` names the costs in the title."""

    costs: CostModel
    costs_for: Callable[[Schedule], CostModel] | None
    per_token: PerToken | None
    text: str


def compare_costs(args: argparse.Namespace, pp: int) -> CompareCosts:
    """The costs of ``compare``: the cost flags, or ``--model``/``--cluster``."""
    seq, mbs, unit = args.seq, args.micro_batch_size, args.time_unit
    if not args.model:
        if args.cluster:
            raise PipesimError("--cluster goes with --model (a model preset or TOML file); give both")
        given = [f for f, v in (("--seq", seq), ("--micro-batch-size", mbs), ("--time-unit", unit)) if v is not None]
        if given and len(given) < 3:
            missing = [f for f in ("--seq", "--micro-batch-size", "--time-unit") if f not in given]
            raise PipesimError(f"per-token figures need --seq, --micro-batch-size and --time-unit; add {', '.join(missing)}")
        costs = costs_from(args)
        return CompareCosts(costs, None, PerToken(seq, mbs, SECONDS[unit], pp) if given else None, costs.describe())
    from ..planner.layout import Layout, with_default_ep
    from ..planner.memory_command import memory_row
    from ..planner.naming import recompute_text
    from ..planner.spec_args import without_fp8
    from ..planner.specs import load_cluster, load_model, load_training, model_training
    from ..planner.stages import component_costs, stage_parts
    from ..schedules import build

    if not args.cluster:
        raise PipesimError("--model needs --cluster (a cluster preset such as h800-2048, or a TOML file)")
    if unit is not None:
        raise PipesimError("--model times are in seconds; drop --time-unit")
    if cost_flags_given(args):  # before costs_from, whose refusals ask for more cost flags
        raise PipesimError("--model brings its own costs; drop the cost flags (--f, --b, --preset, ...)")
    if args.costs_per != "chunk":  # each chunk is priced by the layers it holds already
        raise PipesimError("--model prices each chunk by the layers it holds (a V chunk half a stage); drop --costs-per")
    model, cluster = load_model(args.model), load_cluster(args.cluster)
    base = model_training(args.model)
    training = load_training(None, base=base, seq=seq)
    if training.precision == "fp8" and not cluster.fp8_tflops:  # as plan and memory price it (spec_args)
        training = without_fp8(args, cluster, base, training)
    if cluster.gpus % pp:
        raise PipesimError(
            f"--pp {pp} must divide the cluster's {cluster.gpus} GPUs: give --pp {divisors_text(cluster.gpus, pp)}"
        )
    dp = cluster.gpus // pp
    lay = with_default_ep(model, training, Layout(pp=pp, dp=dp, micro_batch=mbs or 1))
    recompute = "selective" if training.recompute == "auto" else training.recompute
    cache: dict[tuple, CostModel] = {}

    def costs_for(s: Schedule) -> CostModel:
        # the layers are split over the stages as the planner splits them: balanced over
        # what each rank holds (a V puts the embedding's and the head's stages on rank 0)
        pl = s.placement
        held = pl.held()
        if held not in cache:
            parts = stage_parts(model, cluster, training, lay, pl.stages, recompute, held)
            cache[held] = component_costs(model, cluster, training, lay, pl.stages, recompute, parts)
        return cache[held]

    text = f"{model.name} on {cluster.name} ({lay}, {recompute_text(recompute)}; seconds, from the planner's estimate)"
    # the layout is tp1 with every other GPU data-parallel, which a large model may not fit
    # (Llama 3 70B at pp2: 35B parameters a GPU, 212 GB of weights and gradients alone):
    # the timings stand, but say that this layout cannot run them
    row = memory_row(model, cluster, training, lay, "1f1b", max(pp, args.microbatches or 0), recompute)
    if not row["fits"]:
        text += (
            f"; this layout does not fit: 1f1b needs {row['peak_gb']:.0f} GB on rank {row['rank']}, "
            f"{row['usable']['usable_bytes'] / 1e9:.0f} GB usable (pipesim plan finds one that fits)"
        )
    return CompareCosts(costs_for(build("1f1b", pp, pp)), costs_for, PerToken(training.seq, lay.micro_batch, 1.0, pp), text)


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.table import Table  # imported when a table is printed: not to build the parser

    from ..comparison import compare_columns, compare_rows, refuse_if_none_runs
    from ..render.terminal import print_timeline

    if args.timelines and args.json:
        raise PipesimError("--json prints the metrics only, --timelines draws each timeline: drop one of them")
    if args.width is not None and not args.timelines:
        raise PipesimError("--width squeezes the timelines --timelines draws; add --timelines or drop it")
    names = schedule_names(args.schedules)
    refuse_options_none_take(args, names)
    # a schedule file is compared as read, and the names beside it are built at its size
    files = listed_files(args, names)
    pp, M = shape(args, files)
    # the work limit holds for the whole comparison: every schedule is built, simulated
    # and kept (counted_chunks: two chunks a rank or --chunks; a file counts the ops it has)
    built = [n for n in names if n not in files]
    list_work(pp, M, counted_chunks(args, built), files, what=f"compare of {len(names)} schedule{'s' * (len(names) != 1)}")
    priced = compare_costs(args, pp)
    costs, per_token = priced.costs, priced.per_token
    rows = compare_rows(args, names, costs, priced.costs_for, files)
    refuse_if_none_runs(rows, names, pp, M)
    refuse_costs_none_use(args, [r.schedule for r in rows if r.schedule])
    dropped: list[Row] = []
    if args.memory_limit is not None:
        keep = [r for r in rows if r.report is None or max(r.report.peak_activation_memory) <= args.memory_limit + 1e-9]
        dropped = [r for r in rows if r not in keep]
        if not any(r.report for r in keep):  # a table of nothing is no answer, as refuse_if_none_runs says
            least = min(max(r.report.peak_activation_memory) for r in dropped)
            raise PipesimError(
                f"no schedule of {', '.join(names)} fits --memory-limit {args.memory_limit:g} stages at pp={pp}, M={M}: "
                f"the least peak is {least:g} stages; raise the limit to at least that or add schedules"
            )
        rows = keep
    front = pareto(rows)
    hours = per_token.table([(r.name, r.report.makespan) for r in rows if r.report], M) if per_token else {}
    if args.json:
        out = [
            {
                **row.report.to_dict(),
                "min_utilization": min(row.report.utilization),
                "pareto": row.name in front,
                **({k.replace(" ", "_"): v for k, v in hours.get(row.name, {}).items()}),
            }
            if row.report
            else {"schedule": row.name, "error": row.error}
            for row in rows
        ]
        gone = [{"schedule": r.name, "peak_activation_memory": max(r.report.peak_activation_memory)} for r in dropped]
        emit_json(
            {
                "pp": pp,
                "microbatches": M,
                "costs": costs.to_dict(),
                "memory_limit": args.memory_limit,
                **({"per_token": per_token.to_dict(M)} if per_token else {}),
                "schedules": out,
                "dropped": gone,
            }
        )
        return 0
    columns = compare_columns(costs)
    extra = list(next(iter(hours.values()), {}))  # the per-token columns, when asked for
    t = Table(title=f"pp={pp}, M={M}, costs: {priced.text}")
    table: list[list[str]] = []
    for row in rows:
        if row.report is None:
            table.append([row.name, f"[dim]n/a: {row.error}[/]", *[""] * (len(columns) + len(extra) - 2)])
        else:
            cells = [cell(row.report) for _, cell in columns[1:]]
            h = hours.get(row.name, {})
            cells += [f"{v:+.4g}" if k.startswith("vs") else f"{v:.4g}" for k, v in h.items()]
            table.append([f"{row.name} *" if row.name in front else row.name, *cells])
    # names and numbers keep their whole width (Rich would cut three interleaved-* names to
    # one "interleave…" at 100 columns); only the headers give way, wrapping
    for i, header in enumerate([h for h, _ in columns] + extra):
        widest = max((len(r[i]) for r in table if not r[i].startswith("[dim]")), default=0)
        t.add_column(header, justify="left" if i == 0 else "right", min_width=widest, no_wrap=i == 0, overflow="fold")
    for r in table:
        t.add_row(*r)
    out = console()
    out.print(t)
    if per_token:
        out.print(per_token.describe(hours, M))
    # a schedule of no time has no bubble to trade memory for (its share is n/a)
    trade = sorted(
        (max(r.report.peak_activation_memory), r.report.bubble_ratio, r.name)
        for r in rows
        if r.name in front and r.report.makespan > 0
    )
    if trade:
        steps = ", ".join(f"{n} ({m:g} stage{'s' * (m != 1)}, {pct(b)})" for m, b, n in trade)
        out.print(f"* memory/bubble trade-off: no other schedule has both less peak memory and less bubble: {steps}")
    if dropped:
        gone = ", ".join(f"{r.name} ({max(r.report.peak_activation_memory):g})" for r in dropped)
        out.print(f"dropped, peak activation memory above --memory-limit {args.memory_limit:g} stages: {gone}")
    halves = [r.name for r in rows if r.schedule and r.schedule.placement.stages != r.schedule.pp]
    if halves and args.costs_per == "chunk" and not priced.costs_for:
        out.print(
            f"[dim]costs are per chunk, and {', '.join(halves)} {'cut' if len(halves) > 1 else 'cuts'} the model into more, "
            f"smaller chunks than 1F1B; --costs-per stage compares {'them' if len(halves) > 1 else 'it'} on one model[/]"
        )
    if args.timelines:
        for row in rows:
            if row.report:
                out.print(
                    f"\n[bold]{row.name}[/]  makespan {num(row.report.makespan)}  bubble {share(row.report.bubble_ratio, row.report.makespan)}"
                )
                print_timeline(out, row.schedule, row.timeline, args.width)
    return 0
