"""The flags and argparse types every command module shares, and the readers that turn
parsed flags into pipesim's objects (the shape, the cost model, the schedule).

Below cli.py, so that render/, planner/, profile/ and runtime/ commands take them from
here rather than reaching back up into the command line.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .errors import PipesimError
from .family_names import FAMILY_OPTIONS, takers
from .inputs import INT32_MAX, MAX_COUNT, MAX_OPS, MAX_OPS_COST, MAX_VALUE, MIN_ACTIVATION_BYTES, int_text, shorten, work

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from .ir import Schedule

# The schedule builders, the cost models and the schedule reader import numpy: they are
# imported in the functions that build, price or read, so that every command's --help
# (which only declares these flags) starts without them.


def whole_number(lo: int, hi: int, unit: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number (of ``unit``, which the error names) from ``lo``
    to ``hi``, its digits capped before int() (inputs.int_text), so a flag of 5,000
    digits is one line like any other."""
    of = f" of {unit}" if unit else ""

    def parse(text: str) -> int:
        v = int_text(text)
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"expected a whole number{of} from {lo:,} to {hi:,}, got {shorten(text)}")
        return v

    return parse


positive_int = whole_number(1, MAX_COUNT)
#: --width of a terminal timeline: 0 never squeezes, past MAX_COLUMNS it is cut to them
columns = whole_number(0, INT32_MAX, "terminal columns")
#: --width's help wherever it squeezes a terminal timeline (draw's --width is inches)
COLUMNS_HELP = "squeeze the timeline into this many terminal columns (default: the terminal's; 0 = never)"


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
#: --activation-bytes, in zb-auto's own range: 0.5 passed the flag and was refused by zb-auto
activation_bytes = number(
    lambda v: MIN_ACTIVATION_BYTES <= v <= MAX_VALUE, f"a number from {MIN_ACTIVATION_BYTES} to {MAX_VALUE:g}"
)


DEFAULT_PP, DEFAULT_MICROBATCHES = 8, 16


def add_shape(p: argparse.ArgumentParser, builders: bool = True) -> None:
    """--pp and --microbatches, and with ``builders`` the options of pipesim's schedule
    builders (a command that builds none, such as import, does not take them)."""
    p.add_argument("--pp", type=positive_int, help=f"pipeline ranks (default {DEFAULT_PP})")
    p.add_argument("--microbatches", "-m", type=positive_int, help=f"micro-batches per step (default {DEFAULT_MICROBATCHES})")
    if builders:
        add_builder_options(p)


def add_builder_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunks", type=positive_int, help=f"model chunks per rank ({', '.join(takers('chunks'))}; default 2)")
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


#: the builder options a list of schedules hands to those that take them
BUILDER_FLAGS = {"chunks": "--chunks", "group_size": "--group-size", "delay_wgrad": "--delay-wgrad"}


def refuse_options_none_take(args: argparse.Namespace, names: list[str]) -> None:
    """A list of schedules (compare, sweep, report, draw, run) gives each the builder
    options it takes; one that no schedule of the list takes would change nothing, unsaid.
    Unknown names are left to the commands; a list of files only brings its own orders.
    A PyTorch name counts as its family (Interleaved1F1B takes --chunks)."""
    from .schedules import canonical

    built = {n: c for n in names if (c := canonical(n)) is not None}
    for key, flag in BUILDER_FLAGS.items():
        if getattr(args, key, None) in (None, False):
            continue
        if not built and (file := next((n for n in names if is_schedule_file(n)), None)):
            raise PipesimError(f"{flag} is an option of the schedule builders; {file} brings its own order: drop it")
        if built and not any(key in FAMILY_OPTIONS[c] for c in built.values()):
            which = f"{next(iter(built))} does not take it" if len(built) == 1 else f"none of {', '.join(built)} takes it"
            raise PipesimError(f"{flag} is an option of {', '.join(takers(key))}; {which}: drop it")


