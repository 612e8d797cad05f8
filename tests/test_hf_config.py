"""Models read from HuggingFace config.json files (planner/hf_config.py).

The configs under data/hf/ hold the real fields and values of each model's published
config.json. Their parameter counts are checked against the counts the model makers
publish, at the digits they publish, and the two presets that have a config.json twin
(llama3-405b, deepseek-v3) must plan exactly as their twin does."""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner.params import active_params, embedding_params, layer_params, published_active_params, total_params
from pipesim.planner.specs import load_model, model_training

HF = Path(__file__).parent / "data" / "hf"

# (config, published total, published active, where published). Each count is compared at
# the digits its maker prints: rounded, except where a row says "cut" (the maker printed
# the leading digits of a count that rounds up: Qwen3-30B-A3B's 3.35B active is "3.3B").
PUBLISHED = [
    ("llama-3.1-8b", "8.03", None, "Meta-Llama-3.1-8B model page: 8.03B params"),
    ("llama-3.1-70b", "70.6", None, "Meta-Llama-3.1-70B model page: 70.6B params"),
    ("llama-3.1-405b", "405.8 cut", None, "Llama 3.1 405B: 405.8B as issue 19 quotes it (Meta's card: 405B)"),
    ("llama-3.2-1b", "1.24", None, "Llama-3.2-1B model page: 1.24B params (tied embeddings)"),
    ("mistral-7b-v0.1", "7.24", None, "Mistral-7B-v0.1 model page: 7.24B params"),
    ("mixtral-8x7b-v0.1", "46.7", "12.9", "Mistral AI, Mixtral of experts: 46.7B total, 12.9B per token"),
    ("mixtral-8x22b-v0.1", "141", "39", "Mistral AI, Cheaper, Better, Faster, Stronger: 141B, 39B active"),
    ("qwen2.5-72b-instruct", "72.7", None, "Qwen2.5-72B-Instruct model card: 72.7B"),
    ("qwen2-57b-a14b", "57", "14", "Qwen2 technical report, Table 1: 57B total, 14B activated"),
    ("qwen3-32b", "32.8", None, "Qwen3-32B model card: 32.8B"),
    ("qwen3-30b-a3b", "30.5", "3.3 cut", "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    ("qwen3-235b-a22b", "235", "22", "Qwen3-235B-A22B model card: 235B total, 22B activated"),
    # DeepSeek's activated counts leave the input embedding out (params.published_active_params):
    # V2 20.85B, V3 36.62B (README_WEIGHTS.md: 36.7B). V2-Lite's is 2.451B, which DeepSeek
    # print as 2.4B, cut where V2's and V3's are rounded: the one row at the rounding edge
    ("deepseek-v2", "236", "21", "DeepSeek-V2, arXiv 2405.04434: 236B total, 21B activated"),
    ("deepseek-v3", "671", "37", "DeepSeek-V3, arXiv 2412.19437: 671B total (without MTP), 37B activated"),
    ("deepseek-v2-lite", "15.7", "2.4 cut", "DeepSeek-V2, arXiv 2405.04434, appendix B: 15.7B total, 2.4B activated"),
    # gpt-oss's count holds only with its biases (the experts' 39.8M: 116.79B without them);
    # its active count keeps the unembedding and leaves the input embedding out, as DeepSeek's
    ("gpt-oss-120b", "116.83", "5.13", "gpt-oss model card, arXiv 2508.10925, Table 1: 116.83B total, 5.13B active"),
    ("gpt-oss-20b", "20.91", "3.61", "gpt-oss model card, arXiv 2508.10925, Table 1: 20.91B total, 3.61B active"),
]


def shown(count: float, published: str) -> str:
    """``count`` (parameters) in billions at the digits of ``published``, rounded or
    ("... cut") cut as its maker did."""
    digits, _, how = published.partition(" ")
    places = len(digits.partition(".")[2])
    value = count / 1e9
    if how == "cut":
        value = math.floor(value * 10**places) / 10**places
    return f"{value:.{places}f}" + (" cut" if how else "")


@pytest.mark.parametrize("name,total,active,source", PUBLISHED, ids=[row[0] for row in PUBLISHED])
def test_parameter_counts_are_the_published_ones(name, total, active, source):
    m = load_model(str(HF / f"{name}.json"))
    assert shown(total_params(m), total) == total, source
    if active:
        assert shown(published_active_params(m), active) == active, source


@pytest.mark.parametrize("name,sinks", [("gpt-oss-120b", 2304), ("gpt-oss-20b", 1536)])
def test_gpt_oss_counts_its_attention_sinks(name, sinks):
    """transformers' GptOssAttention holds ``sinks = nn.Parameter(torch.empty(
    config.num_attention_heads))``: one a head on every layer, 64 x 36 = 2,304 in
    gpt-oss-120b and 64 x 24 = 1,536 in gpt-oss-20b (their config.json's heads and layers).
    With them both totals stay at the model card's (the test above)."""
    m = load_model(str(HF / f"{name}.json"))
    assert m.attention_sinks
    assert total_params(m) - total_params(dataclasses.replace(m, attention_sinks=False)) == sinks


def test_the_report_prints_each_makers_active_count(capsys):
    """The plan gives the active count as the maker counts it, to three figures; the cost
    arithmetic keeps every parameter a token passes through (active_params)."""
    counts = {
        name: (round(active_params(m) / 1e9, 2), round(published_active_params(m) / 1e9, 2))
        for name in ("deepseek-v2-lite", "deepseek-v2", "deepseek-v3", "mixtral-8x7b-v0.1", "qwen3-30b-a3b")
        for m in [load_model(str(HF / f"{name}.json"))]
    }
    assert counts == {
        "deepseek-v2-lite": (2.66, 2.45),
        "deepseek-v2": (21.38, 20.85),
        "deepseek-v3": (37.55, 36.62),
        "mixtral-8x7b-v0.1": (12.88, 12.88),
        "qwen3-30b-a3b": (3.35, 3.35),
    }
    argv = ["plan", "--model", str(HF / "deepseek-v2-lite.json"), "--cluster", "h100", "--gpus", "16"]
    assert main(argv) == 0
    head = capsys.readouterr().out.splitlines()[2]
    assert head.startswith("deepseek-v2-lite: 15.7B parameters (2.45B active per token), 27 layers.")
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (round(d["parameters"] / 1e9, 2), round(d["active_parameters"] / 1e9, 2)) == (15.71, 2.45)


def test_dense_counts_are_the_checkpoints_weights():
    """Where every weight has a term (no biases), the count is the checkpoint's exact
    number of weights, as its model page lists it."""
    exact = {
        "llama-3.1-8b": 8_030_261_248,
        "llama-3.1-70b": 70_553_706_496,
        "llama-3.2-1b": 1_235_814_400,  # the output head is the embedding (tie_word_embeddings)
        "mistral-7b-v0.1": 7_241_732_096,
        "mixtral-8x7b-v0.1": 46_702_792_704,
    }
    assert {n: total_params(load_model(str(HF / f"{n}.json"))) for n in exact} == exact


def test_each_family_maps_to_the_spec():
    v3 = load_model(str(HF / "deepseek-v3.json"))
    assert (v3.moe_layers, v3.dense_ffn, v3.mtp_layers) == (tuple(range(3, 61)), 18432, 1)
    assert (v3.moe.experts, v3.moe.top_k, v3.moe.shared_experts, v3.moe.expert_ffn) == (256, 8, 1, 2048)
    assert v3.moe.max_nodes == 4  # topk_group 4 of n_group 8: node-limited routing
    assert (v3.attention.kind, v3.attention.q_lora_rank, v3.attention.kv_lora_rank) == ("mla", 1536, 512)
    v2 = load_model(str(HF / "deepseek-v2.json"))
    assert (v2.moe_layers, v2.moe.shared_experts, v2.moe.max_nodes, v2.mtp_layers) == (tuple(range(1, 60)), 2, 3, 0)
    qwen3 = load_model(str(HF / "qwen3-32b.json"))
    assert qwen3.attention.head_dim == 128 and qwen3.hidden // qwen3.heads == 80  # head_dim is read, not derived
    q2moe = load_model(str(HF / "qwen2-57b-a14b.json"))
    assert (len(q2moe.moe_layers), q2moe.moe.shared_experts, q2moe.moe.expert_ffn) == (q2moe.layers, 8, 2560)  # 20480 = 8 x 2560
    mixtral = load_model(str(HF / "mixtral-8x7b-v0.1.json"))
    assert (len(mixtral.moe_layers), mixtral.moe.expert_ffn, mixtral.moe.max_nodes) == (mixtral.layers, 14336, 0)


def test_glm_4_5_maps_to_the_spec():
    """GLM-4.5 technical report (arXiv 2508.06471), Table 1: 3 dense and 89 MoE layers, one
    MTP layer, 96 query heads of 128 and 8 key/value heads on a 5120 model, 160 experts of
    1536 with 8 routed and 1 shared; GLM-4.5-Air: 1 dense and 45 MoE layers, 128 experts of
    1408. n_group 1 of topk_group 1: no group limit."""
    glm = load_model(str(HF / "glm-4.5.json"))
    assert (glm.layers, glm.moe_layers[0], glm.dense_ffn, glm.mtp_layers) == (92, 3, 12288, 1)
    assert (glm.heads, glm.attention.kind, glm.attention.kv_heads, glm.attention.head_dim) == (96, "gqa", 8, 128)
    assert glm.hidden // glm.heads == 53  # head_dim is read, not derived
    assert (glm.moe.experts, glm.moe.top_k, glm.moe.shared_experts, glm.moe.expert_ffn, glm.moe.max_nodes) == (160, 8, 1, 1536, 0)
    air = load_model(str(HF / "glm-4.5-air.json"))
    assert (air.layers, air.moe_layers[0], air.hidden, air.moe.experts, air.moe.expert_ffn, air.mtp_layers) == (
        46,
        1,
        4096,
        128,
        1408,
        1,
    )


def test_glm_counts_are_the_checkpoints_and_near_the_model_cards():
    """Zhipu's model card gives GLM-4.5 355B total and 32B active, GLM-4.5-Air 106B and 12B;
    no one counting rule gives both totals from the configs (without the MTP layer, as
    DeepSeek's 671B is counted: 352.80B and 106.85B; with it, 356.79B and 109.23B), so the
    totals are held to 1% of the card's, and exactly to what the checkpoints hold: the
    weights Hugging Face counts in zai-org/GLM-4.5's safetensors (358.34B; the model page's
    "358B params") and GLM-4.5-Air's ("110B params") are the model, its MTP module as
    stored (vLLM's glm4_moe_mtp.py: a decoder layer, eh_proj of 2h x h, enorm, hnorm and the
    shared head's norm, and its own embedding and output head) and the q/k/v biases and q/k
    norms pipesim leaves out (1.4M). The active counts hold as DeepSeek count them, without
    the input embedding (32.85B and 12.80B; 33.63B and 13.42B with it), read as the card's
    "A32B" and "A12B" are: cut, not rounded."""
    for name, card, card_active, stored in (("glm-4.5", 355, "32 cut", "358.34"), ("glm-4.5-air", 106, "12 cut", "110")):
        m = load_model(str(HF / f"{name}.json"))
        total = total_params(m)
        assert abs(total / (card * 1e9) - 1) < 0.01, name
        assert shown(published_active_params(m), card_active) == card_active, name
        h = m.hidden
        mtp = layer_params(m, m.layers - 1) + 2 * h * h + 3 * h + 2 * m.vocab * h
        assert shown(total + m.mtp_layers * mtp, stored) == stored, name


def test_kimi_k2_is_read_as_deepseek_v3_and_counts_its_checkpoints_weights(tmp_path):
    """Kimi K2's config.json declares model_type "kimi_k2" on DeepSeek-V3's architecture
    (DeepseekV3ForCausalLM); Moonshot's deploy guidance has frameworks that lack it rename
    model_type to "deepseek_v3", which gives the same model here. The checkpoint holds
    1,026,408,232,448 weights (Fireworks' model list: paramCount of Kimi K2 Instruct; a
    header-by-header count of the K2-Instruct safetensors gives the same): pipesim's total
    and the MLA latent norms (q_lora_rank + kv_lora_rank a layer) and routing biases (one an
    expert a MoE layer) it leaves out. Moonshot's model card (MoonshotAI/Kimi-K2, README,
    Model Summary) gives 1T total and 32B activated: 1.03T, and 31.69B as DeepSeek count it,
    without the input embedding."""
    k2 = load_model(str(HF / "kimi-k2-instruct.json"))
    f = tmp_path / "kimi-k2-instruct.json"
    f.write_text(json.dumps(edited("kimi-k2-instruct", model_type="deepseek_v3")))
    assert load_model(str(f)) == k2
    assert (k2.layers, k2.moe_layers[0], k2.heads, k2.moe.experts, k2.moe.shared_experts, k2.moe.top_k) == (61, 1, 64, 384, 1, 8)
    assert (k2.moe.max_nodes, k2.mtp_layers) == (0, 0)  # n_group 1 of topk_group 1; no MTP module
    norms = k2.layers * (k2.attention.q_lora_rank + k2.attention.kv_lora_rank)
    routing_bias = len(k2.moe_layers) * k2.moe.experts
    assert total_params(k2) + norms + routing_bias == 1_026_408_232_448
    assert (round(total_params(k2) / 1e12), round(published_active_params(k2) / 1e9)) == (1, 32)


@pytest.mark.parametrize("preset,config", [("llama3-405b", "llama-3.1-405b"), ("deepseek-v3", "deepseek-v3")])
def test_preset_and_config_plan_the_same(preset, config, tmp_path, capsys):
    """The preset TOML and the model's config.json give the same model and, with the
    preset's training set-up, the same plan, apart from the model's name and the
    preset's published cost."""
    hf = str(HF / f"{config}.json")
    assert dataclasses.replace(load_model(hf), name=preset) == load_model(preset)
    training = tmp_path / "training.toml"
    training.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in model_training(preset).items()))
    plans = []
    for model in (preset, hf):
        assert main(["plan", "--model", model, "--cluster", "h800-2048", "--training", str(training), "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        d.pop("published", None)
        d["model"] = preset
        plans.append(d)
    assert plans[0] == plans[1]


def test_memory_takes_a_config_or_its_folder_named_after_the_folder(tmp_path, capsys):
    folder = tmp_path / "Mixtral-8x22B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "mixtral-8x22b-v0.1.json").read_text())
    assert load_model(str(folder / "config.json")) == load_model(str(folder))
    assert load_model(str(folder)).name == "Mixtral-8x22B-v0.1"
    assert main(["memory", "--model", str(folder), "--pp", "4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"] == "Mixtral-8x22B-v0.1" and d["layout"]["pp"] == 4 and d["layout"]["ep"] > 1


def edited(name: str, **changes) -> dict:
    config = json.loads((HF / f"{name}.json").read_text())
    for key, value in changes.items():
        if value is ...:
            del config[key]
        else:
            config[key] = value
    return config


@pytest.mark.parametrize(
    "config,needle",
    [
        (edited("llama-3.1-8b", model_type="gemma2"), "model_type 'gemma2' is not a family pipesim reads; supported: llama, "),
        # the refusal said "no model_type is not a family pipesim reads": name the field
        (edited("llama-3.1-8b", model_type=...), "missing field 'model_type' (one of llama, mistral, "),
        # Gemma 3 4B-27B's config.json ("gemma3", Gemma3ForConditionalGeneration) holds the
        # text model under text_config; say that pipesim reads that part and how to give it
        (
            {"model_type": "gemma3", "text_config": {**edited("gemma-3-1b"), "vocab_size": 262_208}},
            "model_type 'gemma3' is not a family pipesim reads, but its text_config is ('gemma3_text'): save text_config",
        ),
        (edited("llama-3.1-8b", intermediate_size=...), "missing field 'intermediate_size'"),
        (edited("mixtral-8x7b-v0.1", num_local_experts=...), "missing field 'num_local_experts'"),
        (edited("qwen3-32b", head_dim=...), "missing field 'head_dim'"),
        (edited("qwen3-30b-a3b", moe_intermediate_size=...), "missing field 'moe_intermediate_size'"),
        (edited("qwen2-57b-a14b", shared_expert_intermediate_size=...), "missing field 'shared_expert_intermediate_size'"),
        (edited("deepseek-v3", first_k_dense_replace=...), "missing field 'first_k_dense_replace'"),
        (edited("deepseek-v3", q_lora_rank=...), "missing field 'q_lora_rank'"),
        (edited("deepseek-v2", n_routed_experts=None), "n_routed_experts must be a whole number from 1"),
        (edited("llama-3.1-8b", hidden_size="4096"), "hidden_size must be a whole number from 1"),
        (edited("llama-3.1-8b", tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
        (edited("qwen2-57b-a14b", shared_expert_intermediate_size=5000), "not a multiple of moe_intermediate_size 2560"),
        (edited("llama-3.1-8b", num_attention_heads=30), "hidden_size 4096 is not a multiple of num_attention_heads 30"),
        ([1, 2], "a HuggingFace config is a JSON object, got list"),
        # what the model file's checks refuse, refused under the config's own keys
        (
            edited("llama-3.1-8b", num_key_value_heads=5),
            "num_key_value_heads 5 must divide num_attention_heads 32 (1, 2, 4, 8, 16, 32)",
        ),
        (edited("mixtral-8x7b-v0.1", num_experts_per_tok=9), "num_experts_per_tok 9 exceeds num_local_experts 8"),
        (edited("qwen3-30b-a3b", num_experts_per_tok=200), "num_experts_per_tok 200 exceeds num_experts 128"),
        (edited("llama-3.1-8b", hidden_size=10_000_001), "hidden_size must be a whole number from 1 to 10,000,000"),
        (edited("deepseek-v3", num_nextn_predict_layers=5000), "num_nextn_predict_layers must be a whole number from 0 to 500"),
        # odd values no model has: more groups reached than there are, no MoE layer left
        (edited("deepseek-v3", topk_group=9), "topk_group 9 exceeds n_group 8"),
        (
            edited("qwen3-30b-a3b", mlp_only_layers=list(range(48))),
            "leaves none of its 48 layers an MoE layer; for the dense model it describes give model_type 'qwen3'",
        ),
        (edited("deepseek-v2", first_k_dense_replace=60), "first_k_dense_replace 60 leaves none of its 60 layers an MoE layer"),
        (
            edited("deepseek-v2", first_k_dense_replace=1, moe_layer_freq=200),
            "first_k_dense_replace 1 with moe_layer_freq 200 leaves none of its 60 layers an MoE layer",
        ),
        (edited("qwen3-30b-a3b", mlp_only_layers=[5, "6"]), "mlp_only_layers must be a list of layer numbers"),
        (
            edited("glm-4.5", first_k_dense_replace=200),
            "first_k_dense_replace 200 leaves none of its 92 layers an MoE layer; give first_k_dense_replace below "
            "num_hidden_layers 92 (GLM-4.5 and GLM-4.5-Air: 3 and 1)",
        ),
        (edited("glm-4.5", n_routed_experts="160"), "n_routed_experts must be a whole number from 1"),
        (edited("glm-4.5-air", first_k_dense_replace=1.5), "first_k_dense_replace must be a whole number from 0"),
        (edited("glm-4.5", num_key_value_heads=7), "num_key_value_heads 7 must divide num_attention_heads 96"),
        (edited("glm-4.5", hidden_size=...), "missing field 'hidden_size' (a glm4_moe config has it)"),
        (edited("glm-4.5", head_dim=None), "hidden_size 5120 is not a multiple of num_attention_heads 96; give head_dim"),
    ],
)
def test_bad_configs_are_one_line(config, needle, tmp_path, capsys):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    out = tmp_path / "plan.md"
    code = main(["plan", "--model", str(f), "--cluster", "h100", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert str(f) in err and not out.exists()


def test_supported_families_are_listed_in_the_refusal(tmp_path, capsys):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(edited("llama-3.1-8b", model_type="phi3")))
    assert main(["memory", "--model", str(f), "--pp", "2"]) == 2
    err = capsys.readouterr().err
    families = "llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe, deepseek_v2, deepseek_v3"
    assert f"model_type 'phi3' is not a family pipesim reads; supported: {families}" in err


@pytest.mark.parametrize("text,needle", [("{", "not valid JSON"), ("", "not valid JSON")])
def test_unreadable_configs_are_one_line(text, needle, tmp_path, capsys):
    f = tmp_path / "config.json"
    f.write_text(text)
    assert main(["plan", "--model", str(f), "--cluster", "h100"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_a_folder_without_config_json_is_one_line_naming_it(tmp_path, capsys):
    # a folder is a model only as downloaded weights, which hold config.json
    out = tmp_path / "plan.md"
    assert main(["plan", "--model", str(tmp_path), "--cluster", "h100", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a folder without config.json" in err and str(tmp_path) in err and err.count("\n") == 1
    assert not out.exists()


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    assert main(["plan", "--model", str(tmp_path / "nope.json"), "--cluster", "h100"]) == 2
    err = capsys.readouterr().err
    assert "nope.json" in err and err.count("\n") == 1


HOSTILE = [None, 0, -1, 1.5, 2**70, 1e308, "8", True, [], {}, [1, 2], 10**7, 16_000_001, 9999]
FIELDS = [
    "model_type", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "vocab_size", "intermediate_size", "tie_word_embeddings", "num_local_experts", "num_experts", "num_experts_per_tok",
    "moe_intermediate_size", "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers",
    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts",
    "n_shared_experts", "first_k_dense_replace", "moe_layer_freq", "n_group", "topk_group", "num_nextn_predict_layers",
]  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    name=st.sampled_from([row[0] for row in PUBLISHED] + ["glm-4.5", "glm-4.5-air", "kimi-k2-instruct"]),
    changes=st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from([*HOSTILE, ...])), min_size=1, max_size=3),
)
def test_hostile_configs_end_in_a_plan_or_one_line(name, changes):
    """Any field of a real config deleted or set to a hostile value: pipesim memory
    answers, or refuses in one line having written nothing (the fuzz suite's verdict)."""
    from fuzzing import Case, run_case, verdict

    config = edited(name, **{k: v for k, v in changes if k in json.loads((HF / f"{name}.json").read_text()) or v is not ...})
    c = Case(["memory", "--model", "config.json", "--pp", "2", "--json"], {"config.json": json.dumps(config).encode()})
    with tempfile.TemporaryDirectory(prefix="pipesim-hf-") as d:
        r = run_case(c, Path(d), timeout=30)
    assert verdict(c, r) is None, (changes, r.rc, r.err[:300], r.detail)
    # a refusal names the config's keys, not the model file's fields they become
    assert not [w for w in MODEL_FILE_WORDS if r.rc == 2 and w in r.err], (changes, r.err)


#: words of the model file's refusals (specs.py) that a config.json user never wrote
MODEL_FILE_WORDS = ("kv_heads", "top_k", "[moe]", "[attention]", "[mlp]", "dense_ffn", "expert_ffn", "dense_layers", "mtp_layers")


@pytest.mark.parametrize("missing", [..., None])
def test_absent_or_null_fields_take_the_family_classes_defaults(tmp_path, missing):
    # transformers' LlamaConfig, MistralConfig, Qwen2Config ...: num_key_value_heads None is
    # num_attention_heads ("for backward compatibility"), head_dim None is hidden / heads
    f = tmp_path / "llama-7b.json"
    config = edited("llama-3.1-8b", num_key_value_heads=missing)
    config.pop("head_dim", None)
    f.write_text(json.dumps(config if missing is ... else {**config, "head_dim": None}))
    m = load_model(str(f))
    assert m.attention.kv_heads == m.heads == 32 and m.attention.head_dim == 4096 // 32
    # Qwen3 gives head_dim always (Qwen3-32B: 128, not 5120 / 64); a null one is refused, not guessed
    f.write_text(json.dumps(edited("qwen3-32b", head_dim=None)))
    with pytest.raises(PipesimError, match="head_dim must be a whole number"):
        load_model(str(f))


@pytest.mark.parametrize(
    "name, dropped, window",
    [
        # transformers' MistralConfig.__init__: sliding_window: int | None = 4096
        ("mistral-7b-v0.1", "sliding_window", 4096),
        # Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig: use_sliding_window = False,
        # so the window a config carries does not apply when the flag is absent
        ("qwen2-57b-a14b", "use_sliding_window", 0),
        ("qwen2.5-72b-instruct", "use_sliding_window", 0),
    ],
)
def test_an_absent_window_key_takes_the_family_classes_default(tmp_path, name, dropped, window):
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(edited(name, **{dropped: ...})))
    assert load_model(str(f)).sliding_window == window


@pytest.mark.parametrize("name", ["mistral-7b-v0.1", "mixtral-8x7b-v0.1"])
def test_mistral_families_default_to_eight_key_value_heads(tmp_path, name):
    # transformers' MistralConfig.__init__ and MixtralConfig: num_key_value_heads defaults to
    # 8 ("If it is not specified, will default to `8`"); None becomes num_attention_heads
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(edited(name, num_key_value_heads=...)))
    assert load_model(str(f)).attention.kv_heads == 8
    f.write_text(json.dumps(edited(name, num_key_value_heads=None)))
    assert load_model(str(f)).attention.kv_heads == 32


def test_a_sliding_window_is_read_and_the_report_says_what_is_priced(capsys):
    """Mistral 7B v0.1 attends over 4096 tokens on every layer; the report says so where
    the sequence is longer than the window. Qwen's window applies only with
    use_sliding_window (false in every Qwen config here)."""
    assert load_model(str(HF / "mistral-7b-v0.1.json")).sliding_window == 4096
    assert load_model(str(HF / "qwen2.5-72b-instruct.json")).sliding_window == 0  # 131072 given, not used
    assert load_model(str(HF / "mixtral-8x7b-v0.1.json")).sliding_window == 0  # null
    rows = {}
    for seq in (4096, 8192):
        argv = ["plan", "--model", str(HF / "mistral-7b-v0.1.json"), "--cluster", "h100", "--gpus", "8", "--seq", str(seq)]
        assert main([*argv, "--json"]) == 0
        rows[seq] = json.loads(capsys.readouterr().out)["assumptions"].get("sliding window")
    assert rows[4096] is None
    # a window of half the sequence: (8192 x 4096 - 4096^2 / 2) / (8192^2 / 2) = 3/4 of the square
    assert rows[8192].startswith("all 32 layers of mistral-7b-v0.1 attend over a 4,096-token window (sliding_window)")
    assert "75% of full causal attention's at 8,192 tokens" in rows[8192]


@pytest.mark.parametrize(
    "name, change, windowed",
    [
        # Qwen2Config / Qwen3Config: with use_sliding_window, the layers from max_window_layers on
        ("qwen2.5-72b-instruct", {"use_sliding_window": True}, list(range(70, 80))),
        ("qwen3-32b", {"use_sliding_window": True, "max_window_layers": 60, "sliding_window": 4096}, list(range(60, 64))),
        # Qwen2MoeConfig: the even-numbered layers below max_window_layers (28 of 28 here)
        ("qwen2-57b-a14b", {"use_sliding_window": True}, list(range(0, 28, 2))),
        # a config's own layer_types wins over the rule
        (
            "qwen3-32b",
            {"use_sliding_window": True, "sliding_window": 4096, "layer_types": ["full_attention"] * 63 + ["sliding_attention"]},
            [63],
        ),
        # GptOssConfig without layer_types or sliding_window: alternating from a sliding layer, window 128
        ("gpt-oss-20b", {"layer_types": ..., "sliding_window": ...}, list(range(0, 24, 2))),
        # MistralConfig ignores a layer_types (it warns): every layer
        ("mistral-7b-v0.1", {"layer_types": ["full_attention"] * 32}, list(range(32))),
    ],
)
def test_each_familys_rule_picks_the_windowed_layers(tmp_path, name, change, windowed):
    f = tmp_path / f"{name}.json"
    f.write_text(json.dumps(edited(name, **change)))
    m = load_model(str(f))
    assert [i for i in range(m.layers) if m.window(i)] == windowed
    window = {"qwen2.5-72b-instruct": 131072, "qwen2-57b-a14b": 131072, "gpt-oss-20b": 128}.get(name, 4096)
    assert m.window(windowed[0]) == window


def test_gemma_3_1b_counts_are_the_technical_reports():
    """Gemma 3 technical report (arXiv 2503.19786), Table 1: Gemma 3 1B holds 302M embedding
    and 698M non-embedding parameters (tied: the embedding is the output head too)."""
    m = load_model(str(HF / "gemma-3-1b.json"))
    assert round(embedding_params(m) / 1e6) == 302
    assert round((total_params(m) - embedding_params(m)) / 1e6) == 698
    # Gemma3TextConfig: every sliding_window_pattern-th layer (6: the 6th, 12th, ...) is global,
    # the five before it attend over sliding_window (512 in Gemma 3 1B)
    assert [i for i in range(m.layers) if not m.window(i)] == [5, 11, 17, 23]
    assert {m.window(i) for i in range(m.layers)} == {0, 512}


def test_gemma_3_text_takes_its_classes_defaults(tmp_path):
    # Gemma3TextConfig: num_key_value_heads 4, sliding_window 4096, sliding_window_pattern 6,
    # tie_word_embeddings true when absent
    f = tmp_path / "gemma.json"
    config = edited(
        "gemma-3-1b", num_key_value_heads=..., sliding_window=..., sliding_window_pattern=...
    )  # no tie_word_embeddings given
    f.write_text(json.dumps({**config, "num_attention_heads": 8}))
    m = load_model(str(f))
    assert (m.attention.kv_heads, m.sliding_window, m.tied_embeddings) == (4, 4096, True)
    assert [i for i in range(m.layers) if not m.window(i)] == [5, 11, 17, 23]
    f.write_text(json.dumps({**config, "num_attention_heads": 8, "sliding_window_pattern": 2}))
    assert [i for i in range(26) if not load_model(str(f)).window(i)] == list(range(1, 26, 2))


def test_a_wrapped_text_config_saved_alone_is_read(tmp_path, capsys):
    # what the gemma3 refusal tells the user to do gives the text model itself
    text = edited("gemma-3-1b")
    wrapped, alone = tmp_path / "gemma3.json", tmp_path / "text.json"
    wrapped.write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    alone.write_text(json.dumps(text))
    assert main(["memory", "--model", str(wrapped), "--pp", "2"]) == 2
    assert "save text_config as a config.json of its own" in capsys.readouterr().err
    assert load_model(str(alone)).layers == 26  # Gemma 3 1B's num_hidden_layers


def test_deepseek_routing_groups_take_their_classes_defaults(tmp_path):
    """An absent n_group / topk_group / topk_method reads as the family's class sets it
    (transformers' DeepseekV3Config: n_group 8, topk_group 4, a router that always limits
    the groups; DeepseekV2Config: n_group and topk_group None, topk_method "greedy").
    pipesim read an absent n_group as 1 (refusing V3's topk_group 4) and an absent V2
    topk_method as group-limited."""

    def model(name: str, **changes):
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(edited(name, **changes)))
        return load_model(str(f))

    published = load_model(str(HF / "deepseek-v3.json")).moe
    assert published.max_nodes == 4
    assert model("deepseek-v3", n_group=..., topk_group=..., topk_method=...).moe == published
    assert model("deepseek-v3", n_group=...).moe == published  # topk_group 4 of the default 8
    assert model("deepseek-v2", topk_method=...).moe.max_nodes == 0  # greedy: no group limit
    assert model("deepseek-v2", n_group=..., topk_group=...).moe.max_nodes == 0


def test_an_absent_field_takes_its_class_default_and_a_null_window_is_none(tmp_path):
    """transformers fills an absent key with the class's default and keeps a null:
    MistralConfig's sliding_window null attends over the whole sequence (Mistral 7B v0.2
    and v0.3 configs), which pipesim priced as its 4096 default; an absent
    num_key_value_heads is Qwen2Config's and Qwen3Config's 32, Qwen3MoeConfig's 4 and
    GptOssConfig's 8, which pipesim read as every head (multi-head); and Qwen's window
    with use_sliding_window and no sliding_window is the classes' 4096, which it dropped."""

    def model(name: str, **changes):
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(edited(name, **changes)))
        return load_model(str(f))

    assert model("mistral-7b-v0.1").sliding_window == 4096
    assert model("mistral-7b-v0.1", sliding_window=None).sliding_window == 0
    assert model("mistral-7b-v0.1", sliding_window=...).sliding_window == 4096
    assert model("gpt-oss-20b", sliding_window=None).sliding_window == 0
    assert model("qwen3-32b", num_key_value_heads=...).attention.kv_heads == 32
    assert model("qwen3-30b-a3b", num_key_value_heads=...).attention.kv_heads == 4
    assert model("gpt-oss-20b", num_key_value_heads=...).attention.kv_heads == 8
    assert model("llama-3.1-8b", num_key_value_heads=...).attention.kv_heads == 32  # LlamaConfig: None, every head
    windowed = model("qwen3-32b", use_sliding_window=True, sliding_window=..., max_window_layers=32)
    assert windowed.sliding_window == 4096 and windowed.layer_types.count("sliding_attention") == 32  # layers 32-63


def test_an_absent_glm_field_takes_glm4moeconfigs_default(tmp_path):
    """transformers' Glm4MoeConfig: first_k_dense_replace 1, n_shared_experts 1, n_group 1,
    topk_group 1, num_key_value_heads 8, and no num_nextn_predict_layers (no MTP module).
    head_dim absent is hidden / heads (Glm4MoeAttention's getattr), which GLM-4.5's 5120 /
    96 is not: refused, asking for head_dim (the bad-config cases)."""
    f = tmp_path / "glm.json"
    keys = (
        "first_k_dense_replace",
        "n_shared_experts",
        "n_group",
        "topk_group",
        "num_key_value_heads",
        "num_nextn_predict_layers",
    )
    f.write_text(json.dumps(edited("glm-4.5", **dict.fromkeys(keys, ...))))
    m = load_model(str(f))
    assert (m.moe_layers[0], m.moe.shared_experts, m.moe.max_nodes, m.attention.kv_heads, m.mtp_layers) == (1, 1, 0, 8, 0)
    # DeepSeek's configs give first_k_dense_replace: refused by name, not defaulted
    f.write_text(json.dumps(edited("deepseek-v3", n_shared_experts=...)))
    with pytest.raises(PipesimError, match="missing field 'n_shared_experts'"):
        load_model(str(f))
