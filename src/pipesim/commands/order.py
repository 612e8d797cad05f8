"""A schedule's op order: ``pipesim ops`` prints it (or writes it as a schedule file) and
``pipesim validate`` checks it is complete and deadlock-free."""

from __future__ import annotations

import argparse
import sys

from ..errors import PipesimError
from ..options import SCHEDULE_HELP, add_shape, add_zb_auto, naming_the_file, refuse_order_costs, schedule_from
from ..output import emit_json


def add_commands(command) -> None:
    c = command("ops", cmd_ops, "print a schedule's op order per rank (reference notation)")
    c.add_argument("--schedule", "-s", required=True, help=SCHEDULE_HELP)
    add_shape(c)
    add_zb_auto(c)
    c.add_argument(
        "--json", action="store_true", help='print {"ranks": [[op, ...], ...]}, the ranks only (-o writes a schedule file)'
    )
    c.add_argument("--output", "-o", help="write the schedule as a JSON file instead (- for stdout)")

    c = command("validate", cmd_validate, "check a schedule (name or JSON file): complete and deadlock-free")
    c.add_argument("--schedule", "-s", required=True, help=SCHEDULE_HELP)
    add_shape(c)
    add_zb_auto(c)


def cmd_ops(args: argparse.Namespace) -> int:
    from ..files import Stream, output_extension, save_schedule  # they read schedules (numpy): not for --help

    if args.output and args.json:  # -o wrote the schedule file, and --json changed nothing, unsaid
        raise PipesimError(
            f'--json prints {{"ranks": ...}}, -o {args.output} writes the whole schedule file instead: drop one of them'
        )
    if args.output and args.output != "-":
        output_extension(args.output, (".json",), ".json for a schedule file (a picture: pipesim draw)")
    refuse_order_costs(args)
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


def cmd_validate(args: argparse.Namespace) -> int:
    from ..engine import compile

    refuse_order_costs(args)
    s = schedule_from(args)
    with naming_the_file(args.schedule):
        compile(s)  # the array check; validate's per-op walk words a failure (1M ranks: 36 s -> a few)
    print(f"{s.name}: pp={s.pp}, M={s.microbatches}, {s.num_ops} ops: valid")
    return 0
