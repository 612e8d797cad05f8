"""What torchtitan's ``Trainer.Config`` needs beyond its parallelism and batch for a plan to
run as priced: whether it captures the step in CUDA graphs, the multiplies' precision
(its quantization converters) and AsyncTP under torch.compile; each as lines of the
configuration function (the current form) and notes where torchtitan cannot run what
the plan priced.

Read from pytorch/torchtitan at b5bcd76 (2026-08-21; check them again against the version
you run): torchtitan/trainer.py ``Trainer.Config._validate_cuda_graphs`` (added by #3559,
f84224af0, 2026-08-13), torchtitan/config/configs.py ``TrainingConfig.disable_cuda_graphs``
and ``CompileConfig``, torchtitan/components/quantization/float8.py
``Float8LinearConverter.Config.recipe_name`` and the model config registries.
"""

from __future__ import annotations

from typing import NamedTuple

from .layout import Layout
from .specs import Model, Training
from .torchtitan_bases import PLACEHOLDER

#: how each MoE base configuration builds its model spec (config_registry.py at b5bcd76),
#: so that the recipe can build it again with the plan's expert dispatcher: base function
#: -> (module of its model_registry, the call's arguments)
MODEL_SPECS = {
    "deepseek_v3_671b": ("torchtitan.models.deepseek_v3", '"671B", attn_backend="flex"'),
    "qwen3_30b_a3b": ("torchtitan.models.qwen3", '"30B-A3B"'),
    "gpt_oss_20b": ("torchtitan.models.gpt_oss", '"20b"'),
    "gpt_oss_120b": ("torchtitan.models.gpt_oss", '"120b"'),
}

#: the base a configuration starts from instead where calling the preset's own needs what a
#: bf16 run does not: llama3_405b() passes converters=[Float8LinearConverter.Config(...)] to
#: model_registry, which builds the converter there and then (llama3/__init__.py at
#: b5bcd76: ``c.build().convert(config)``), and Float8LinearConverter.__init__
#: (components/quantization/float8.py) raises ImportError without torchao and ValueError on
#: a GPU older than SM89, before the recipe could replace the spec. llama3_70b() builds
#: none, and differs from llama3_405b() (config_registry.py) only in what these lines set
#: again: the model, its Hugging Face assets, lr 8e-5 (1.5e-4), a 600-step warm-up (the
#: default), 3000 steps (1000) and compile on; its loss counts the same 128256-token
#: vocabulary (decoder_vocab_size), its data, checkpointing, validation and FullAC match.
#: base -> (the base called instead, the lines after the parallelism, their imports)
REBASED = {
    "llama3_405b": (
        "llama3_70b",
        [
            "    # llama3_405b() builds its Float8 converter when called, which needs torchao and an SM89+ GPU: its",
            "    # settings on llama3_70b()'s configuration, without the converter",
            '    config.model_spec = model_registry("405B")',
            '    config.hf_assets_path = "./assets/hf/Llama-3.1-405B"',
            "    config.optimizer = default_adamw(lr=8e-5)",
            "    config.lr_scheduler = LRSchedulersContainer.Config(warmup_steps=600)",
            "    config.training.steps = 3000",
        ],
        [
            "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw",
            "from torchtitan.models.llama3 import model_registry",
        ],
    ),
}

#: the compile settings of a rebased base's own configuration (llama3_405b:
#: CompileConfig(enable=True, enable_async_tensor_parallel=True)), which the command-line
#: form, run over that base, starts from
REBASED_COMPILE = {"llama3_405b": {"enable": True, "enable_async_tensor_parallel": True}}

#: the MoE models' ``moe_comm_backend`` for pipesim's ``moe_dispatcher``: each
#: model_registry takes one (deepseek_v3, qwen3 and gpt_oss __init__.py at b5bcd76), default
#: "standard", PyTorch's all-to-all; "deepep" is DeepEP's kernels
#: (models/common/config_utils.py: "standard", "deepep", "hybridep", "minimal_async_ep")
COMM_BACKENDS = {"alltoall": "standard", "deepep": "deepep"}

#: when torchtitan's Float8 lost its tensorwise recipe: #3127 (6348d93d1, 2026-04-27)
#: narrowed Float8LinearConverter's recipe_name to "rowwise" and "rowwise_with_gw_hp";
#: before it (and so in every version that read TOML job files, #2386 on 2026-02-23)
#: ``[quantize.linear.float8] recipe_name`` took "tensorwise" too
TENSORWISE_UNTIL = "#3127 (2026-04-27)"


class TrainerLines(NamedTuple):
    """Lines of the configuration function after the parallelism (``lines``), the import
    lines they need besides torchtitan.config's, the names they import from
    torchtitan.config (``config_names``, merged into the one import line of it), the
    ``training`` settings they add, notes, the ``compile`` settings the command-line form
    passes over the base it names, and ``base``, the configuration function the
    configuration calls."""

    lines: list[str]
    imports: list[str]
    config_names: tuple[str, ...]
    training: dict
    notes: list[str]
    compile: dict
    base: str


