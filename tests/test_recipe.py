"""A plan you can run: stage split, torchtitan settings, Megatron-LM flags.

Results are made by hand (the search is tested in test_planner.py), so each case is a
layout the planner could recommend and the test runs in milliseconds."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.layout import Layout
from pipesim.planner.megatron_flags import megatron_layout
from pipesim.planner.plan_stages import stage_split
from pipesim.planner.recipe import markdown as recipe_markdown
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training

# torchtitan's setting names, read from pytorch/torchtitan at b5bcd76 (2026-08-21),
# torchtitan/config/configs.py: fields of ParallelismConfig and of TrainingConfig
TORCHTITAN_PARALLELISM = {
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "module_fqns_per_model_part",
    "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_schedule",
    "pipeline_parallel_schedule_csv",
    "num_pp_microbatches",
    "expert_parallel_degree",
}
TORCHTITAN_PARALLELISM |= {"context_parallel_degree", "context_parallel_load_balancer"}
# the weights its split is generated from (the same ParallelismConfig; command-line options in
# tests/unit_tests/test_no_new_cli_options.py at b5bcd76)
TORCHTITAN_PARALLELISM |= {"pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers"}
TORCHTITAN_TRAINING = {"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length"}
# and TrainingConfig.disable_cuda_graphs (#3559, 2026-08-13), which Trainer.Config's
# _validate_cuda_graphs asks for with pipeline or expert parallelism (trainer.py at b5bcd76)
TORCHTITAN_TRAINING |= {"disable_cuda_graphs"}
# the TOML job file of torchtitan before its config refactor (#2386), read at 9810191bb^
# (torchtitan/config/job_config.py: Parallelism and Training)
OLD_TORCHTITAN_PARALLELISM = (TORCHTITAN_PARALLELISM - {"num_pp_microbatches", "context_parallel_load_balancer"}) | {
    "pipeline_parallel_microbatch_size",
    "context_parallel_rotate_method",
    "expert_tensor_parallel_degree",
    "enable_async_tensor_parallel",  # moved to CompileConfig by #4045 (2026-08-12)
    "expert_parallel_comm_backend",  # "standard" or "deepep" (#2107, 2025-12-17)
    "pipeline_parallel_expert_parallel_overlap",  # DualPipeV's, #1721 (2025-12-12) to #2774
}
OLD_TORCHTITAN_TRAINING = {"local_batch_size", "global_batch_size", "seq_len"}
# its schedule names (torch.distributed.pipelining get_schedule_class, torch 2.13)
TORCH_SCHEDULES = {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
# Megatron-LM's flags, read from NVIDIA/Megatron-LM at d98e8a6 (2026-08-22): the parser
# megatron/training/arguments.py builds (its own add_argument calls and the
# TransformerConfig fields it turns into flags)
MEGATRON_FLAGS = {
    "--num-layers",
    "--tensor-model-parallel-size",
    "--pipeline-model-parallel-size",
    "--pipeline-model-parallel-layout",
    "--sequence-parallel",
    "--tp-comm-overlap",  # ModelParallelConfig.tp_comm_overlap, not in arguments.py's exclude list
    "--expert-model-parallel-size",
    "--moe-layer-freq",  # arguments.py:3520 (moe_freq_type: an integer or a Python list expression)
    "--mtp-num-layers",
    "--micro-batch-size",
    "--global-batch-size",
    "--seq-length",
    "--use-distributed-optimizer",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--overlap-moe-expert-parallel-comm",
    "--delay-wgrad-compute",
    # ModelParallelConfig.microbatch_group_size_per_vp_stage's argparse_meta name (not in
    # arguments.py's exclude list, so TransformerConfig's factory builds it)
    "--microbatch-group-size-per-virtual-pipeline-stage",
    # context parallelism and expert tensor parallelism (the same parser)
    "--context-parallel-size",
    "--cp-comm-type",
    "--hierarchical-context-parallel-sizes",
    "--expert-tensor-parallel-size",
    # the MoE dispatcher and grouped experts: TransformerConfig's moe_token_dispatcher_type,
    # moe_flex_dispatcher_backend and moe_grouped_gemm (Megatron-LM d98e8a6)
    "--moe-token-dispatcher-type",
    "--moe-flex-dispatcher-backend",
    "--moe-grouped-gemm",
    # precision, dropout and CUDA graphs: ModelParallelConfig.bf16, TransformerConfig's fp8
    # ("--fp8-format"), fp8_recipe, attention_dropout, hidden_dropout and cuda_graph_impl
    "--bf16",
    "--fp8-format",
    "--fp8-recipe",
    "--attention-dropout",
    "--hidden-dropout",
    "--cuda-graph-impl",
    # ZeRO-3: Megatron-FSDP (DistributedDataParallelConfig.use_megatron_fsdp and arguments.py's
    # --data-parallel-sharding-strategy, choices no_shard, optim, optim_grads, optim_grads_params)
    "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    # arguments.py's --ckpt-format (choices torch, torch_dist, torch_dcp, fsdp_dtensor; default
    # torch_dist): validate_args asserts fsdp_dtensor under --use-megatron-fsdp (d98e8a6)
    "--ckpt-format",
    # data parallelism and the optimizer (arguments.py at d98e8a6: --overlap-grad-reduce,
    # --overlap-param-gather, --ddp-average-in-collective, --grad-reduce-in-bf16,
    # --use-precision-aware-optimizer, --exp-avg-dtype, --exp-avg-sq-dtype) and the attention
    # kernels (TransformerConfig.attention_backend: flash, fused, unfused, local, auto)
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--ddp-average-in-collective",
    "--grad-reduce-in-bf16",
    "--use-precision-aware-optimizer",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--attention-backend",
    # arguments.py at d98e8a6: --untie-embeddings-and-output-weights (store_true; tied without it)
    "--untie-embeddings-and-output-weights",
}


def plan_with(model: str, cluster: str, gpus: int, results: list[tuple]) -> Plan:
    m, c = load_model(model), load_cluster(cluster, gpus)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    for pp, dp, tp, ep, schedule, chunks, M in results:
        cand = Candidate(Layout(pp=pp, dp=dp, tp=tp, ep=ep), schedule, chunks, "selective", M)
        plan.results.append(Result(cand, True, step_time=1.0))
    return plan


DEEPSEEK = [
    (16, 128, 1, 64, "dualpipe", None, 120),
    (16, 128, 1, 64, "dualpipev", None, 120),
    (16, 128, 1, 64, "interleaved-1f1b", 2, 128),
    (8, 256, 1, 64, "zb-v", None, 60),
    (16, 128, 1, 64, "1f1b", None, 128),
    (8, 256, 1, 64, "zb-v", None, 12),
]
LLAMA = [(8, 8, 8, 1, "1f1b", None, 64), (4, 16, 8, 1, "interleaved-1f1b", 4, 32), (4, 16, 8, 1, "zb-h1", None, 32)]


def cases():
    return [("deepseek-v3", "h800-2048", 2048, DEEPSEEK), ("llama3-405b", "h100", 512, LLAMA)]


@pytest.mark.parametrize("model, cluster, gpus, results", cases())
def test_stage_split_covers_every_layer_once_in_order(model, cluster, gpus, results):
    plan = plan_with(model, cluster, gpus, results)
    for r in plan.results:
        parts = stage_split(plan, r)
        layers = [i for p in parts for i in p.layers]
        assert layers == list(range(plan.model.layers)), r.candidate
        assert all(len(p.layers) >= 1 for p in parts)
        assert [p.embedding for p in parts] == [True] + [False] * (len(parts) - 1)
        assert [p.head for p in parts] == [False] * (len(parts) - 1) + [True]
        assert [p.mtp for p in parts] == [0] * (len(parts) - 1) + [plan.model.mtp_layers]
        pp, chunks = r.candidate.layout.pp, r.candidate.chunks
        ranks = [p.ranks for p in parts]
        if r.candidate.schedule == "dualpipe":  # both copies: stage s on ranks s and pp-1-s
            assert ranks == [tuple(sorted({s, pp - 1 - s})) for s in range(pp)]
        elif r.candidate.schedule in ("dualpipev", "zb-v"):  # a V: down and back
            assert ranks == [(s,) for s in range(pp)] + [(s,) for s in reversed(range(pp))]
        elif chunks:  # looped: stage c*pp + r on rank r
            assert ranks == [(s % pp,) for s in range(pp * chunks)]
        else:
            assert ranks == [(s,) for s in range(pp)]


def test_deepseek_v3_holds_its_mtp_module_on_the_last_stage():
    plan = plan_with("deepseek-v3", "h800-2048", 2048, DEEPSEEK[:1])
    parts = stage_split(plan, plan.results[0])
    assert plan.model.mtp_layers == 1 and parts[-1].mtp == 1 and parts[-1].head
    # the head and MTP module cost the last stage layers: it holds the fewest
    assert len(parts[-1].layers) == min(len(p.layers) for p in parts)


def test_the_recipe_gives_the_split_the_planner_simulated():
    """With Megatron-LM 2021's and DeepSpeed's even split (stage_split = even) every stage
    holds layers / stages of them, whatever the end stages also hold, and the recipe says
    so; balanced, DeepSeek-V3 at pp8 with 4 chunks gives rank 7, which runs the head's and
    MTP's stage 31, fewer layers in its other stages than an even count would."""
    from dataclasses import replace

    plan = plan_with("llama3-405b", "h100", 512, [(6, 8, 8, 1, "1f1b", None, 32)])
    plan.training = replace(plan.training, stage_split="even")
    assert [len(p.layers) for p in stage_split(plan, plan.results[0])] == [21] * 6
    plan = plan_with("deepseek-v3", "h800-2048", 2048, [(8, 256, 1, 64, "interleaved-1f1b", 4, 64)])
    parts = stage_split(plan, plan.results[0])
    assert [p.stage for p in parts if 7 in p.ranks] == [7, 15, 23, 31]
    assert sum(len(parts[s].layers) for s in (7, 15, 23, 31)) < 61 * 4 / 32


