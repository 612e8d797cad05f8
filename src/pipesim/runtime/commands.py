"""``pipesim run``: schedules on torch.distributed, real or synthetic (``export`` and
``import`` are export_import.py's).

Registered through ``parser.COMMANDS``. Nothing here imports torch at module level:
the parser is built on every ``pipesim`` call, and only ``cmd_run`` needs torch.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..cost_flags import costs_run, refuse_costs_none_use
from ..errors import PipesimError
from ..options import (
    SCHEDULE_HELP,
    add_shape,
    columns,
    is_schedule_file,
    named_family,
    nonneg_float,
    options_for,
    positive_int,
    refuse_options_none_take,
    schedule_from,
    schedule_names,
    shape,
)
from .capacity import check_capacity, refuse_mixed_sizes, under_torchrun
from .durations import DEFAULT_DURATION, add_durations, parse_duration, timeout_value
from .trace_folders import profile_dir, refuse_shared_folders
from .user_model import MODEL_DEFAULTS, even_int, input_shape, model_of

# the builders, the validator, the file readers and the terminal timeline import numpy:
# imported in the functions that use them, so that --help (the parser alone) does without


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        raise PipesimError("this command needs PyTorch: pip install 'pipesim[torch]'") from None


# --------------------------------------------------------------------------------------
# run


def _names(args) -> list[str]:
    from ..schedules import REGISTRY

    if args.schedules == "all":
        return list(REGISTRY)
    names = schedule_names(args.schedules)  # none, or one named twice (1f1b,1F1B ran it twice), is refused
    for n in names:
        if not is_schedule_file(n):
            named_family(n)  # an unknown name is an error (a PyTorch CSV's with the way in)
    return names


#: the relative error --check passes by default: float64 runs of one model in two orders
TOLERANCE = 1e-9


def _refuse_unused(args: argparse.Namespace) -> None:
    """Flags that only some runs use, refused where this run would not use them (a flag
    silently dropped reads as if it had shaped the result)."""
    if args.tolerance is not None and not args.check:
        raise PipesimError("--tolerance sets what --check passes; add --check or drop it")
    if args.timeline and args.json:
        raise PipesimError("--json prints each measured timeline as data, --timeline draws it: drop one of them")
    if args.width is not None and not args.timeline:
        raise PipesimError("--width squeezes the drawn timeline; add --timeline or drop it")
    user = args.model not in ("tiny", "moe")
    if args.input_shape is not None and not user:
        raise PipesimError(
            f"--input-shape is the input of a list of layers (--model MODULE:NAME); --model {args.model} makes its own: drop it"
        )
    if user and not args.synthetic:
        for k in ("layers", "dim"):
            if getattr(args, k) != MODEL_DEFAULTS[k]:
                raise PipesimError(
                    f"--{k} shapes --model tiny or moe; --model {args.model} is your own model, built as it is: drop it"
                )


def cmd_run(args: argparse.Namespace) -> int:
    since = time.monotonic()  # --timeout's "this long" is the user's wait: start-up, torch's import included
    from ..costs import Costs
    from ..engine import validate
    from ..ir import Pair

    if args.check and args.synthetic:
        raise PipesimError("--check compares real gradients; --synthetic computes none: drop one of them")
    _refuse_unused(args)
    if args.schedule is not None and args.schedules is not None:  # was told to give one, as if it had none
        raise PipesimError("--schedule and --schedules each name what to run: give one of them, not both")
    if args.schedule is None and args.schedules is None:
        raise PipesimError("give --schedule NAME (or a JSON file) or --schedules a,b,c|all")
    if args.synthetic:  # ops sleep: a model flag would be silently ignored, its timings read as the model's
        for k, default in MODEL_DEFAULTS.items():
            v = getattr(args, k)
            if v != default:
                value = ",".join(map(str, v)) if isinstance(v, tuple) else v
                shown = f"--{k.replace('_', '-')}" + ("" if v is True else f" {value}")
                # --serial-pairs is no model but how a real model's pairs run: synthetic pairs sleep --pair
                what = (
                    "runs a real run's overlapped pairs as their two halves"
                    if k == "serial_pairs"
                    else "sets the model a real run computes"
                )
                raise PipesimError(f"{shown} {what}; --synthetic computes none: drop one of them")
    given = [f"--{k}" for k in ("f", "b", "w", "bw", "pair", "comm") if getattr(args, k) is not None]
    if given and not args.synthetic:
        raise PipesimError(f"{given[0]} sets a synthetic duration; add --synthetic (real runs take as long as they take)")
    for k in ("f", "b", "w"):
        if getattr(args, k) is None:
            setattr(args, k, DEFAULT_DURATION)
    schedules, skipped = [], []
    names = [args.schedule] if args.schedule else _names(args)
    if args.schedules:
        refuse_options_none_take(args, names)
    # files first: the names beside them are built at the first file's pp and M where
    # --pp and -m are not given, as compare, sweep and draw build them (options.shape)
    files = {n: schedule_from(args, n) for n in names if args.schedule or is_schedule_file(n)}
    size = shape(args, files)
    for name in names:
        try:
            schedules.append(validate(files[name] if name in files else _build(args, name, size)))
        except PipesimError as e:
            if name in files:  # a file has its own pp and M: nothing to skip for
                raise
            skipped.append((name, str(e)))
    if not schedules:
        raise PipesimError(f"none of the schedules can be built at pp={size[0]}, M={size[1]}: {skipped[0][1]}")
    # files bring their own pp: said before torch is imported, each as it was named
    kept = [n if n == s.name else f"{n} ({s.name})" for n, s in zip([n for n in names if n not in dict(skipped)], schedules)]
    refuse_mixed_sizes([(n, s.pp, s.placement.stages, args.ep) for n, s in zip(kept, schedules)])
    if args.serial_pairs and not any(isinstance(it, Pair) for s in schedules for _, it in s.items()):
        names = ", ".join(s.name for s in schedules)
        runs = "runs" if len(schedules) == 1 else "run"
        raise PipesimError(f"--serial-pairs splits overlapped F&B pairs, and {names} {runs} none: drop it")
    if args.synthetic:  # a per-stage list of the wrong length failed inside the ranks, after the launch
        # --pair or --bw for schedules that run no pair or fused backward slept nowhere,
        # and the "synthetic:" line listed them as if used: refused as simulate refuses them
        try:
            refuse_costs_none_use(args, schedules)
        except PipesimError as e:
            if not skipped:
                raise
            # the schedule that would have used it may be one that cannot be built here
            left = ", ".join(f"{n} ({why})" for n, why in skipped)
            raise PipesimError(f"{e}; skipped at pp={size[0]}, M={size[1]}: {left}") from None
        for s in schedules:
            Costs(f=args.f, b=args.b, w=args.w, bw=args.bw).check_stages(s.placement.stages, s.name)
            _refuse_nothing_to_compare(args, s)
    # the trace files --profile writes are checked against the inputs before torch is
    # imported (seconds: a refusal took 9 s), so that refusing one is as quick as any other
    profiles = [profile_dir(args, s, len(schedules)) for s in schedules]
    refuse_shared_folders(args.profile, profiles, names=[n for n in names if n not in dict(skipped)])
    if args.a2a_delay and args.ep == 1:
        raise PipesimError("--a2a-delay slows the expert all-to-alls, which only --ep 2 or more sends: add --ep")
    if not under_torchrun():  # and so are more ranks than this machine can run
        check_capacity(schedules[0].pp * args.ep, schedules[0].pp, args.ep)
    else:
        # this process is a rank: c10d reads its log level once, when torch loads, and
        # would print its retries and stack frames before the one line a failed
        # rendezvous gets (the local launcher sets the same for its ranks)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    _torch()
    from .api import execute_many, job
    from .results import RunFailed

    # built here, not by cost_flags.costs_from: the synthetic durations are per-chunk costs only,
    # and --comm belongs to the comparison's simulation, not to what the ranks sleep
    costs = Costs(f=args.f, b=args.b, w=args.w, bw=args.bw, pair=args.pair) if args.synthetic else None
    model = None if args.synthetic else model_of(args)
    jobs = [
        job(
            s,
            model,
            check=args.check,
            synthetic=_slept(costs, s),
            tolerance=TOLERANCE if args.tolerance is None else args.tolerance,
            profile=profile,
            ep=args.ep,
            a2a_delay=args.a2a_delay,
            overlap=not args.serial_pairs,
        )
        for s, profile in zip(schedules, profiles)
    ]
    try:
        results = execute_many(jobs, backend=args.backend, timeout=args.timeout, since=since)
    except RunFailed as e:
        print(f"pipesim: error: {e}", file=sys.stderr)
        return 1
    if results is None:  # a torchrun rank other than 0: rank 0 reports
        return 0
    from .run_report import report

    return report(args, results, skipped)


def _slept(costs, schedule):
    """The synthetic durations ``schedule`` sleeps: --pair and --bw are dropped for one
    that runs no pair or fused backward (in a list beside one that does), as
    cost_flags.costs_run tells; its report listed them as if they had been."""
    if costs is None:
        return None
    from dataclasses import replace

    unused = {k: None for k in ("pair", "bw") if getattr(costs, k) is not None and k not in costs_run(schedule)}
    return replace(costs, **unused) if unused else costs


def _refuse_nothing_to_compare(args, s) -> None:
    """A synthetic run is measured against its simulation, whose makespan the difference
    divides by: with every duration it runs 0 and no P2P latency to add (--comm 0, or one
    rank), that was a ZeroDivisionError traceback after the whole run. (A latency measured
    at start-up is never 0.)"""
    from ..costs import Costs
    from ..simulate import simulate

    if args.comm is None and s.pp > 1:
        return
    costs = Costs(f=args.f, b=args.b, w=args.w, bw=args.bw, pair=args.pair, comm=args.comm or 0.0)
    t = simulate(s, costs)
    if t.end - t.start == 0:
        latency = f"--comm {args.comm:g}" if args.comm is not None else "one rank (no P2P)"
        raise PipesimError(
            f"--synthetic with these durations and {latency} simulates {s.name} as a step of 0 s, nothing to measure "
            "against: give the ops a duration (--f, --b, --w)"
        )


def _build(args, name: str, size: tuple[int, int]):
    from ..schedules import build

    # each schedule gets the builder options it takes (--delay-wgrad and --group-size
    # were dropped here, unsaid), as compare gives them
    return build(name, *size, **options_for(args, name))


def add_commands(command) -> None:
    c = command("run", cmd_run, "run schedules on torch.distributed: check gradients, measure timelines")
    c.add_argument("--schedule", "-s", help=SCHEDULE_HELP)
    c.add_argument("--schedules", help="several schedules in one launch: comma-separated names or files, or 'all'")
    add_shape(c)
    c.add_argument("--check", action="store_true", help="compare losses and every gradient with one process")
    c.add_argument(
        "--tolerance",
        type=nonneg_float,
        help=f"with --check: largest relative error that passes (default {TOLERANCE:g}, float64)",
    )
    c.add_argument("--synthetic", action="store_true", help="ops sleep for set durations; compare with the simulation")
    add_durations(c)
    m = c.add_argument_group("model (real runs)")
    m.add_argument(
        "--model",
        default=MODEL_DEFAULTS["model"],
        help="'tiny' (a small transformer; the default), 'moe' (with experts) or MODULE:NAME, your stage model or layers",
    )
    m.add_argument(
        "--layers",
        type=positive_int,
        default=MODEL_DEFAULTS["layers"],
        help="transformer blocks per stage of tiny or moe (default 1)",
    )
    m.add_argument("--dim", type=even_int, default=MODEL_DEFAULTS["dim"], help="width of tiny or moe, even: 2 heads (default 16)")
    m.add_argument("--input-shape", type=input_shape, help="micro-batch input shape for a list of layers, e.g. 4,16")
    m.add_argument(
        "--serial-pairs",
        action="store_true",
        help="run each overlapped F&B pair (DualPipe, DualPipeV, combined 1F1B) as its two halves in turn, to compare",
    )
    e = c.add_argument_group("experts (--model moe; see docs/runtime-moe.md)")
    e.add_argument("--ep", type=positive_int, default=1, help="expert-parallel ranks per stage: pp x ep processes (default 1)")
    e.add_argument("--experts", type=positive_int, help="experts per MoE layer of --model moe (default 4)")
    e.add_argument("--top-k", type=positive_int, default=MODEL_DEFAULTS["top_k"], help="experts each token goes to (default 2)")
    e.add_argument(
        "--a2a-delay",
        type=parse_duration,
        default=0.0,
        help="least time of each all-to-all, a slow link on purpose: 10ms, 0.01s, or a number of ms (default 0)",
    )
    c.add_argument(
        "--backend", choices=("auto", "gloo", "nccl"), default="auto", help="default: nccl with a GPU per rank, else gloo"
    )
    c.add_argument("--timeout", type=timeout_value, default=600.0, help="give up after this long (seconds; default 600)")
    c.add_argument("--json", action="store_true", help="print the results (and measured timelines) as JSON")
    # a switch here, a file in profile: each help says which, and where the other is
    c.add_argument(
        "--timeline",
        action="store_true",
        help="draw each measured timeline in the terminal (a switch, no file: --profile DIR, then "
        "pipesim profile DIR --timeline FILE.json writes one)",
    )
    c.add_argument(
        "--width", type=columns, help="squeeze the timeline into this many columns (default: the terminal's; 0 = never)"
    )
    c.add_argument(
        "--profile",
        metavar="DIR",
        help="record a torch.profiler trace per rank, DIR/rank{r}.json (DIR/NAME/ for several schedules); read with pipesim profile DIR",
    )
