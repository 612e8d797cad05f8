"""``pipesim profile TRACE|DIR``: a PyTorch profiler trace in, pipesim's costs out.

Registered through ``parser.COMMANDS``; needs no torch (the trace is JSON).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from ..errors import PipesimError
from ..output import console, emit_json, num, pct

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from ..ir import Schedule
    from .measure import Profile

# the trace reader, the labels, the cost file and the builders import numpy: imported in
# the functions that use them, so that --help (the parser alone) does without


def layer_fields() -> tuple[str, ...]:
    """The cost file's per-layer fields: each component's F, B and W (communication has no W)."""
    from .labels import COMM, COMPONENTS

    return tuple(f"{c}_{p}" for c in COMPONENTS for p in ("f", "b", "w") if not (c in COMM and p == "w"))


def add_commands(command) -> None:
    c = command(
        "profile",
        cmd_profile,
        "read a PyTorch profiler trace (or a folder of per-rank traces): component and per-stage costs, the measured timeline",
    )
    c.add_argument("trace", metavar="TRACE", help="a torch.profiler Chrome trace (.json or .json.gz), or a folder of rank*.json")
    c.add_argument(
        "--map",
        metavar="MAP",
        help="your annotation names: attn=self_attn,mlp=moe (names before (F)/(B)/(W)), attn_f='fwd*' (whole names), "
        "or a TOML file with a [map] table",
    )
    c.add_argument("--output", "-o", metavar="COSTS.toml", help="write the component cost file (what --components reads)")
    c.add_argument(
        "--timeline",
        metavar="FILE.json",
        help="write the measured timeline to FILE.json, to draw with pipesim draw --measured FILE.json "
        "(takes a file: run --timeline is the switch that draws in the terminal)",
    )
    c.add_argument("--flags", action="store_true", help="print only the per-stage costs as simulate flags (--f ... --b ...)")
    c.add_argument("--json", action="store_true", help="print what was found as JSON")
    c.set_defaults(output_flags=("output", "timeline"), positional=("trace",))  # both are written: neither may be a trace read


def cmd_profile(args: argparse.Namespace) -> int:
    from ..costfile import parse_costs
    from ..files import json_text, output_extension, timeline_to_dict, write_text_atomic
    from .labels import Mapping
    from .measure import profile
    from .pipeline_actions import filled_note

    if args.flags and args.json:  # --flags printed the flags alone, unsaid
        raise PipesimError("--flags prints the per-stage costs as flags, --json everything found as JSON: drop one of them")
    if args.output:
        output_extension(args.output, (".toml",), "a .toml component cost file (what --components reads)")
    if args.timeline:
        output_extension(args.timeline, (".json",), "a .json timeline (what draw --measured reads)", flag="--timeline")
    prof = profile(args.trace, Mapping.parse(args.map))
    files = []
    if args.output:
        if not prof.rows:
            raise PipesimError(
                f"-o writes a component cost file, and {args.trace} has no component annotations "
                "(attn(F), mlp(B), ...); its per-stage costs are what --flags prints"
            )
        text = cost_file(prof)
        parse_costs(tomllib.loads(text))  # what we write must load back
        files.append((args.output, text))
    if args.timeline:
        files.append((args.timeline, json_text(timeline_to_dict(prof.schedule, prof.timeline), indent=None)))  # versioned, strict
    if args.flags:
        if prof.stage_costs is None:
            raise PipesimError(f"{args.trace} has no pipeline action labels (pipesim/F0.3 ..., PP:2F0): no per-stage costs")
        print(stage_flags(prof))
        if prof.filled:  # stderr: the flags on stdout go into a command line
            print(f"pipesim: {filled_note(prof.filled)}", file=sys.stderr)
    elif args.json:
        emit_json(to_dict(prof))
    else:
        print_profile(prof)
    for path, text in files:
        write_text_atomic(path, text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


def comm_sms(prof: Profile) -> float | None:
    """The comm_sms the cost file gets. Compute kernels measured beside communication
    already ran on the SMs it left: charging the share again would count it twice, so
    then 0; measured alone, the SMs the communication kernels held (their grid)."""
    if prof.overlapped > 0.01:
        return 0.0
    if prof.comm_sms_seen is not None and prof.total_sms and prof.comm_sms_seen < prof.total_sms:
        return prof.comm_sms_seen
    return None


def cost_file(prof: Profile) -> str:
    from ..costfile import format_cost_file

    top: dict = {"layers": prof.layers}
    sms = comm_sms(prof)
    if sms is not None:
        top["comm_sms"] = sms
    if prof.total_sms:
        top["total_sms"] = float(prof.total_sms)
    measured = {
        "source": ", ".join(Path(s).name for s in prof.sources),
        "time_unit": "s",
        "from": "gpu kernels" if prof.gpu else "cpu ranges",
        "window": prof.window,
        "kernels": prof.kernels,
        "unassigned_kernels": prof.unassigned,
        "compute_beside_comm": round(prof.overlapped, 4),
    }
    if prof.device:
        measured["device"] = prof.device
    if prof.comm_sms_seen is not None:
        measured["comm_sms_seen"] = prof.comm_sms_seen
    comments = (
        "measured by pipesim profile; times in seconds, per layer of one micro-batch",
        *(
            [
                f"{pct(prof.overlapped)} of the compute kernel time ran beside communication kernels, which held "
                f"{prof.comm_sms_seen:g} SMs: the times already carry that, so comm_sms = 0"
            ]
            if sms == 0.0 and prof.comm_sms_seen
            else []
        ),
    )
    # every part explicitly: one the trace does not show took no time in it (LayerCosts'
    # defaults, B = W = F, are guesses for hand-written files)
    fields = layer_fields()
    layer = {f: prof.layer_times.get(f, 0.0) for f in fields}
    missing = [f for f in fields if f not in prof.layer_times]
    if missing:
        comments += (f"not in the trace, so 0: {', '.join(missing)}",)
    return format_cost_file(layer, top, measured, comments)


def stage_values(prof: Profile) -> dict[str, object]:
    """The measured kinds' per-stage costs, as simulate's flags name them (f, b, w, bw, pair)."""
    from .pipeline_actions import measured_kinds

    c = prof.stage_costs
    kinds = measured_kinds(prof.schedule)
    values = {k.lower(): getattr(c, k.lower()) for k in kinds if k != "BW"}
    if "BW" in kinds:
        values["bw"] = c.bw if c.bw is not None else c.b
    if c.pair is not None:
        values["pair"] = c.pair
    values["comm"] = c.comm
    return values


def _flag(v) -> str:
    return ",".join(f"{x:.6g}" for x in v) if isinstance(v, tuple) else f"{v:.6g}"


def _as_printed(v):
    """A flag's value as the printed line gives it back (6 significant digits)."""
    return tuple(float(f"{x:.6g}") for x in v) if isinstance(v, tuple) else float(f"{v:.6g}")


