"""The recipe of a model whose attention is not plain causal: a sliding window on some layers
and gpt-oss's attention sinks, as Megatron-LM must be told of them and as far as torchtitan
runs them. Results are made by hand, as in test_recipe.py."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training

HF = Path(__file__).parent / "data" / "hf"

# Megatron-LM at d98e8a6 (2026-08-22), megatron/training/arguments.py: --window-size
# (tuple_type: "127,0" -> (127, 0)) and --window-attn-skip-freq (moe_freq_type: an int, or a
# list expression) added by hand; --softmax-type built from TransformerConfig.softmax_type
# (Literal 'vanilla', 'off-by-one', 'learnable') by its ArgumentGroupFactory
WINDOW_FLAGS = {"--window-size", "--window-attn-skip-freq", "--softmax-type"}


def plan_of(model, layout: Layout, schedule: str = "1f1b", chunks=None, gpus: int = 64, **training) -> Plan:
    plan = Plan(model, load_cluster("h100", gpus), load_training(seq=4096, global_batch=1024, **training))
    plan.results.append(Result(Candidate(layout, schedule, chunks, "none", 128), True, step_time=1.0))
    return plan


def config(name: str) -> dict:
    return json.loads((HF / f"{name}.json").read_text())


def megatron_windowed(flags: list[str], layers: int) -> list[bool]:
    """Which layers Megatron-Core runs windowed under these flags: is_layer_window_attention
    (core/transformer/utils.py at d98e8a6, layer numbers from 1): every layer without
    --window-attn-skip-freq; with an int N all but the multiples of N; with a list, its
    entries."""
    values = {f.split(" ", 1)[0]: f.split(" ", 1)[1] for f in flags if " " in f}
    if "--window-size" not in values:
        return [False] * layers
    freq = values.get("--window-attn-skip-freq")
    if freq is None:
        return [True] * layers
    pattern = ast.literal_eval(freq.strip('"'))
    if isinstance(pattern, int):
        return [n % pattern != 0 for n in range(1, layers + 1)]
    return [bool(x) for x in pattern]


def test_megatron_flags_carry_gpt_oss_window_and_sinks():
    """gpt-oss-120b's config.json: sliding_window 128 on the layers layer_types names
    "sliding_attention". transformers' mask keeps key j for query i when i - 128 < j <= i,
    128 keys; Transformer Engine's window (left, right) keeps i - left .. i + right inclusive
    (dot_product_attention.py at d0067d0da), so left is 127. Its sinks are Megatron-Core's
    softmax_type "learnable" (Megatron-Bridge's GPTOSSProvider sets it)."""
    m = load_model(str(HF / "gpt-oss-120b.json"))
    mg = recipe(plan_of(m, Layout(pp=8, dp=8, ep=8)))["megatron"]
    assert mg["runs"]
    flags = mg["flags"]
    assert "--window-size 127,0" in flags
    assert "--window-attn-skip-freq 2" in flags
    assert "--softmax-type learnable" in flags
    assert {f.split()[0] for f in flags} & {f.split()[0] for f in WINDOW_FLAGS} == WINDOW_FLAGS
    types = config("gpt-oss-120b")["layer_types"]
    assert megatron_windowed(flags, m.layers) == [t == "sliding_attention" for t in types]
    assert any("cuDNN 9.13.1" in note for note in mg["notes"])


def test_megatron_flags_for_gemma_3s_five_local_layers_to_one_global():
    """Gemma3TextConfig: sliding_window 512 (gemma-3-1b's config.json), every layer windowed
    but each sliding_window_pattern-th (6), counting from 1: Megatron's skip frequency 6. No
    sinks, so no --softmax-type."""
    m = load_model(str(HF / "gemma-3-1b.json"))
    flags = recipe(plan_of(m, Layout(pp=2, dp=4), gpus=8))["megatron"]["flags"]
    assert "--window-size 511,0" in flags and "--window-attn-skip-freq 6" in flags
    assert not any(f.startswith("--softmax-type") for f in flags)
    assert megatron_windowed(flags, m.layers) == [(n + 1) % 6 != 0 for n in range(m.layers)]


def test_megatron_flags_for_a_window_pattern_no_frequency_gives_are_the_list():
    m = load_model(str(HF / "gpt-oss-20b.json"))
    types = ("sliding_attention",) * 20 + ("full_attention",) * 4
    m = replace(m, layer_types=types)
    flags = recipe(plan_of(m, Layout(pp=8, dp=8, ep=8)))["megatron"]["flags"]
    (freq,) = [f for f in flags if f.startswith("--window-attn-skip-freq")]
    assert freq == '--window-attn-skip-freq "[' + ",".join(["1"] * 20 + ["0"] * 4) + ']"'
    assert megatron_windowed(flags, m.layers) == [t == "sliding_attention" for t in types]


def test_megatron_flags_without_a_window_say_nothing_of_one():
    flags = recipe(plan_of(load_model("llama3-70b"), Layout(pp=8, dp=1, tp=8)))["megatron"]["flags"]
    assert not {f.split()[0] for f in flags} & WINDOW_FLAGS


@pytest.mark.parametrize("name, base", [("gpt-oss-120b", "gpt_oss_120b"), ("gpt-oss-20b", "gpt_oss_20b")])
def test_gpt_oss_starts_from_torchtitans_own_configuration(name, base):
    """torchtitan at b5bcd76 has gpt-oss's two flavours (models/gpt_oss/__init__.py _120b and
    _20b: 36 and 24 layers of 2880, 128 and 32 experts top 4, vocabulary 201,088, a sink a
    head, a 128-token window on the even layers) and a configuration function for each
    (models/gpt_oss/config_registry.py gpt_oss_120b, gpt_oss_20b)."""
    m = load_model(str(HF / f"{name}.json"))
    tt = recipe(plan_of(m, Layout(pp=1, dp=64, ep=8)))["torchtitan"]
    code = tt["python"]
    ast.parse(code)
    assert f"from torchtitan.models.gpt_oss.config_registry import {base}" in code
    assert "your_configs" not in code
    # another window pattern is not torchtitan's gpt-oss
    other = replace(m, layer_types=("sliding_attention",) * m.layers)
    assert "your_configs" in recipe(plan_of(other, Layout(pp=1, dp=64, ep=8)))["torchtitan"]["python"]


def test_torchtitan_runs_gpt_oss_without_context_parallelism_and_says_its_pipeline_is_untried():
    """torchtitan/models/gpt_oss/README.md at b5bcd76: "TODO: More parallelism support: CP,
    PP"; models/common/decoder.py raises NotImplementedError for CP with VarlenAttention,
    gpt-oss's default attention backend. Its ModelSpec passes pipeline_llm, so a pipeline
    is set, with a note."""
    m = load_model(str(HF / "gpt-oss-120b.json"))
    cp = recipe(plan_of(m, Layout(pp=4, dp=8, cp=2, ep=8), cp_comm="a2a"))["torchtitan"]
    assert not cp["runs"] and "no context parallelism" in cp["why"]
    pp = recipe(plan_of(m, Layout(pp=8, dp=8, ep=8)))["torchtitan"]
    assert pp["runs"] and any("lists pipeline parallelism as to do" in n for n in pp["notes"])
    flat = recipe(plan_of(m, Layout(pp=1, dp=64, ep=8)))["torchtitan"]
    assert not any("pipeline parallelism as to do" in n for n in flat["notes"])


def test_megatron_flags_say_the_window_the_run_priced():
    """Megatron-Bridge's GPT-OSS provider hands gpt-oss's 128 to Transformer Engine as
    window_size (128, 0): TE keeps keys i - 128 .. i, 129 (dot_product_attention.py's
    window_size docstring at v2.9). Priced so (sliding_window_as_te_left), the flag is what
    Bridge passes."""
    m = load_model(str(HF / "gpt-oss-120b.json"))
    flags = recipe(plan_of(m, Layout(pp=8, dp=8, ep=8), sliding_window_as_te_left=True))["megatron"]["flags"]
    assert "--window-size 128,0" in flags
