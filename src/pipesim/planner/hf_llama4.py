"""Llama 4's text model from its HuggingFace config (``llama4``, the text model under
``text_config``; ``llama4_text``, that part alone), as transformers' Llama4TextConfig and
modeling_llama4.py build it.

* Layers: MoE on the layers ``moe_layers`` lists, by default every
  ``interleave_moe_layer_step``-th counting from the step's last (Llama4TextConfig:
  range(step - 1, layers, step); Scout's step 1, every layer; Maverick's 2, layers 1, 3,
  ..., 47). The other layers are dense, ``intermediate_size_mlp`` wide
  (Llama4TextDecoderLayer: Llama4TextMLP(intermediate_size=intermediate_size_mlp)).
* An MoE layer (Llama4TextMoe): ``num_local_experts`` experts of ``intermediate_size``
  (Llama4TextExperts: gate_up_proj of hidden x 2 intermediate_size, down_proj back), a
  router of hidden x experts without bias (Llama4Router), reaching ``num_experts_per_tok``
  (1) experts a token, and one shared expert as wide as a routed one (Llama4TextMoe's
  shared_expert = Llama4TextMLP(config), intermediate_size). The router takes the top-k
  logits and a sigmoid of them (Llama4Router.forward) where Mixtral's takes a softmax:
  a k-wide elementwise op on the logits either way, priced as the router pipesim prices.
* Attention: grouped-query, ``head_dim`` (class default 128; null: hidden / heads), no
  biases (attention_bias is set False by the class). Each layer's kind is the config's
  ``layer_types`` where it gives one, else Llama4TextConfig.__post_init__'s (transformers
  008e5743, configuration_llama4.py): "chunked_attention" on the layers whose
  ``no_rope_layers`` entry is 1 (despite its name, the layers that take rotary positions),
  "full_attention" on the others (NoPE); ``no_rope_layers`` absent, null or empty is
  int((i + 1) % no_rope_layer_interval != 0) for layer i, the interval 4 by default: layers
  3, 7, ..., 47 full, the other 36 of 48 chunked. Llama4TextDecoderLayer takes
  config.layer_types[layer_idx] as its attention_type and Llama4TextModel.forward hands it
  create_chunked_causal_mask's or create_causal_mask's mask by that name (modeling_llama4.py
  at 63210d0e). The chunk is ``attention_chunk_size`` (8192; null: none, every layer full),
  read as ``attention_chunk``; attention_window.py prices the chunks' pairs.

Priced as without them: the NoPE layers' query temperature scaling (attn_temperature_tuning,
an elementwise multiply of q), the rotary positions on every layer (pipesim's rotary
kernel on all 48 where 36 take it), and the rope layers' weightless L2 norm of q and k
(use_qk_norm: Scout true, Maverick false). The vision encoder and projector of a
``llama4`` checkpoint are not read: pipesim plans the text model (the model cards' totals
hold them: Scout's 109B is 107.8B of text and 0.87B of vision, tests/test_hf_llama4.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PipesimError
from ..inputs import shorten
from .attention_window import CHUNKED, FULL, SLIDING, read_layer_types
from .hf_families import gqa, moe_mlp, routed, some_moe

if TYPE_CHECKING:
    from .hf_fields import Fields

#: Llama4TextConfig's defaults for the fields read here when absent (transformers'
#: configuration_llama4.py)
HEAD_DIM, INTERLEAVE_STEP, DENSE_FFN, CHUNK, NO_ROPE_INTERVAL = 128, 1, 16384, 8192, 4


def text_fields(f: Fields) -> Fields:
    """The text model's fields: a ``llama4`` config's ``text_config``, a ``llama4_text``
    config itself; named ``model_type`` llama4_text either way (its readers' key)."""
    if f.config["model_type"] == "llama4_text":
        return f
    text = f.config.get("text_config")
    if not isinstance(text, dict):
        raise f.refuse(f"a llama4 config holds its text model under text_config, an object; got {text!r}")
    return type(f)({**text, "model_type": "llama4_text"}, f"{f.where} text_config", f.bounds)


def _layer_list(f: Fields, key: str) -> list | None:
    """A per-layer list a config gives (``moe_layers``: indices; ``no_rope_layers``: 0/1 a
    layer), or None where it is absent or null."""
    value = f.config.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        raise f.refuse(f"{key} must be a list of whole numbers, got {shorten(value)}")
    return value


def read_llama4(f: Fields) -> dict:
    f = text_fields(f)
    if "head_dim" not in f.config:  # absent: the class's 128 (null: hidden / heads, as gqa reads it)
        f = type(f)({**f.config, "head_dim": HEAD_DIM}, f.where, f.bounds)
    out = gqa(f)
    layers = out["layers"]
    listed = _layer_list(f, "moe_layers")  # Llama4TextConfig takes it whenever it is not None, [] too
    if listed is None:
        step = f.get("interleave_moe_layer_step", INTERLEAVE_STEP, lo=1)
        listed, why = list(range(step - 1, layers, step)), f"interleave_moe_layer_step {step}"
    elif not all(0 <= i < layers for i in listed):
        raise f.refuse(f"moe_layers {shorten(listed)} must hold layer numbers from 0 to {layers - 1}")
    else:
        why = f"moe_layers {shorten(listed)}"
    moe = [i in set(listed) for i in range(layers)]
    some_moe(f, moe, why, "for a dense model give model_type 'llama'")
    if not all(moe) and "intermediate_size_mlp" not in f.config:
        f = type(f)({**f.config, "intermediate_size_mlp": DENSE_FFN}, f.where, f.bounds)
    out["mlp"] = moe_mlp(f, moe, "intermediate_size_mlp")
    out["moe"] = {**routed(f, "num_local_experts", "intermediate_size"), "shared_experts": 1}
    # absent: the class's 8192; null: no chunks (every layer attends over the whole sequence)
    chunked = f.config.get("attention_chunk_size", CHUNK) is not None
    chunk = f.get("attention_chunk_size", CHUNK) if chunked else 0
    types = _layer_types(f, layers)
    if chunk and CHUNKED in types:
        out["attention_chunk"], out["layer_types"] = chunk, types
    return out


def _layer_types(f: Fields, layers: int) -> list[str]:
    """Each layer's attention as Llama4TextConfig sets it: the config's ``layer_types``
    ("chunked_attention" or "full_attention", one a layer) where given, else chunked on the
    rope layers (``_rope_layers``)."""
    given = f.config.get("layer_types")
    if given is None:
        return [CHUNKED if rope else FULL for rope in _rope_layers(f, layers)]
    types = list(read_layer_types(given, layers, f.where))
    if SLIDING in types:
        raise PipesimError(f'{f.where}: layer_types of Llama 4 are "{CHUNKED}" or "{FULL}", got "{SLIDING}"')
    return types


def _rope_layers(f: Fields, layers: int) -> list[bool]:
    """The layers that take rotary positions and chunked attention: ``no_rope_layers``'s 1
    entries (despite its name, Llama4TextAttention.use_rope = no_rope_layers[i]), by default
    all but every ``no_rope_layer_interval``-th."""
    given = _layer_list(f, "no_rope_layers")
    if not given:  # absent, null or [] ("invalid as we cannot have 0 layers"): the class's default
        every = f.get("no_rope_layer_interval", NO_ROPE_INTERVAL, lo=1)
        return [(i + 1) % every != 0 for i in range(layers)]
    if len(given) != layers or not all(x in (0, 1) for x in given):
        raise PipesimError(f"{f.where}: no_rope_layers must hold one 0 or 1 a layer ({layers}), got {shorten(given)}")
    return [x == 1 for x in given]


#: model_type -> reader
READERS = {"llama4": read_llama4, "llama4_text": read_llama4}
