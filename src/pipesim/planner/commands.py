"""The planner's commands: ``pipesim plan`` and ``pipesim memory``, registered here."""

from __future__ import annotations

from ..options import positive_float, positive_int
from .spec_args import add_specs


def cmd_plan(args) -> int:
    from .plan_command import cmd_plan  # the planner's search, imported when plan runs, not to build the parser

    return cmd_plan(args)


def cmd_memory(args) -> int:
    from .memory_command import cmd_memory  # the evaluator behind it: ~50 ms of imports that --help does not need

    return cmd_memory(args)


def add_commands(command) -> None:
    c = command("plan", cmd_plan, "recommend a pipeline strategy for a model on a cluster, as a Markdown report")
    add_specs(c)
    c.add_argument(
        "--schedules",
        help="search only these (comma-separated; default: every schedule of 'pipesim schedules' the planner can build)",
    )
    c.add_argument("--compare", metavar="A,B", help="GPU-hours per million tokens that B recovers against A (e.g. 1f1b,dualpipe)")
    c.add_argument(
        "--top",
        type=positive_int,
        default=10,
        help="plans to rank, the recommendation first and then its runners-up (default 10)",
    )
    c.add_argument(
        "--layout",
        type=positive_int,
        default=1,
        metavar="N",
        help="how to run plan #N of the ranking, N at most --top (default 1: the recommendation)",
    )
    c.add_argument("--output", "-o", help="write the report here (.md, or .json for the JSON form)")
    c.add_argument("--json", action="store_true", help="print the plan as JSON")
    g = c.add_argument_group("pins (each fixes one dimension of the search; the rest is searched)")
    for flag, pin, what in (
        ("--tp", "tp", "tensor-parallel shards"),
        ("--pp", "pp", "pipeline ranks"),
        ("--dp", "dp", "data-parallel replicas"),
        ("--ep", "ep", "expert-parallel degree (MoE)"),
        ("--chunks", "chunks", "chunks per rank (interleaved schedules take any; V and dual placements hold 2, flat 1)"),
        ("--micro-batch-size", "micro_batch", "sequences per micro-batch"),
        ("--microbatches", "microbatches", "micro-batches per pipeline per step"),
        ("--cp", "cp", "context-parallel ranks (each holds 1/cp of every sequence)"),
        ("--etp", "etp", "expert tensor-parallel shards (MoE; experts fold over tp x cp x dp: etp x ep x edp)"),
    ):
        # -m as every other command spells --microbatches (memory, simulate, compare, ...)
        short = ("-m",) if pin == "microbatches" else ()
        g.add_argument(flag, *short, type=positive_int, dest="pin_" + pin, metavar="N", help=what)
    g = c.add_argument_group("calibration (fit the efficiencies to a measurement, then re-rank)")
    g.add_argument("--calibrate", metavar="COSTS.toml", help="a component cost file measured on --measured-on (pipesim profile)")
    g.add_argument("--measured-step", type=positive_float, metavar="SECONDS", help="the measured step time of --measured-on")
    g.add_argument("--measured-on", metavar="LAYOUT", help="the layout measured, e.g. pp16,dp128,ep64,mb1,dualpipe (v2: chunks)")

    c = command(
        "memory",
        cmd_memory,
        "memory per GPU of a layout for a model: parameters, activations, what of the card is usable, what a second "
        "parameter copy costs",
    )
    add_specs(c, cluster_default="h100", timed=False)  # memory prints no time: no --tokens, --tp-overlap
    c.add_argument("--pp", type=positive_int, required=True, help="pipeline ranks")
    c.add_argument(
        "--schedule",
        "-s",
        help="schedule (default dualpipe), set beside 1f1b (alone where --stage-split names pp x chunks stages)",
    )
    c.add_argument("--dp", type=positive_int, help="data-parallel replicas (default: the cluster's GPUs / pp / tp / cp)")
    c.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel shards (default 1)")
    c.add_argument(
        "--ep",
        type=positive_int,
        help="expert-parallel degree (MoE; default the largest up to min(64, dp, experts) the layout takes)",
    )
    c.add_argument(
        "--cp", type=positive_int, default=1, help="context-parallel ranks (each holds 1/cp of every sequence; default 1)"
    )
    c.add_argument(
        "--etp",
        type=positive_int,
        default=1,
        help="expert tensor-parallel shards (MoE; experts fold over tp x cp x dp: etp x ep x edp; default 1)",
    )
    c.add_argument(
        "--chunks", type=positive_int, help="chunks per rank of the schedule set beside 1f1b (interleaved: virtual stages)"
    )
    c.add_argument("--micro-batch-size", type=positive_int, default=1, help="sequences per micro-batch (default 1)")
    c.add_argument(
        "--microbatches",
        "-m",
        type=positive_int,
        help="micro-batches (default 4pp, past which most schedules' peak no longer grows; for GPipe and looped BFS, "
        "whose peak grows with M, the step's: the global batch / (dp x micro-batch size))",
    )
    c.add_argument("--json", action="store_true", help="print the rows, the usable memory and the per-layer activations as JSON")