def shape(args: argparse.Namespace, files: dict[str, Schedule] | None = None) -> tuple[int, int]:
    """(pp, M) of the flags, refused up front when beyond the work limit. In a list with
    schedule files (``listed_files``), a flag not given is the first file's: the names
    are built at the size of the schedule they are listed beside."""
    first = next(iter(files.values()), None) if files else None
    pp = args.pp or (first.pp if first else DEFAULT_PP)
    M = args.microbatches or (first.microbatches if first else DEFAULT_MICROBATCHES)
    work(pp, M, getattr(args, "chunks", None) or 1, what=getattr(args, "schedule", None) or "schedule")
    return pp, M


def add_op_costs(g) -> None:
    """The F, B and W times and the P2P latency: the simulator's costs, and zb-auto's,
    whose builder orders by them."""
    g.add_argument("--f", type=cost_value, help="forward time (default 1)")
    g.add_argument("--b", type=cost_value, help="backward-for-input time (default 1)")
    g.add_argument("--w", type=cost_value, help="weight-gradient time (default 1)")
    g.add_argument("--comm", type=nonneg_float, help="P2P latency per cross-rank transfer (default 0)")


def add_zb_auto(c) -> None:
    """zb-auto's costs and search flags, which its order depends on (simulate's costs are
    its own): ops, validate and export take them so as to give zb-auto's order for the
    costs, not for unit costs."""
    add_op_costs(c.add_argument_group("zb-auto's costs, by which it orders (a comma-separated list: one per stage)"))
    add_search(c)


