"""What a recipe sets beyond the layout, so that the framework runs what the plan priced:
the multiplies' precision, dropout and CUDA graphs in Megatron-LM's flags, and in
torchtitan's configuration function CUDA graphs (which its Trainer refuses with pipeline
parallelism), the base configuration's Float8 converters and AsyncTP. Each expected name
is read from the framework's source at the commit cited beside it; results are made by
hand, as in test_recipe.py."""

from __future__ import annotations

import ast
import tomllib

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training


def plan_of(model: str, layout: Layout, gpus: int, schedule: str = "1f1b", **training) -> Plan:
    plan = Plan(load_model(model), load_cluster("h100", gpus), load_training(seq=4096, global_batch=1024, **training))
    plan.results.append(Result(Candidate(layout, schedule, None, "full", 64), True, step_time=1.0))
    return plan


def python_lines(plan: Plan) -> list[str]:
    code = recipe(plan)["torchtitan"]["python"]
    ast.parse(code)
    return [x.split("#")[0].strip() for x in code.splitlines()]


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


# torchtitan at b5bcd76 (2026-08-21), torchtitan/trainer.py Trainer.Config._validate_cuda_graphs
# (#3559, f84224af0): unless training.disable_cuda_graphs, "CUDA graphs do not support
# pipeline parallelism yet" with pipeline_parallel_degree > 1, and expert parallelism only
# with HybridEP's non-blocking dispatch or MinimalAsyncEP; TrainingConfig.disable_cuda_graphs
# defaults to False, and llama3_8b's configuration leaves it so
@pytest.mark.parametrize(
    "model, pp, ep, graphs, disabled",
    [
        ("llama3-8b", 2, 1, False, True),
        ("llama3-8b", 2, 1, True, True),  # refused with a pipeline: a note says so
        ("llama3-8b", 1, 1, True, False),
        ("llama3-8b", 1, 1, False, True),  # priced without graphs
        ("mixtral-8x22b", 1, 4, True, True),  # refused with expert parallelism
        # #3559's own known limitations (f84224af0's message): "FSDP reshard_after_forward=always
        # is unsupported" (CUDA_ERROR_STREAM_CAPTURE_ISOLATION)
        ("llama3-8b", 1, 1, "always", True),
    ],
)
def test_torchtitan_turns_cuda_graphs_off_where_its_trainer_refuses_them(model, pp, ep, graphs, disabled):
    reshard = {"fsdp_reshard": graphs, "zero": 3} if graphs == "always" else {}
    graphs = bool(graphs)
    plan = plan_of(model, Layout(pp=pp, dp=16 // pp // 2, tp=2, ep=ep), 16, cuda_graphs=graphs, **reshard)
    tt = recipe(plan)["torchtitan"]
    assert tt["training"]["disable_cuda_graphs"] is disabled
    if tt["python"]:
        assert f"config.training.disable_cuda_graphs = {disabled}" in python_lines(plan)
    # tyro's bool flags, as torchtitan's own error message and docs/debugging.md write them
    flag = "--training.disable_cuda_graphs" if disabled else "--training.no-disable-cuda-graphs"
    assert flag in (tt["command_line"] or flag).split()
    refused = [n for n in tt["notes"] if "Trainer refuses" in n]
    assert len(refused) == (graphs and disabled)


# torchtitan at b5bcd76, torchtitan/models/llama3/config_registry.py: llama3_405b builds its
# model spec with model_registry("405B", converters=[Float8LinearConverter.Config(...)]);
# llama3_8b with model_registry("8B") alone; torchtitan/components/quantization/float8.py:
# Float8LinearConverter.Config.recipe_name Literal["rowwise", "rowwise_with_gw_hp"] (#3127)
@pytest.mark.parametrize("model, gpus, reset", [("llama3-405b", 512, True), ("llama3-8b", 16, False)])
def test_torchtitan_runs_bf16_where_the_base_converts_to_float8(model, gpus, reset):
    plan = plan_of(model, Layout(pp=2, dp=gpus // 16, tp=8), gpus)
    lines = python_lines(plan)
    assert ('config.model_spec = model_registry("405B")' in lines) == reset
    assert ("from torchtitan.models.llama3 import model_registry" in lines) == reset


@pytest.mark.parametrize("scaling", ["block", "tensor"])
def test_torchtitan_says_it_has_no_fp8_of_the_plans_scaling(scaling):
    plan = plan_of("llama3-8b", Layout(pp=2, dp=4, tp=2), 16, precision="fp8", fp8_scaling=scaling)
    tt = recipe(plan)["torchtitan"]
    (said,) = [n for n in tt["notes"] if "Float8" in n]
    assert '"rowwise"' in said and "bf16" in said
    assert ('"tensorwise"' in said) == (scaling == "tensor")  # the recipe #3127 removed
    assert not any("Float8" in x or "MXFP8" in x for x in python_lines(plan))


# torchtitan at b5bcd76, torchtitan/config/configs.py CompileConfig: enable,
# enable_async_tensor_parallel (moved there from ParallelismConfig by #4045, 737594746), and
# __post_init__ refusing AsyncTP without enable and "model" in components; before #2386
# (job_config.py at 9810191bb^) Parallelism.enable_async_tensor_parallel with Compile.enable
@pytest.mark.parametrize("overlap, on", [("all", True), ("micro_pipeline", True), ("none", False), ("backward", False)])
def test_torchtitan_sets_async_tp_as_the_plan_overlaps(overlap, on):
    plan = plan_of("llama3-8b", Layout(pp=2, dp=4, tp=2), 16, tp_overlap=overlap)
    lines = python_lines(plan)
    assert ("config.compile = CompileConfig(enable=True, enable_async_tensor_parallel=True)" in lines) == on
    assert ("config.compile.enable_async_tensor_parallel = False" in lines) == (not on)
    assert ("from torchtitan.config import CompileConfig, ParallelismConfig" in lines) == on
    # the command line as tyro reads the same CompileConfig fields (flags, "no-" negated)
    flags = recipe(plan)["torchtitan"]["command_line"].split()
    compiled = (
        ["--compile.enable", "--compile.enable_async_tensor_parallel"] if on else ["--compile.no-enable-async-tensor-parallel"]
    )
    assert [f for f in flags if f.startswith("--compile.")] == compiled
    old = tomllib.loads(recipe(plan)["torchtitan"]["toml"])
    assert old["parallelism"].get("enable_async_tensor_parallel", False) == on
    assert old.get("compile") == ({"enable": True} if on else None)


# torchtitan at b5bcd76: torchtitan/models/deepseek_v3/__init__.py model_registry(flavor,
# attn_backend="flex", moe_comm_backend="standard", ...), config_registry.py's
# deepseek_v3_671b calling model_registry("671B", attn_backend="flex"); and
# models/common/config_utils.py's comm_backend values "standard" (PyTorch's all-to-all) and
# "deepep" (DeepEP's kernels)
@pytest.mark.parametrize(
    "dispatcher, ep, line",
    [
        ("deepep", 8, 'config.model_spec = model_registry("671B", attn_backend="flex", moe_comm_backend="deepep")'),
        ("alltoall", 8, None),
        ("deepep", 1, None),  # no expert parallelism: nothing to dispatch between ranks
    ],
)
def test_torchtitan_dispatches_experts_as_the_plan_priced(dispatcher, ep, line):
    plan = plan_of("deepseek-v3", Layout(pp=8, dp=32, tp=1, ep=ep), 256, moe_dispatcher=dispatcher)
    lines = python_lines(plan)
    specs = [x for x in lines if x.startswith("config.model_spec")]
    assert specs == ([line] if line else [])
    assert ("from torchtitan.models.deepseek_v3 import model_registry" in lines) == bool(line)
    # before #2386, Parallelism.expert_parallel_comm_backend ("standard" or "deepep", from
    # #2107; job_config.py at 9810191bb^)
    tt = recipe(plan)["torchtitan"]
    old = tomllib.loads(tt["toml"])["parallelism"]
    assert old.get("expert_parallel_comm_backend") == ("deepep" if line else None)
    assert ("#2107" in tt["toml_versions"]) == bool(line)


# torchtitan's DualPipeV expert-parallel overlap: ParallelismConfig's
# pipeline_parallel_expert_parallel_overlap (job_config.py at 9810191bb^, default true, from
# #1721), refused with activation checkpointing by dual_pipe_v.py's get_dual_pipe_v_flag
# ("Expert Parallel with DualPipeV and Activation Checkpointing cannot be used together"),
# and dual_pipe_v.py removed by #2774 (fe80b63cf), so b5bcd76's configs.py has no such field
@pytest.mark.parametrize(
    "model, schedule, recompute, overlap",
    [
        ("deepseek-v3", "dualpipev", "none", True),
        ("deepseek-v3", "dualpipev", "full", True),
        ("deepseek-v3", "zb-v", "none", False),
        ("llama3-8b", "dualpipev", "none", False),  # dense: no all-to-all to hide
    ],
)
def test_dualpipev_expert_overlap_only_where_torchtitan_had_it(model, schedule, recompute, overlap):
    plan = Plan(load_model(model), load_cluster("h100", 256), load_training(seq=4096, global_batch=1024))
    ep = 8 if model == "deepseek-v3" else 1
    plan.results.append(Result(Candidate(Layout(pp=8, dp=32, ep=ep), schedule, None, recompute, 64), True, step_time=1.0))
    tt = recipe(plan)["torchtitan"]
    old = tomllib.loads(tt["toml"])["parallelism"]
    assert old.get("pipeline_parallel_expert_parallel_overlap", False) == overlap
    assert "pipeline_parallel_expert_parallel_overlap" not in tt["parallelism"]
    notes = " ".join(tt["notes"])
    assert ("#2774" in notes) == overlap and ("#1721" in tt["toml_versions"]) == overlap
    assert ("NotImplementedError" in notes) == (overlap and recompute != "none")


# torchtitan at b5bcd76, torchtitan/models/deepseek_v3/MTP.md: "The current implementation
# explicitly rejects CP and PP when MTP is enabled"
@pytest.mark.parametrize("pp, cp, refused", [(1, 2, "context"), (2, 1, "pipeline"), (2, 2, "pipeline and context"), (1, 1, None)])
def test_torchtitan_says_its_deepseek_v3_refuses_mtp_with_cp_and_pp(pp, cp, refused):
    plan = plan_of("deepseek-v3", Layout(pp=pp, dp=256 // pp // cp, cp=cp, ep=8), 256)
    said = [n for n in recipe(plan)["torchtitan"]["notes"] if "with MTP enabled" in n]
    assert said == ([] if refused is None else [said[0]])
    assert refused is None or f"refuses {refused} parallelism with MTP enabled" in said[0]


def run_without_torchao(code: str, monkeypatch) -> dict:
    """Run the configuration function against stand-ins for torchtitan's modules, whose
    llama3_405b() raises as torchtitan b5bcd76's does without torchao (model_registry builds
    Float8LinearConverter, whose __init__ raises ImportError "torchao is not installed"),
    and return what the configuration set."""
    import sys
    import types

    class Settings(types.SimpleNamespace):
        def __getattr__(self, name):  # any section the code reaches into
            value = Settings()
            setattr(self, name, value)
            return value

    def module(name, **attrs):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**attrs))

    def no_torchao():
        raise ImportError("torchao is not installed. Please install it to use float8 linear layers.")

    def made(kind):
        return lambda *args, **kwargs: (kind, args, kwargs)

    config = Settings(made_from="llama3_70b")
    registry = dict(llama3_405b=no_torchao, llama3_70b=lambda: config)
    module("torchtitan.models.llama3.config_registry", **registry)
    module("torchtitan.models.llama3", model_registry=made("model_registry"))
    module("torchtitan.config", ParallelismConfig=made("ParallelismConfig"), CompileConfig=made("CompileConfig"))
    module("torchtitan.distributed.activation_checkpoint", FullAC=Settings(Config=made("FullAC")))
    module(
        "torchtitan.components.optimizer",
        default_adamw=made("default_adamw"),
        LRSchedulersContainer=Settings(Config=made("LRSchedulersContainer")),
    )
    scope: dict = {}
    exec(compile(code, "my_plan.py", "exec"), scope)
    return vars(scope["pipesim_plan"]())


# torchtitan at b5bcd76: torchtitan/models/llama3/config_registry.py llama3_405b calls
# model_registry("405B", converters=[Float8LinearConverter.Config(...)]), and
# models/llama3/__init__.py model_registry builds each converter (c.build().convert(config));
# torchtitan/components/quantization/float8.py Float8LinearConverter.__init__ raises
# ImportError without torchao. llama3_405b's own settings beside llama3_70b's (same file):
# hf_assets_path "./assets/hf/Llama-3.1-405B", default_adamw(lr=8e-5),
# LRSchedulersContainer.Config(warmup_steps=600), steps=3000, CompileConfig(enable=True, ...)
@pytest.mark.parametrize("overlap", ["none", "all"])
def test_a_bf16_405b_recipe_runs_without_torchao(overlap, monkeypatch):
    plan = plan_of("llama3-405b", Layout(pp=8, dp=8, tp=8), 512, tp_overlap=overlap)
    tt = recipe(plan)["torchtitan"]
    config = run_without_torchao(tt["python"], monkeypatch)
    assert config["made_from"] == "llama3_70b"
    assert config["model_spec"] == ("model_registry", ("405B",), {})
    assert config["hf_assets_path"] == "./assets/hf/Llama-3.1-405B"
    assert config["optimizer"] == ("default_adamw", (), {"lr": 8e-5})
    assert config["lr_scheduler"] == ("LRSchedulersContainer", (), {"warmup_steps": 600})
    assert config["training"].steps == 3000
    compiled = {"enable": True, **({"enable_async_tensor_parallel": True} if overlap == "all" else {})}
    assert config["compile"] == ("CompileConfig", (), compiled)
    assert any("pip install torchao" in n for n in tt["notes"])


# torchtitan at b5bcd76: the MoE model registries take moe_comm_backend (deepseek_v3,
# qwen3 and gpt_oss __init__.py), "deepep" selecting DeepEP (models/common/config_utils.py);
# a model with no torchtitan configuration (Mixtral) gets a placeholder base whose model
# spec the user builds, so the recipe can only say what to pass
@pytest.mark.parametrize("dispatcher, said", [("deepep", True), ("alltoall", False)])
def test_a_placeholder_moe_base_is_told_the_plans_dispatcher(dispatcher, said):
    plan = plan_of("mixtral-8x22b", Layout(pp=2, dp=8, tp=1, ep=8), 16, moe_dispatcher=dispatcher)
    tt = recipe(plan)["torchtitan"]
    assert "from your_configs import your_base_config" in tt["python"]
    notes = [n for n in tt["notes"] if "moe_comm_backend" in n]
    assert len(notes) == said
    assert not said or 'moe_comm_backend="deepep"' in notes[0]
    assert tomllib.loads(tt["toml"])["parallelism"].get("expert_parallel_comm_backend") == ("deepep" if said else None)


def _command_line_compile(command_line: str, base: dict) -> dict:
    """The CompileConfig fields the command-line form leaves over ``base``'s, as tyro reads
    the flags (a bool flag sets it, ``no-`` before the hyphenated name clears it)."""
    out = dict(base)
    for flag in command_line.split():
        if flag.startswith("--compile."):
            name = flag.removeprefix("--compile.")
            out[name.removeprefix("no-").replace("-", "_")] = not name.startswith("no-")
    return out


# torchtitan at b5bcd76: config_registry.py's llama3_405b has CompileConfig(enable=True,
# enable_async_tensor_parallel=True), which the command-line form (over --config
# llama3_405b) starts from; configs.py's CompileConfig defaults enable_async_tensor_parallel
# to False, which the configuration function's CompileConfig(enable=True) leaves
@pytest.mark.parametrize("tp, overlap", [(1, "all"), (1, "none"), (8, "none"), (8, "all")])
def test_the_405b_command_line_compiles_as_its_configuration_function(tp, overlap, monkeypatch):
    plan = plan_of("llama3-405b", Layout(pp=8, dp=64 // tp, tp=tp), 512, tp_overlap=overlap)
    tt = recipe(plan)["torchtitan"]
    kind, _, given = run_without_torchao(tt["python"], monkeypatch)["compile"]
    python = {"enable": False, "enable_async_tensor_parallel": False, **given}
    over_base = _command_line_compile(tt["command_line"], {"enable": True, "enable_async_tensor_parallel": True})
    assert kind == "CompileConfig" and over_base == python
    assert python["enable_async_tensor_parallel"] == (tp > 1 and overlap == "all")


def test_the_405b_command_line_says_it_keeps_the_float8_converter():
    # llama3_405b's model_registry("405B", converters=[Float8LinearConverter.Config(...)])
    # converts the spec's linears when the base is called (models/llama3/__init__.py at
    # b5bcd76): the command line, run over that base, trains them in Float8
    plan = plan_of("llama3-405b", Layout(pp=8, dp=64, tp=1), 512)
    (said,) = [n for n in recipe(plan)["torchtitan"]["notes"] if "--config llama3_405b" in n]
    assert "row-wise Float8" in said and "did not price" in said


# torchtitan at b5bcd76, models/common/decoder.py Decoder.Config.update_from_config: "if
# self.enable_weight_tying and parallelism.pipeline_parallel_degree > 1: raise
# NotImplementedError('Weight tying is not supported with Pipeline Parallel.')" (added to
# Qwen3 by #2461, 6b081f404); Qwen3-0.6B ties them (its config.json: tie_word_embeddings
# true), as torchtitan's qwen3 "0.6B" flavour does (enable_weight_tying=True)
@pytest.mark.parametrize("pp, refused", [(2, True), (1, False)])
def test_torchtitan_refuses_tied_embeddings_under_a_pipeline(pp, refused, tmp_path):
    config = tmp_path / "qwen3-0.6b.json"
    config.write_text(
        '{"model_type": "qwen3", "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072, '
        '"num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "vocab_size": 151936, '
        '"tie_word_embeddings": true}'
    )
    plan = Plan(load_model(str(config)), load_cluster("h100", 16), load_training(seq=4096, global_batch=256))
    plan.results.append(Result(Candidate(Layout(pp=pp, dp=16 // pp), "1f1b", None, "full", 8), True, step_time=1.0))
    tt = recipe(plan)["torchtitan"]
    assert (tt["python"] is None and tt["command_line"] is None) == refused
    assert refused == ("Weight tying is not supported with Pipeline Parallel." in (tt["python_why"] or ""))