@pytest.mark.parametrize("model, cluster, gpus, results", cases())
def test_torchtitan_block_parses_and_uses_its_setting_names(model, cluster, gpus, results):
    plan = plan_with(model, cluster, gpus, results)
    for n, r in enumerate(plan.results, 1):
        tt = recipe(plan, n)["torchtitan"]
        if r.candidate.schedule == "dualpipe":
            assert not tt["runs"] and "two copies" in tt["why"]
            continue
        old = tomllib.loads(tt["toml"])
        assert set(old) <= {"parallelism", "training", "activation_checkpoint", "compile"}
        assert set(old["parallelism"]) <= OLD_TORCHTITAN_PARALLELISM
        assert set(old["training"]) <= OLD_TORCHTITAN_TRAINING
        assert old["training"]["global_batch_size"] == plan.training.global_batch
        assert set(tt["training"]) <= TORCHTITAN_TRAINING
        par = tt["parallelism"]
        assert set(par) <= TORCHTITAN_PARALLELISM
        lay = r.candidate.layout
        assert par["pipeline_parallel_degree"] == lay.pp and par["tensor_parallel_degree"] == lay.tp
        assert par["num_pp_microbatches"] == r.candidate.microbatches
        assert par["pipeline_parallel_schedule"] in TORCH_SCHEDULES
        parts = par["module_fqns_per_model_part"]
        assert len(parts) == len(stage_split(plan, r))
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
        # torchtitan's models named the head "output" until #2937 (2026-04-27), after its TOML days
        old_parts = old["parallelism"]["module_fqns_per_model_part"]
        assert old_parts[-1][-2:] == ["norm", "output"] and old_parts[:-1] == parts[:-1] and old_parts[-1][:-1] == parts[-1][:-1]
        assert [x for p in parts for x in p if x.startswith("layers.")] == [f"layers.{i}" for i in range(plan.model.layers)]
        # the CSV is needed exactly when no PyTorch class runs the order: ZB-H1 (PyTorch's
        # InterleavedZeroBubble on one stage per rank), and ZB-V below M = 2pp - 1, where
        # pipesim searches it (tests/test_torch_orders.py holds both against PyTorch)
        c = r.candidate
        needs_csv = c.schedule == "zb-h1" or (c.schedule == "zb-v" and c.microbatches < 2 * c.layout.pp - 1)
        assert ("pipeline_parallel_schedule_csv" in par) == needs_csv
        assert (recipe(plan, n)["schedule_csv"] is not None) == needs_csv
        assert ("expert_parallel_degree" in par) == (plan.model.moe is not None)
        flags = [f for f in tt["command_line"].split() if f.startswith("--")]
        assert {f.removeprefix("--parallelism.") for f in flags if f.startswith("--parallelism.")} <= TORCHTITAN_PARALLELISM
        # the token counts too, or the base configuration's batch and sequence would run
        assert {f.removeprefix("--training.") for f in flags if f.startswith("--training.")} == TORCHTITAN_TRAINING


