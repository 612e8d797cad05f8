"""The ``pipesim`` command line.

Every command is a thin layer over the library: parse flags, call build/simulate/...,
print. Bad input of any kind ends in one line on stderr naming what is wrong and what
would be right, and exit status 2; nothing is written when a command fails.
"""

from __future__ import annotations

import argparse
import bisect
import errno
import importlib
import itertools
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.table import Table

from . import theory
from .comparison import Row, compare_columns, compare_rows
from .components import PRESETS, ComponentCosts
from .costfile import load_cost_file
from .costs import CostModel, Costs, chunk_costs
from .errors import PipesimError
from .files import (
    Stream,
    input_files,
    output_extension,
    output_target,
    refuse_overwrite,
    save_schedule,
    write_bytes_atomic,
)
from .inputs import work
from .ir import Op, Pair, Schedule
from .memory import MemoryModel, memory
from .metrics import Report, summarize
from .options import (
    add_costs,
    add_search,
    add_shape,
    columns,
    costs_from,
    options_from,
    positive_float,
    positive_int,
    schedule_from,
    schedule_names,
    shape,
    whole_number,
)
from .output import console, emit_json, num, pct
from .pertoken import SECONDS, PerToken
from .render.pair import pair_chart_bytes, render_pair
from .render.terminal import MAX_COLUMNS, print_timeline
from .schedules import REGISTRY, build
from .simulate import simulate
from .steady import all_busy


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line and exit status 2 (argparse prints usage too), and
    a command, choice or flag one edit away from a real one gets a did-you-mean."""

    typed: list[str] = []  # the command line, set by main: which command's flags to suggest from

    def error(self, message: str) -> None:  # type: ignore[override]
        hint = self._suggestion(message)
        if hint:  # the one likely meant rather than the whole list of choices
            message = message.split(" (choose from ")[0]
        raise PipesimError(f"{message}{hint} (see '{self.prog} --help')")

    def _suggestion(self, message: str) -> str:
        bad = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if bad:
            return did_you_mean_one_edit(bad.group(1), re.findall(r"'([^']*)'", bad.group(2)))
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        command = self._subparsers._group_actions[0].choices.get(self.typed[0]) if self._subparsers and self.typed else None
        if unknown and command is not None:
            flags = [f for f in command._option_string_actions if f.startswith("--")]
            for word in unknown.group(1).split():
                if word.startswith("--") and (hint := did_you_mean_one_edit(word.split("=")[0], flags)):
                    return hint
        return ""


def did_you_mean_one_edit(word: str, known: Sequence[str]) -> str:
    """" (did you mean X?)" for the known word one edit away (a letter added, dropped, changed,
    or two neighbours swapped: comapre -> compare), else ""."""
    close = [k for k in known if _edits(word, k) <= 1]
    return f" (did you mean {close[0]}?)" if close else ""


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: Levenshtein plus adjacent transpositions."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


#: the pip extra that brings each optional import (a missing one is a one-line hint)
EXTRAS = {"matplotlib": "plot", "torch": "torch", "numpy": "torch", "ortools": "exact"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    what = f"pipesim {argv[0]}" if argv and not argv[0].startswith("-") else "pipesim"
    try:
        parser = make_parser()  # inside: a Ctrl-C while the commands import is one line too
        parser.typed = argv
        args = parser.parse_args(argv)
        args.argv = argv  # as typed, for reports that say how to reproduce them
        if not getattr(args, "run", None):
            raise PipesimError("no command given; give one, e.g. pipesim simulate -s 1f1b (see 'pipesim --help')")
        check_args(args)
        return args.run(args) or 0
    except PipesimError as e:
        print(f"pipesim: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in EXTRAS:
            raise
        print(f"pipesim: error: {what} needs {top}: pip install 'pipesim[{EXTRAS[top]}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pipesim: interrupted: {what} stopped by Ctrl-C (no file is left half-written)", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (pipesim ... | head): not an error
        _drop_stdout()
        return 0
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
        # stdout on a full disk or /dev/full (files pipesim writes say so themselves)
        _drop_stdout()
        print(f"pipesim: error: {what} cannot write its output: {e.strerror}", file=sys.stderr)
        return 1


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of what could not
    be written does not print a second error."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def check_args(args: argparse.Namespace) -> None:
    """Checks every command shares, before any work: no flag given an empty value, and
    no output that would replace one of the command's inputs."""
    for key, value in vars(args).items():
        for v in value if isinstance(value, list) else [value]:
            if v == "":
                raise PipesimError(f"--{key.replace('_', '-')} '' is empty; give a value (see 'pipesim {args.argv[0]} --help')")
    written = getattr(args, "output_flags", ("output",))
    outputs = [
        ("-o" if k == "output" else "--" + k.replace("_", "-"), v) for k in written for v in _listed(getattr(args, k, None))
    ]
    for _, out in outputs:
        output_target(out)  # a device, FIFO, folder or missing folder: refused before any work
    refuse_overwrite(outputs, input_files(vars(args), skip=(*written, "argv"), positional=getattr(args, "positional", ())))


