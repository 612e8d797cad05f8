"""What torchtitan's configuration function says of a model torchtitan has no configuration
for, read from pytorch/torchtitan: at b5bcd76 (2026-08-21) torchtitan/models/ holds no
llama4 (#3573, d92336f, 2026-06-08, deleted models/llama4 and its 17bx16e and 17bx128e
flavours), and models/deepseek_v3/__init__.py's deepseekv3_configs holds "16B", "236B" and
"671B" alone (27 layers of 2048, 60 of 5120, 61 of 7168: DeepSeek-V2-Lite, V2, V3)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training

HF = Path(__file__).parent / "data" / "hf"


def base_comment(config: str) -> str:
    m = load_model(str(HF / f"{config}.json"))
    plan = Plan(m, load_cluster("h100", 256), load_training(seq=4096, global_batch=1024))
    lay = Layout(pp=4, dp=16, tp=4, ep=16)
    plan.results.append(Result(Candidate(lay, "1f1b", None, "full", 64), True, step_time=1.0))
    code = recipe(plan)["torchtitan"]["python"]
    ast.parse(code)
    return next(x for x in code.splitlines() if "your_configs.your_base_config" in x)


@pytest.mark.parametrize("config", ["llama-4-scout", "llama-4-maverick"])
def test_a_llama4_recipe_says_torchtitan_no_longer_has_the_model(config):
    # before: "yours to write, ... (its model_spec, data, optimizer)", as though a Llama 4
    # model spec were torchtitan's to pick
    line = base_comment(config)
    assert "#3573" in line and "Llama 4" in line and "model spec is yours" in line


def test_kimi_k2_recipe_names_the_deepseek_v3_flavours_torchtitan_has():
    line = base_comment("kimi-k2-instruct")
    assert 'deepseek_v3.model_registry builds MLA and MoE layers in the flavours "16B", "236B" and "671B" alone' in line


def test_glm_recipe_claims_no_torchtitan_model():
    # GLM-4.5 is GQA with experts: neither torchtitan's deepseek_v3 flavours nor its removed Llama 4
    line = base_comment("glm-4.5-air")
    assert line.endswith("(its model_spec, data, optimizer)")
