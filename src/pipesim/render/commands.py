"""The picture commands: ``draw`` (charts and Chrome traces), ``sweep`` and ``report``
(one interactive HTML file).

Each checks its output paths before any work, renders everything in memory, then
writes each file whole (a temporary file renamed into place), so a failed command
leaves nothing half-written. matplotlib is imported only when a picture is asked for.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from ..cost_flags import add_costs, cost_flags_given, costs_from, costs_run, refuse_costs_none_use, refuse_costs_unused
from ..errors import PipesimError
from ..options import (
    DEFAULT_PP,
    SCHEDULE_HELP,
    add_builder_options,
    add_shape,
    counted_chunks,
    list_options,
    list_work,
    listed_files,
    naming_the_file,
    number,
    options_for,
    positive_int,
    refuse_options_none_take,
    schedule_from,
    schedule_names,
    schedules_help,
    shape,
)
from ..output import console, pct
from ..sweep import COLUMNS, RANGE_HELP, parse_range, run_sweep, skip_lines, to_csv
from .trace import UNITS

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from ..costs import Costs
    from ..ir import Schedule

# the builders, the simulator, the comparison and the file readers and writers import
# numpy: imported in the commands that use them, so that --help (the parser alone) does without

CHART_EXTS = (".png", ".svg", ".pdf")


def add_commands(command) -> None:
    c = command("draw", cmd_draw, "draw timelines as a chart (.png, .svg, .pdf) or a Chrome/Perfetto trace (.json)")
    g = c.add_mutually_exclusive_group(required=True)
    g.add_argument("--schedule", "-s", help=SCHEDULE_HELP)
    g.add_argument(
        "--schedules",
        help="comma-separated names or schedule JSON files, stacked on one time axis (the names are built at the first "
        "file's pp and M where --pp and -m are not given)",
    )
    g.add_argument("--measured", metavar="FILE.json", help="a measured timeline (pipesim profile --timeline), in seconds")
    add_shape(c)
    add_costs(c)
    c.add_argument(
        "--output",
        "-o",
        action="append",
        required=True,
        help="file to write, by extension: .png, .svg, .pdf (chart) or .json (Chrome trace); repeat for several",
    )
    c.add_argument(
        "--time-unit",
        choices=tuple(UNITS),
        help="what one cost-model unit is in a Chrome trace, -o x.json (default us: one unit = 1 microsecond; "
        "a measured timeline is in s)",
    )
    c.add_argument(
        "--width", type=_inches, help="chart time axis width in inches, 1 to 200 (default: from the shortest op, 6 to 40)"
    )

    c = command("sweep", cmd_sweep, "bubble and activation memory over a range of micro-batch counts: a plot, CSV or table")
    c.add_argument("--pp", type=positive_int, help=f"pipeline ranks (default {DEFAULT_PP})")
    c.add_argument("--microbatches", "-m", help=f"{RANGE_HELP} (default PP:16*PP)")
    add_builder_options(c)  # the builder options draw, compare and report take
    c.add_argument("--schedules", help=schedules_help("a file is one point, at its own M, and sets --pp when not given"))
    add_costs(c)
    c.add_argument(
        "--output",
        "-o",
        action="append",
        help="a plot (.png, .svg, .pdf) or the data (.csv), by extension; repeat for several; without, a table",
    )
    c.add_argument("--csv", help="also write the data as CSV to this path")
    c.set_defaults(output_flags=("output", "csv"))  # both are written: neither may be an input

    c = command(
        "report", cmd_report, "write an interactive HTML report: a sortable table, timelines to hover and zoom, memory, a sweep"
    )
    add_shape(c)
    add_costs(c)
    c.add_argument("--schedules", help=schedules_help())
    c.add_argument("--sweep", metavar="M-RANGE", help=f"also sweep the schedules over micro-batch counts: {RANGE_HELP}")
    c.add_argument("--output", "-o", required=True, help="the .html file to write")


#: inches, where the terminal commands' --width counts columns: the error says which
_inches = number(lambda v: 1 <= v <= 200, "a chart width in inches from 1 to 200")


# --------------------------------------------------------------------------------------
# outputs


def _write(path: str, data: bytes | str) -> None:
    from ..files import write_bytes_atomic, write_text_atomic

    if isinstance(data, str):
        write_text_atomic(path, data)
    else:
        write_bytes_atomic(path, data)
    print(f"wrote {path}", file=sys.stderr)


_names = schedule_names


# --------------------------------------------------------------------------------------
# draw


def _build_each(args: argparse.Namespace, names: list[str]) -> list[Schedule]:
    if len(names) == 1 and args.schedule:
        return [schedule_from(args, names[0])]
    from ..schedules import build

    refuse_options_none_take(args, names)
    files = listed_files(args, names, alike="")  # stacked: files of any size
    # each schedule takes the options it takes, zb-auto the cost flags it orders by, as in
    # compare; the names are built at the first file's size where --pp or -m is not given
    return [files[n] if n in files else build(n, *shape(args, files), **options_for(args, n)) for n in names]


def cmd_draw(args: argparse.Namespace) -> int:
    from ..costs import chunk_costs
    from ..files import load_timeline, output_extension
    from ..simulate import simulate

    exts = [
        output_extension(p, (*CHART_EXTS, ".json"), ".png, .svg or .pdf for a chart, .json for a Chrome trace")
        for p in args.output
    ]
    if args.measured:  # before costs_from, whose refusals would ask for more cost flags
        _refuse_with_measured(args)
    costs = costs_from(args)
    if ".json" not in exts and args.time_unit is not None:
        raise PipesimError(
            "--time-unit sets what one time unit is in a Chrome trace (-o x.json); a chart's axis shows the timeline's "
            "own units: drop it or add a .json output"
        )
    if args.measured:
        if args.time_unit not in (None, "s"):
            raise PipesimError(f"a measured timeline is in seconds; drop --time-unit {args.time_unit} (or give s)")
        runs = [load_timeline(args.measured)]
        _refuse_past_draw_limit([runs[0][0]])
    else:
        names = [args.schedule] if args.schedule else _names(args.schedules)
        built = _build_each(args, names)
        _refuse_past_draw_limit(built)
        refuse_costs_none_use(args, built)
        with naming_the_file(args.schedule or ""):  # in a list, each file is named by its path already
            runs = [(s, simulate(s, chunk_costs(costs, s, args.costs_per))) for s in built]
    files: list[tuple[str, bytes | str]] = []
    for path, ext in zip(args.output, exts):
        if ext == ".json":
            from .trace import trace_json

            settings = _settings(args, None if args.measured else costs, runs)
            unit = args.time_unit or ("s" if args.measured else "us")
            files.append((path, trace_json(runs, time_unit=unit, settings=settings)))
        else:
            from .chart import Panel, chart_bytes

            files.append((path, chart_bytes([Panel(s, tl) for s, tl in runs], ext[1:], width=args.width)))
    for path, data in files:
        _write(path, data)
    return 0


#: the most ops draw renders, all its schedules together: below MAX_OPS, because each op
#: is a box (and a label) in a chart and events in a trace. Measured on this project's
#: 2-core machine, zb-h1 at pp=64, M=1500 (288,000 ops): 19.6 s of CPU for an SVG, 7.1 s
#: for a PNG, 9.8 s and 1.2 GB for a Chrome trace (at MAX_OPS an SVG was some 25 minutes).
DRAW_MAX_OPS = 500_000


def _refuse_past_draw_limit(schedules: list[Schedule]) -> None:
    """Counted on the schedules as built (a file, a V or an interleaved order has the ops
    it has), before any is simulated or drawn."""
    ops = sum(s.num_ops for s in schedules)
    if ops > DRAW_MAX_OPS:
        what = schedules[0].name if len(schedules) == 1 else f"{len(schedules)} schedules together"
        raise PipesimError(
            f"draw of {what} too large: {ops:,} ops, above the limit of {DRAW_MAX_OPS:,} (about 35 s of CPU for an SVG, "
            "2 GB for a Chrome trace); use fewer ranks or micro-batches (simulate and compare take up to 24,000,000)"
        )


def _refuse_with_measured(args: argparse.Namespace) -> None:
    """A measured timeline brings its own schedule, shape and times (in seconds): a flag
    that would shape or price a simulated one is refused, not silently dropped."""
    shaping = [f for f, v in (("--pp", args.pp), ("--microbatches", args.microbatches), ("--chunks", args.chunks)) if v]
    shaping += [f for f, v in (("--delay-wgrad", args.delay_wgrad), ("--group-size", args.group_size)) if v]
    if cost_flags_given(args) or args.costs_per != "chunk":  # --f 1 too: it prices nothing here
        shaping.append("the cost flags")
    if shaping:
        raise PipesimError(
            f"--measured draws a measured timeline, which brings its own schedule and times: drop {', '.join(shaping)}"
        )


def costs_text(costs: Costs) -> str:
    """``f=1 b=1 w=0.5 comm=0.1``, per-stage lists joined by commas, as the flags take them
    (component costs describe themselves)."""
    from ..costs import Costs

    if not isinstance(costs, Costs):
        return costs.describe()
    return " ".join(
        f"{k}={','.join(f'{x:g}' for x in v) if isinstance(v, list) else f'{v:g}'}" for k, v in costs.to_dict().items()
    )


def _settings(args: argparse.Namespace, costs: Costs | None, runs: list[tuple[Schedule, object]]) -> dict:
    """What the trace was made from (a schedule file brings its own pp and M; a measured
    timeline its times, no costs)."""
    s = runs[0][0]
    d: dict = {"schedules": [s.name for s, _ in runs], "pp": s.pp, "microbatches": s.microbatches}
    d.update({"costs": costs.to_dict()} if costs is not None else {"source": "measured"})
    if getattr(args, "chunks", None):
        d["chunks"] = args.chunks
    return d


# --------------------------------------------------------------------------------------
# sweep


def _sweep_work(
    args: argparse.Namespace, pp: int, Ms: list[int], names: list[str], files: dict[str, Schedule], flag: str, text: str | None
) -> None:
    """The whole sweep against the work limit, before the first simulation: every
    schedule at every M, counted as compare counts a list, beside the files' own ops;
    one schedule at a time, 17 schedules ran 17 times the limit."""
    where = f"{flag} {text!r}: " if text else ""
    what = f"sweep of {len(names)} schedule{'s' * (len(names) != 1)} (M summed over the range)"
    list_work(pp, sum(Ms), counted_chunks(args, names), files, what=what, where=where)


def cmd_sweep(args: argparse.Namespace) -> int:
    from rich.table import Table  # imported when a table is printed: not to build the parser

    from ..files import output_extension

    names = _names(args.schedules)
    refuse_options_none_take(args, names)
    given = parse_range(args.microbatches) if args.microbatches else None  # before any file is read
    # a schedule file is one point at its own M (-m is the range, no M to check it by),
    # and the sweep runs at its pp where --pp is not given
    files = listed_files(argparse.Namespace(**{**vars(args), "microbatches": None}), names, alike="pp")
    pp = args.pp or next((s.pp for s in files.values()), DEFAULT_PP)
    Ms = given or parse_range(f"{pp}:{16 * pp}")
    built = [n for n in names if n not in files]
    if not built and args.microbatches:  # nothing is built over the range: it changed nothing, unsaid
        _refuse_range_of_files("-m", args.microbatches, files)
    _sweep_work(args, pp, Ms, built, files, "--microbatches", args.microbatches)
    outputs = [
        (path, output_extension(path, (*CHART_EXTS, ".csv"), ".png, .svg or .pdf for a plot, .csv for the data"))
        for path in args.output or []
    ]
    if args.csv:
        output_extension(args.csv, (".csv",), ".csv", flag="--csv")
    costs = costs_from(args)
    used: set[str] = set()  # what the swept schedules run, for --pair and --bw
    points, skips = run_sweep(
        names, pp, Ms, costs, list_options(args), args.costs_per, files, look=lambda s: used.update(costs_run(s))
    )
    if points:
        refuse_costs_unused(args, used, names)
    notes = skip_lines(skips) + (_outside(files, Ms) if built else [])  # files alone: no range to be outside of
    if not points:
        raise PipesimError(f"no schedule of {', '.join(names)} can take pp={pp} with M in {Ms}: " + "; ".join(notes))
    files: list[tuple[str, bytes | str]] = []
    if args.csv:
        files.append((args.csv, to_csv(points)))
    for path, ext in outputs:
        if ext == ".csv":
            files.append((path, to_csv(points)))
        else:
            from .sweep_plot import sweep_bytes

            files.append((path, sweep_bytes(points, ext[1:], title=f"pp={pp}, costs {costs_text(costs)}")))
    for note in notes:
        print(f"pipesim: {note}", file=sys.stderr)
    if not files:
        t = Table(title=f"sweep: pp={pp}, M in {Ms}, costs {costs_text(costs)}")
        for col in COLUMNS:  # spaces let the headers wrap instead of being cut; names keep their width
            if col == "schedule":
                t.add_column("schedule", min_width=max(len(p.schedule) for p in points), no_wrap=True)
            else:
                t.add_column(col.replace("_", " "), justify="right")
        for p in points:
            cells = [getattr(p, col) for col in COLUMNS]
            t.add_row(
                *(
                    pct(v) if "ratio" in col or "utilization" in col else f"{v:g}" if isinstance(v, float) else str(v)
                    for col, v in zip(COLUMNS, cells)
                )
            )
        console().print(t)
    for path, data in files:
        _write(path, data)
    return 0


def _refuse_range_of_files(flag: str, text: str, files: dict[str, Schedule]) -> None:
    """A range of M given to schedule files alone, each of which runs at its own M."""
    each = "brings its own M" if len(files) == 1 else "bring their own M"
    raise PipesimError(
        f"{flag} {text} is the range of M the named schedules are built at, and {', '.join(files)} {each}: "
        f"drop {flag} or list a schedule name beside the files"
    )


def _outside(files: dict[str, Schedule], Ms: list[int]) -> list[str]:
    """A line for each schedule file whose own M is not one of the sweep's: its one
    point lies outside the range asked for."""
    return [
        f"{name} is a schedule file of M={s.microbatches}, outside the sweep's M in {Ms}: its one point is at its own M"
        for name, s in files.items()
        if s.microbatches not in Ms
    ]


# --------------------------------------------------------------------------------------
# report


def _sort_value(text: str) -> float | str:
    """What a table cell sorts by: its number (``30.4%`` -> 30.4, ``2x`` -> 2), else its text."""
    try:
        return float(text.rstrip("%x"))
    except ValueError:
        return text


def _unit_text(costs_per: str) -> str:
    if costs_per == "stage":
        return "the cost model's: F, B, W are one 1F1B stage's (1/pp of the model); a smaller chunk costs its share"
    return "the cost model's: F, B, W are per chunk"


#: the report's own work limit, below MAX_OPS: each op also becomes page data (its
#: dependencies, memory steps, JSON), about 18 us of CPU and 1.7 KB of memory per op where
#: compare needs a fraction of that. Measured on this project's 2-core machine:
#: zb-v at pp=64, M=3906 (1,499,904 ops) took 26.6 s of CPU, 2.6 GB and wrote a 106 MB page;
#: at MAX_OPS that is about 7 minutes and 40 GB (pp=64, M=100000: died after 7.5 minutes).
REPORT_MAX_OPS = 1_500_000
REPORT_COST = "about 30 s of CPU, 2.6 GB and a 100 MB page"


def cmd_report(args: argparse.Namespace) -> int:
    from ..comparison import compare_columns, compare_rows, refuse_if_none_runs
    from ..files import output_extension
    from .html import Unrunnable, report_html
    from .report_data import sweep_data, timeline_data, to_json

    output_extension(args.output, (".html", ".htm"), ".html")
    names = _names(args.schedules)
    refuse_options_none_take(args, names)
    costs = costs_from(args)
    Ms = parse_range(args.sweep, "--sweep") if args.sweep else None  # before any file is read
    files = listed_files(args, names)  # as compare reads them: the names built at their size
    pp, M = shape(args, files)
    # every schedule is built, simulated and kept for the page, as compare keeps them: the
    # limit holds for them all together, counted as compare counts them (2 chunks each),
    # a file by the ops it has
    built = [n for n in names if n not in files]
    chunks = counted_chunks(args, built)
    what = f"report of {len(names)} schedule{'s' * (len(names) != 1)}"
    list_work(pp, M, chunks, files, what=what, limit=REPORT_MAX_OPS, cost=REPORT_COST)
    if Ms and built:
        _sweep_work(args, pp, Ms, built, files, "--sweep", args.sweep)
    elif Ms:
        _refuse_range_of_files("--sweep", args.sweep, files)
    rows = compare_rows(args, names, costs, files=files)
    refuse_if_none_runs(rows, names, pp, M)
    refuse_costs_none_use(args, [r.schedule for r in rows if r.schedule])
    data: dict = {"schedules": [timeline_data(r.schedule, r.timeline) for r in rows if r.report], "sweep": None}
    notes: list[str] = []
    if Ms:
        points, skips = run_sweep(names, pp, Ms, costs, list_options(args), args.costs_per, files)
        notes = skip_lines(skips) + _outside(files, Ms)
        data["sweep"] = sweep_data(points) if points else None
    columns = compare_columns(costs)
    table = [
        [(r.name, r.name), *[(text := cell(r.report), _sort_value(text)) for _, cell in columns[1:]]]
        if r.report
        else Unrunnable(r.name, f"n/a: {r.error}")
        for r in rows
    ]
    from .. import __version__ as pipesim_version

    command = "pipesim " + shlex.join(args.argv)
    settings = [
        ("pp", str(pp)),
        ("micro-batches", str(M)),
        *([("chunks", str(args.chunks))] if args.chunks else []),
        ("schedules", ", ".join(names)),
        ("costs", costs.describe()),
        ("time unit", _unit_text(args.costs_per)),
        *([("sweep", f"M in {Ms}" + "".join(f"; {n}" for n in notes))] if Ms else []),
        ("pipesim", pipesim_version),
        ("command", command),
    ]
    page = report_html(
        title=f"pipesim report: pp={pp}, M={M}",
        subtitle="Simulated pipeline schedules: metrics, then each timeline and its memory on one time axis.",
        header=tuple(h for h, _ in columns),
        rows=table,
        data_json=to_json(data),
        settings=settings,
        sweep=data["sweep"] is not None,
    )
    _write(args.output, page)
    return 0