def _listed(value) -> list[str]:
    return [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]


# --------------------------------------------------------------------------------------
# flags and output of the commands below (the ones other modules share: options.py, output.py)


def picture_path(text: str) -> str:
    if not text.lower().endswith((".png", ".svg", ".pdf")):
        raise argparse.ArgumentTypeError(f"expected a .png, .svg or .pdf file, got {text!r}")
    return text


def memory_from(args: argparse.Namespace) -> MemoryModel | None:
    file = getattr(args, "components", None)
    return load_cost_file(file)[1] if file else None


GB = 1e9  # memory is printed in decimal GB everywhere, as GPU data sheets and cluster files give it


def report_json(report: Report, schedule: Schedule, costs: CostModel, opts: dict) -> dict:
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
    mem_model = memory_from(args)
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
    out.print(
        f"makespan {num(rep.makespan)}   bubble {pct(rep.bubble_ratio)}   span bubble {pct(rep.span_bubble_ratio)}   "
        f"steady-state utilization {pct(rep.steady_state_utilization)}   min rank utilization {pct(min(rep.utilization))}\n"
        f"peak activations {rep.peak_activations} (chunks)   parameters {rep.parameter_copies:g}x"
    )
    out.print(busy.describe(tl.start))
    if rep.compute_utilization is not None:
        out.print(
            f"compute utilization {pct(sum(rep.compute_utilization) / s.pp)} (mean; min {pct(min(rep.compute_utilization))})   "
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
    from .planner.estimate import Layout, component_costs, default_ep, stage_parts
    from .planner.specs import load_cluster, load_model, load_training, model_training

    if not args.cluster:
        raise PipesimError("--model needs --cluster (a cluster preset such as h800-2048, or a TOML file)")
    if unit is not None:
        raise PipesimError("--model times are in seconds; drop --time-unit")
    if costs_from(args) != Costs():
        raise PipesimError("--model brings its own costs; drop the cost flags (--f, --b, --preset, ...)")
    model, cluster = load_model(args.model), load_cluster(args.cluster)
    training = load_training(None, base=model_training(args.model), seq=seq)
    if cluster.gpus % pp:
        raise PipesimError(f"--pp {pp} must divide the cluster's {cluster.gpus} GPUs")
    dp = cluster.gpus // pp
    ep = default_ep(model, dp)
    lay = Layout(pp=pp, dp=dp, ep=ep, micro_batch=mbs or 1)
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

    text = f"{model.name} on {cluster.name} ({lay}, {recompute} recomputation; seconds, from the planner's estimate)"
    return CompareCosts(costs_for(build("1f1b", pp, pp)), costs_for, PerToken(training.seq, lay.micro_batch, 1.0, pp), text)


def cmd_compare(args: argparse.Namespace) -> int:
    names = schedule_names(args.schedules)
    pp, M = shape(args)
    # the work limit holds for the whole comparison: every schedule is built, simulated
    # and kept (two chunks per rank bounds a V's and DualPipe's ops)
    work(pp, M, 2 * len(names), what=f"compare of {len(names)} schedules")
    priced = compare_costs(args, pp)
    costs, per_token = priced.costs, priced.per_token
    rows = compare_rows(args, names, costs, priced.costs_for)
    dropped: list[Row] = []
    if args.memory_limit is not None:
        keep = [r for r in rows if r.report is None or max(r.report.peak_activation_memory) <= args.memory_limit + 1e-9]
        dropped = [r for r in rows if r not in keep]
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
    trade = sorted((max(r.report.peak_activation_memory), r.report.bubble_ratio, r.name) for r in rows if r.name in front)
    if trade:
        steps = ", ".join(f"{n} ({m:g} stages, {pct(b)})" for m, b, n in trade)
        out.print(f"* memory/bubble trade-off: no other schedule has both less peak memory and less bubble: {steps}")
    if dropped:
        gone = ", ".join(f"{r.name} ({max(r.report.peak_activation_memory):g})" for r in dropped)
        out.print(f"dropped, peak activation memory above --memory-limit {args.memory_limit:g} stages: {gone}")
    halves = [r.name for r in rows if r.schedule and r.schedule.placement.stages != r.schedule.pp]
    if halves and args.costs_per == "chunk" and not priced.costs_for:
        out.print(
            f"[dim]costs are per chunk, and {', '.join(halves)} cut the model into more, smaller chunks than 1F1B; "
            "--costs-per stage compares them on one model[/]"
        )
    if args.timelines:
        for row in rows:
            if row.report:
                out.print(f"\n[bold]{row.name}[/]  makespan {num(row.report.makespan)}  bubble {pct(row.report.bubble_ratio)}")
                print_timeline(out, row.schedule, row.timeline, args.width)
    return 0


def cmd_ops(args: argparse.Namespace) -> int:
    if args.output and args.output != "-":
        output_extension(args.output, (".json",), ".json for a schedule file (a picture: pipesim draw)")
    s = schedule_from(args)
    if args.output:
        save_schedule(s, args.output)
        if args.output != "-":
            print(f"wrote {args.output}", file=sys.stderr)
        return 0
    if args.json:
        emit_json({"ranks": Stream(s.pp, s.rank_notation)})
        return 0
    for r in range(s.pp):
        print(f"rank {r}: {' '.join(s.rank_notation(r))}")
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    """One overlapped F&B pair on two streams, beside the same two ops run alone."""
    costs = costs_from(args)
    if not isinstance(costs, ComponentCosts):
        costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 1)
    pair = Pair(Op("F", 0, 1), Op(args.backward, 1, 0))
    segs = costs.segments(pair, (0, 0))
    t_pair = costs.pair_time(pair, 0, 0)
    t_alone = costs.op_time(pair.forward, 0) + costs.op_time(pair.backward, 0)
    compute = sum(g.end - g.start for g in segs if g.stream == "compute")
    comm = sum(g.end - g.start for g in segs if g.stream == "comm")
    title = f"F&{args.backward} pair: {num(t_pair)} on two streams, {num(t_alone)} alone; {costs.describe()}"
    for path in args.output or ():
        write_bytes_atomic(path, pair_chart_bytes(segs, path.rsplit(".", 1)[-1].lower(), title))
        print(f"wrote {path}", file=sys.stderr)
    if args.output:
        return 0
    if args.json:
        emit_json(
            {
                "costs": costs.to_dict(),
                "pair_time": t_pair,
                "lone_time": t_alone,
                "segments": [{"stream": g.stream, "part": g.label, "start": g.start, "end": g.end} for g in segs],
            }
        )
        return 0
    out = console()
    out.print(f"costs: {costs.describe()}")
    out.print(
        f"F&{args.backward} pair: [bold]{num(t_pair)}[/] on two streams; the same ops alone take {num(t_alone)} "
        f"({pct(1 - t_pair / t_alone)} saved). Compute stream busy {num(compute)}, communication {num(comm)}; "
        f"compute runs {pct(costs.comm_share)} slower while a communication kernel holds its SMs."
    )
    out.print()
    for line in render_pair(segs, args.width or 100):
        out.print(line, crop=False, no_wrap=True, overflow="ignore")
    out.print(
        "[dim]blue: forward parts, orange: backward for inputs, green: weight gradients; parts in DeepSeek-V3 Figure 4's order[/]"
    )
    t = Table(title="parts (time from the pair's start)")
    for col in ("stream", "part", "start", "end", "hides behind"):
        t.add_column(col)
    beside = hidden_behind(segs)
    for g in sorted(segs, key=lambda g: (g.start, g.stream))[:MAX_PART_ROWS]:
        t.add_row(g.stream, g.label, num(g.start), num(g.end), ", ".join(beside.get(id(g), ())) if g.stream == "comm" else "")
    out.print(t)
    if len(segs) > MAX_PART_ROWS:
        out.print(f"[dim]the first {MAX_PART_ROWS} of {len(segs):,} parts; --json lists them all[/]")
    return 0


