"""A model whose MoE layers are interleaved with dense ones, as Megatron-LM's
``--moe-layer-freq`` says them (NVIDIA/Megatron-LM at d98e8a6, megatron/core/models/gpt/
gpt_layer_specs.py get_gpt_decoder_layer_specs: an integer N makes layer i, from 0, an MoE
layer when i % N == 0; a list holds one 1 (MoE) or 0 (dense) a layer, as long as the
layers), read from a model file's ``[mlp]`` table and priced layer by layer."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.moe_layers import megatron_moe_layer_freq
from pipesim.planner.params import published_active_params, total_params
from pipesim.planner.specs import load_model

TOY = """\
name = "toy-alt"
layers = 8
hidden = 1024
heads = 8
vocab = 32000

[mlp]
{pattern}
dense_ffn = 4096

[moe]
experts = 8
expert_ffn = 2048
top_k = 2
"""


def toy(tmp_path, pattern: str = "moe_layer_freq = 2", name: str = "toy.toml"):
    path = tmp_path / name
    path.write_text(TOY.format(pattern=pattern))
    return path


def test_megatron_frequency_two_puts_experts_on_the_even_layers(tmp_path):
    m = load_model(str(toy(tmp_path)))
    assert [m.is_moe_layer(i) for i in range(8)] == [i % 2 == 0 for i in range(8)]
    listed = load_model(str(toy(tmp_path, "moe_layer_freq = [0, 1, 0, 1, 0, 1, 0, 1]")))
    assert [listed.is_moe_layer(i) for i in range(8)] == [False, True] * 4
    prefix = load_model(str(toy(tmp_path, "dense_layers = 3")))
    assert [prefix.is_moe_layer(i) for i in range(8)] == [False] * 3 + [True] * 5
    every = load_model(str(toy(tmp_path, "")))  # Megatron's default moe_layer_freq 1
    assert all(every.is_moe_layer(i) for i in range(8))
    assert [load_model("deepseek-v3").is_moe_layer(i) for i in (0, 2, 3, 60)] == [False, False, True, True]


def test_the_alternating_toy_counts_by_hand(tmp_path):
    """Hidden 1024, 8 heads of 128 (as many key/value heads), SwiGLU, untied embeddings,
    vocabulary 32,000; layers 0, 2, 4, 6 MoE (8 experts of 2048, top-2, a router of
    hidden x experts), layers 1, 3, 5, 7 dense (4096 wide). Megatron-Core's and
    transformers' layers hold q, k, v, o (4 x 1024^2 = 4,194,304), two RMSNorms (2 x 1024)
    and the MLP: SwiGLU's gate, up and down (3 x hidden x width).

    dense layer: 4,194,304 + 2,048 + 3 x 1024 x 4096 (12,582,912) = 16,779,264
    MoE layer: 4,194,304 + 2,048 + 1024 x 8 (8,192) + 8 x 3 x 1024 x 2048 (50,331,648) = 54,536,192
    total: 4 x 16,779,264 + 4 x 54,536,192 + 2 x 32,000 x 1024 (65,536,000) + a final norm
    (1,024) = 350,798,848

    Active (the multiplies a token passes through, norms left out, the embedding counted as
    Mistral and Qwen count it): dense 4,194,304 + 12,582,912 = 16,777,216; MoE 4,194,304 +
    8,192 + 2 x 6,291,456 = 16,785,408; 4 x (16,777,216 + 16,785,408) + 65,536,000 = 199,786,496.

    Four MoE layers anywhere give these counts; the list [0, 1, ...] and dense_layers = 4
    hold four too."""
    for pattern in ("moe_layer_freq = 2", "moe_layer_freq = [0, 1, 0, 1, 0, 1, 0, 1]", "dense_layers = 4"):
        m = load_model(str(toy(tmp_path, pattern)))
        assert (total_params(m), published_active_params(m)) == (350_798_848, 199_786_496), pattern
    three = load_model(str(toy(tmp_path, "moe_layer_freq = 3")))  # layers 0, 3, 6: one MoE layer fewer
    assert total_params(three) == 350_798_848 - (54_536_192 - 16_779_264)


def _stage_ms(text: str) -> dict[int, float]:
    """The plan's stage table: stage -> ms per micro-batch."""
    rows = re.findall(r"^\| (\d+) \| [\d, ]+ \| [\d-]+ \| [^|]+ \| ([\d.]+) \|$", text, re.M)
    return {int(s): float(ms) for s, ms in rows}


