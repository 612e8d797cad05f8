"""What a recipe sets beyond the layout, so that the framework runs what the plan priced:
the multiplies' precision, dropout and CUDA graphs in Megatron-LM's flags. Each expected
name is read from the framework's source at the commit cited beside it; results are made
by hand, as in test_recipe.py."""

from __future__ import annotations

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training


def plan_of(model: str, layout: Layout, gpus: int, schedule: str = "1f1b", **training) -> Plan:
    plan = Plan(load_model(model), load_cluster("h100", gpus), load_training(seq=4096, global_batch=1024, **training))
    plan.results.append(Result(Candidate(layout, schedule, None, "full", 64), True, step_time=1.0))
    return plan


# Megatron-LM at d98e8a6 (2026-08-22), megatron/core/transformer/transformer_config.py:
# fp8 (argparse name "--fp8-format": Literal['e4m3', 'hybrid']), fp8_recipe (Literal
# 'tensorwise', 'delayed', 'mxfp8', 'blockwise', 'custom', default "delayed"), and
# megatron/core/model_parallel_config.py ``bf16: bool = False`` (fp32 without --bf16);
# megatron/core/transformer/moe/README.md: "--fp8-format e4m3 --fp8-recipe blockwise"
@pytest.mark.parametrize(
    "precision, scaling, expected",
    [
        ("bf16", "block", ["--bf16"]),
        ("fp8", "block", ["--bf16", "--fp8-format e4m3", "--fp8-recipe blockwise"]),
        ("fp8", "tensor", ["--bf16", "--fp8-format hybrid", "--fp8-recipe tensorwise"]),
    ],
)
def test_megatron_runs_the_precision_the_plan_priced(precision, scaling, expected):
    plan = plan_of("llama3-70b", Layout(pp=4, dp=2, tp=8), 64, precision=precision, fp8_scaling=scaling)
    flags = recipe(plan)["megatron"]["flags"]
    assert [f for f in flags if f == "--bf16" or f.startswith("--fp8-")] == expected


@pytest.mark.parametrize("dropout", [False, True])
def test_megatron_drops_out_only_where_the_plan_priced_it(dropout):
    # TransformerConfig at d98e8a6: hidden_dropout = 0.1 and attention_dropout = 0.1 by default
    plan = plan_of("llama3-8b", Layout(pp=2, dp=4, tp=2), 16, hidden_dropout=dropout)
    flags = recipe(plan)["megatron"]["flags"]
    off = {"--attention-dropout 0.0", "--hidden-dropout 0.0"}
    assert (off <= set(flags)) == (not dropout) and not (off & set(flags) and dropout)


@pytest.mark.parametrize("model, graphed", [("llama3-8b", True), ("mixtral-8x22b", False)])
def test_megatron_captures_cuda_graphs_where_the_plan_priced_them(model, graphed):
    # TransformerConfig at d98e8a6: cuda_graph_impl Literal 'none', 'local',
    # 'transformer_engine', 'full_iteration', default "none"; cuda_graph_modules "full"
    plan = plan_of(model, Layout(pp=2, dp=4, tp=2, ep=1), 16, cuda_graphs=True)
    mg = recipe(plan)["megatron"]
    assert ("--cuda-graph-impl transformer_engine" in mg["flags"]) == graphed
    assert graphed or any("--cuda-graph-modules attn moe" in n for n in mg["notes"])
    plan = plan_of(model, Layout(pp=2, dp=4, tp=2, ep=1), 16, cuda_graphs=False)
    assert not any(f.startswith("--cuda-graph") for f in recipe(plan)["megatron"]["flags"])