#: rows of pair's parts table: Rich lays a table out at about 0.6 ms a row, and
#: --layers 10000 makes 80,000 parts
MAX_PART_ROWS = 400


def hidden_behind(segs) -> dict[int, list[str]]:
    """For each communication segment (by id), the compute parts running beside it, in
    the segments' order: a sweep over compute sorted by start, not every pair (--layers
    10000 is 80,000 segments)."""
    compute = sorted((g.start, n, g) for n, g in enumerate(segs) if g.stream == "compute")
    starts = [c[0] for c in compute]
    reach = list(itertools.accumulate((c[2].end for c in compute), max))  # latest end of the first k
    out = {}
    for g in segs:
        if g.stream == "compute":
            continue
        hi = bisect.bisect_left(starts, g.end)  # compute that starts before g ends
        lo = bisect.bisect_right(reach, g.start, 0, hi)  # skip a prefix that ended before g starts
        out[id(g)] = [h.label.split(" ")[0] for _, _, h in sorted(compute[lo:hi], key=lambda c: c[1]) if h.end > g.start]
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    from .engine import compile

    s = schedule_from(args)
    compile(s)  # the array check; validate's per-op walk words a failure (1M ranks: 36 s -> a few)
    print(f"{s.name}: pp={s.pp}, M={s.microbatches}, {s.num_ops} ops: valid")
    return 0


