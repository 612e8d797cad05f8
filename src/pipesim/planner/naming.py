"""How the report and the recipe name a result in words: its layout and schedule, its
GPU-hours, and the schedule families they speak of together."""

from __future__ import annotations

from .moe_layers import prefix_moe_layers
from .results import Plan, Result
from .specs import Model, Training

#: DualPipe's two forms: two parameter copies, or one folded into a V
DUAL_FAMILY = ("dualpipe", "dualpipev")


def layout_text(r: Result, plan: Plan) -> str:
    """The result's parallel degrees, e.g. "pp16 x dp128, ep64 (8 nodes)"."""
    lay, c = r.candidate.layout, plan.cluster
    parts = [f"pp{lay.pp}", f"dp{lay.dp}"] + ([f"tp{lay.tp}"] if lay.tp > 1 else []) + ([f"cp{lay.cp}"] if lay.cp > 1 else [])
    text = " x ".join(parts)
    if lay.ep > 1 or lay.etp > 1:
        text += f", ep{lay.ep}" + (f" x etp{lay.etp}" if lay.etp > 1 else "")
        if lay.ep > 1:  # the nodes the expert all-to-all spans; at ep1 there is none ("ep1 x etp16 (1 node)")
            where = lay.span("ep", c.domain).domains
            unit = "node" if c.domain == c.gpus_per_node else "NVLink domain"
            text += f" ({where} {unit}{'s' if where > 1 else ''})"
    return text


def schedule_label(name: str, chunks: int | None, group: int | None) -> str:
    """A schedule as the plan names it: its chunks per rank where given and Megatron's
    micro-batch group where one is set, e.g. "interleaved-1f1b (v=4, g=12)"."""
    given = ([f"v={chunks}"] if chunks else []) + ([f"g={group}"] if group is not None else [])
    return name + (f" ({', '.join(given)})" if given else "")


def schedule_text(r: Result) -> str:
    """The schedule's label, with Megatron's micro-batch group where the search set one."""
    return schedule_label(r.candidate.schedule, r.candidate.chunks, r.group_size)


def hours_for_run(r: Result, t: Training) -> float:
    """GPU-hours of the whole run (``Training.tokens``) at the result's steady-state rate."""
    return r.gpu_hours_per_t * t.tokens / 1e12


def fmt_hours(h: float) -> str:
    """GPU-hours as the report prints them: 1.23B, 1.23M, 456K, 789, or 0.0012 below one
    (a run of a few tokens printed "0 GPU-hours (1 minute on 8 GPUs)"; 1e18 tokens
    "20994.65M")."""
    if h >= 1e9:
        return f"{h / 1e9:.2f}B"
    if h >= 1e6:
        return f"{h / 1e6:.2f}M"
    if h >= 1e3:
        return f"{h / 1e3:.0f}K"
    return f"{h:.0f}" if h >= 0.5 or h == 0 else f"{h:.2g}"


def fmt_tokens(n: float) -> str:
    """A run's tokens in words: "15T tokens", "1,000,000T tokens" (--tokens takes up to
    1e18), "500B tokens", "20M tokens", "1 token" (printed "1e-12T tokens" before)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale:
            x = n / scale
            return f"{x:,.0f}{unit} tokens" if x >= 1e3 else f"{x:g}{unit} tokens"
    return f"{n:,.0f} token{'' if round(n) == 1 else 's'}"


def fmt_params(n: float) -> str:
    """A parameter count to three figures: "8.03B", "1.03T" (Kimi K2 printed "1.03e+03B"),
    "302M" (a 0.302B model)."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= scale * 0.9995:  # 999.96B rounds to 1.00T, not "1e+03B"
            return f"{n / scale:.3g}{unit}"
    return f"{n:,.0f}"


def wall_clock(hours: float) -> str:
    """How long a run takes on its GPUs, in days from two days up ("48 days"), hours or
    minutes below: a one-day run printed as "1 days" and a short one as "0 days"."""
    if hours >= 47.5:  # rounds to 48 hours or more: two days
        return f"{hours / 24:,.0f} days"
    if hours >= 1.5:
        return f"{hours:.0f} hours"
    if hours >= 0.5:
        return "1 hour"
    if hours * 60 < 0.5:  # "1 minute" was the floor, beside "0 GPU-hours"
        return "under a minute"
    return f"{hours * 60:.0f} minute{'' if hours * 60 < 1.5 else 's'}"


def recompute_text(mode: str) -> str:
    """A recomputation mode in words: "selective recomputation", "no recomputation" (not
    "none recomputation"), "full recomputation of every 2nd layer" (not "every-2
    recomputation"), "per-op recomputation" (torchtitan's selective op, not "op recomputation")."""
    if mode == "none":
        return "no recomputation"
    if mode.startswith("every-"):
        return f"full recomputation of {every_nth_layer(mode.removeprefix('every-'))}"
    if mode == "op":
        return "per-op recomputation"
    return f"{mode} recomputation"


def every_nth_layer(n: int | str) -> str:
    """ "every layer", "every 2nd layer", "every 3rd layer", "every 11th layer": recompute =
    every-N in words (the notes said "every 2th layer")."""
    n = int(n)
    if n == 1:
        return "every layer"
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"every {n}{suffix} layer"


def moe_layers_text(m: Model) -> str:
    """A model's MoE layers in words for its report line, where they are not simply the
    last ones (a prefix of dense layers, or none, says nothing the layer count and the
    experts do not): "24 MoE, every 2nd layer from layer 1", or "30 MoE" where no step fits."""
    moe = m.moe_layers
    if not moe or moe == prefix_moe_layers(m.layers, moe[0]):
        return ""
    first, n = moe[0], len(moe)
    step = moe[1] - first if n > 1 else 0
    if step and moe == tuple(range(first, m.layers, step)):
        return f"{n} MoE, {every_nth_layer(step)} from layer {first}"
    return f"{n} MoE"
