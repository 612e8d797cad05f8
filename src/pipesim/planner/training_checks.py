"""A training file's checks: what ``specs.load_training`` refuses, in one line naming the
field, the value and what is accepted, once every field has its type."""

from __future__ import annotations

from dataclasses import replace

from ..errors import PipesimError
from ..inputs import shorten
from .pipeline_layout import check_syntax, is_layout
from .training import (
    ATTENTION_BLOCK_ORDERS,
    CP_COMMS,
    EAGER_BLOCKS,
    FP8_CASTS,
    FP8_SCALINGS,
    FUSED_KERNELS,
    MOE_EXPERT_GEMMS,
    NORM_KERNELS,
    OPTIMIZER_STEPS,
    P2P_SYNCS,
    UB_FPROP_RS,
    Training,
)


def _every_n(recompute: object) -> bool:
    n = recompute.removeprefix("every-") if isinstance(recompute, str) and recompute.startswith("every-") else ""
    return n.isdigit() and int(n) >= 1


def check_training(t: Training, where: str) -> Training:
    """``t`` if every field holds a value pipesim prices; else one line naming the field,
    the value and what is accepted (``where``: the file or flags it came from)."""
    if t.precision not in ("bf16", "fp8"):
        raise PipesimError(f'{where}: precision must be "bf16" or "fp8", got {t.precision!r}')
    if t.fp8_scaling not in FP8_SCALINGS:
        raise PipesimError(f'{where}: fp8_scaling must be "block" or "tensor", got {t.fp8_scaling!r}')
    if t.fp8_casts not in FP8_CASTS:
        raise PipesimError(f'{where}: fp8_casts must be "transformer_engine" or "torchao", got {t.fp8_casts!r}')
    if t.precision == "fp8" and t.fp8_casts == "torchao" and t.fp8_scaling != "tensor":
        raise PipesimError(f'{where}: fp8_casts = "torchao" is torchao\'s tensorwise Float8: set fp8_scaling = "tensor"')
    if t.recompute not in ("none", "selective", "full", "auto", "op") and not _every_n(t.recompute):
        raise PipesimError(
            f"{where}: recompute must be none, selective, full, op (torchtitan's selective op), every-N "
            f"(a full checkpoint every Nth layer, N >= 1) or auto, got {t.recompute!r}"
        )
    if t.norm_kernel not in NORM_KERNELS:
        raise PipesimError(f"{where}: norm_kernel must be one of {', '.join(NORM_KERNELS)}, got {t.norm_kernel!r}")
    if t.fused_kernels not in FUSED_KERNELS:
        raise PipesimError(
            f'{where}: fused_kernels must be "te" (TransformerEngine, Megatron-Core), "megatron-jit" '
            f'(Megatron-LM 2021-22\'s TorchScript kernels) or "inductor" (torch.compile), got {t.fused_kernels!r}'
        )
    if t.fused_kernels == "inductor" and t.precision == "fp8" and t.fp8_casts != "torchao":
        raise PipesimError(
            f'{where}: fused_kernels = "inductor" is torch.compile, whose FP8 linears are torchao\'s: set fp8_casts = "torchao"'
        )
    if t.fused_kernels != "te" and not t.fused_elementwise:
        raise PipesimError(
            f"{where}: fused_kernels = {t.fused_kernels!r} names fused kernels, but fused_elementwise = false runs "
            'PyTorch\'s eager ops; set fused_elementwise = true or leave fused_kernels at "te"'
        )
    if t.eager_block not in EAGER_BLOCKS:
        raise PipesimError(f"{where}: eager_block must be one of {', '.join(EAGER_BLOCKS)}, got {t.eager_block!r}")
    if t.eager_block != "torchtitan" and t.fused_elementwise:
        raise PipesimError(
            f'{where}: eager_block = "{t.eager_block}" names an eager block, but fused_elementwise = true runs fused '
            'kernels; set fused_elementwise = false or leave eager_block at "torchtitan"'
        )
    if t.p2p_sync not in P2P_SYNCS:
        raise PipesimError(f"{where}: p2p_sync must be one of {', '.join(P2P_SYNCS)}, got {t.p2p_sync!r}")
    if t.ub_fprop_rs not in UB_FPROP_RS:
        raise PipesimError(f"{where}: ub_fprop_rs must be one of {', '.join(UB_FPROP_RS)}, got {t.ub_fprop_rs!r}")
    if t.ub_fprop_rs != "none" and t.tp_overlap != "all":
        raise PipesimError(
            f'{where}: ub_fprop_rs = "{t.ub_fprop_rs}" prices Transformer Engine\'s userbuffers, which run only with '
            f'--tp-comm-overlap: set tp_overlap = "all" (got {t.tp_overlap!r}) or ub_fprop_rs = "none"'
        )
    # a word that is neither rule nor layout (no embedding letter) is a misspelt rule
    if not isinstance(t.stage_split, str) or (is_layout(t.stage_split) and "E" not in t.stage_split):
        raise PipesimError(
            f'{where}: stage_split must be "balanced", "even" or a Megatron layout such as "Et|(tt|)*30mL", got {t.stage_split!r}'
        )
    if is_layout(t.stage_split):
        check_syntax(t.stage_split)
    if t.cp_comm not in CP_COMMS:
        raise PipesimError(f"{where}: cp_comm must be one of {', '.join(CP_COMMS)}, got {t.cp_comm!r}")
    if t.torch_context_parallel and t.cp_comm not in ("p2p", "all_gather"):
        raise PipesimError(
            f"{where}: torch_context_parallel runs PyTorch's ring, whose keys and values pass round it (cp_comm = p2p) "
            f"or are all-gathered (all_gather); got cp_comm = {t.cp_comm!r}"
        )
    if t.optimizer_step not in OPTIMIZER_STEPS:
        raise PipesimError(f"{where}: optimizer_step must be one of {', '.join(OPTIMIZER_STEPS)}, got {t.optimizer_step!r}")
    if t.moe_dispatcher not in ("deepep", "alltoall"):
        raise PipesimError(f'{where}: moe_dispatcher must be "deepep" or "alltoall", got {t.moe_dispatcher!r}')
    if t.moe_pad_to_capacity and t.moe_dispatcher == "deepep":
        # Megatron-Core's TransformerConfig refuses the flex dispatcher with the padding (d98e8a6)
        raise PipesimError(
            f"{where}: moe_pad_to_capacity pads the all-to-all dispatcher's input; DeepEP takes no padding: "
            'set moe_dispatcher = "alltoall" with it, or leave it false'
        )
    if t.moe_expert_gemms not in MOE_EXPERT_GEMMS:
        raise PipesimError(f'{where}: moe_expert_gemms must be "grouped" or "per_expert", got {t.moe_expert_gemms!r}')
    if t.fsdp_reshard not in ("default", "always", "never"):
        raise PipesimError(f'{where}: fsdp_reshard must be "default", "always" or "never", got {t.fsdp_reshard!r}')
    if t.attention_block_order not in ATTENTION_BLOCK_ORDERS:
        raise PipesimError(
            f'{where}: attention_block_order must be "longest-first" (FlashAttention-3/-4) or "launch" (FlashAttention-2, '
            f"PyTorch's SDPA), got {t.attention_block_order!r}"
        )
    if t.zero not in (0, 1, 2, 3):
        raise PipesimError(f"{where}: zero must be 0, 1, 2 or 3, got {t.zero}")
    if t.zero1_allreduce and t.zero != 1:
        raise PipesimError(
            f"{where}: zero1_allreduce is DeepSpeed's ZeRO stage 1 reduction; it needs zero = 1, got zero = {t.zero}"
        )
    for key in ("seq", "global_batch"):
        if getattr(t, key) < 1:
            raise PipesimError(f"{where}: {key} must be >= 1, got {getattr(t, key)}")
    if not t.tokens > 0:  # the run's GPU-hours divide by it (--tokens refuses 0 the same way)
        raise PipesimError(f"{where}: tokens must be > 0 (the tokens of the whole run), got {t.tokens}")
    for key in ("dp_overlap", "attention_efficiency", "hbm_efficiency"):
        if not 0 <= getattr(t, key) <= 1:
            raise PipesimError(f"{where}: {key} must be between 0 and 1, got {getattr(t, key)}")
    if not 0 <= t.allocator_fragmentation < 1:
        raise PipesimError(
            f"{where}: allocator_fragmentation must be a share from 0 up to (not including) 1, got {t.allocator_fragmentation}"
        )
    if t.compute_efficiency > 1:
        raise PipesimError(f"{where}: compute_efficiency must be between 0 and 1, got {t.compute_efficiency}")
    # the training file's list, as a tuple: a Training is hashed and compared
    return replace(t, recompute_modules=check_recompute_modules(t.recompute_modules, t, where))


#: Megatron-Core's recompute module names pipesim prices (``recompute_modules.py``)
RECOMPUTE_MODULES = ("layernorm", "moe_act")


def check_recompute_modules(value: object, t: Training, where: str) -> tuple[str, ...]:
    """``value`` as a tuple of module names, or one line naming what is wrong."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise PipesimError(
            f'{where}: recompute_modules must be a list of Megatron-Core module names ("layernorm", "moe_act"), '
            f"got {shorten(value)}"
        )
    wrong = [x for x in value if x not in RECOMPUTE_MODULES]
    if wrong:
        raise PipesimError(
            f"{where}: recompute_modules entry {wrong[0]!r} is not one pipesim prices; give "
            '"layernorm" or "moe_act" (core_attn and mla_up_proj are recompute = "selective")'
        )
    if len(set(value)) != len(value):
        raise PipesimError(f"{where}: recompute_modules names a module twice, got {shorten(value)}; give each once")
    if value and t.fused_kernels != "te":
        raise PipesimError(
            f"{where}: recompute_modules is Megatron-Core's selective recompute on Transformer Engine's layer; "
            'set fused_kernels = "te" or leave recompute_modules empty'
        )
    return tuple(value)