def cuda_graphs(m: Model, lay: Layout, t: Training) -> tuple[bool, list[str]]:
    """``training.disable_cuda_graphs`` for the plan, and a note where the plan priced
    graphs torchtitan will not capture. torchtitan's Trainer captures the whole forward and
    backward by default since #3559, and its ``_validate_cuda_graphs`` raises unless the
    setting is on with pipeline parallelism ("CUDA graphs do not support pipeline
    parallelism yet") and with expert parallelism over a dispatcher that synchronizes with
    the host (all but HybridEP with a non-blocking capacity factor and MinimalAsyncEP, none
    of which pipesim prices). A plan priced without graphs (``cuda_graphs = false``)
    turns them off too: their launches are the host time it priced."""
    if not t.cuda_graphs:
        return True, []
    refused = "pipeline parallelism" if lay.pp > 1 else "expert parallelism" if m.moe and lay.ep > 1 else ""
    if not refused and t.fsdp_reshard == "always":
        # #3559's known limitations: FSDP's all-gathers on its own streams break the capture
        # (CUDA_ERROR_STREAM_CAPTURE_ISOLATION) under reshard_after_forward = always
        refused = 'fsdp_reshard_after_forward = "always"'
    if refused:
        return True, [
            f"the plan priced CUDA graphs (cuda_graphs = true), which torchtitan's Trainer refuses with {refused} "
            "(Trainer.Config._validate_cuda_graphs, #3559): the configuration turns them off; price it with "
            "cuda_graphs = false"
        ]
    return False, []


def precision(base: str, m: Model, lay: Layout, t: Training) -> tuple[list[str], list[str], list[str]]:
    """(lines, imports, notes) that make torchtitan's model the one priced: the base's model
    spec built again where it converts its linears to Float8 (a bf16 plan, or an FP8 one
    torchtitan has no scaling of) or where the plan's expert dispatcher is not its default
    all-to-all; an FP8 plan gets a note, since torchtitan's Float8 today is row-wise scaled
    and MXFP8 block-scaled by 32, neither the plan's per-tensor or 128-tile block scaling."""
    lines, imports, notes = [], [], []
    if base in REBASED:
        _, lines, imports = REBASED[base]
        lines, imports = list(lines), list(imports)
        notes.append(
            f"{base}() builds a Float8 converter when called (model_registry's converters), which raises without "
            "torchao (pip install torchao) or on a GPU older than SM89, even where the model spec is replaced after: "
            f"the configuration starts from {REBASED[base][0]}() and sets {base}'s own settings again; the "
            f"command-line form over --config {base} keeps that converter (it is built into the base's model spec, "
            "which no command-line setting reaches), so it runs torchtitan's row-wise Float8 multiplies, which the "
            "plan did not price, and needs torchao and an SM89+ GPU: run the configuration function instead"
        )
    module, call = MODEL_SPECS.get(base, (None, ""))
    backend = comm_backend(m, lay, t)
    if module and backend != "standard":
        imports.append(f"from {module} import model_registry")
        lines.append(
            f'    config.model_spec = model_registry({call}, moe_comm_backend="{backend}")  # the plan\'s dispatcher, {t.moe_dispatcher}'
        )
    elif base == PLACEHOLDER[1] and backend != "standard":
        # your_base_config is the user's: its MoE model spec must ask for the dispatcher too
        notes.append(
            f"the plan dispatches experts with {t.moe_dispatcher} (moe_dispatcher = {t.moe_dispatcher}): build "
            f"{PLACEHOLDER[1]}'s model spec with moe_comm_backend=\"{backend}\", as each of torchtitan's MoE "
            'model_registry takes it (its default "standard" is PyTorch\'s all-to-all)'
        )
    if t.precision == "fp8":
        scaled = {"tensor": "one scale per tensor", "block": "DeepSeek-V3's 1x128 and 128x128 tiles"}[t.fp8_scaling]
        notes.append(
            f"the plan priced FP8 multiplies scaled by {scaled} (fp8_scaling = {t.fp8_scaling}); torchtitan's Float8 "
            'is row-wise scaled (Float8LinearConverter recipe_name "rowwise" or "rowwise_with_gw_hp") and its MXFP8 '
            "Blackwell's 32-element blocks, neither of which pipesim prices, so the configuration runs its multiplies "
            "in bf16 (price that with precision = bf16)"
            + (
                f'; torchtitan before {TENSORWISE_UNTIL} took recipe_name = "tensorwise" ([quantize.linear.float8] in '
                'the TOML form, with converters = ["quantize.linear.float8"] under [model])'
                if t.fp8_scaling == "tensor"
                else ""
            )
        )
    return lines, imports, notes


