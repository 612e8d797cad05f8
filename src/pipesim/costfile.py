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

[memory]              # optional: sizes for the memory timeline
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
import tomllib
from dataclasses import fields
from pathlib import Path

from .components import ComponentCosts, LayerCosts
from .errors import PipesimError
from .memory import MemoryModel, layer_activation

TOP = {"layers": int, "p2p": float, "comm_sms": float, "total_sms": float, "lone_overlap": bool}
MEMORY = {
    "hidden": int,
    "heads": int,
    "seq": int,
    "micro_batch": int,
    "flash_attention": bool,
    "params": float,
    "dp": int,
    "zero": int,
    "param_bytes": float,
    "grad_bytes": float,
    "optimizer_bytes": float,
}
LAYER = {f.name for f in fields(LayerCosts)}


def load_cost_file(path: str | Path) -> tuple[ComponentCosts, MemoryModel | None]:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except OSError as e:
        raise PipesimError(f"cannot read cost file {str(p)!r}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise PipesimError(f"{p}: not valid TOML ({e})") from None
    try:
        return parse_costs(data)
    except PipesimError as e:
        raise PipesimError(f"{p}: {e}") from None


def _typed(table: dict, schema: dict, where: str) -> dict:
    out = {}
    for key, value in table.items():
        if key not in schema:
            raise PipesimError(f"unknown key {where}{key}; expected one of {', '.join(sorted(schema))}")
        want = schema[key]
        ok = isinstance(value, bool) if want is bool else isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (want is int and value != int(value)):
            raise PipesimError(f"{where}{key} must be {'true or false' if want is bool else 'a number'}, got {value!r}")
        if want is not bool and value < 0:
            raise PipesimError(f"{where}{key} must be >= 0, got {value}")
        out[key] = want(value)
    return out


def parse_costs(data: dict) -> tuple[ComponentCosts, MemoryModel | None]:
    layer = data.get("layer")
    if not isinstance(layer, dict):
        raise PipesimError("missing [layer] table with the per-layer times (attn_f, mlp_f, dispatch_f, combine_f, ...)")
    if not isinstance(data.get("measured", {}), dict):
        raise PipesimError("[measured] must be a table")
    top = _typed({k: v for k, v in data.items() if k not in ("layer", "memory", "measured")}, TOP, "")
    costs = ComponentCosts.uniform(LayerCosts(**_typed(layer, {k: float for k in LAYER}, "layer.")), **top)
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
    return costs, MemoryModel(params=params, activation=act * layers, w_share=w_share, **extra)


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
