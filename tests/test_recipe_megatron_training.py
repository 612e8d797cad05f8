"""Megatron-LM flags for the training settings a plan priced beyond its layout: the data
parallel reduction's overlap and dtype, the optimizer's state bytes, recomputation that
Megatron has no setting for, sequence parallelism and unfused attention. Each expected
flag is read from NVIDIA/Megatron-LM at d98e8a6 (2026-08-22), at the file cited beside it;
results are made by hand, as in test_recipe.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training


def megatron_of(recompute: str = "selective", layout: Layout | None = None, model: str = "llama3-8b", **training) -> dict:
    plan = Plan(load_model(model), load_cluster("h100", 16), load_training(seq=4096, global_batch=256, **training))
    lay = layout or Layout(pp=2, dp=4, tp=2)
    plan.results.append(Result(Candidate(lay, "1f1b", None, recompute, 64), True, step_time=1.0))
    return recipe(plan)["megatron"]


# megatron/core/distributed/distributed_data_parallel_config.py: overlap_grad_reduce and
# overlap_param_gather default False (the reduction then waits for the whole backward);
# megatron/training/arguments.py validate_args: "--overlap-param-gather only supported with
# distributed optimizer ..." and "Must use --overlap-param-gather with --overlap-grad-reduce"
@pytest.mark.parametrize(
    "zero, dp_overlap, expected",
    [
        (1, 0.84, ["--overlap-grad-reduce", "--overlap-param-gather"]),
        (2, 0.84, ["--overlap-grad-reduce", "--overlap-param-gather"]),
        (0, 0.84, ["--overlap-grad-reduce"]),  # DDP's all-reduce overlaps; no gather to overlap
        (1, 0.0, []),  # priced after the whole backward (dp_overlap 0)
        (3, 0.84, []),  # Megatron-FSDP: its own schedule, not DDP's buckets
    ],
)
def test_megatron_overlaps_the_gradient_reduction_the_plan_overlapped(zero, dp_overlap, expected):
    flags = megatron_of(zero=zero, dp_overlap=dp_overlap)["flags"]
    assert [f for f in flags if f.startswith("--overlap-") and "moe" not in f] == expected


def test_megatron_averages_in_the_collective_where_the_plan_did():
    # arguments.py: --ddp-average-in-collective (store_true, default False)
    assert "--ddp-average-in-collective" in megatron_of(average_in_collective=True)["flags"]
    assert "--ddp-average-in-collective" not in megatron_of()["flags"]


# megatron/training/arguments.py validate_args under args.bf16: unless --grad-reduce-in-bf16,
# accumulate_allreduce_grads_in_fp32 = True (main_grads_dtype fp32, the default);
# megatron/core/distributed/param_and_grad_buffer.py group_params_for_buffers: the buffer's
# grad_dtype is torch.float if grad_reduce_in_fp32 else param.dtype (held and reduced alike)
@pytest.mark.parametrize(
    "grad_bytes, reduce_bytes, flag, noted",
    [(4, 4, False, False), (2, 2, True, False), (4, 2, False, True)],
)
def test_megatron_reduces_gradients_in_the_dtype_the_plan_priced(grad_bytes, reduce_bytes, flag, noted):
    mg = megatron_of(grad_bytes=grad_bytes, grad_reduce_bytes=reduce_bytes)
    assert ("--grad-reduce-in-bf16" in mg["flags"]) == flag
    said = [n for n in mg["notes"] if "grad_reduce_bytes" in n]
    assert len(said) == noted and (not noted or "twice the bytes" in said[0])


# megatron/core/optimizer/optimizer_config.py: exp_avg_dtype and exp_avg_sq_dtype fp32 unless
# use_precision_aware_optimizer (asserted); arguments.py --exp-avg-dtype choices fp32, fp16,
# bf16, fp8. DeepSeek-V3 keeps bf16 moments beside fp32 master weights (arXiv 2412.19437,
# section 3.3.3): the preset's optimizer_bytes = 8
def test_bf16_moments_use_the_precision_aware_optimizer():
    mg = megatron_of(model="deepseek-v3", layout=Layout(pp=2, dp=8, tp=1, ep=8), optimizer_bytes=8)
    assert {"--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"} <= set(mg["flags"])
    assert not any(f.startswith("--exp-avg") for f in megatron_of()["flags"])  # 12 bytes: the defaults


@pytest.mark.parametrize("recompute", ["op", "every-2"])
def test_recomputation_megatron_cannot_run_is_said(recompute):
    # arguments.py: --recompute-granularity full or selective, --recompute-method uniform or
    # block; none checkpoints every Nth layer or torchtitan's per-op selection
    mg = megatron_of(recompute)
    assert not any(f.startswith("--recompute") for f in mg["flags"])
    assert any(f"recompute = {recompute}" in n and "recompute nothing" in n for n in mg["notes"])


def test_no_sequence_parallel_flag_where_the_plan_priced_none():
    # arguments.py validate_args: "Tensor parallel communication/GEMM overlap can happen only
    # when sequence parallelism is enabled"
    mg = megatron_of(sequence_parallel=False)
    assert "--sequence-parallel" not in mg["flags"] and "--tp-comm-overlap" not in mg["flags"]
    assert any("--tp-comm-overlap needs --sequence-parallel" in n for n in mg["notes"])
    assert {"--sequence-parallel", "--tp-comm-overlap"} <= set(megatron_of()["flags"])


def test_unfused_attention_is_megatrons_own():
    # megatron/core/transformer/enums.py AttnBackend: flash, fused, unfused, local, auto;
    # TransformerConfig.attention_backend defaults to auto (Transformer Engine's kernels)
    assert "--attention-backend unfused" in megatron_of(flash_attention=False)["flags"]
    assert not any(f.startswith("--attention-backend") for f in megatron_of()["flags"])


@pytest.mark.parametrize("model, tied", [("llama3-8b", False), ("deepseek-v3", False), ("tests/data/hf/llama-3.2-1b.json", True)])
def test_megatron_unties_the_head_where_the_model_does(model, tied):
    # gpt_builders.py at d98e8a6: share_embeddings_and_output_weights = not
    # args.untie_embeddings_and_output_weights; Llama 3.2 1B's config.json ties them
    # (tie_word_embeddings true), Llama 3 8B's and DeepSeek-V3's do not
    lay = Layout(pp=2, dp=8, tp=1, ep=8) if model == "deepseek-v3" else None
    flags = megatron_of(model=str(Path(__file__).parent.parent / model) if model.endswith(".json") else model, layout=lay)[
        "flags"
    ]
    assert ("--untie-embeddings-and-output-weights" in flags) == (not tied)


@pytest.mark.parametrize("delayed", [False, True])
def test_combined_1f1b_defers_weight_gradients_only_where_the_plan_did(delayed):
    # megatron/core/transformer/transformer_config.py at d98e8a6: delay_wgrad_compute, the
    # split W that pipesim's combined builder makes with delay_wgrad (schedules/combined.py)
    plan = Plan(load_model("deepseek-v3"), load_cluster("h100", 16), load_training(seq=4096, global_batch=256))
    cand = Candidate(Layout(pp=2, dp=8, tp=1, ep=8), "interleaved-1f1b-overlap", 2, "selective", 16)
    options = {"chunks": 2, **({"delay_wgrad": True} if delayed else {})}
    plan.results.append(Result(cand, True, step_time=1.0, options=options))
    mg = recipe(plan)["megatron"]
    assert ("--delay-wgrad-compute" in mg["flags"]) == delayed
    # where the plan kept W in B, nothing tells the user to add the flag
    assert not any(n.startswith("add --delay-wgrad-compute") for n in mg["notes"])


@pytest.mark.parametrize("zero", [1, 2])
def test_zero_2_says_the_distributed_optimizer_keeps_every_gradient(zero):
    # docs/user-guide/features/dist_optimizer.md at d98e8a6: "bf16 parameters, fp32 gradients"
    # take 6 + 12/d bytes under the distributed optimizer (the 4 bytes of gradient unsharded);
    # arguments.py --data-parallel-sharding-strategy choices no_shard, optim, optim_grads,
    # optim_grads_params (Megatron-FSDP)
    notes = megatron_of(zero=zero)["notes"]
    said = [n for n in notes if "zero = 2" in n]
    assert len(said) == (zero == 2) and (zero == 1 or "optim_grads " in said[0])