def stage_flags(prof: Profile) -> str:
    return " ".join(f"--{k} {_flag(v)}" for k, v in stage_values(prof).items())


def to_dict(prof: Profile) -> dict:
    from ..metrics import summarize

    rep = summarize(prof.schedule, prof.timeline)
    d = {
        "sources": prof.sources,
        "from": "gpu kernels" if prof.gpu else "cpu ranges",
        "device": prof.device,
        "total_sms": prof.total_sms,
        "window": prof.window,
        "kernels": prof.kernels,
        "unassigned_kernels": prof.unassigned,
        "unassigned_time": prof.unassigned_time,
        "layers": prof.layers,
        "components": [
            {
                "component": str(r.component),
                "field": r.component.field,
                "instances": r.instances,
                "per_layer": r.per_layer,
                "busy_per_layer": r.busy,
                "streams": list(r.streams),
                "share": r.share,
                "kernels": r.kernels,
            }
            for r in prof.rows
        ],
        "compute_beside_comm": prof.overlapped,
        "comm_sms_seen": prof.comm_sms_seen,
        "schedule": prof.schedule.name,
        "pp": prof.schedule.pp,
        "microbatches": prof.schedule.microbatches,
        "makespan": rep.makespan,
        "stage_costs": {k: list(v) if isinstance(v, tuple) else v for k, v in stage_values(prof).items()}
        if prof.stage_costs
        else None,
        # which of stage_costs no op measured: each the mean of its kind at from_stages
        "filled": [{"kind": f.kind.lower(), "stage": f.stage, "from_stages": list(f.sources)} for f in prof.filled],
        "notes": prof.notes,
    }
    return d


