"""The commands that list the schedules and simulate one: ``pipesim schedules`` and
``pipesim simulate`` (metrics, the closed form beside them, memory, a terminal timeline)."""

from __future__ import annotations

import argparse

from ..cost_flags import add_costs, costs_from, refuse_costs_none_use
from ..errors import PipesimError
from ..options import (
    COLUMNS_HELP,
    SCHEDULE_HELP,
    add_search,
    add_shape,
    columns,
    naming_the_file,
    options_from,
    schedule_from,
)
from ..output import console, emit_json, num, pct, share

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from ..costs import CostModel
    from ..ir import Schedule
    from ..memory import MemoryModel
    from ..metrics import Report

# the registry, the simulator, the cost file reader and the terminal timeline import numpy:
# imported in the commands that use them, so that --help (the parser alone) does without


def add_commands(command) -> None:
    c = command("schedules", cmd_schedules, "list the schedules with their constraints and closed forms")
    c.add_argument("--json", action="store_true", help="print the list as JSON")

    c = command("simulate", cmd_simulate, "simulate one schedule: metrics and a terminal timeline")
    c.add_argument("--schedule", "-s", required=True, help=SCHEDULE_HELP)
    add_shape(c)
    add_costs(c)
    add_search(c)
    c.add_argument("--json", action="store_true", help="print the metrics, the search result and the op order as JSON")
    c.add_argument("--no-timeline", action="store_true", help="metrics only")
    c.add_argument("--width", type=columns, help=COLUMNS_HELP)


def memory_from(args: argparse.Namespace) -> MemoryModel | None:
    """The [memory] sizes of a --components file, which are one chunk of the file's own
    layers: a --layers that overrides them would time one chunk and size another."""
    from ..costfile import load_cost_file

    file = getattr(args, "components", None)
    if not file:
        return None
    costs, mem = load_cost_file(file)
    layers = len(costs.stages[0])
    if mem is not None and args.layers is not None and args.layers != layers:
        raise PipesimError(
            f"--layers {args.layers} overrides {file}'s layers = {layers}, which its [memory] sizes a chunk by: "
            "set layers in the file instead"
        )
    return mem


GB = 1e9  # memory is printed in decimal GB everywhere, as GPU data sheets and cluster files give it


def report_json(report: Report, schedule: Schedule, costs: CostModel, opts: dict) -> dict:
    from .. import theory
    from ..files import Stream

    d = report.to_dict()
    d["costs"] = costs.to_dict()
    d["theory"] = {
        "makespan": theory.makespan(schedule.name, schedule.pp, schedule.microbatches, costs, **opts),
        "peak_activations": theory.peak_activations(schedule.name, schedule.pp, schedule.microbatches, **opts),
    }
    # null for the handcrafted schedules; false for a search that did not prove its result
    d["proven_optimal"] = schedule.info.get("proven_optimal")
    d["search"] = schedule.info or None
    d["ranks"] = Stream(schedule.pp, schedule.rank_notation)  # written a rank at a time
    return d


def search_line(s: Schedule) -> str | None:
    info = s.info
    if not info:
        return None
    proven = info.get("proven_optimal")
    verdict = "heuristic (not proven)" if proven is None else "proven optimal" if proven else "not proven optimal"
    bound = info.get("lower_bound")
    tail = f", lower bound {num(bound)}" if bound is not None and not proven else ""
    status = f", CP-SAT {info['status']}" if "status" in info else ""
    return (
        f"searched: {info['method']}  longest span {num(info['longest_span'])}  {verdict}{tail}{status}  "
        f"peak memory {info['peak_memory']:.3g} of {info['memory_limit']:g}  ({info['search_seconds']:.2f} s)"
    )