# torchtitan's activation checkpointing, read at b5bcd76 (torchtitan/distributed/
# activation_checkpoint.py: ActivationCheckpointingConfig is SelectiveAC.Config, FullAC.Config,
# MemoryBudgetAC.Config or None) and, for the TOML form, at 9810191bb^ (job_config.py's
# ActivationCheckpoint: mode none/full/selective, selective_ac_option "op" or N)
TORCHTITAN_AC = {"none": "None", "full": "FullAC.Config()", "op": "SelectiveAC.Config()"}
OLD_TORCHTITAN_AC = {"none": {"mode": "none"}, "full": {"mode": "full"}, "op": {"mode": "selective", "selective_ac_option": "op"}}


@pytest.mark.parametrize("recompute", ["none", "full", "op", "selective", "every-2"])
def test_torchtitan_recipe_sets_the_plans_activation_checkpointing(recompute):
    # the base configurations set their own (llama3_405b: FullAC; the Trainer's default is
    # SelectiveAC), so a recipe that says nothing runs another recomputation than planned
    m, c = load_model("llama3-405b"), load_cluster("h100", 512)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    plan.results.append(Result(Candidate(Layout(pp=8, dp=8, tp=8), "1f1b", None, recompute, 64), True, step_time=1.0))
    tt = recipe(plan)["torchtitan"]
    code = tt["python"]
    ast.parse(code)
    lines = [x.strip() for x in code.splitlines()]
    old = tomllib.loads(tt["toml"])
    if recompute in TORCHTITAN_AC:
        assert f"config.activation_checkpoint = {TORCHTITAN_AC[recompute]}" in lines
        policy = TORCHTITAN_AC[recompute].removesuffix(".Config()")
        if policy != "None":
            assert f"from torchtitan.distributed.activation_checkpoint import {policy}" in lines
        assert old["activation_checkpoint"] == OLD_TORCHTITAN_AC[recompute]
    else:  # no torchtitan policy matches: nothing set, and a note says so
        assert not any(x.startswith("config.activation_checkpoint") for x in lines)
        assert any("activation_checkpoint" in n for n in tt["notes"])
        if recompute == "every-2":
            assert old["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "2"}
        else:
            assert "activation_checkpoint" not in old


def test_torchtitan_names_the_class_or_the_csv():
    plan = plan_with("deepseek-v3", "h800-2048", 2048, DEEPSEEK)
    names = [recipe(plan, n)["torchtitan"].get("parallelism", {}).get("pipeline_parallel_schedule") for n in range(1, 7)]
    assert names == [None, "DualPipeV", "Interleaved1F1B", "ZBVZeroBubble", "1F1B", "ZBVZeroBubble"]
    assert recipe(plan, 4)["schedule_csv"] is None  # M = 60: the authors' pattern, ZBVZeroBubble's own
    zbv = recipe(plan, 6)  # M = 12 < 2pp - 1: searched
    assert zbv["schedule_csv"] == {
        "path": "zb-v-pp8-m12.csv",
        "command": "pipesim export --schedule zb-v --pp 8 -m 12 -o zb-v-pp8-m12.csv",
    }
    assert any("no PyTorch schedule class runs zb-v's order" in x for x in zbv["torchtitan"]["notes"])
    assert any("refuses pipeline parallelism with MTP" in x for x in zbv["torchtitan"]["notes"])


def megatron_layout_ok(layout: str, layers: int, mtp: int, stages: int) -> bool:
    """Megatron-LM's rules for --pipeline-model-parallel-layout
    (megatron/core/transformer/pipeline_parallel_layer_layout.py): its (...)*n and x*n
    shorthands unrolled in that order, as its parse_str_to_list does, embedding first and
    once, loss last and once, every decoder layer, the MTP layers after them."""
    flat = re.sub(r"\(([^)]+)\)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), layout)
    flat = re.sub(r"(.)\*(\d+)", lambda x: x.group(1) * int(x.group(2)), flat)
    assert set(flat) <= set("Etm|L")
    body = flat.replace("|", "")
    mtp_after_layers = "t" not in body[body.index("m") :] if mtp else True
    return (
        flat.count("|") == stages - 1
        and body[0] == "E"
        and body[-1] == "L"
        and body.count("E") == body.count("L") == 1
        and body.count("t") == layers
        and body.count("m") == mtp
        and mtp_after_layers
    )


def test_megatron_flags_for_deepseek_like_plans():
    plan = plan_with("deepseek-v3", "h800-2048", 2048, DEEPSEEK)
    out = [recipe(plan, n)["megatron"] for n in range(1, 6)]
    assert not out[0]["runs"] and "no DualPipe" in out[0]["why"]
    assert not out[1]["runs"] and "no DualPipeV" in out[1]["why"]
    assert not out[3]["runs"] and "no zb-v" in out[3]["why"]
    inter = out[2]["flags"]
    assert {f.split()[0] for f in inter} <= MEGATRON_FLAGS
    assert "--expert-model-parallel-size 64" in inter and "--mtp-num-layers 1" in inter
    # DeepSeek-V3's first three layers dense, as Megatron's help text writes such a pattern
    # ("([0]+[1]*23)": 1 dense layer followed by 23 expert layers); without it every layer is MoE
    assert '--moe-layer-freq "([0]*3+[1]*58)"' in inter
    assert "--pipeline-model-parallel-size 16" in inter and "--tensor-model-parallel-size 1" in inter
    (layout,) = [f.split(" ", 1)[1].strip('"') for f in inter if f.startswith("--pipeline-model-parallel-layout")]
    assert megatron_layout_ok(layout, 61, 1, 32)  # 16 ranks x 2 virtual stages
    assert layout == megatron_layout(stage_split(plan, plan.results[2]))
    assert layout.endswith("mL") and layout.startswith("E")


@pytest.mark.parametrize(
    "schedule, chunks, runs",
    [("interleaved-1f1b-overlap", 4, False), ("interleaved-1f1b", 2, False), ("1f1b-overlap", None, True)],
)
def test_no_virtual_stages_at_pp1(schedule, chunks, runs):
    # Megatron-Core's megatron/core/parallel_state.py, initialize_model_parallel, raises
    # "pipeline-model-parallel size should be greater than 1 with interleaved schedule"
    # where virtual stages are asked for at pp1: the flags without them ran the one stage
    # whole, not the chunked order the plan simulated (DeepSeek-V3 config on h800-2048 was
    # recommended interleaved-1f1b-overlap (v=4) on pp1 x dp512 x tp4, 1.51 s; the plain
    # combined 1F1B those flags run priced 2.41 s)
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048", 2048)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    layout = Layout(pp=1, dp=512, tp=4, ep=256)
    plan.results.append(Result(Candidate(layout, schedule, chunks, "selective", 2), True, step_time=1.0))
    meg = recipe(plan, 1)["megatron"]
    assert meg["runs"] == runs, meg
    if not runs:
        assert "virtual pipeline stages at pp1" in meg["why"]


@pytest.mark.parametrize(
    "ep, recompute, runs", [(64, "selective", True), (64, "none", True), (64, "full", False), (1, "selective", False)]
)
def test_combined_1f1b_recipes_only_where_megatron_takes_them(ep, recompute, runs):
    # Megatron-LM d98e8a6, megatron/core/transformer/transformer_config.py, __post_init__
    # under overlap_moe_expert_parallel_comm: assert expert_model_parallel_size > 1 ("only
    # supported with expert model parallelism") and recompute_granularity != 'full' ("disable
    # full recomputation when enabling overlap_moe_expert_parallel_comm"), recompute_method
    # and recompute_num_layers None
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048", 2048)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    layout = Layout(pp=8, dp=256, tp=1, ep=ep)
    plan.results.append(Result(Candidate(layout, "interleaved-1f1b-overlap", 2, recompute, 128), True, step_time=1.0))
    meg = recipe(plan, 1)["megatron"]
    assert meg["runs"] == runs, meg
    if runs:
        assert "--overlap-moe-expert-parallel-comm" in meg["flags"]
        assert not any(f.startswith(("--recompute-granularity full", "--recompute-method")) for f in meg["flags"])
    else:
        assert "--overlap-moe-expert-parallel-comm" in meg["why"] and ("ep1" if ep == 1 else "full recomputation") in meg["why"]


def test_combined_1f1b_at_m_not_a_multiple_of_pp_names_megatrons_group(tmp_path):
    # M=60 on pp=8: Megatron's default group of 8 leaves a last group of 4 < 8; 10 is the
    # smallest group it takes (60 % 9 = 6 < 8, 60 % 10 = 0), which the planner searched
    plan = plan_with("deepseek-v3", "h800-2048", 2048, [(8, 256, 1, 64, "interleaved-1f1b-overlap", 4, 60)])
    plan.results[0].options = {"chunks": 4, "group_size": 10}  # what the search built it with
    rec = recipe(plan, 1)
    flags = rec["megatron"]["flags"]
    assert {f.split()[0] for f in flags} <= MEGATRON_FLAGS
    assert "--overlap-moe-expert-parallel-comm" in flags
    assert "--microbatch-group-size-per-virtual-pipeline-stage 10" in flags
    command = rec["schedule_csv"]["command"]
    assert "--group-size 10" in command
    argv = command.split()[1:]
    argv[argv.index("-o") + 1] = str(tmp_path / "x.csv")
    assert main(argv) == 0  # the command runs as printed


def test_megatron_flags_for_llama_like_plans():
    plan = plan_with("llama3-405b", "h100", 512, LLAMA)
    one, inter, zb = (recipe(plan, n)["megatron"] for n in (1, 2, 3))
    for flags in (one["flags"], inter["flags"]):
        assert {f.split()[0] for f in flags} <= MEGATRON_FLAGS
        assert "--sequence-parallel" in flags and "--tensor-model-parallel-size 8" in flags
        assert not any(f.startswith(("--expert-model-parallel-size", "--mtp-num-layers")) for f in flags)
        assert "--tp-comm-overlap" in flags  # the default tp_overlap = "all" priced it
    layouts = [f.split(" ", 1)[1].strip('"') for f in inter["flags"] if "layout" in f]
    assert megatron_layout_ok(layouts[0], 126, 0, 16)  # 4 ranks x 4 virtual stages
    assert not zb["runs"] and "no zb-h1" in zb["why"]


@pytest.mark.parametrize("zero", [1, 3])
def test_zero_3_recipes_shard_the_parameters(zero):
    # Megatron's distributed optimizer alone shards optimizer states and gradients (ZeRO-1/2):
    # a ZeRO-3 plan needs Megatron-FSDP sharding parameters too; torchtitan's FSDP is ZeRO-3
    m, c = load_model("llama3-70b"), load_cluster("h100", 64)
    plan = Plan(m, c, load_training(seq=8192, global_batch=2048, zero=zero))
    plan.results.append(Result(Candidate(Layout(pp=2, dp=4, tp=8), "1f1b", None, "full", 512), True, step_time=1.0))
    d = recipe(plan)
    flags = d["megatron"]["flags"]
    assert {f.split()[0] for f in flags} <= MEGATRON_FLAGS
    # Megatron-LM d98e8a6, megatron/training/arguments.py, validate_args under
    # args.use_megatron_fsdp: assert args.ckpt_format == "fsdp_dtensor" ("Megatron-FSDP
    # requires the `fsdp_dtensor` checkpointing format"), whose default is torch_dist; and
    # assert CUDA_DEVICE_MAX_CONNECTIONS != "1"
    fsdp = {"--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params", "--ckpt-format fsdp_dtensor"}
    assert (fsdp <= set(flags)) == (zero == 3) and "--use-distributed-optimizer" in flags
    connections = [n for n in d["megatron"]["notes"] if "Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1" in n]
    assert len(connections) == (zero == 3)
    said = [n for n in d["torchtitan"]["notes"] if "with FSDP (ZeRO-3), where the plan assumed" in n]
    assert said == ([] if zero == 3 else [said[0]]) and (zero == 3 or "ZeRO-1" in said[0])


@pytest.mark.parametrize("cp_comm, rotate", [("p2p", "alltoall"), ("all_gather", "allgather"), ("a2a", None), ("a2a+p2p", None)])
def test_old_torchtitan_rotate_method_is_the_ring_for_p2p_and_nothing_for_ulysses(cp_comm, rotate):
    # PyTorch's "alltoall" rotate method passes each key/value chunk to rank + 1 (a ring,
    # _AllToAllRotater's permute_tensor), "allgather" gathers them all: neither splits heads
    m, c = load_model("llama3-8b"), load_cluster("h100", 64)
    plan = Plan(m, c, load_training(seq=65536, global_batch=64, cp_comm=cp_comm))
    plan.results.append(Result(Candidate(Layout(pp=1, dp=8, tp=2, cp=4), "1f1b", None, "full", 8), True, step_time=1.0))
    tt = recipe(plan)["torchtitan"]
    assert tomllib.loads(tt["toml"])["parallelism"].get("context_parallel_rotate_method") == rotate
    said = " ".join(tt["notes"])
    assert ("all-gathers keys and values" in said) == (cp_comm != "all_gather")
    assert ("neither form splits heads" in said) == (rotate is None)


def test_plan_layout_flag_gives_the_runner_ups_recipe(capsys):
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--schedules", "1f1b,zb-v", "--json"]
    assert main([*argv, "--layout", "2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["recipe"]["layout"] == 2 and d["recipe"]["schedule"] == d["runners_up"][0]["schedule"]
    code = main([*argv, "--layout", "999", "--top", "999"])
    err = capsys.readouterr().err
    assert (
        code == 2 and err.startswith("pipesim: error: --layout 999: choose 1 (the recommendation) to ") and err.count("\n") == 1
    )


def test_plan_layout_past_the_top_is_refused(capsys, tmp_path):
    """Past --top the search drops what provably cannot join the top (search.py's bound,
    "N more fit but provably could not win"), so its order there is not the ranking's:
    --top 1 --layout 2 printed the recipe of "plan #2 of the ranking" beside a table of one
    row, and plan #2 need not be the second fastest."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--seq", "4096", "--global-batch", "64"]
    out = tmp_path / "p.md"
    code = main([*argv, "--top", "1", "--layout", "2", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not out.exists()
    assert "--layout 2 is past the 1 plans --top ranks" in err and "give --top 2 or more" in err


def test_the_wrote_line_names_the_plan_whose_recipe_the_file_holds(tmp_path, capsys):
    # the file's "How to run it" is for plan #2: the line on stderr must not leave #1 alone
    out = tmp_path / "plan.json"
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--schedules", "1f1b,zb-v"]
    assert main([*argv, "--layout", "2", "-o", str(out)]) == 0
    wrote = capsys.readouterr().err.strip().splitlines()[-1]
    second = json.loads(out.read_text())["runners_up"][0]
    assert wrote.endswith(
        f"how to run plan #2: {second['schedule']} on {second['layout']}: {second['step_seconds']:.2f} s per step"
    )


def test_markdown_report_says_how_to_run_it():
    from pipesim.planner.report import markdown

    plan = plan_with("deepseek-v3", "h800-2048", 2048, DEEPSEEK)
    text = markdown(plan)
    section = text.split("## How to run it", 1)[1]
    assert "| 0 | 0, 15 | 0-" in section  # DualPipe: stage 0 on ranks 0 and 15
    assert "torchtitan: cannot run it: dualpipe keeps two copies of the model" in section
    assert "Megatron-LM: no equivalent. Megatron-LM has no DualPipe" in section


def test_zb_auto_export_command_writes_the_order_the_plan_simulated(tmp_path, capsys):
    """zb-auto orders by each candidate's own per-stage F/B/W and memory, so the recipe's
    export command carries them (to the last digit): it writes the order the search built
    from the options prepare gives that candidate, not the one unit costs give."""
    import shlex

    from pipesim.planner import search as S
    from pipesim.planner.specs import model_training
    from pipesim.runtime.torch_export import rows_to_csv, to_torch_rows
    from pipesim.schedules import build

    m, c = load_model("llama3-8b"), load_cluster("h100", 16)
    t = load_training(base=model_training("llama3-8b"))  # what pipesim plan --model llama3-8b trains
    plan = S.search(m, c, t, schedules=["zb-auto"])
    r = plan.best
    command = recipe(plan, 1)["schedule_csv"]["command"]
    argv = shlex.split(command)[1:]
    argv[argv.index("-o") + 1] = str(tmp_path / "order.csv")
    assert main(argv) == 0
    written = (tmp_path / "order.csv").read_text()
    p = S.prepare(m, c, t, r.candidate, S.Shared(m, c, t))
    pp, M = r.candidate.layout.pp, r.candidate.microbatches
    assert written == rows_to_csv(to_torch_rows(build("zb-auto", pp, M, **p.options)))
    assert written != rows_to_csv(to_torch_rows(build("zb-auto", pp, M)))  # unit costs order it otherwise


def test_export_refuses_costs_a_schedule_is_not_built_with(tmp_path, capsys):
    """Only zb-auto's order depends on costs: --f for 1F1B would be dropped unseen."""
    out = tmp_path / "x.csv"
    assert main(["export", "-s", "1f1b", "--pp", "2", "-m", "4", "--f", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--f orders zb-auto" in err and "drop it" in err
    assert not out.exists()


def test_a_model_torchtitan_has_no_configuration_for_says_what_to_import():
    # Mistral 7B from its config.json matches no torchtitan configuration: the import is a
    # placeholder, and the recipe says what it must give rather than leaving an ImportError
    for model, own in ((str(Path(__file__).parent / "data" / "hf" / "mistral-7b-v0.1.json"), False), ("llama3-405b", True)):
        m, c = load_model(model), load_cluster("h100", 512)
        plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
        plan.results.append(Result(Candidate(Layout(pp=8, dp=8, tp=8), "1f1b", None, "full", 128), True, step_time=1.0))
        code = recipe(plan)["torchtitan"]["python"]
        ast.parse(code)
        said = [x for x in code.splitlines() if x.startswith("# your_configs.your_base_config: yours to write")]
        assert ("from your_configs import your_base_config" in code) == (not own) == bool(said)
        assert own or m.name in said[0]


@pytest.mark.parametrize("schedule, pp", [("1f1b-overlap", 1), ("1f1b", 1), ("1f1b", 8)])
def test_torchtitan_without_a_pipeline_accumulates_micro_batches(schedule, pp):
    # torchtitan before #2386 ran global / (local_batch_size x dp) accumulation steps of
    # local_batch_size sequences each (train.py); a pipeline's step is one forward of all M
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    plan = Plan(m, c, load_training(seq=4096, global_batch=15360))
    dp = 2048 // pp
    M = 15360 // dp
    plan.results.append(Result(Candidate(Layout(pp=pp, dp=dp, ep=64), schedule, None, "full", M), True, step_time=1.0))
    d = recipe(plan)
    tt = d["torchtitan"]
    old = tomllib.loads(tt["toml"])
    assert old["training"]["local_batch_size"] == (1 if pp == 1 else M)
    assert old["training"]["global_batch_size"] // (old["training"]["local_batch_size"] * dp) == (M if pp == 1 else 1)
    said = " ".join(tt["notes"])
    if pp == 1:  # no schedule, CSV or pipeline notes for a pipeline torchtitan does not build
        assert tt["parallelism"]["pipeline_parallel_degree"] == 1
        assert not {"pipeline_parallel_schedule", "pipeline_parallel_schedule_csv", "num_pp_microbatches"} & set(
            tt["parallelism"]
        )
        assert d["schedule_csv"] is None and "pipeline_parallel_microbatch_size" not in old["parallelism"]
        assert "refuses pipeline parallelism with MTP" not in said
        assert ("one after another" in said) == (schedule == "1f1b-overlap")
    else:
        assert tt["parallelism"]["num_pp_microbatches"] == M and "refuses pipeline parallelism with MTP" in said


@pytest.mark.parametrize("schedule", ["dualpipe", "dualpipev", "zb-h1"])
def test_megatron_refusal_is_one_plain_sentence(schedule):
    # "Megatron-LM has no DualPipeV; PyTorch's ScheduleDualPipeV (torchtitan) runs it schedule: ..." read as nonsense
    plan = plan_with("deepseek-v3", "h800-2048", 2048, [(16, 128, 1, 64, schedule, None, 120)])
    why = recipe(plan)["megatron"]["why"]
    shown = {"dualpipe": "DualPipe", "dualpipev": "DualPipeV"}.get(schedule, schedule)
    assert why.startswith(f"Megatron-LM has no {shown} schedule (it runs 1F1B, interleaved 1F1B and combined 1F1B)")
    assert "runs it schedule" not in why and not why.endswith(".")
    assert ("runs it" in why) == (schedule != "zb-h1")


# torchtitan's Qwen3 configuration functions, read at b5bcd76: torchtitan/models/qwen3/
# config_registry.py defines qwen3_0_6b, qwen3_1_7b, qwen3_14b, qwen3_30b_a3b and qwen3_32b;
# its model registry (models/qwen3/__init__.py) also has "4B", "8B" and "235B-A22B"
@pytest.mark.parametrize(
    "config, line",
    [
        ("qwen3-32b", "from torchtitan.models.qwen3.config_registry import qwen3_32b"),
        ("qwen3-30b-a3b", "from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b"),
        ("qwen3-235b-a22b", 'its model_spec is torchtitan.models.qwen3.model_registry("235B-A22B"))'),
    ],
)
def test_qwen3_from_a_config_uses_torchtitans_own_configuration(config, line):
    m, c = load_model(str(Path(__file__).parent / "data" / "hf" / f"{config}.json")), load_cluster("h100", 512)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    plan.results.append(
        Result(Candidate(Layout(pp=8, dp=64, tp=1, ep=8 if m.moe else 1), "1f1b", None, "full", 128), True, step_time=1.0)
    )
    code = recipe(plan)["torchtitan"]["python"]
    ast.parse(code)
    assert line in code
    assert ("your_configs" in code) == (config == "qwen3-235b-a22b")


# torchtitan's expert_tensor_parallel_degree, read in its history: added by #1555
# (2025-08-13, aeb3a4baf: "Currently we only support ETP=TP or ETP=1"), in the TOML form
# until #2386 (2026-02-23), deprecated by #3167 (2026-04-30); absent at b5bcd76
@pytest.mark.parametrize("tp, etp", [(2, 2), (2, 1), (4, 2)])
def test_expert_tensor_parallelism_in_the_torchtitan_versions_that_had_it(tp, etp):
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048", 1024)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    lay = Layout(pp=8, dp=128 // tp, tp=tp, ep=64 // etp, etp=etp)
    plan.results.append(Result(Candidate(lay, "1f1b", None, "full", 128), True, step_time=1.0))
    d = recipe(plan)
    tt = d["torchtitan"]
    if etp not in (1, tp):  # never took another degree
        assert not tt["runs"] and "expert_tensor_parallel_degree = tp or 1" in tt["why"] and "etp2 with tp4" in tt["why"]
        return
    old = tomllib.loads(tt["toml"])["parallelism"]
    assert old["expert_tensor_parallel_degree"] == etp and old["tensor_parallel_degree"] == tp
    assert "from #1555 (2025-08-13), which added expert_tensor_parallel_degree" in tt["toml_versions"]
    assert (tt["python"] is None) == (etp > 1)  # today's torchtitan splits no experts
    if etp > 1:
        assert "no expert tensor parallelism since #3167 (2026-04-30)" in tt["python_why"]
        text = "\n".join(recipe_markdown(plan))
        assert "torchtitan in its current form cannot run it" in text and "Older torchtitan runs it from a TOML job file" in text
    else:
        assert "expert_tensor_parallel_degree" not in tt["python"]


# torchtitan's ParallelDims (read in its history): expert parallelism borrows the ranks of
# dp_shard x cp x tp (less the tp ways experts are split), never replicated data
# parallelism; from dp2ep (#1324) until #1660 (2025-12-17) it also asserted
# ``ep % cp == 0`` (``ep % (cp * tp) == 0`` with etp 1, #1555); at b5bcd76 (#4258) it refuses
# an ep that does not divide dp_shard * cp * tp
@pytest.mark.parametrize(
    "tp, etp, ep, zero, shard",
    [
        (1, 1, 8, 0, True),  # ep over data-parallel ranks: FSDP must shard them
        (8, 1, 8, 0, False),  # ep inside tp: replicated dp is fine
        (8, 8, 8, 0, True),  # experts split tp ways leave ep nothing of tp
        (8, 1, 4, 1, True),
        (2, 1, 64, 1, True),
    ],
)
def test_torchtitan_lends_experts_only_sharded_ranks(tp, etp, ep, zero, shard):
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048", 1024)
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024, zero=zero))
    lay = Layout(pp=8, dp=128 // tp, tp=tp, ep=ep, etp=etp)
    plan.results.append(Result(Candidate(lay, "1f1b", None, "full", 128), True, step_time=1.0))
    tt = recipe(plan)["torchtitan"]
    par = tomllib.loads(tt["toml"])["parallelism"]
    dp_shard = par["data_parallel_shard_degree"]
    assert dp_shard == (128 // tp if shard else 1)
    # the mesh torchtitan builds: ep divides the ranks experts may take
    assert (dp_shard * tp // (etp if tp > 1 else 1)) % ep == 0
    assert ("so they shard (FSDP over" in " ".join(tt["notes"])) == (shard and zero == 0)
    # before #1660 ep had to cover all of tp where experts are not split
    early = etp == 1 and ep % tp != 0
    assert ("only from #1660 (2025-12-17)" in tt["toml_versions"]) == early
    if early:
        assert tt["toml_versions"].endswith(f"ep{ep} does not cover tp{tp}")


@pytest.mark.parametrize("gpus, first_line", [
    (8, "# my_plan.py; run: MODULE=my_plan CONFIG=pipesim_plan NGPU=8 ./run_train.sh"),
    (64, "torchrun --nnodes 8 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint <first node>:29500 -m "
     "torchtitan.train --module my_plan --config pipesim_plan"),
])  # fmt: skip
def test_the_torchtitan_launch_fits_the_node_count(gpus, first_line):
    # torchtitan b5bcd76: run_train.sh runs `torchrun --nproc_per_node=${NGPU} --rdzv_backend
    # c10d --rdzv_endpoint="localhost:0" ... -m torchtitan.train --module ${MODULE} --config
    # ${CONFIG}`, one host, no --nnodes; multinode_trainer.slurm runs `srun torchrun --nnodes 4
    # --nproc_per_node 8 --rdzv_id 101 --rdzv_backend c10d --rdzv_endpoint "$head_node_ip:29500"
    # -m torchtitan.train --module ${MODULE} --config ${CONFIG}` on every node
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus)
    plan = Plan(m, c, load_training(seq=8192, global_batch=512))
    plan.results.append(Result(Candidate(Layout(pp=1, dp=gpus), "1f1b", None, "full", 1), True, step_time=1.0))
    head = recipe(plan)["torchtitan"]["python"].splitlines()[0]
    assert first_line in head and ("run_train.sh" in head) == (gpus == 8)


@pytest.mark.parametrize("tp, cp, zero, schedule, said", [
    (8, 1, 1, "1f1b", True), (1, 2, 1, "1f1b", True), (1, 1, 1, "1f1b", False), (8, 1, 3, "1f1b", False),
    (8, 1, 1, "1f1b-overlap", False),
])  # fmt: skip
def test_megatron_recipes_say_when_it_asserts_one_device_connection(tp, cp, zero, schedule, said):
    # Megatron-LM d98e8a6, megatron/training/arguments.py, validate_args: with
    # tensor_model_parallel_size > 1 or context_parallel_size > 1 and device arch < 10, it
    # asserts CUDA_DEVICE_MAX_CONNECTIONS == "1" unless use_megatron_fsdp (or torch FSDP2) or
    # overlap_moe_expert_parallel_comm is set, which only warn
    m = load_model("deepseek-v3" if schedule == "1f1b-overlap" else "llama3-70b")
    plan = Plan(m, load_cluster("h100", 64), load_training(seq=8192, global_batch=512, zero=zero))
    lay = Layout(pp=1, dp=64 // (tp * cp), tp=tp, cp=cp, ep=8 if m.moe else 1)
    plan.results.append(Result(Candidate(lay, schedule, None, "selective", 8), True, step_time=1.0))
    meg = recipe(plan)["megatron"]
    assert meg["runs"]
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1: export it" in n for n in meg["notes"]) == said


def test_export_command_writes_numpy_floats_as_numbers(tmp_path):
    """The search's costs and room may come out of numpy arrays: np.float64 repr()s as
    'np.float64(...)' under numpy 2, which the printed export command then carried and
    pipesim export refused as no number."""
    import dataclasses
    import shlex

    import numpy as np

    from pipesim.planner import search as S
    from pipesim.planner.specs import model_training
    from pipesim.planner.torchtitan_config import export_command

    m, c = load_model("llama3-8b"), load_cluster("h100", 16)
    plan = S.search(m, c, load_training(base=model_training("llama3-8b")), schedules=["zb-auto"])
    r = plan.best
    numpy_options = {k: tuple(map(np.float64, v)) if isinstance(v, tuple) else np.float64(v) for k, v in r.options.items()}
    plain, numpy = export_command(r), export_command(dataclasses.replace(r, options=numpy_options))
    assert "np." not in numpy and numpy == plain
    argv = shlex.split(numpy)[1:]
    argv[argv.index("-o") + 1] = str(tmp_path / "order.csv")
    assert main(argv) == 0


def test_the_context_parallel_note_points_where_the_toml_form_is(capsys):
    """The Markdown prints the TOML form before the torchtitan notes (recipe.markdown),
    so a note saying "the TOML form below" sent the reader past the end of the recipe."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--seq", "4096", "--global-batch", "64"]
    assert main([*argv, "--cp", "2", "--pp", "1"]) == 0
    md = capsys.readouterr().out
    note = next(line for line in md.splitlines() if line.startswith("- torchtitan's context parallelism all-gathers"))
    assert md.index("context_parallel_rotate_method") < md.index(note)
    assert "TOML form passes them in a ring" in note and "below" not in note