# --------------------------------------------------------------------------------------


def make_parser() -> Parser:
    from . import __version__

    p = Parser(prog="pipesim", description="Pipeline-parallel schedules: generate, check, simulate, compare.")
    p.add_argument("--version", action="version", version=f"pipesim {__version__}")
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
    c.add_argument(
        "--width", type=columns, help="squeeze the timeline into this many columns (default: the terminal's; 0 = never)"
    )

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
    g = c.add_argument_group(
        "per million tokens (GPU-hours, and the difference against the first schedule): --seq, --micro-batch-size "
        "and --time-unit with the cost flags, or --model and --cluster presets whose costs are in seconds"
    )
    g.add_argument("--seq", type=positive_int, help="tokens per sequence (with --model: default the preset's)")
    g.add_argument("--micro-batch-size", type=positive_int, help="sequences per micro-batch (with --model: default 1)")
    g.add_argument("--time-unit", choices=tuple(SECONDS), help="what one cost-model time unit is")
    g.add_argument(
        "--model",
        help="a model preset (deepseek-v3, llama3-70b, ...), TOML file or HuggingFace config.json: costs from the planner's model",
    )
    g.add_argument("--cluster", help="a cluster preset (h800-2048, h100, ...) or TOML file, with --model")
    c.add_argument(
        "--width", type=columns, help="squeeze the timeline into this many columns (default: the terminal's; 0 = never)"
    )

    c = command("ops", cmd_ops, "print a schedule's op order per rank (reference notation)")
    c.add_argument("--schedule", "-s", required=True)
    add_shape(c)
    c.add_argument("--json", action="store_true", help='print {"ranks": [[op, ...], ...]}')
    c.add_argument("--output", "-o", help="write the schedule as a JSON file instead (- for stdout)")

    c = command("validate", cmd_validate, "check a schedule (name or JSON file): complete and deadlock-free")
    c.add_argument("--schedule", "-s", required=True)
    add_shape(c)

    c = command("pair", cmd_pair, "the two-stream timeline of one overlapped F&B pair (component costs)")
    add_costs(c)
    c.add_argument(
        "--backward", choices=("BW", "B"), default="BW", help="the pair's backward: fused (BW, default) or input-only (B)"
    )
    c.add_argument("--json", action="store_true")
    c.add_argument("--width", type=whole_number(1, MAX_COLUMNS), help="columns of the picture (default 100)")
    c.add_argument(
        "--output", "-o", action="append", type=picture_path, help="draw it as a chart instead (.png, .svg or .pdf; repeatable)"
    )

    for module in AREA_COMMANDS:
        importlib.import_module(module).add_commands(command)
    return p


# The commands of other areas. Each module defines ``add_commands(command)`` and calls
# ``command(name, run, help)`` (which returns the sub-parser) once per command; it
# imports its heavy dependencies (matplotlib, torch) inside ``run`` so that start-up
# stays fast and the core needs neither.
AREA_COMMANDS: tuple[str, ...] = (
    "pipesim.render.commands",
    "pipesim.runtime.commands",
    "pipesim.planner.commands",
    "pipesim.profile.commands",
)


if __name__ == "__main__":
    sys.exit(main())