def cmd_schedules(args: argparse.Namespace) -> int:
    from rich.table import Table  # imported when a table is printed: not to build the parser

    from .. import theory
    from ..schedules import REGISTRY

    rows = []
    for name, fam in REGISTRY.items():
        form = theory.FORMS.get(name)
        rows.append(
            {
                "name": name,
                "placement": fam.placement,
                "constraints": fam.constraints,
                "options": {k: v for k, v in fam.options.items()},
                "bubble": form.bubble if form else None,
                "bubble_exact_when": form.regime if form else None,
                "activations": form.activations if form else None,
                "summary": fam.summary,
            }
        )
    if args.json:
        emit_json({"schedules": rows})
        return 0
    t = Table(title="pipesim schedules (F, B, W per chunk; BW = B+W; F&B = overlapped pair; c = P2P latency)")
    for col in ("name", "placement", "constraints", "bubble per rank", "exact when", "peak activations"):
        t.add_column(col)
    for r in rows:
        t.add_row(
            r["name"],
            r["placement"],
            r["constraints"],
            r["bubble"] or "-",
            r["bubble_exact_when"] or "-",
            r["activations"] or "-",
        )
    console().print(t)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from .. import theory
    from ..costs import chunk_costs
    from ..memory import memory
    from ..metrics import summarize
    from ..render.terminal import print_timeline
    from ..simulate import simulate
    from ..steady import all_busy

    if args.width is not None and (args.json or args.no_timeline):
        raise PipesimError(
            f"--width squeezes the terminal timeline, which {'--json' if args.json else '--no-timeline'} drops: drop one"
        )
    if args.json and args.no_timeline:  # the JSON has no timeline: the flag changed nothing, unsaid
        raise PipesimError("--json prints the metrics without a timeline already: drop --no-timeline")
    s = schedule_from(args)
    refuse_costs_none_use(args, [s])
    costs = costs_from(args)
    mem_model = memory_from(args)
    with naming_the_file(args.schedule):
        tl = simulate(s, chunk_costs(costs, s, args.costs_per))
    rep = summarize(s, tl)
    mem = memory(s, tl, mem_model) if mem_model else None
    busy = all_busy(tl)
    if args.json:
        d = report_json(rep, s, costs, options_from(args))
        d["all_busy"] = busy.to_dict()
        if mem:
            d["memory_bytes"] = mem.to_dict()
        emit_json(d)
        return 0
    out = console()
    out.print(f"[bold]{s.name}[/]  pp={s.pp}  M={s.microbatches}  placement={s.placement.kind}  costs: {costs.describe()}")
    span = rep.makespan
    out.print(
        f"makespan {num(span)}   bubble {share(rep.bubble_ratio, span)}   span bubble {share(rep.span_bubble_ratio, span)}   "
        f"steady-state utilization {pct(rep.steady_state_utilization)}   min rank utilization {share(min(rep.utilization), span)}\n"
        f"peak activations {rep.peak_activations} (chunks)   parameters {rep.parameter_copies:g}x"
    )
    # with no time there is no moment for a rank to idle in, nor to be busy in
    out.print(busy.describe(tl.start) if span > 0 else "no rank idles: n/a (every item takes no time)")
    if rep.compute_utilization is not None:
        out.print(
            f"compute utilization {share(sum(rep.compute_utilization) / s.pp, span)} (mean; min {share(min(rep.compute_utilization), span)})   "
            f"steady state {pct(rep.steady_state_compute_utilization)}   exposed communication {num(max(rep.exposed_comm))} (worst rank)"
        )
    if mem:
        gb = GB
        out.print(
            "memory per rank (GB): peak "
            + " ".join(f"{x / gb:.1f}" for x in mem.peak)
            + f"   = parameters {max(mem.params) / gb:.1f} + gradients {max(mem.grads) / gb:.1f} + optimizer {max(mem.optimizer) / gb:.1f}"
            + f" + activations up to {max(mem.activation_peak) / gb:.1f}"
        )
    line = search_line(s)
    if line:
        out.print(line)
    th = theory.makespan(s.name, s.pp, s.microbatches, costs, **options_from(args))
    if th is not None:
        out.print(f"closed form makespan {num(th)} ({'matches' if abs(th - rep.makespan) < 1e-9 * max(1, th) else 'DIFFERS'})")
    if not args.no_timeline:
        out.print()
        print_timeline(out, s, tl, args.width)
    return 0
