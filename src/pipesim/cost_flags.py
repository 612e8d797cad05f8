"""The cost flags every schedule-level command shares (per-chunk F/B/W/BW/pair times, or
per-layer component times) and the cost model they describe. Apart from options.py,
whose flags and readers every command takes, because this half is about pricing alone.
"""

from __future__ import annotations

import argparse

from .errors import PipesimError
from .inputs import MAX_LAYERS
from .layer import PRESETS, LayerCosts
from .options import add_op_costs, cost_value, nonneg_float, positive_float, whole_number

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from .costs import CostModel
    from .ir import Schedule

# The cost models import numpy: they are imported in costs_from, so that every command's
# --help (which only declares these flags) starts without them.


def add_costs(p: argparse.ArgumentParser, per_chunk: bool = True) -> None:
    """The cost flags: per-chunk times (unless ``per_chunk`` is False: pair prices one pair
    part by part, and took --f and --costs-per only to drop them) and per-layer components."""
    if per_chunk:
        add_chunk_costs(p)
    add_component_costs(p, per_chunk)


def add_chunk_costs(p: argparse.ArgumentParser) -> None:
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


def add_component_costs(p: argparse.ArgumentParser, beside_chunk_costs: bool = True) -> None:
    # "instead of --f/--b/--w" only where those are flags too (pair takes none of them)
    instead = "instead of --f/--b/--w: " if beside_chunk_costs else ""
    c = p.add_argument_group(
        f"component costs per layer ({instead}a chunk is --layers layers of attention, "
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


def cost_flags_given(args: argparse.Namespace) -> bool:
    """Whether any cost flag (per chunk or per component) is on the command line."""
    keys = ("f", "b", "w", "bw", "pair", "comm", *COMPONENT_FLAGS, *_COMPONENT_EXTRAS, "components", "preset")
    return any(getattr(args, k, None) is not None for k in keys) or getattr(args, "lone_overlap", False)


def costs_from(args: argparse.Namespace) -> CostModel:
    """The cost model the flags describe: per-chunk ``Costs`` or per-layer ``ComponentCosts``."""
    from .components import ComponentCosts
    from .costfile import load_cost_file
    from .costs import Costs

    simple = {k: getattr(args, k) for k in ("f", "b", "w", "bw", "pair", "comm") if getattr(args, k, None) is not None}
    layer = {_LAYER_FIELD.get(k, k): v for k in COMPONENT_FLAGS if (v := getattr(args, k, None)) is not None}
    extras = {k: v for k in _COMPONENT_EXTRAS if (v := getattr(args, k, None)) is not None}
    file, preset = getattr(args, "components", None), getattr(args, "preset", None)
    if not (layer or extras or file or preset or getattr(args, "lone_overlap", False)):
        return Costs(**simple)
    _refuse_lone_modifiers(layer, extras, file or preset, getattr(args, "lone_overlap", False), simple)
    if simple:
        flags = ", ".join(f"--{k}" for k in simple)
        raise PipesimError(
            f"{flags} {'describe' if len(simple) > 1 else 'describes'} per-chunk costs; with component costs give per-layer "
            "times (--attn, --mlp, --dispatch, --combine)"
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


#: the flags that make a component model on their own: a preset, a file, a forward time
_COMPONENT_BASES = "--preset, --components or a forward time (--attn, --mlp, --dispatch, --combine)"


def _refuse_lone_modifiers(layer: dict, extras: dict, base: object, lone: bool, simple: dict) -> None:
    """A flag that only adjusts a component model (--layers, --p2p, a backward time...)
    given without one of the flags that make it: it switched the whole cost model to
    default layers (attention and MLP 1, dispatch and combine 0), which the user asked
    for nowhere (`simulate --layers 3` printed another model than `simulate`)."""
    if base or any(k in layer for k in _LAYER_FIELD.values()):
        return
    modifiers = [*(k for k in COMPONENT_FLAGS if _LAYER_FIELD.get(k, k) in layer), *extras, *(["lone_overlap"] if lone else [])]
    flag = "--" + modifiers[0].replace("_", "-")
    hint = " (per-chunk P2P latency is --comm)" if modifiers[0] == "p2p" and not simple else ""
    raise PipesimError(f"{flag} adjusts a component cost model; give {_COMPONENT_BASES} with it, or drop it{hint}")


def refuse_costs_none_use(args: argparse.Namespace, schedules: list[Schedule]) -> None:
    """--pair prices overlapped F&B pairs and --bw fused backwards (BW): given for
    schedules that run none, they changed nothing, unsaid (`simulate -s 1f1b --pair 3`
    printed 1F1B as without it; zb-h1 splits every backward into B and W)."""
    if schedules:
        used = set().union(*(costs_run(s) for s in schedules))
        refuse_costs_unused(args, used, [s.name for s in schedules])


#: the cost flags that price one kind of item, and what that item is called
_PRICED = {"pair": "overlapped F&B pairs", "bw": "fused backwards (BW)"}


def costs_run(schedule: Schedule) -> set[str]:
    """The keys of ``_PRICED`` whose items ``schedule`` runs."""
    from .ir import KINDS

    t, bw = schedule.table, KINDS.index("BW")
    runs = {"pair": bool((t.kind2 >= 0).any()), "bw": bool((t.kind == bw).any() or (t.kind2 == bw).any())}
    return {k for k, yes in runs.items() if yes}


def refuse_costs_unused(args: argparse.Namespace, used: set[str], names: list[str]) -> None:
    """Refuse --pair or --bw when none of the schedules ``names`` runs what it prices
    (``used``: the union of their ``costs_run``); a sweep, which holds one schedule at
    a time, gathers ``used`` as it goes."""
    for key, what in _PRICED.items():
        if getattr(args, key, None) is not None and key not in used:
            raise PipesimError(
                f"--{key} prices {what}, and {', '.join(names)} {'runs' if len(names) == 1 else 'run'} none: drop it"
            )