def async_tp_on(lay: Layout, t: Training) -> bool:
    """Whether torchtitan runs AsyncTP for the plan: tensor parallelism whose collectives
    the plan overlaps (``tp_overlap`` all or micro_pipeline)."""
    return lay.tp > 1 and t.tp_overlap in ("all", "micro_pipeline")


def comm_backend(m: Model, lay: Layout, t: Training) -> str:
    """The ``moe_comm_backend`` that dispatches the plan's experts ("standard" without
    expert parallelism)."""
    return COMM_BACKENDS[t.moe_dispatcher] if m.moe and lay.ep > 1 else "standard"


def compile_settings(base: str, lay: Layout, t: Training) -> tuple[dict, list[str], tuple[str, ...]]:
    """(the ``compile`` settings over the base's own, the configuration's lines for them,
    the names they import from torchtitan.config) for AsyncTP: compiled with it where the
    plan overlaps the tensor-parallel collectives (``tp_overlap`` all or micro_pipeline),
    off where it does not. CompileConfig's __post_init__ refuses AsyncTP without ``enable``
    and "model" among its components, so the config is built whole rather than patched.

    A rebased base (``REBASED``: llama3_405b) is called as another whose compile is off, so
    the configuration turns compile on as the base had it; its AsyncTP only as the plan
    has it. The command-line form runs over the base itself, which has AsyncTP on, so it
    turns that off where the plan has none, at tp1 too: torchtitan enables AsyncTP only on
    a tensor-parallel mesh (distributed/compile.py ``_maybe_enable_async_tp`` returns
    without one), but both forms then give the same configuration."""
    on = async_tp_on(lay, t)
    if on:
        return (
            {"enable": True, "enable_async_tensor_parallel": True},
            ["    config.compile = CompileConfig(enable=True, enable_async_tensor_parallel=True)  # AsyncTP"],
            ("CompileConfig",),
        )
    if base in REBASED_COMPILE:
        over = {"enable_async_tensor_parallel": False} if REBASED_COMPILE[base]["enable_async_tensor_parallel"] else {}
        return over, ["    config.compile = CompileConfig(enable=True)"], ("CompileConfig",)
    if lay.tp == 1:
        return {}, [], ()
    return {"enable_async_tensor_parallel": False}, ["    config.compile.enable_async_tensor_parallel = False"], ()


def trainer_lines(m: Model, lay: Layout, t: Training, base: str) -> TrainerLines:
    """All of the above for one plan."""
    off, notes = cuda_graphs(m, lay, t)
    lines, imports, more = precision(base, m, lay, t)
    settings, compiled, names = compile_settings(base, lay, t)
    called = REBASED[base][0] if base in REBASED else base
    return TrainerLines(lines + compiled, imports, names, {"disable_cuda_graphs": off}, notes + more, settings, called)


#: torchtitan's expert-parallel overlap inside DualPipeV's forward-and-backward pairs: added
#: by #1721 (fcc5643f4, 2025-12-12) as ParallelismConfig.pipeline_parallel_expert_parallel_overlap
#: (default true; job_config.py at 9810191bb^), refused with activation checkpointing
#: (dual_pipe_v.py get_dual_pipe_v_flag: NotImplementedError unless mode "none"), removed
#: by #2774 (fe80b63cf, 2026-04-02: "doesn't compose with SAC and is not maintained").
#: Without it PyTorch's ScheduleDualPipeV runs an OVERLAP_F_B action's forward and backward
#: one after the other (torch 2.13 schedules.py, _PipelineScheduleRuntime)
DUALPIPEV_OVERLAP = "#1721 (2025-12-12)"


def dualpipev_overlap(m: Model, lay: Layout, schedule: str, recompute: str) -> tuple[dict, list[str]]:
    """(TOML settings, notes) for a DualPipeV plan whose pairs hide the expert all-to-all:
    today's torchtitan runs the pairs unoverlapped; the TOML form's versions from #1721
    overlapped them, without activation checkpointing only."""
    if schedule != "dualpipev" or not m.moe or lay.ep == 1 or lay.pp == 1:
        return {}, []
    notes = [
        "the plan overlaps each DualPipeV forward-and-backward pair's expert all-to-all with the other's compute; "
        "torchtitan from #2774 (2026-04-02) runs the pair's forward and backward one after the other, its "
        "overlap removed, so the all-to-all stays exposed (Megatron-LM's combined 1F1B, or the TOML form's "
        f"versions from {DUALPIPEV_OVERLAP}, overlap it)"
    ]
    if recompute != "none":
        notes.append(
            f"the TOML form's versions (from {DUALPIPEV_OVERLAP}) refuse that overlap with activation checkpointing "
            '(NotImplementedError unless [activation_checkpoint] mode = "none"): plan with --recompute none for it'
        )
    return {"pipeline_parallel_expert_parallel_overlap": True}, notes
