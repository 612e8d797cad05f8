"""The ``pipesim`` command line.

Every command is a thin layer over the library: parse flags, call build/simulate/...,
print. Bad input of any kind ends in one line on stderr naming what is wrong and what
would be right, and exit status 2; nothing is written when a command fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from . import theory
from .costs import Costs
from .errors import PipesimError
from .files import load_schedule, save_schedule
from .ir import Schedule
from .metrics import Report, summarize
from .render.terminal import LEGEND, render
from .schedules import REGISTRY, build, family
from .simulate import simulate
from .timeline import Timeline


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line and exit status 2 (argparse prints usage too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise PipesimError(f"{message} (see '{self.prog} --help')")


def main(argv: Sequence[str] | None = None) -> int:
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "run", None):
            parser.print_help()
            return 2
        return args.run(args) or 0
    except PipesimError as e:
        print(f"pipesim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


# --------------------------------------------------------------------------------------
# flags shared by several commands


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {v}")
    return v


def cost_value(text: str) -> float | tuple[float, ...]:
    """A cost: one number for every stage, or a comma-separated number per stage."""
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers per stage, got {text!r}") from None
    if any(v < 0 or v != v for v in vals):
        raise argparse.ArgumentTypeError(f"costs must be >= 0, got {text!r}")
    return vals[0] if len(vals) == 1 else vals


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}")
    return v


def nonneg_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if v < 0 or v != v:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


DEFAULT_PP, DEFAULT_MICROBATCHES = 8, 16


def add_shape(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pp", type=positive_int, help=f"pipeline ranks (default {DEFAULT_PP})")
    p.add_argument("--microbatches", "-m", type=positive_int, help=f"micro-batches per step (default {DEFAULT_MICROBATCHES})")
    p.add_argument("--chunks", type=positive_int, help="model chunks per rank (interleaved-1f1b; default 2)")


def shape(args: argparse.Namespace) -> tuple[int, int]:
    return args.pp or DEFAULT_PP, args.microbatches or DEFAULT_MICROBATCHES


def add_costs(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("costs (per chunk; a comma-separated list gives one value per stage)")
    g.add_argument("--f", type=cost_value, default=1.0, help="forward time (default 1)")
    g.add_argument("--b", type=cost_value, default=1.0, help="backward-for-input time (default 1)")
    g.add_argument("--w", type=cost_value, default=1.0, help="weight-gradient time (default 1)")
    g.add_argument("--bw", type=cost_value, help="fused backward time (default B + W)")
    g.add_argument("--pair", type=nonneg_float, help="overlapped F&B pair time (default F + BW: no overlap)")
    g.add_argument("--comm", type=nonneg_float, default=0.0, help="P2P latency per cross-rank transfer (default 0)")


def costs_from(args: argparse.Namespace) -> Costs:
    return Costs(f=args.f, b=args.b, w=args.w, bw=args.bw, pair=args.pair, comm=args.comm)


def add_search(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search (zb-auto: the cost flags above are its costs too)")
    g.add_argument(
        "--memory-limit",
        type=positive_float,
        help="peak activations per rank, in micro-batches of one stage's activation (default pp), or bytes with --activation-bytes",
    )
    g.add_argument("--w-memory", type=share, help="share of an activation kept until its W; B frees the rest (default 1)")
    g.add_argument("--activation-bytes", type=positive_float, help="bytes one forward adds: --memory-limit is then in bytes")
    g.add_argument("--exact", action="store_true", help="improve with CP-SAT (OR-Tools) and prove optimality if it can")
    g.add_argument("--time-limit", type=nonneg_float, help="seconds for --exact (default 10)")


SEARCH_FLAGS = ("memory_limit", "w_memory", "activation_bytes", "time_limit")
COST_OPTIONS = ("f", "b", "w", "comm")


def options_from(args: argparse.Namespace, name: str | None = None) -> dict:
    """Builder options given on the command line. Flags a schedule does not take are
    passed anyway so that ``build`` rejects them; the cost flags go to the builders that
    take costs (zb-auto) and to the simulator."""
    opts = {k: v for k in ("chunks", *SEARCH_FLAGS) if (v := getattr(args, k, None)) is not None}
    if "time_limit" in opts and not getattr(args, "exact", False):
        raise PipesimError("--time-limit bounds the exact search; add --exact (the heuristic needs no limit)")
    if getattr(args, "exact", False):
        opts["exact"] = True
    name = name or getattr(args, "schedule", None)
    fam = REGISTRY.get(name) if name else None
    if fam is not None:
        for k in COST_OPTIONS:
            if k in fam.options and getattr(args, k, None) is not None:
                opts[k] = getattr(args, k)
    return opts


def schedule_from(args: argparse.Namespace, name: str | None = None) -> Schedule:
    """Build the named schedule, or load it when ``--schedule`` names a JSON file."""
    name = name or args.schedule
    if name.endswith(".json") or "/" in name:
        s = load_schedule(name)
        for flag in ("pp", "microbatches"):
            given, have = getattr(args, flag), getattr(s, flag)
            if given is not None and given != have:
                raise PipesimError(f"--{flag} {given} disagrees with the file's {flag} = {have}; drop the flag")
        return s
    pp, M = shape(args)
    return build(name, pp, M, **options_from(args))


# --------------------------------------------------------------------------------------
# output helpers


def console() -> Console:
    """Rich console; when piped, 160 columns rather than Rich's 80 so tables stay whole."""
    width = None if sys.stdout.isatty() else 160
    return Console(highlight=False, soft_wrap=True, width=width)


