"""How a torchtitan recipe splits the data-parallel and context-parallel ranks: the load
balancer its attention takes under context parallelism, and FSDP over the context ranks.
Each expected value is read from pytorch/torchtitan at b5bcd76 (2026-08-21) at the file
cited beside it; results are made by hand, as in test_recipe.py."""

from __future__ import annotations

import tomllib

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.parallelism import cp_text
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training


def plan_of(model: str, layout: Layout, gpus: int, **training) -> Plan:
    plan = Plan(load_model(model), load_cluster("h100", gpus), load_training(seq=65536, global_batch=64, **training))
    plan.results.append(Result(Candidate(layout, "1f1b", None, "full", 8), True, step_time=1.0))
    return plan


# torchtitan b5bcd76: torchtitan/config/configs.py ParallelismConfig.context_parallel_load_balancer
# documents "headtail" (the default) as HeadTailLoadBalancer "for SDPA" and "ptrr" as
# PTRRLoadBalancer "for FlexAttention"; torchtitan/models/common/decoder.py
# Decoder.Config.update_from_config raises NotImplementedError for CP with SDPA or varlen
# attention ("Use FlexAttention or disable CP"); torchtitan/models/llama3/__init__.py and
# deepseek_v3/__init__.py model_registry(..., attn_backend="flex"), and deepseek_v3's
# config_registry.py passes attn_backend="flex"; so every base that runs CP runs flex
@pytest.mark.parametrize(
    "model, layout, gpus",
    [
        ("llama3-8b", Layout(pp=1, dp=2, tp=2, cp=4), 16),
        ("llama3-405b", Layout(pp=16, dp=8, tp=8, cp=16), 16384),
        ("deepseek-v3", Layout(pp=8, dp=16, tp=1, cp=2, ep=8), 256),
    ],
)
def test_torchtitan_balances_context_parallelism_for_flex_attention(model, layout, gpus):
    plan = plan_of(model, layout, gpus, cp_comm="all_gather")
    tt = recipe(plan)["torchtitan"]
    assert tt["parallelism"]["context_parallel_load_balancer"] == "ptrr"
    assert "        context_parallel_load_balancer='ptrr'," in tt["python"].splitlines()
    assert "--parallelism.context_parallel_load_balancer ptrr" in tt["command_line"]
    # the report's assumption line names the same setting
    line = cp_text(plan.model, plan.cluster, plan.training, layout)
    assert 'context_parallel_load_balancer = "ptrr"' in line and "headtail" not in line


# torchtitan b5bcd76: torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh ("fsdp:
# ... This includes dp_shard and cp ... we always assume that when cp is used, FSDP is also
# applied"), fsdp_enabled = dp_shard_enabled or cp_enabled; torchtitan/distributed/fsdp.py
# resolve_fsdp_mesh appends "cp" to the shard axes when cp is on; models/llama3/parallelize.py
# always runs apply_fsdp_to_decoder over that mesh. pipesim's ZeRO-0 shards nothing.
@pytest.mark.parametrize(
    "zero, cp, said",
    [
        (0, 4, "the plan's ZeRO-0 runs as FSDP over cp4, replicated over dp2"),
        (0, 1, None),  # no context ranks: replicated data parallelism, as priced
        (1, 4, "torchtitan shards over data and context parallelism (dp2 x cp4) with FSDP (ZeRO-3)"),
        (1, 1, "torchtitan shards over data parallelism with FSDP (ZeRO-3)"),
        (3, 4, None),  # ZeRO-3 over cp x dp: what pipesim prices
    ],
)
def test_torchtitan_says_fsdp_shards_over_the_context_ranks(zero, cp, said):
    plan = plan_of("llama3-8b", Layout(pp=1, dp=2, tp=8 // cp, cp=cp), 16, zero=zero, cp_comm="all_gather")
    tt = recipe(plan)["torchtitan"]
    sharding = [n for n in tt["notes"] if "FSDP" in n]
    assert sharding == ([] if said is None else [sharding[0]])
    assert said is None or said in sharding[0]
    # the settings stay the plan's: replicated dp for ZeRO-0 (torchtitan adds cp itself)
    par = tomllib.loads(tt["toml"])["parallelism"]
    assert par["data_parallel_shard_degree"] == (1 if zero == 0 else 2)
    assert par.get("data_parallel_replicate_degree") == (2 if zero == 0 else None)


# torchtitan at b5bcd76, torchtitan/config/configs.py: TrainingConfig.mixed_precision_reduce:
# Literal["float32"] = "float32" ("torch dtype to use for reductions when applying mixed
# precision via FSDP"), the only value it takes
@pytest.mark.parametrize("reduce_bytes, dp, said", [(2, 8, True), (4, 8, False), (2, 1, False)])
def test_torchtitan_says_it_reduces_gradients_in_fp32(reduce_bytes, dp, said):
    m, c = load_model("llama3-8b"), load_cluster("h100", 2 * dp)
    plan = Plan(m, c, load_training(seq=4096, global_batch=256, grad_reduce_bytes=reduce_bytes))
    plan.results.append(Result(Candidate(Layout(pp=2, dp=dp), "1f1b", None, "full", 8), True, step_time=1.0))
    notes = [n for n in recipe(plan)["torchtitan"]["notes"] if "mixed_precision_reduce" in n]
    assert len(notes) == said