def rerun_name(s: Schedule, values: dict[str, object] | None = None) -> str:
    """The registry schedule (with its --chunks) that builds the order measured, to simulate
    it again; SCHEDULE where none does (PyTorch's labels, zb-auto's cost-dependent order).
    ``values``: the flags printed beside the name, as printed; a builder that orders by
    costs (zb-auto) is built with them, since simulate hands it those."""
    from ..schedules import REGISTRY, build

    fam = REGISTRY.get(s.name)
    if fam is None:
        return "SCHEDULE"
    chunks = {"chunks": s.placement.chunks} if "chunks" in fam.options and s.placement.chunks != fam.options["chunks"] else {}
    costs = {k: _as_printed(v) for k, v in (values or {}).items() if k in fam.options}
    try:
        same = build(s.name, s.pp, s.microbatches, **chunks, **costs).ranks == s.ranks
    except PipesimError:
        same = False
    return f"{s.name}{f' --chunks {s.placement.chunks}' if chunks else ''}" if same else "SCHEDULE"


def print_profile(prof: Profile) -> None:
    from rich.table import Table  # imported when a table is printed: not to build the parser

    from ..metrics import summarize

    out = console()
    where = prof.sources[0] if len(prof.sources) == 1 else f"{len(prof.sources)} traces ({Path(prof.sources[0]).parent})"
    device = f" on {prof.device}" if prof.device else ""
    out.print(
        f"[bold]{where}[/]{device}: {prof.kernels} GPU kernels, {prof.unassigned} unassigned "
        f"({num(prof.unassigned_time * 1e3)} ms); window {num(prof.window * 1e3)} ms"
        # each trace's first-to-last work, added up: longer than the run it measured
        + (f" (summed over the {len(prof.sources)} traces)" if len(prof.sources) > 1 else "")
    )
    for note in prof.notes:
        out.print(f"[dim]{note}[/]")
    if prof.rows:
        t = Table(title=f"components: {prof.layers} layer{'s' * (prof.layers != 1)}; times per layer of one micro-batch")
        for col in ("component", "instances", "ms per layer", "busy ms per layer", "stream", "share of window", "kernels"):
            t.add_column(col, justify="left" if col == "component" else "right")
        for r in prof.rows:
            t.add_row(
                str(r.component),
                str(r.instances),
                f"{r.per_layer * 1e3:.4g}",
                f"{r.busy * 1e3:.4g}",
                "+".join(map(str, r.streams)) or "cpu",
                pct(r.share),
                str(r.kernels),
            )
        out.print(t)
        if prof.overlapped:
            out.print(
                f"{pct(prof.overlapped)} of compute kernel time ran beside communication"
                + (f" holding {prof.comm_sms_seen:g} SMs" if prof.comm_sms_seen else "")
            )
    if prof.stage_costs is not None:
        rep = summarize(prof.schedule, prof.timeline)
        s = prof.schedule
        out.print(
            f"pipeline: {s.name}, pp={s.pp}, M={s.microbatches}, {s.placement.kind} placement; "
            f"measured makespan {rep.makespan * 1e3:.1f} ms, bubble {pct(rep.bubble_ratio)}"
        )
        t = Table(title="per-stage costs (ms, mean of each kind at each stage)")
        t.add_column("kind")
        stages = s.placement.stages
        for st in range(stages):
            t.add_column(f"stage {st}", justify="right")
        for kind, v in stage_values(prof).items():
            if kind in ("pair", "comm"):
                t.add_row("F&B" if kind == "pair" else "P2P latency", f"{v * 1e3:.3f} (every stage)")
                continue
            vals = v if isinstance(v, tuple) else (v,) * stages
            filled = {f.stage for f in prof.filled if f.kind.lower() == kind}
            t.add_row(kind.upper(), *(f"{x * 1e3:.3f}" + ("*" if st in filled else "") for st, x in enumerate(vals)))
        out.print(t)
        if prof.filled:
            out.print("* not measured: no op of that kind ran at that stage; the mean of the stages that ran it")
        name = rerun_name(s, stage_values(prof))
        out.print(f"simulate with: pipesim simulate -s {name} --pp {s.pp} -m {s.microbatches} {stage_flags(prof)}")