def emit_json(data) -> None:
    print(json.dumps(data, indent=1))


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def num(x: float) -> str:
    return f"{x:.6g}"


def print_timeline(out: Console, s: Schedule, tl, width: int | None) -> None:
    if width is None and sys.stdout.isatty():
        width = shutil.get_terminal_size().columns
    lines, squeezed = render(s, tl, width or None)
    for line in lines:
        out.print(line, crop=False, no_wrap=True, overflow="ignore")
    note = (
        f"; squeezed to {width} columns: cells show micro-batch numbers, colour the kind (widen with --width)" if squeezed else ""
    )
    out.print(f"[dim]{LEGEND}{note}[/]")


def report_json(report: Report, schedule: Schedule, costs: Costs, opts: dict) -> dict:
    d = report.to_dict()
    d["costs"] = costs.to_dict()
    d["theory"] = {
        "makespan": theory.makespan(schedule.name, schedule.pp, schedule.microbatches, costs, **opts),
        "peak_activations": theory.peak_activations(schedule.name, schedule.pp, schedule.microbatches, **opts),
    }
    # null for the handcrafted schedules; false for a search that did not prove its result
    d["proven_optimal"] = schedule.info.get("proven_optimal")
    d["search"] = schedule.info or None
    d["ranks"] = schedule.to_notation()
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


# --------------------------------------------------------------------------------------
# commands


