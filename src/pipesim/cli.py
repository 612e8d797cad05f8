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

from rich.console import Console
from rich.table import Table

from . import theory
from .components import PRESETS, ComponentCosts, LayerCosts
from .costfile import load_cost_file
from .costs import CostModel, Costs, chunk_costs
from .errors import PipesimError
from .files import (
    input_files,
    json_text,
    load_schedule,
    output_extension,
    output_target,
    refuse_overwrite,
    save_schedule,
    write_bytes_atomic,
)
from .inputs import INT32_MAX, MAX_COUNT, MAX_LAYERS, MAX_VALUE, int_text, shorten, work
from .ir import Op, Pair, Schedule
from .memory import MemoryModel, memory
from .metrics import Report, summarize
from .pertoken import SECONDS, PerToken
from .render.pair import pair_chart_bytes, render_pair
from .render.terminal import MAX_COLUMNS, print_timeline  # noqa: F401  (runtime/commands.py imports print_timeline from here)
from .schedules import REGISTRY, build, family
from .simulate import simulate
from .steady import all_busy
from .timeline import Timeline


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
# flags shared by several commands


def whole_number(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``lo`` to ``hi``, its digits capped before
    int() (inputs.int_text), so a flag of 5,000 digits is one line like any other."""

    def parse(text: str) -> int:
        v = int_text(text)
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected a whole number from {lo:,} to {hi:,}, got {shorten(text)}")
        return v

    return parse


positive_int = whole_number(1, MAX_COUNT)
#: --width of a terminal timeline: 0 never squeezes, past MAX_COLUMNS it is cut to them
columns = whole_number(0, INT32_MAX)



def cost_value(text: str) -> float | tuple[float, ...]:
    """A cost: one number for every stage, or a comma-separated number per stage."""
    try:
        vals = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or comma-separated numbers per stage, got {text!r}") from None
    if any(not 0 <= v <= MAX_VALUE for v in vals):  # NaN fails every comparison
        raise argparse.ArgumentTypeError(f"costs must be from 0 to {MAX_VALUE:g}, got {text!r}")
    return vals[0] if len(vals) == 1 else vals


def number(ok: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse type: a number for which ``ok`` holds, else "expected <expected>"."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = float("nan")
        if v != v or not ok(v):  # NaN is never a good answer
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return v

    return parse


# bounded above so that sums of MAX_OPS of them stay finite (1e308 + 1e308 is inf)
positive_float = number(lambda v: 0 < v <= MAX_VALUE, f"a number > 0 and <= {MAX_VALUE:g}")
nonneg_float = number(lambda v: 0 <= v <= MAX_VALUE, f"a number from 0 to {MAX_VALUE:g}")
share = number(lambda v: 0 <= v <= 1, "a share between 0 and 1")


DEFAULT_PP, DEFAULT_MICROBATCHES = 8, 16


def add_shape(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pp", type=positive_int, help=f"pipeline ranks (default {DEFAULT_PP})")
    p.add_argument("--microbatches", "-m", type=positive_int, help=f"micro-batches per step (default {DEFAULT_MICROBATCHES})")
    p.add_argument("--chunks", type=positive_int, help="model chunks per rank (interleaved-1f1b; default 2)")
    p.add_argument(
        "--delay-wgrad",
        action="store_true",
        help="combined 1F1B: split the weight gradient off the backward (Megatron's --delay-wgrad-compute)",
    )
    p.add_argument(
        "--group-size",
        type=positive_int,
        help="interleaved 1F1B (plain and combined): micro-batches per group through each chunk "
        "(Megatron's --microbatch-group-size-per-virtual-pipeline-stage; default pp)",
    )


def shape(args: argparse.Namespace) -> tuple[int, int]:
    """(pp, M) of the flags, refused up front when beyond the work limit."""
    pp, M = args.pp or DEFAULT_PP, args.microbatches or DEFAULT_MICROBATCHES
    work(pp, M, getattr(args, "chunks", None) or 1, what=getattr(args, "schedule", None) or "schedule")
    return pp, M


def add_op_costs(g) -> None:
    """The F, B and W times and the P2P latency: the simulator's costs, and zb-auto's,
    whose builder orders by them."""
    g.add_argument("--f", type=cost_value, help="forward time (default 1)")
    g.add_argument("--b", type=cost_value, help="backward-for-input time (default 1)")
    g.add_argument("--w", type=cost_value, help="weight-gradient time (default 1)")
    g.add_argument("--comm", type=nonneg_float, help="P2P latency per cross-rank transfer (default 0)")


def add_costs(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("costs per chunk (a comma-separated list gives one value per stage)")
    add_op_costs(g)
    g.add_argument("--bw", type=cost_value, help="fused backward time (default B + W)")
    g.add_argument("--pair", type=nonneg_float, help="overlapped F&B pair time (default F + BW: no overlap)")
    g.add_argument(
        "--costs-per",
        choices=("chunk", "stage"),
        default="chunk",
        help="chunk (default): the times are one chunk's, whatever its size; stage: they are one 1F1B stage's "
        "(1/pp of the model), and V or interleaved chunks cost their share, to compare schedules on one model",
    )
    c = p.add_argument_group(
        "component costs per layer (instead of --f/--b/--w: a chunk is --layers layers of attention, "
        "dispatch, MLP, combine; overlapped pairs run on two streams)"
    )
    c.add_argument("--preset", choices=sorted(PRESETS), help="ep-1to1: communication equals computation (DeepSeek-V3's regime)")
    c.add_argument("--components", metavar="FILE.toml", help="component times (and memory sizes) from a TOML file")
    for name, what in COMPONENT_FLAGS.items():
        c.add_argument(f"--{name.replace('_', '-')}", type=nonneg_float, help=what)
    c.add_argument("--layers", type=whole_number(1, MAX_LAYERS), help="layers per chunk (default 1)")
    c.add_argument("--p2p", type=nonneg_float, help="P2P latency between stages (default 0)")
    c.add_argument("--comm-sms", type=nonneg_float, help="SMs a communication kernel holds while it runs (default 20)")
    c.add_argument("--total-sms", type=positive_float, help="SMs of the GPU (default 132, H800)")
    c.add_argument("--lone-overlap", action="store_true", help="lone ops overlap two half micro-batches (default: exposed)")


COMPONENT_FLAGS = {
    "attn": "attention forward time",
    "mlp": "MLP (experts) forward time",
    "dispatch": "all-to-all dispatch time",
    "combine": "all-to-all combine time",
    "attn_b": "attention backward-for-input (default = --attn)",
    "attn_w": "attention weight gradient (default = --attn)",
    "mlp_b": "MLP backward-for-input (default = --mlp)",
    "mlp_w": "MLP weight gradient (default = --mlp)",
    "dispatch_b": "dispatch's backward all-to-all (default = --dispatch)",
    "combine_b": "combine's backward all-to-all (default = --combine)",
}
_LAYER_FIELD = {"attn": "attn_f", "mlp": "mlp_f", "dispatch": "dispatch_f", "combine": "combine_f"}
_COMPONENT_EXTRAS = ("layers", "p2p", "comm_sms", "total_sms")


def picture_path(text: str) -> str:
    if not text.lower().endswith((".png", ".svg", ".pdf")):
        raise argparse.ArgumentTypeError(f"expected a .png, .svg or .pdf file, got {text!r}")
    return text


def costs_from(args: argparse.Namespace) -> CostModel:
    """The cost model the flags describe: per-chunk ``Costs`` or per-layer ``ComponentCosts``."""
    simple = {k: getattr(args, k) for k in ("f", "b", "w", "bw", "pair", "comm") if getattr(args, k, None) is not None}
    layer = {_LAYER_FIELD.get(k, k): v for k in COMPONENT_FLAGS if (v := getattr(args, k, None)) is not None}
    extras = {k: v for k in _COMPONENT_EXTRAS if (v := getattr(args, k, None)) is not None}
    file, preset = getattr(args, "components", None), getattr(args, "preset", None)
    if not (layer or extras or file or preset or getattr(args, "lone_overlap", False)):
        return Costs(**simple)
    if simple:
        flags = ", ".join(f"--{k}" for k in simple)
        raise PipesimError(
            f"{flags} describe per-chunk costs; with component costs give per-layer times (--attn, --mlp, --dispatch, --combine)"
        )
    if file and preset:
        raise PipesimError("give either --preset or --components, not both")
    if file:
        base = load_cost_file(file)[0]
        base_layer, layers = base.stages[0][0], len(base.stages[0])
        extras = {"p2p": base.p2p, "comm_sms": base.comm_sms, "total_sms": base.total_sms, "layers": layers, **extras}
        lone = base.lone_overlap or args.lone_overlap
    else:
        base_layer, lone = (PRESETS[preset] if preset else LayerCosts()), args.lone_overlap
    fields_now = {f: getattr(base_layer, f) for f in base_layer.__dataclass_fields__}
    if layer:  # flags override the file or preset; derived defaults follow the new forward times
        for f in ("attn_b", "attn_w", "mlp_b", "mlp_w", "dispatch_b", "combine_b"):
            if f not in layer and f.split("_")[0] + "_f" in layer:
                fields_now[f] = None
        fields_now.update(layer)
    layers = extras.pop("layers", 1)
    return ComponentCosts.uniform(LayerCosts(**fields_now), layers, lone_overlap=lone, **extras)


def memory_from(args: argparse.Namespace) -> MemoryModel | None:
    file = getattr(args, "components", None)
    return load_cost_file(file)[1] if file else None


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
    opts = {k: v for k in ("chunks", "group_size", *SEARCH_FLAGS) if (v := getattr(args, k, None)) is not None}
    if "time_limit" in opts and not getattr(args, "exact", False):
        raise PipesimError("--time-limit bounds the exact search; add --exact (the heuristic needs no limit)")
    if getattr(args, "exact", False):
        opts["exact"] = True
    if getattr(args, "delay_wgrad", False):
        opts["delay_wgrad"] = True
    name = name or getattr(args, "schedule", None)
    fam = REGISTRY.get(name) if name else None
    if fam is not None:
        for k in COST_OPTIONS:
            if k in fam.options and getattr(args, k, None) is not None:
                opts[k] = getattr(args, k)
    return opts


def is_schedule_file(name: str) -> bool:
    """Whether ``--schedule`` names a schedule JSON file rather than a registry schedule."""
    return name.endswith(".json") or "/" in name


def schedule_from(args: argparse.Namespace, name: str | None = None) -> Schedule:
    """Build the named schedule, or load it when ``--schedule`` names a JSON file."""
    name = name or args.schedule
    if is_schedule_file(name):
        s = load_schedule(name)
        # the one schedule of the command: builder flags cannot apply to it (in a list of
        # several, they are for the others)
        builder_only = [k for k in options_from(args, name) if k not in COST_OPTIONS]
        if builder_only and name == getattr(args, "schedule", None):
            flag = "--" + builder_only[0].replace("_", "-")
            raise PipesimError(f"{flag} is an option of the schedule builders; a schedule file brings its own order: drop it")
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
    return _Console(highlight=False, soft_wrap=True, width=width)


class _Console(Console):
    """Rich exits 1 on a broken pipe; pipesim treats a reader that went away as success
    (``pipesim compare | head``), in ``main``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def emit_json(data: dict) -> None:
    sys.stdout.write(json_text(data))


GB = 1e9  # memory is printed in decimal GB everywhere, as GPU data sheets and cluster files give it


def schedule_names(text: str | None) -> list[str]:
    """``--schedules``: comma-separated names, or every registry schedule when not given."""
    if text is None:
        return list(REGISTRY)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise PipesimError(f"--schedules {text!r} names no schedule; give comma-separated names such as 1f1b,dualpipe")
    return names


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def num(x: float) -> str:
    return f"{x:.6g}"


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


COMPARE_COLUMNS: list[tuple[str, Callable[[Report], str]]] = [
    ("schedule", lambda r: r.schedule),
    ("makespan", lambda r: num(r.makespan)),
    ("bubble", lambda r: pct(r.bubble_ratio)),
    ("steady-state util", lambda r: pct(r.steady_state_utilization)),
    ("min rank util", lambda r: pct(min(r.utilization))),
    ("peak act. (chunks)", lambda r: str(max(r.peak_activations))),
    ("peak act. (stages)", lambda r: f"{max(r.peak_activation_memory):g}"),
    ("params", lambda r: f"{r.parameter_copies:g}x"),
]
COMPONENT_COLUMNS: list[tuple[str, Callable[[Report], str]]] = [
    ("compute util", lambda r: pct(sum(r.compute_utilization) / len(r.compute_utilization))),
    ("steady compute util", lambda r: pct(r.steady_state_compute_utilization)),
    ("exposed comm (worst rank)", lambda r: num(max(r.exposed_comm))),
]


def compare_columns(costs: CostModel) -> list[tuple[str, Callable[[Report], str]]]:
    """The comparison table's columns: header and cell of a report."""
    return COMPARE_COLUMNS + (COMPONENT_COLUMNS if isinstance(costs, ComponentCosts) else [])


@dataclass
class Row:
    """One schedule in a comparison: its timeline and report, or why it cannot run."""

    name: str
    schedule: Schedule | None = None
    timeline: Timeline | None = None
    report: Report | None = None
    error: str | None = None


def compare_rows(
    args: argparse.Namespace, names: list[str], costs: Costs, costs_for: Callable[[Schedule], CostModel] | None = None
) -> list[Row]:
    """Each schedule built and simulated; ``costs_for`` (a model's costs, which depend on
    the schedule's stage count) replaces ``costs`` when given."""
    rows = []
    for name in names:
        fam = family(name)  # an unknown name is an error, not a row
        try:
            # each schedule gets the options it takes: --chunks, and for zb-auto the
            # costs and the memory limit (it then uses all the memory allowed)
            opts = {k: v for k, v in options_from(args, name).items() if k in fam.options}
            s = build(name, *shape(args), **opts)
            tl = simulate(s, costs_for(s) if costs_for else chunk_costs(costs, s, args.costs_per))
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
        emit_json({"ranks": s.to_notation()})
        return 0
    for r, ops in enumerate(s.to_notation()):
        print(f"rank {r}: {' '.join(ops)}")
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
    from .validate import validate

    s = schedule_from(args)
    validate(s)
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
