"""Which layers of a model are MoE layers: read from a model file's ``[mlp]`` table, and
written back as Megatron-LM's flag.

A model holds one thing, ``Model.moe_layers``: the indices (from 0) of its MoE layers,
ascending; every other layer has a dense MLP. ``Model.is_moe_layer`` is the question
every cost, count and split asks of it. A model file says it in one of two ways under
``[mlp]``:

* ``dense_layers = N``: the first N layers dense, the rest MoE (DeepSeek-V2/V3's
  ``first_k_dense_replace``), the common case;
* ``moe_layer_freq``: Megatron-Core's own field (TransformerConfig.moe_layer_freq, flag
  ``--moe-layer-freq``; NVIDIA/Megatron-LM at d98e8a6, megatron/core/models/gpt/
  gpt_layer_specs.py, get_gpt_decoder_layer_specs): an integer N makes layer i an MoE layer
  when ``i % N == 0`` (layer 0 is MoE; N = 2: layers 0, 2, 4, ...), a list holds one entry
  a layer, 1 for an MoE layer and 0 for a dense one, as long as the model's layers (the
  function asserts the length). Megatron's help text gives DeepSeek-V3 as
  ``"([0]*3+[1]*58)"`` style lists (megatron/training/arguments.py, moe_freq_type).

Neither given: every layer MoE with a ``[moe]`` table (Megatron's default moe_layer_freq 1),
every layer dense without one.
"""

from __future__ import annotations

from ..errors import PipesimError
from ..inputs import number, shorten


def prefix_moe_layers(layers: int, dense: int) -> tuple[int, ...]:
    """The MoE layers of a model whose first ``dense`` layers are dense."""
    return tuple(range(dense, layers))


def freq_moe_layers(layers: int, freq: int) -> tuple[int, ...]:
    """The MoE layers Megatron-Core's integer moe_layer_freq N makes: i % N == 0."""
    return tuple(i for i in range(layers) if i % freq == 0)


def read_moe_layers(mlp: dict, layers: int, has_moe: bool, where: str) -> tuple[int, ...]:
    """``Model.moe_layers`` from a model file's ``[mlp]`` table (``where`` names the
    file), refusing in one line what no model is: both keys, a count or frequency out of
    range, a list of the wrong length or with entries other than 0 and 1, MoE layers
    without a ``[moe]`` table, or a ``[moe]`` table no layer uses."""
    at = f"{where} [mlp]"
    if "dense_layers" in mlp and "moe_layer_freq" in mlp:
        raise PipesimError(f"{at}: give dense_layers or moe_layer_freq, not both (both say which layers are MoE)")
    if "moe_layer_freq" in mlp:
        if not has_moe:
            raise PipesimError(
                f"{at}: moe_layer_freq names MoE layers but the model has no [moe] table; give one, or drop moe_layer_freq"
            )
        return _from_freq(mlp["moe_layer_freq"], layers, at)
    dense = number(mlp.get("dense_layers", 0 if has_moe else layers), "dense_layers", 0, layers, integer=True, where=at)
    if not has_moe and dense < layers:
        raise PipesimError(
            f"{where}: dense_layers {dense} leaves {layers - dense} of the {layers} layers MoE, which need a [moe] table: "
            "give one (experts, expert_ffn and top_k), or drop dense_layers for a dense model"
        )
    if has_moe and dense == layers:
        # experts no layer runs would still be planned for (expert parallelism, all-to-alls),
        # as hf_config refuses a config.json whose every layer is dense
        raise PipesimError(
            f"{at}: dense_layers {dense} leaves none of the {layers} layers an MoE layer; give "
            f"dense_layers below {layers}, or drop [moe] for a dense model"
        )
    return prefix_moe_layers(layers, dense)


def _from_freq(value: object, layers: int, at: str) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != layers or not all(x in (0, 1) and not isinstance(x, (bool, float)) for x in value):
            raise PipesimError(
                f"{at}: moe_layer_freq {shorten(value)} must be an integer from 1 to {layers} or a list of {layers} "
                f"entries (one a layer), each 1 (MoE) or 0 (dense); got {_list_shape(value)}"
            )
        if 1 not in value:
            raise PipesimError(
                f"{at}: moe_layer_freq has no 1, so no layer is an MoE layer; mark the MoE layers 1, or drop [moe] "
                "for a dense model"
            )
        return tuple(i for i, x in enumerate(value) if x == 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= layers:
        raise PipesimError(
            f"{at}: moe_layer_freq must be an integer from 1 to {layers} (layer i is MoE when i % N == 0) or a list of "
            f"{layers} entries of 1 (MoE) and 0 (dense), got {shorten(value)}"
        )
    return freq_moe_layers(layers, value)


def _list_shape(value: list) -> str:
    """What is wrong with a moe_layer_freq list, in words: its length, or its first bad entry."""
    bad = [x for x in value if x not in (0, 1) or isinstance(x, (bool, float))]
    return f"entry {shorten(bad[0])}" if bad else f"{len(value)} entries"


def mtp_layer_kind(m, last_stage_layers: int) -> int:
    """The decoder layer (index from 0) each MTP layer is built as, for a model ``m`` whose
    last pipeline stage holds ``last_stage_layers`` decoder layers. Megatron-LM (d98e8a6,
    gpt_builders.py) builds the MTP layer from the last decoder layer's spec
    (``decoder_layer_specs[-1]``, every layer's spec by moe_layer_freq), except where the
    last stage's block has no decoder layer (a layout such as ``...|mL``): there it takes
    ``_get_transformer_layer_spec``, the one layer spec with ``config.num_moe_experts``,
    an MoE layer whenever the model has experts. A dense last layer before such a stage
    then gives an MoE MTP layer, priced here as the last MoE layer."""
    if last_stage_layers or not m.moe_layers or m.is_moe_layer(m.layers - 1):
        return m.layers - 1
    return m.moe_layers[-1]


def megatron_moe_layer_freq(moe_layers: tuple[int, ...], layers: int) -> str:
    """``--moe-layer-freq`` for these MoE layers ("" when every layer is one, Megatron's
    default 1): the integer N where the layers are those ``i % N == 0`` makes, else the
    list as a Python expression that Megatron's moe_freq_type evaluates (arguments.py at
    d98e8a6: digits, brackets, + and * only), its shortest repeating unit written in runs as
    the help text writes them: ``"([0]*3+[1]*58)"``, ``"([0]+[1])*24"``."""
    if len(moe_layers) == layers:
        return ""
    for n in range(2, layers + 1):
        if moe_layers == freq_moe_layers(layers, n):
            return str(n)
    moe = set(moe_layers)
    marks = [1 if i in moe else 0 for i in range(layers)]
    period = next(p for p in range(1, layers + 1) if layers % p == 0 and marks == marks[:p] * (layers // p))
    runs: list[list[int]] = []
    for x in marks[:period]:
        if runs and runs[-1][0] == x:
            runs[-1][1] += 1
        else:
            runs.append([x, 1])
    unit = "+".join(f"[{x}]*{n}" if n > 1 else f"[{x}]" for x, n in runs)
    return f'"({unit})"' if period == layers else f'"({unit})*{layers // period}"'