def cmd_schedules(args: argparse.Namespace) -> int:
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
    s = schedule_from(args)
    costs = costs_from(args)
    tl = simulate(s, costs)
    rep = summarize(s, tl)
    if args.json:
        emit_json(report_json(rep, s, costs, options_from(args)))
        return 0
    out = console()
    out.print(
        f"[bold]{s.name}[/]  pp={s.pp}  M={s.microbatches}  placement={s.placement.kind}  "
        f"costs: {', '.join(f'{k}={v}' for k, v in costs.to_dict().items())}"
    )
    out.print(
        f"makespan {num(rep.makespan)}   bubble {pct(rep.bubble_ratio)}   span bubble {pct(rep.span_bubble_ratio)}   "
        f"steady-state utilization {pct(rep.steady_state_utilization)}   min rank utilization {pct(min(rep.utilization))}\n"
        f"peak activations {rep.peak_activations} (chunks)   parameters {rep.parameter_copies:g}x"
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


@dataclass
class Row:
    """One schedule in a comparison: its timeline and report, or why it cannot run."""

    name: str
    schedule: Schedule | None = None
    timeline: Timeline | None = None
    report: Report | None = None
    error: str | None = None


def compare_rows(args: argparse.Namespace, names: list[str], costs: Costs) -> list[Row]:
    rows = []
    for name in names:
        fam = family(name)  # an unknown name is an error, not a row
        try:
            # each schedule gets the options it takes: --chunks, and for zb-auto the
            # costs and the memory limit (it then uses all the memory allowed)
            opts = {k: v for k, v in options_from(args, name).items() if k in fam.options}
            s = build(name, *shape(args), **opts)
            tl = simulate(s, costs)
            rows.append(Row(name, s, tl, summarize(s, tl)))
        except PipesimError as e:
            rows.append(Row(name, error=str(e)))
    return rows


def pareto(rows: list[Row]) -> set[str]:
    """Schedules no other one beats on both peak activation memory and bubble."""
    reps = [r.report for r in rows if r.report]

    def point(rep: Report) -> tuple[float, float]:
        return (max(rep.peak_activation_memory), rep.bubble_ratio)

    front = set()
    for rep in reps:
        m, b = point(rep)
        if not any(point(o)[0] <= m and point(o)[1] <= b and point(o) != (m, b) for o in reps):
            front.add(rep.schedule)
    return front


def cmd_compare(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.schedules.split(",") if n.strip()] if args.schedules else list(REGISTRY)
    costs = costs_from(args)
    rows = compare_rows(args, names, costs)
    pp, M = shape(args)
    dropped: list[Row] = []
    if args.memory_limit is not None:
        keep = [r for r in rows if r.report is None or max(r.report.peak_activation_memory) <= args.memory_limit + 1e-9]
        dropped = [r for r in rows if r not in keep]
        rows = keep
    front = pareto(rows)
    if args.json:
        out = [
            {**row.report.to_dict(), "min_utilization": min(row.report.utilization), "pareto": row.name in front}
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
                "schedules": out,
                "dropped": gone,
            }
        )
        return 0
    t = Table(title=f"pp={pp}, M={M}, costs {costs.to_dict()}")
    for col in (
        "schedule",
        "makespan",
        "bubble",
        "steady-state util",
        "min rank util",
        "peak act. (chunks)",
        "peak act. (stages)",
        "params",
    ):
        t.add_column(col, justify="left" if col == "schedule" else "right")
    for row in rows:
        rep = row.report
        if rep is None:
            t.add_row(row.name, f"[dim]n/a: {row.error}[/]", "", "", "", "", "", "")
            continue
        t.add_row(
            f"{row.name} *" if row.name in front else row.name,
            num(rep.makespan),
            pct(rep.bubble_ratio),
            pct(rep.steady_state_utilization),
            pct(min(rep.utilization)),
            str(max(rep.peak_activations)),
            f"{max(rep.peak_activation_memory):g}",
            f"{rep.parameter_copies:g}x",
        )
    out = console()
    out.print(t)
    trade = sorted((max(r.report.peak_activation_memory), r.report.bubble_ratio, r.name) for r in rows if r.name in front)
    if trade:
        steps = ", ".join(f"{n} ({m:g} stages, {pct(b)})" for m, b, n in trade)
        out.print(f"* memory/bubble trade-off: no other schedule has both less peak memory and less bubble: {steps}")
    if dropped:
        gone = ", ".join(f"{r.name} ({max(r.report.peak_activation_memory):g})" for r in dropped)
        out.print(f"dropped, peak activation memory above --memory-limit {args.memory_limit:g} stages: {gone}")
    if args.timelines:
        for row in rows:
            if row.report:
                out.print(f"\n[bold]{row.name}[/]  makespan {num(row.report.makespan)}  bubble {pct(row.report.bubble_ratio)}")
                print_timeline(out, row.schedule, row.timeline, args.width)
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    s = schedule_from(args)
    if args.output:
        save_schedule(s, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
        return 0
    if args.json:
        emit_json({"ranks": s.to_notation()})
        return 0
    for r, ops in enumerate(s.to_notation()):
        print(f"rank {r}: {' '.join(ops)}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from .validate import validate

    s = schedule_from(args)
    validate(s)
    print(f"{s.name}: pp={s.pp}, M={s.microbatches}, {s.num_ops} ops: valid")
    return 0


# --------------------------------------------------------------------------------------


def make_parser() -> Parser:
    p = Parser(prog="pipesim", description="Pipeline-parallel schedules: generate, check, simulate, compare.")
    sub = p.add_subparsers(title="commands", parser_class=Parser, metavar="COMMAND")

    def command(name: str, run: Callable, help: str) -> Parser:
        c = sub.add_parser(name, help=help, description=help)
        c.set_defaults(run=run)
        return c

    c = command("schedules", cmd_schedules, "list the schedules with their constraints and closed forms")
    c.add_argument("--json", action="store_true")

    c = command("simulate", cmd_simulate, "simulate one schedule: metrics and a terminal timeline")
    c.add_argument("--schedule", "-s", required=True, help="a schedule name (see 'pipesim schedules') or a schedule JSON file")
    add_shape(c)
    add_costs(c)
    add_search(c)
    c.add_argument("--json", action="store_true", help="print the metrics, the search result and the op order as JSON")
    c.add_argument("--no-timeline", action="store_true", help="metrics only")
    c.add_argument("--width", type=int, help="squeeze the timeline into this many columns (default: the terminal's; 0 = never)")

    c = command("compare", cmd_compare, "simulate several schedules side by side")
    add_shape(c)
    add_costs(c)
    c.add_argument("--schedules", help=f"comma-separated names (default: all of {', '.join(REGISTRY)})")
    c.add_argument(
        "--memory-limit",
        type=positive_float,
        help="drop schedules whose peak activation memory (in 1F1B stages) exceeds this; zb-auto is searched under it",
    )
    c.add_argument("--timelines", action="store_true", help="also draw each schedule's timeline")
    c.add_argument("--json", action="store_true")
    c.add_argument("--width", type=int, help="squeeze the timeline into this many columns (default: the terminal's; 0 = never)")

    c = command("ops", cmd_ops, "print a schedule's op order per rank (reference notation)")
    c.add_argument("--schedule", "-s", required=True)
    add_shape(c)
    c.add_argument("--json", action="store_true", help='print {"ranks": [[op, ...], ...]}')
    c.add_argument("--output", "-o", help="write the schedule as a JSON file instead")

    c = command("validate", cmd_validate, "check a schedule (name or JSON file): complete and deadlock-free")
    c.add_argument("--schedule", "-s", required=True)
    add_shape(c)

    for module in AREA_COMMANDS:
        importlib.import_module(module).add_commands(command)
    return p


# The commands of other areas. Each module defines ``add_commands(command)`` and calls
# ``command(name, run, help)`` (which returns the sub-parser) once per command; it
# imports its heavy dependencies (matplotlib, torch) inside ``run`` so that start-up
# stays fast and the core needs neither.
AREA_COMMANDS: tuple[str, ...] = ()


if __name__ == "__main__":
    sys.exit(main())
