"""``pipesim export`` and ``pipesim import``: a schedule to and from PyTorch's
torch.distributed.pipelining orders (its compute-only CSV and schedule classes).

Registered through ``parser.COMMANDS``. Nothing here imports torch at module level: only
``export --check`` and ``import --torch`` need it.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import PipesimError
from ..inputs import MAX_TORCH_OPS, read_text, work
from ..options import (
    DEFAULT_MICROBATCHES,
    DEFAULT_PP,
    SCHEDULE_HELP,
    add_shape,
    add_zb_auto,
    positive_int,
    refuse_order_costs,
    schedule_from,
)
from .commands import _torch

# the array check and the schedule files import numpy: imported in the commands, so that
# --help (the parser alone) does without


def cmd_export(args: argparse.Namespace) -> int:
    from ..files import output_extension, write_chunks_atomic
    from .torch_export import check_torch, csv_chunks, torchtitan_hint

    refuse_order_costs(args)
    if args.output and args.output != "-":  # the CSV whatever the name: x.json got CSV text
        output_extension(args.output, (".csv",), ".csv (PyTorch's compute-only CSV), or - for stdout")
    s = schedule_from(args)
    check_torch(s)  # refuses what PyTorch cannot run, before writing
    if args.check:
        _torch()
        from .api import check_exports
        from .results import RunFailed

        try:
            (errors,) = check_exports([s], backend=args.backend)
        except RunFailed as e:
            print(f"pipesim: error: PyTorch's runtime failed on the export: {e}", file=sys.stderr)
            return 1
        worst = max(errors)
        ok = worst <= 1e-9
        print(
            f"{'PASS' if ok else 'FAIL'}: PyTorch's _PipelineScheduleRuntime ran it; largest relative error "
            f"{worst:.2e} over {s.pp} ranks",
            file=sys.stderr,
        )
        if not ok:
            return 1
    # written a rank at a time: the text of 24M actions is never held whole
    write_chunks_atomic(args.output or "-", csv_chunks(s))
    if args.output and args.output != "-":
        print(
            f"wrote {args.output}: {s.pp} ranks, {s.placement.stages} stages; {torchtitan_hint(s, args.output)}", file=sys.stderr
        )
    else:
        print(torchtitan_hint(s), file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from ..engine import compile
    from ..files import output_extension, save_schedule
    from .torch_export import from_torch_rows, order_of_torch_class, read_csv, torch_1f1b_defect

    if args.torch is not None and args.csv is not None:  # was told to give one, as if it had none
        raise PipesimError("--torch and --csv each name the order to read: give one of them, not both")
    if args.torch is None and args.csv is None:
        raise PipesimError("give --torch CLASS (a PyTorch schedule, e.g. DualPipeV) or --csv FILE (compute-only actions)")
    if args.output and args.output != "-":
        output_extension(args.output, (".json",), ".json for a schedule file")
    if args.torch:
        # not shape(args): it checks pp x M x --chunks against the simulator's limit, and
        # PyTorch's below is the smaller, the one to name
        pp, M = args.pp or DEFAULT_PP, args.microbatches or DEFAULT_MICROBATCHES
        # at least one stage per rank, whatever the class: sizes past PyTorch's limit
        # even so are refused before the seconds torch takes to import
        work(
            pp,
            M,
            stages=pp * max(1, args.chunks or 1),
            what=f"PyTorch's {args.torch}",
            limit=MAX_TORCH_OPS,
            cost="about 20 s in PyTorch's generator",
        )
        _torch()
        rows = order_of_torch_class(args.torch, pp, M, args.chunks)
        name, where = f"torch-{args.torch}", f"PyTorch's {args.torch} (pp={pp}, M={M})"
    else:
        if args.chunks is not None:
            raise PipesimError("--chunks sets a PyTorch class's stages per rank (--torch); a CSV names its own: drop it")
        rows = read_csv(read_text(args.csv, "--csv file"), args.csv)
        if args.pp is not None and args.pp != len(rows):
            raise PipesimError(f"--pp {args.pp} disagrees with the CSV's {len(rows)} rows (one per rank); drop the flag")
        name = os.path.splitext(os.path.basename(args.csv))[0]
        where = args.csv
        # the CSV's own count, read once; a different -m is said in one line, as --pp is,
        # not as a list of ops the count leaves out
        s = from_torch_rows(rows, name, None, source=args.csv)
        M, found = args.microbatches, s.microbatches
        if M is not None and found != M:
            raise PipesimError(
                f"--microbatches {M} disagrees with the CSV's {found} micro-batches (0..{found - 1}); drop the flag"
            )
    if args.torch:
        s = from_torch_rows(rows, name, M, source=None)
    try:
        compile(s)  # the array check: validate walks every op as an object
    except PipesimError as e:
        known = torch_1f1b_defect(args.torch, rows, M) if args.torch else None
        raise PipesimError(f"{where} is not a valid schedule: {known or e}") from None
    if args.output and args.output != "-":
        save_schedule(s, args.output)
        print(
            f"wrote {args.output}: {s.name}, pp={s.pp}, M={s.microbatches}, {s.placement.kind} placement, {s.num_ops} ops, valid",
            file=sys.stderr,
        )
    else:
        save_schedule(s, "-")
    return 0


def add_commands(command) -> None:
    c = command("export", cmd_export, "write a schedule as torch.distributed.pipelining's compute-only CSV")
    c.add_argument("--schedule", "-s", required=True, help=SCHEDULE_HELP)
    add_shape(c)
    add_zb_auto(c)
    c.add_argument("--to", choices=("torch",), default="torch", help="the target (torch: _PipelineScheduleRuntime's CSV)")
    c.add_argument("--output", "-o", help="write here (default: print)")
    c.add_argument("--check", action="store_true", help="first run it in PyTorch's runtime (gloo) and compare gradients")
    c.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto", help=argparse.SUPPRESS)

    c = command("import", cmd_import, "read a PyTorch pipeline order into a pipesim schedule file (validated)")
    c.add_argument(
        "--torch", metavar="CLASS", help="a torch.distributed.pipelining schedule: 1F1B, DualPipeV, ZBVZeroBubble, ..."
    )
    c.add_argument("--csv", metavar="FILE", help="a compute-only CSV (one row of actions per rank)")
    add_shape(c, builders=False)  # PyTorch's classes and a CSV bring their own order: no --chunks, --group-size
    # --chunks, as every other command calls a rank's model chunks; --stages-per-rank, its
    # first name here, still works
    c.add_argument(
        "--chunks",
        "--stages-per-rank",
        type=positive_int,
        help="model chunks (stages) per rank for PyTorch's multi-stage classes (default 2); --stages-per-rank is the same",
    )
    c.add_argument("--output", "-o", help="write the schedule JSON here (default: print)")