def test_plan_prices_the_moe_stages_heavier_where_the_pattern_puts_them(tmp_path, capsys):
    """pp8 puts one layer on each stage: stages 0, 2, 4, 6 hold the MoE layers (layer i %
    2 == 0), with 4x the dense MLP's multiply work a token (top-2 of 2048 against 4096, but
    the experts' all-to-all and routing besides). The middle stages (no embedding, no head)
    must read MoE heavier than their dense neighbours, and the memory command must hold
    more parameters on the MoE stages' ranks (8 experts of 6.3M against a 12.6M MLP)."""
    path = toy(tmp_path)
    assert main(["plan", "--model", str(path), "--cluster", "h100", "--gpus", "16"]) == 0
    out = capsys.readouterr().out
    assert "8 layers (4 MoE, every 2nd layer from layer 0)" in out
    assert main(["plan", "--model", str(path), "--cluster", "h100", "--gpus", "16", "--pp", "8"]) == 0
    ms = _stage_ms(capsys.readouterr().out)
    assert sorted(ms) == list(range(8))
    assert min(ms[2], ms[4], ms[6]) > max(ms[1], ms[3], ms[5])
    argv = ["memory", "--model", str(path), "--cluster", "h100", "--gpus", "16", "--pp", "8", "--schedule", "1f1b"]
    assert main([*argv, "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["schedules"][0]["static_per_rank_gb"]
    assert min(ranks[2], ranks[4], ranks[6]) > max(ranks[1], ranks[3], ranks[5])


def test_megatron_flag_evaluates_back_to_the_pattern():
    """The flag's list expression, evaluated as Megatron's _eval_pattern does (eval of
    digits, brackets, + and *), gives the pattern back."""
    cases = {
        (tuple(range(3, 61)), 61): [0] * 3 + [1] * 58,  # DeepSeek-V3
        ((1, 3, 5, 7), 8): [0, 1] * 4,  # Llama 4 Maverick's interleaving, shrunk
        ((0, 1, 2, 4, 5, 6), 8): [1, 1, 1, 0] * 2,
        ((0, 1, 2), 8): [1, 1, 1, 0, 0, 0, 0, 0],
    }
    for (moe, layers), want in cases.items():
        flag = megatron_moe_layer_freq(moe, layers)
        assert re.fullmatch(r'"[\d\[\]()+*]+"', flag), flag
        assert eval(flag.strip('"')) == want
    assert megatron_moe_layer_freq((0, 2, 4, 6), 8) == "2"
    assert megatron_moe_layer_freq(tuple(range(8)), 8) == ""


@pytest.mark.parametrize(
    "pattern, words",
    [
        ("moe_layer_freq = [0, 1, 0]", "a list of 8 entries (one a layer), each 1 (MoE) or 0 (dense); got 3 entries"),
        ("moe_layer_freq = [0, 1, 0, 1, 0, 1, 0, 2]", "got entry 2"),
        ("moe_layer_freq = [0, 1, 0, 1, 0, 1, 0, true]", "got entry true"),
        ("moe_layer_freq = [0, 0, 0, 0, 0, 0, 0, 0]", "moe_layer_freq has no 1, so no layer is an MoE layer"),
        ("moe_layer_freq = 0", "moe_layer_freq must be an integer from 1 to 8 (layer i is MoE when i % N == 0)"),
        ("moe_layer_freq = 9", "got 9"),
        ('moe_layer_freq = "2"', "got '2'"),
        ("moe_layer_freq = true", "got true"),
        ("moe_layer_freq = 2\ndense_layers = 1", "give dense_layers or moe_layer_freq, not both"),
        ("dense_layers = 8", "dense_layers 8 leaves none of the 8 layers an MoE layer"),
        ("dense_layers = 9", "dense_layers must be"),
    ],
)
def test_a_bad_pattern_is_one_line_naming_the_key(tmp_path, capsys, pattern, words):
    path = toy(tmp_path, pattern)
    assert main(["plan", "--model", str(path), "--cluster", "h100", "--gpus", "16"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "toy.toml [mlp]" in err and words in err, err


def test_moe_layers_without_experts_are_refused(tmp_path, capsys):
    path = tmp_path / "dense.toml"
    path.write_text(TOY.format(pattern="moe_layer_freq = 2").split("[moe]")[0])
    assert main(["plan", "--model", str(path), "--cluster", "h100", "--gpus", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "moe_layer_freq names MoE layers but the model has no [moe] table" in err


HF = Path(__file__).parent / "data" / "hf"


def config_file(tmp_path, name: str, **changes) -> str:
    config = {**json.loads((HF / f"{name}.json").read_text()), **changes}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_qwen_moe_interleaves_as_its_decoder_layer_builds_them(tmp_path):
    """Qwen3MoeDecoderLayer (transformers' modeling_qwen3_moe.py) makes layer i an MoE layer
    when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0: step 2 puts
    experts on layers 1, 3, ..., 47 and a dense MLP of intermediate_size (6144) on the
    others. Qwen3-30B-A3B's config: hidden 2048, 128 experts of 768. Each layer made dense
    trades 128 x 3 x 2048 x 768 (603,979,776) expert weights and a 2048 x 128 router
    (262,144) for 3 x 2048 x 6144 (37,748,736): 566,493,184 fewer a layer, 24 layers
    13,595,836,416."""
    every = load_model(str(HF / "qwen3-30b-a3b.json"))
    half = load_model(config_file(tmp_path, "qwen3-30b-a3b", decoder_sparse_step=2))
    assert [half.is_moe_layer(i) for i in range(48)] == [False, True] * 24
    assert half.dense_ffn == 6144
    assert total_params(every) - total_params(half) == 24 * 566_493_184
    one = load_model(config_file(tmp_path, "qwen3-30b-a3b", mlp_only_layers=[5]))
    assert [i for i in range(48) if not one.is_moe_layer(i)] == [5]


def test_deepseek_moe_layer_freq_as_deepseek_and_vllm_build_it(tmp_path):
    """DeepSeek's modeling code and vLLM's DeepseekV2DecoderLayer: layer i is MoE when i >=
    first_k_dense_replace and i % moe_layer_freq == 0. DeepSeek-V2 (60 layers, first 1)
    with moe_layer_freq 2: layers 2, 4, ..., 58, 29 of them."""
    m = load_model(config_file(tmp_path, "deepseek-v2", moe_layer_freq=2))
    assert m.moe_layers == tuple(range(2, 60, 2))
    flag = megatron_moe_layer_freq(m.moe_layers, m.layers)  # Megatron's list, evaluated as _eval_pattern does
    assert eval(flag.strip('"')) == [int(i >= 2 and i % 2 == 0) for i in range(60)]


def test_the_plan_json_lists_the_moe_layers(tmp_path, capsys):
    # Llama 4 Maverick: experts on every other layer from layer 1 (interleave_moe_layer_step 2,
    # transformers' Llama4TextConfig), so 24 of 48: 1, 3, ..., 47; the text said it in words only
    import json

    from pipesim.cli import main

    argv = ["plan", "--model", "tests/data/hf/llama-4-maverick.json", "--cluster", "h100", "--gpus", "256", "--json"]
    assert main([*argv, "--pp", "2", "--tp", "4", "--schedules", "1f1b"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layers"] == 48 and d["moe_layers"] == list(range(1, 48, 2))
