"""Llama 4's config.json read as transformers' Llama4TextConfig and modeling_llama4.py build
the text model, held to the model cards' published sizes (meta-llama/Llama-4-Scout-17B-16E:
17B active, 109B total; meta-llama/Llama-4-Maverick-17B-128E: 17B active, 400B total)."""

from __future__ import annotations

import json

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.params import published_active_params, total_params
from pipesim.planner.specs import load_model

#: the text_config fields of Llama 4 Scout's config.json (meta-llama/Llama-4-Scout-17B-16E,
#: transformers 4.51.0 as saved with the weights): MoE on every layer, every 4th layer NoPE
SCOUT = {
    "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
    "interleave_moe_layer_step": 1, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_attention_heads": 40,
    "num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
    "use_qk_norm": True, "vocab_size": 202048, "no_rope_layers": [1, 1, 1, 0] * 12,
}  # fmt: skip

#: Maverick's (vLLM's tests/models: LLAMA_4_MAVERICK_TWO_LAYER_CONFIG, its 48 layers there cut
#: to 2): 128 experts on every other layer, the vocabulary Scout's
MAVERICK = {
    **SCOUT, "interleave_moe_layer_step": 2, "num_local_experts": 128, "use_qk_norm": False, "no_rope_layers": [],
}  # fmt: skip


def config(tmp_path, text: dict, name: str = "llama4.json", wrapped: bool = True) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"model_type": "llama4", "text_config": text} if wrapped else text))
    return str(path)


def test_scout_and_maverick_hold_their_published_sizes(tmp_path):
    """Counted by hand from the configs, with transformers' modules: attention q and o of
    5120 x 40 x 128 and k, v of 5120 x 8 x 128 (62,914,560 a layer), two RMSNorms (10,240);
    a routed or shared expert 3 x 5120 x 8192 (125,829,120), a router 5120 x experts; a
    dense layer's MLP 3 x 5120 x 16384 (251,658,240); embedding and head 2 x 202,048 x 5120
    (2,068,971,520) and a final norm (5,120).

    Scout, 48 MoE layers of 16 experts: 48 x (62,914,560 + 10,240 + 17 x 125,829,120 +
    81,920) + 2,068,971,520 + 5,120 = 107,769,861,120. Its vision encoder (vision_config:
    34 layers of 1408 with q, k, v, o and a 5632-wide MLP, biases and two LayerNorms,
    23,807,872 each; patch, position and class embeddings and two LayerNorms, 1,647,360; the
    adapter 5632 x 4096 + 4096 x 4096 and the projector 4096 x 5120, 60,817,408) holds
    871,932,416 more, which pipesim does not plan: 108.64B, the card's 109B.

    Maverick, 24 dense and 24 MoE layers of 128 experts (layers 1, 3, ..., 47): 24 x
    (62,914,560 + 10,240 + 251,658,240) + 24 x (62,914,560 + 10,240 + 129 x 125,829,120 +
    655,360) + 2,068,971,520 + 5,120 = 400,711,848,960: the card's 400B (401.6B with a vision
    encoder as Scout's, whose config was not checked here).

    Active, counting the embedding as Meta's 17B needs (16.1B without it): 48 x 62,914,560
    + the MoE layers' shared expert, one routed expert and router + Maverick's dense MLPs +
    2,068,971,520: Scout 17,172,398,080, Maverick 17,184,194,560."""
    scout = load_model(config(tmp_path, SCOUT, "scout.json"))
    maverick = load_model(config(tmp_path, MAVERICK, "maverick.json"))
    assert total_params(scout) == 107_769_861_120 and round((107_769_861_120 + 871_932_416) / 1e9) == 109
    assert total_params(maverick) == 400_711_848_960 and round(400_711_848_960 / 1e11, 1) == 4.0
    assert (published_active_params(scout), published_active_params(maverick)) == (17_172_398_080, 17_184_194_560)
    assert all(scout.is_moe_layer(i) for i in range(48)) and scout.dense_ffn == 0
    assert [maverick.is_moe_layer(i) for i in range(48)] == [False, True] * 24 and maverick.dense_ffn == 16384
    assert (maverick.moe.experts, maverick.moe.expert_ffn, maverick.moe.top_k, maverick.moe.shared_experts) == (128, 8192, 1, 1)
    assert (maverick.attention.kv_heads, maverick.attention.head_dim, maverick.attention_chunk) == (8, 128, 8192)
    # the text model alone (llama4_text) is the same model
    assert load_model(config(tmp_path, MAVERICK, "maverick.json", wrapped=False)) == maverick


def test_moe_layers_and_class_defaults(tmp_path):
    """moe_layers, where given, overrides the step (Llama4TextConfig); absent fields take
    the class's defaults: head_dim 128 (not 5120 / 40), 8 key/value heads, 8192-token
    chunks; a null attention_chunk_size has no chunks, nor has a model whose every layer is
    NoPE (no_rope_layers all 0)."""
    listed = load_model(config(tmp_path, {**MAVERICK, "moe_layers": [0, 47]}))
    assert listed.moe_layers == (0, 47)
    bare = {k: v for k, v in MAVERICK.items() if k not in ("head_dim", "num_key_value_heads", "attention_chunk_size")}
    m = load_model(config(tmp_path, bare))
    assert (m.attention.head_dim, m.attention.kv_heads, m.attention_chunk) == (128, 8, 8192)
    assert load_model(config(tmp_path, {**MAVERICK, "attention_chunk_size": None})).attention_chunk == 0
    assert load_model(config(tmp_path, {**SCOUT, "no_rope_layers": [0] * 48})).attention_chunk == 0


@pytest.mark.parametrize(
    "text, words",
    [
        ({**MAVERICK, "vocab_size": ...}, "llama4.json text_config: missing field 'vocab_size' (a llama4_text config has it)"),
        ({**MAVERICK, "moe_layers": [1, 48]}, "moe_layers [1, 48] must hold layer numbers from 0 to 47"),
        # Llama4TextConfig takes moe_layers whenever it is not None: [] is no MoE layer
        ({**MAVERICK, "moe_layers": []}, "moe_layers [] leaves none of its 48 layers an MoE layer"),
        ({**MAVERICK, "moe_layers": None}, None),  # null: the step's layers
        ({**MAVERICK, "no_rope_layers": [1, 0]}, "no_rope_layers must hold one 0 or 1 a layer (48)"),
        ({**MAVERICK, "interleave_moe_layer_step": 0}, "interleave_moe_layer_step must be a whole number from 1"),
        ({**MAVERICK, "interleave_moe_layer_step": 60}, "interleave_moe_layer_step 60 leaves none of its 48 layers an MoE"),
        ({**MAVERICK, "num_experts_per_tok": 200}, "num_experts_per_tok 200 exceeds num_local_experts 128"),
        (5, "a llama4 config holds its text model under text_config, an object; got 5"),
    ],
)
def test_a_config_pipesim_cannot_read_is_refused_by_its_keys(tmp_path, text, words):
    text = {k: v for k, v in text.items() if v is not ...} if isinstance(text, dict) else text
    if words is None:
        assert load_model(config(tmp_path, text)).moe_layers == tuple(range(1, 48, 2))
        return
    with pytest.raises(PipesimError) as e:
        load_model(config(tmp_path, text))
    assert words in str(e.value) and "[mlp]" not in str(e.value)
