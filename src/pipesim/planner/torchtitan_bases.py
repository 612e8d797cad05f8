"""Which of torchtitan's own model configurations a plan's model is, so that its recipe
starts from it: the presets' (config_registry.py of each model), Qwen3's and gpt-oss's
flavours matched by shape (a model read from a config.json has its own name), or a
placeholder to fill in. Read from pytorch/torchtitan at b5bcd76 (2026-08-21)."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from .attention_window import chunked_layers
from .specs import Model, load_model

#: the model presets' full configurations in torchtitan (config_registry.py of each model)
TORCHTITAN_BASES = {
    "llama3-8b": ("torchtitan.models.llama3.config_registry", "llama3_8b"),
    "llama3-70b": ("torchtitan.models.llama3.config_registry", "llama3_70b"),
    "llama3-405b": ("torchtitan.models.llama3.config_registry", "llama3_405b"),
    "deepseek-v3": ("torchtitan.models.deepseek_v3.config_registry", "deepseek_v3_671b"),
}


#: the import a recipe names when no torchtitan configuration matches the model
PLACEHOLDER = ("your_configs", "your_base_config")


#: torchtitan's Qwen3 flavours by shape (torchtitan/models/qwen3/__init__.py at b5bcd76:
#: qwen3_configs), (layers, hidden, heads, kv heads, head size, vocabulary, tied embeddings,
#: dense width or (experts, expert width, top-k)) -> (flavour, its config_registry.py
#: function, None where the registry has the flavour but no configuration function)
QWEN3_FLAVOURS = {
    (28, 1024, 16, 8, 128, 151936, True, 3072): ("0.6B", "qwen3_0_6b"),
    (28, 2048, 16, 8, 128, 151936, True, 6144): ("1.7B", "qwen3_1_7b"),
    (36, 2560, 32, 8, 128, 151936, True, 9728): ("4B", None),
    (36, 4096, 32, 8, 128, 151936, False, 12288): ("8B", None),
    (40, 5120, 40, 8, 128, 151936, False, 17408): ("14B", "qwen3_14b"),
    (64, 5120, 64, 8, 128, 151936, False, 25600): ("32B", "qwen3_32b"),
    (48, 2048, 32, 4, 128, 151936, False, (128, 768, 8)): ("30B-A3B", "qwen3_30b_a3b"),
    (94, 4096, 64, 4, 128, 151936, False, (128, 1536, 8)): ("235B-A22B", None),
}


def _qwen3_shape(m: Model) -> tuple:
    a, e = m.attention, m.moe
    every_moe = len(m.moe_layers) == m.layers  # torchtitan's Qwen3 MoE flavours have experts on every layer
    mlp = (e.experts, e.expert_ffn, e.top_k) if e and not e.shared_experts and every_moe else m.dense_ffn
    return (m.layers, m.hidden, m.heads, a.kv_heads or m.heads, a.head_dim, m.vocab, m.tied_embeddings, mlp)


#: torchtitan's gpt-oss flavours by shape (torchtitan/models/gpt_oss/__init__.py at b5bcd76:
#: _20b and _120b, a sink a head, a 128-token window on the even layers, counting from 0,
#: _build_gptoss_layers), (layers, hidden, heads, kv heads, head size, vocabulary, experts,
#: expert width, top-k) -> its config_registry.py function
GPT_OSS_FLAVOURS = {
    (36, 2880, 64, 8, 64, 201088, 128, 2880, 4): "gpt_oss_120b",
    (24, 2880, 64, 8, 64, 201088, 32, 2880, 4): "gpt_oss_20b",
}


def _gpt_oss_base(m: Model) -> str | None:
    a, e = m.attention, m.moe
    every_moe = len(m.moe_layers) == m.layers  # gpt-oss has experts on every layer
    if not (m.attention_sinks and e and a.kind == "gqa" and every_moe and not m.tied_embeddings):
        return None
    if any(m.window(i) != (128 if i % 2 == 0 else 0) for i in range(m.layers)):
        return None
    shape = (m.layers, m.hidden, m.heads, a.kv_heads or m.heads, a.head_dim, m.vocab, e.experts, e.expert_ffn, e.top_k)
    return GPT_OSS_FLAVOURS.get(shape)


def torchtitan_base(m: Model) -> tuple[str, str, str]:
    """(module, function, hint) of torchtitan's own full configuration for this model:
    the preset's or a Qwen3 or gpt-oss flavour's, matched by shape (a model read from a config.json
    has its own name), or a placeholder to fill in, with a hint naming torchtitan's model
    spec where it has the model but no configuration function for it."""
    for preset, (module, base) in TORCHTITAN_BASES.items():
        if replace(_preset_model(preset), name=m.name) == m:
            return module, base, ""
    if base := _gpt_oss_base(m):
        return "torchtitan.models.gpt_oss.config_registry", base, ""
    if m.attention.kind == "gqa" and not m.mtp_layers and m.rotary and m.activation == "swiglu":
        flavour, base = QWEN3_FLAVOURS.get(_qwen3_shape(m), (None, None))
        if base:
            return "torchtitan.models.qwen3.config_registry", base, ""
        if flavour:
            return (*PLACEHOLDER, f'its model_spec is torchtitan.models.qwen3.model_registry("{flavour}")')
    return (*PLACEHOLDER, _no_flavour_hint(m))


def _no_flavour_hint(m: Model) -> str:
    """What torchtitan holds for a model it has no configuration of, where the placeholder's
    "yours to write" would let a user look for a model spec that is gone or guess at one:
    torchtitan's Llama 4 (the one model of it with chunked attention, flavours 17bx16e and
    17bx128e) was removed by #3573 (d92336f, 2026-06-08, "deprecate llama4": models/llama4
    deleted), so no model at b5bcd76 attends within chunks; its deepseek_v3 model_registry
    builds MLA + MoE in the flavours 16B, 236B and 671B alone (deepseekv3_configs at b5bcd76:
    DeepSeek-V2-Lite's, V2's and V3's shapes)."""
    if chunked_layers(m):
        return (
            "torchtitan has no model with chunked attention since #3573 (2026-06-08) removed its Llama 4, "
            "so the model spec is yours too"
        )
    if m.attention.kind == "mla" and m.moe:
        return (
            "torchtitan.models.deepseek_v3.model_registry builds MLA and MoE layers in the flavours "
            '"16B", "236B" and "671B" alone (DeepSeek-V2-Lite\'s, V2\'s and V3\'s shapes)'
        )
    return ""


@cache
def _preset_model(name: str) -> Model:
    return load_model(name)