def add_search(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("search (zb-auto: the cost flags above are its costs too)")
    g.add_argument(
        "--memory-limit",
        type=positive_float,
        help="peak activations per rank, in micro-batches of one stage's activation (default pp, or pp - 1 + --w-memory "
        "where that is above 1), or bytes with --activation-bytes",
    )
    g.add_argument(
        "--w-memory",
        type=nonneg_float,
        help="activations its W keeps from a B to its own end (default 1); above 1 the B adds memory (tensor + sequence parallelism)",
    )
    g.add_argument(
        "--activation-bytes",
        type=activation_bytes,
        help=f"bytes one forward adds, at least {MIN_ACTIVATION_BYTES}: --memory-limit is then in bytes",
    )
    g.add_argument("--exact", action="store_true", help="improve with CP-SAT (OR-Tools) and prove optimality if it can")
    g.add_argument("--time-limit", type=nonneg_float, help="seconds for --exact (default 10)")


SEARCH_FLAGS = ("memory_limit", "w_memory", "activation_bytes", "time_limit")

#: what --schedule takes, wherever a command reads one (schedule_from)
SCHEDULE_HELP = "a schedule name (see 'pipesim schedules') or a schedule JSON file"


def schedules_help(files: str = "the others are built at its pp and M where --pp and -m are not given") -> str:
    """What --schedules takes in compare, sweep and report (``listed_files``): names or
    schedule files, with what a file means there."""
    return f"comma-separated names or schedule JSON files ({files}); default: all of {', '.join(FAMILY_OPTIONS)}"


COST_OPTIONS = ("f", "b", "w", "comm")


def refuse_order_costs(args: argparse.Namespace) -> None:
    """For commands that print or check an order (ops, validate, export): the cost flags
    order zb-auto only, and changed nothing of another schedule or a file, unsaid."""
    costs = [k for k in COST_OPTIONS if getattr(args, k, None) is not None]
    if not costs:
        return
    if is_schedule_file(args.schedule):
        raise PipesimError(f"--{costs[0]} orders zb-auto, whose builder takes costs; a schedule file brings its order: drop it")
    if not set(costs) <= named_family(args.schedule).options.keys():  # an unknown name: family's one line
        raise PipesimError(
            f"--{costs[0]} orders zb-auto, whose builder takes costs; {args.schedule} is built without them: drop it"
        )


def options_from(args: argparse.Namespace, name: str | None = None) -> dict:
    """Builder options given on the command line. Flags a schedule does not take are
    passed anyway so that ``build`` rejects them; the cost flags go to the builders that
    take costs (zb-auto) and to the simulator."""
    opts = {k: v for k in ("chunks", "group_size", *SEARCH_FLAGS) if (v := getattr(args, k, None)) is not None}
    if "time_limit" in opts and not getattr(args, "exact", False):
        raise PipesimError("--time-limit bounds the exact search; add --exact (the heuristic needs no limit)")
    if "activation_bytes" in opts and "memory_limit" not in opts:
        # it only says what unit --memory-limit is in: alone it was taken and changed nothing
        raise PipesimError(
            "--activation-bytes makes --memory-limit a number of bytes; give --memory-limit in bytes with it, or drop it"
        )
    if getattr(args, "exact", False):
        opts["exact"] = True
    if getattr(args, "delay_wgrad", False):
        opts["delay_wgrad"] = True
    name = name or getattr(args, "schedule", None)
    takes = FAMILY_OPTIONS.get(name) if name else None
    if takes is not None:
        for k in COST_OPTIONS:
            if k in takes and getattr(args, k, None) is not None:
                opts[k] = getattr(args, k)
    return opts


def options_for(args: argparse.Namespace, name: str) -> dict:
    """``options_from`` narrowed to the options schedule ``name`` takes: what each of a
    list of schedules is built with (compare, run), the flags given for the others left out."""
    takes = named_family(name).options
    return {k: v for k, v in options_from(args, name).items() if k in takes}


def list_options(args: argparse.Namespace) -> dict:
    """The options a list of schedules shares, for a caller that gives each schedule those
    its family takes (``sweep.run_sweep``): ``options_from`` with the cost flags as well,
    which zb-auto orders by. Without a name ``options_from`` leaves them out, and a sweep
    of zb-auto was built for unit costs while simulated at the flags'."""
    return {**options_from(args), **{k: v for k in COST_OPTIONS if (v := getattr(args, k, None)) is not None}}


def is_schedule_file(name: str) -> bool:
    """Whether ``--schedule`` names a schedule JSON file rather than a registry schedule:
    by its extension in any case (``ops -o S.JSON`` writes one), or a path."""
    return name.lower().endswith(".json") or "/" in name


def named_family(name: str):
    """The registry family of schedule ``name``; an unknown name that ends in .csv (a
    PyTorch compute-only CSV, as ``export`` writes) is told, in the same line, that
    ``import --csv`` makes a schedule file of it: ``--schedule`` reads JSON only."""
    from .files import csv_hint
    from .schedules import family

    try:
        return family(name)
    except PipesimError as unknown:
        hint = csv_hint(name) if isinstance(name, str) else None
        if hint is None:
            raise
        raise PipesimError(f"{unknown}; {hint}") from None


def schedule_from(args: argparse.Namespace, name: str | None = None) -> Schedule:
    """Build the named schedule, or load it when ``--schedule`` names a JSON file."""
    from .files import load_schedule
    from .schedules import build

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
                raise PipesimError(f"--{flag} {given} disagrees with {name}'s {flag} = {have}; drop the flag")
        return s
    named_family(name)  # an unknown name's one line, with the way in for a CSV
    pp, M = shape(args)
    return build(name, pp, M, **options_from(args))


def listed_files(args: argparse.Namespace, names: list[str], alike: str = "pp, M") -> dict[str, Schedule]:
    """The schedule files of a list of names, each read as ``--schedule`` reads one
    (``schedule_from``: --pp and -m, where given, must agree with it). ``alike`` is what
    they must share: a comparison or a report runs every schedule at one pp and M
    ("pp, M"), a sweep over M at one pp ("pp"); a drawing stacks any (""). Each is named
    as listed: the name a file declares may be a registry schedule's listed beside it
    (`ops -o` writes "1f1b"), and two rows, lines or panels of one name told nothing."""
    from dataclasses import replace

    for n in names:  # an unknown name, before a file of up to 24M ops is read
        if not is_schedule_file(n):
            named_family(n)
    files = {n: replace(schedule_from(args, n), name=n) for n in names if is_schedule_file(n)}
    keys = [k for k in alike.split(", ") if k]
    first_name, first = next(iter(files.items()), (None, None))

    def size(s: Schedule) -> str:
        return ", ".join(f"{k}={s.pp if k == 'pp' else s.microbatches}" for k in keys)

    for name, s in files.items():
        if size(s) != size(first):
            raise PipesimError(
                f"--schedules: {name} is {size(s)} and {first_name} {size(first)}; every schedule here runs at one "
                f"{alike}: give files of one size"
            )
    return files


def counted_chunks(args: argparse.Namespace, names: list[str]) -> int:
    """The chunks a rank a list of built schedules (names, not files) is counted at against
    the work limit: two each (a V's and DualPipe's), or --chunks each where more, since an
    interleaved order given --chunks 8 has four times the ops two chunks would."""
    return max(2, getattr(args, "chunks", None) or 1) * len(names)


def list_work(
    pp: int, M: int, chunks: int, files: dict[str, Schedule], what: str, where: str = "", limit: int | None = None, cost: str = ""
) -> None:
    """A list's work against the limit (``inputs.work``; ``limit`` and ``cost`` as there)
    before the first simulation: the files' own ops, and ``chunks`` chunks a rank of the
    names beside them at (pp, M) in what is left (none when ``chunks`` is 0). Each file
    was held to the limit as it was read, not all of them with the names."""
    limit = MAX_OPS if limit is None else limit
    ops = sum(s.num_ops for s in files.values())
    if ops > limit:
        raise PipesimError(
            f"{where}{what} too large: {', '.join(files)} {'has' if len(files) == 1 else 'have'} {ops:,} ops, above the "
            f"limit of {limit:,} ({cost or MAX_OPS_COST}); use smaller or fewer files"
        )
    if chunks:
        beside = f" beside the {ops:,} ops of {', '.join(files)}" if files else ""
        work(pp, M, chunks, where=where, what=what + beside, limit=limit - ops, cost=cost)


@contextmanager
def naming_the_file(name: str) -> Iterator[None]:
    """An error met checking or simulating ``--schedule`` names the file when it is one:
    a file `ops -o` wrote declares its schedule's name, and "invalid zb-h1 schedule" of
    an edited mine.json read as pipesim's zb-h1 being wrong."""
    try:
        yield
    except PipesimError as e:
        if not is_schedule_file(name) or str(e).startswith(f"{name}:"):
            raise
        raise PipesimError(f"{name}: {e}") from None


def schedule_names(text: str | None, flag: str = "--schedules") -> list[str]:
    """``--schedules`` (or ``flag``): comma-separated names, or every registry schedule
    when not given."""
    from .schedules import canonical

    if text is None:
        return list(FAMILY_OPTIONS)
    parts = [n.strip() for n in text.split(",")]
    names = [n for n in parts if n]
    if not names:
        raise PipesimError(f"{flag} {text!r} names no schedule; give comma-separated names such as 1f1b,dualpipe")
    if len(names) != len(parts):  # 1f1b,,gpipe: a name left out, not an item to drop unsaid
        raise PipesimError(
            f"{flag} {text!r}: an empty item (two commas together, or one at an end); give names like 1f1b,dualpipe"
        )
    seen: dict[str, str] = {}
    for n in names:  # the same schedule twice was built, simulated and printed twice
        # 1F1B and Schedule1F1B are 1f1b; a file is the file it names (./s.json is s.json);
        # an unknown name is itself
        key = os.path.realpath(n) if is_schedule_file(n) else canonical(n) or n
        if key in seen:
            what = "file" if is_schedule_file(n) else "schedule"
            same = "is given twice" if seen[key] == n else f"names the same {what} as {seen[key]}"
            raise PipesimError(f"{flag} {text!r}: {n} {same}; give each schedule once")
        seen[key] = n
    return names
