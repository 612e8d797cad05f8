"""Component cost files (TOML): per-layer component times and, optionally, memory sizes.

layers = 4            # per stage
p2p = 0.05            # latency of one transfer between stages
comm_sms = 20         # GPU share communication kernels take while they run
total_sms = 132
lone_overlap = false  # true: lone ops overlap two half micro-batches

[layer]               # times of one layer for one micro-batch
attn_f = 1.0
mlp_f = 1.0
dispatch_f = 1.0
combine_f = 1.0
# attn_b, attn_w, mlp_b, mlp_w default to the forward time; dispatch_b, combine_b
# to the forward communication

[memory]              # optional: sizes for the memory timeline (a pair's taken layer by layer)
hidden = 4096
heads = 32
seq = 4096
micro_batch = 1
flash_attention = false
params = 8.05e8       # parameters of one stage (default 12 * hidden^2 * layers)
dp = 8
zero = 1

[measured]            # optional, written by `pipesim profile`: where the times came from
source = "train.json" # (strings, numbers, booleans; read by tools, not by the cost model)
time_unit = "s"
window = 0.129
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from .components import ComponentCosts, LayerCosts
from .errors import PipesimError
from .inputs import MAX_COUNT, MAX_LAYERS, MAX_VALUE, known_keys, load_toml, number
from .memory import MemoryModel, layer_activation

# key: (type, smallest, largest); bool keys take true or false
TOP = {
    "layers": (int, 1, MAX_LAYERS),
    "p2p": (float, 0, MAX_VALUE),
    "comm_sms": (float, 0, 1e6),
    "total_sms": (float, 1, 1e6),
    "lone_overlap": (bool, None, None),
}
MEMORY = {
    "hidden": (int, 1, 10_000_000),
    "heads": (int, 1, 1_000_000),
    "seq": (int, 1, 100_000_000),
    "micro_batch": (int, 1, MAX_COUNT),
    "flash_attention": (bool, None, None),
    "params": (float, 0, 1e18),
    "dp": (int, 1, MAX_COUNT),
    "zero": (int, 0, 3),
    "param_bytes": (float, 0, 64),
    "grad_bytes": (float, 0, 64),
    "optimizer_bytes": (float, 0, 64),
}
LAYER = {f.name: (float, 0, MAX_VALUE) for f in fields(LayerCosts)}


def load_cost_file(path: str | Path) -> tuple[ComponentCosts, MemoryModel | None]:
    p = Path(path)
    data = load_toml(p, "cost file")
    try:
        return parse_costs(data)
    except PipesimError as e:
        raise PipesimError(f"{p}: {e}") from None


def _typed(table: dict, schema: dict, where: str) -> dict:
    known_keys(table, schema, f"[{where.rstrip('.')}]" if where else "top level")
    out = {}
    for key, value in table.items():
        want, lo, hi = schema[key]
        if want is bool:
            if not isinstance(value, bool):
                raise PipesimError(f"{where}{key} must be true or false, got {value!r}")
            out[key] = value
        else:
            out[key] = number(value, f"{where}{key}", lo, hi, integer=want is int)
    return out


def parse_costs(data: dict) -> tuple[ComponentCosts, MemoryModel | None]:
    known_keys(data, [*TOP, "layer", "memory", "measured"], "top level")
    layer = data.get("layer")
    if not isinstance(layer, dict):
        raise PipesimError("missing [layer] table with the per-layer times (attn_f, mlp_f, dispatch_f, combine_f, ...)")
    if not isinstance(data.get("measured", {}), dict):
        raise PipesimError("[measured] must be a table")
    top = _typed({k: v for k, v in data.items() if k not in ("layer", "memory", "measured")}, TOP, "")
    costs = ComponentCosts.uniform(LayerCosts(**_typed(layer, LAYER, "layer.")), **top)
    mem = data.get("memory")
    if mem is None:
        return costs, None
    if not isinstance(mem, dict):
        raise PipesimError("[memory] must be a table")
    m = _typed(mem, MEMORY, "memory.")
    for key in ("hidden", "heads", "seq"):
        if key not in m:
            raise PipesimError(f"[memory] needs {key} (and hidden, heads, seq to size activations)")
    layers = top.get("layers", 1)
    act, w_share = layer_activation(m["hidden"], m["heads"], m["seq"], m.get("micro_batch", 1), m.get("flash_attention", False))
    extra = {k: m[k] for k in ("dp", "zero", "param_bytes", "grad_bytes", "optimizer_bytes") if k in m}
    params = m.get("params", 12 * m["hidden"] ** 2 * layers)
    return costs, MemoryModel(params=params, activation=act * layers, w_share=w_share, layer_bytes=(act,) * layers, **extra)


def format_cost_file(layer: dict[str, float], top: dict, measured: dict | None = None, comments: tuple[str, ...] = ()) -> str:
    """The text of a cost file that ``load_cost_file`` reads back: ``top`` keys of
    ``TOP``, the ``[layer]`` times, and an optional ``[measured]`` table of provenance."""

    def value(v) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return f"{v:.9g}"
        return json.dumps(str(v))  # a JSON string is a TOML basic string

    lines = [f"# {c}" for c in comments]
    lines += [f"{k} = {value(v)}" for k, v in top.items() if k in TOP]
    lines += ["", "[layer]"] + [f"{k} = {value(v)}" for k, v in layer.items() if k in LAYER]
    if measured:
        lines += ["", "[measured]"] + [f"{k} = {value(v)}" for k, v in measured.items()]
    return "\n".join(lines) + "\n"
