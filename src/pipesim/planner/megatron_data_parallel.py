"""Megatron-LM's data-parallel and optimizer flags for what the plan priced: the sharding
(distributed optimizer, Megatron-FSDP), the gradient reduction overlapped with the
backward, the dtype gradients are held and reduced in, where the 1/dp scaling runs and
the optimizer states' bytes; notes where no flag gives what the plan priced.

Read from NVIDIA/Megatron-LM at d98e8a6 (2026-08-22; check them again against the version
you run): megatron/training/arguments.py (``--overlap-grad-reduce``, ``--overlap-param-gather``,
``--ddp-average-in-collective``, ``--grad-reduce-in-bf16``, the precision-aware optimizer's
``--exp-avg-dtype`` and ``--exp-avg-sq-dtype``, and validate_args),
megatron/core/distributed/distributed_data_parallel_config.py (both overlaps default off)
and param_and_grad_buffer.py, megatron/core/optimizer/optimizer_config.py.
"""

from __future__ import annotations

from .specs import Training
from .step import timed


def data_parallel_flags(t: Training, reduces: bool = True) -> tuple[list[str], list[str]]:
    """(flags, notes) for the plan's data parallelism and optimizer; ``reduces``: whether
    any gradient is reduced over data-parallel ranks (no word on the reduction's bytes
    where none is)."""
    flags: list[str] = []
    notes: list[str] = []
    if t.zero >= 1:
        flags.append("--use-distributed-optimizer")
    if t.zero == 2:
        # the distributed optimizer reduce-scatters into a whole gradient buffer, ZeRO-1's
        # memory (docs/user-guide/features/dist_optimizer.md at d98e8a6: bf16 parameters and
        # fp32 gradients take 6 + 12/d bytes a parameter); sharding the gradients is
        # Megatron-FSDP's optim_grads strategy (arguments.py)
        notes.append(
            "the plan shards gradients over the data-parallel ranks (zero = 2), but --use-distributed-optimizer keeps "
            "every gradient in its buffer (ZeRO-1's memory): Megatron-FSDP shards them (--use-megatron-fsdp "
            "--data-parallel-sharding-strategy optim_grads --ckpt-format fsdp_dtensor), or plan with zero = 1"
        )
    if t.zero == 3:
        # the distributed optimizer shards optimizer states and gradients only; parameters too
        # is Megatron-FSDP (arguments.py at d98e8a6: --use-megatron-fsdp, version 1 by default,
        # which keeps the distributed optimizer, with the default sharding optim_grads_params).
        # validate_args then asserts ckpt_format == "fsdp_dtensor" (the default is torch_dist)
        # and CUDA_DEVICE_MAX_CONNECTIONS unset or above 1
        flags += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params", "--ckpt-format fsdp_dtensor"]
        notes.append(
            "Megatron-FSDP refuses CUDA_DEVICE_MAX_CONNECTIONS=1 (which Megatron's tensor-parallel examples export): "
            "leave it unset or set it above 1"
        )
    if timed(t):
        # the plan times each chunk's reduction beside the backwards after it and, with ZeRO
        # 1 or 2, each chunk's parameter gather before its first forward (step.timed): what
        # these do. DistributedDataParallelConfig defaults both off, and then the whole
        # reduction runs after the last backward; validate_args asserts
        # --overlap-param-gather only beside --overlap-grad-reduce and the distributed optimizer
        flags.append("--overlap-grad-reduce")
        if t.zero >= 1:
            flags.append("--overlap-param-gather")
    if t.average_in_collective:
        flags.append("--ddp-average-in-collective")
    gradient, said = gradient_dtype(t)
    flags += gradient
    notes += said if reduces else []
    optimizer, said = optimizer_states(t)
    return flags + optimizer, notes + said


def gradient_dtype(t: Training) -> tuple[list[str], list[str]]:
    """Megatron-Core holds the gradients it accumulates and reduces them in one dtype
    (param_and_grad_buffer.py: the buffer's grad_dtype is fp32 where grad_reduce_in_fp32,
    else the parameters'), and under --bf16 validate_args makes that fp32 unless
    ``--grad-reduce-in-bf16``: ``grad_bytes`` and ``grad_reduce_bytes`` 4 and 4 are its
    default, 2 and 2 that flag; any other pair has no flag."""
    if t.zero == 3:  # Megatron-FSDP's own buffers (megatron_fsdp_main_grads_dtype), not DDP's
        return [], []
    pair = (t.grad_bytes, t.grad_reduce_bytes)
    if pair == (4, 4):
        return [], []
    if pair == (2, 2):
        return ["--grad-reduce-in-bf16"], []
    return [], [
        f"the plan holds gradients in {t.grad_bytes:g} bytes (grad_bytes) and reduces them in {t.grad_reduce_bytes:g} "
        "(grad_reduce_bytes); Megatron-LM holds and reduces them in one dtype, fp32 under --bf16 (price that with "
        "grad_bytes = grad_reduce_bytes = 4) or bf16 with --grad-reduce-in-bf16 (both 2), so its reduction moves "
        + ("twice the bytes priced" if pair == (4, 2) else "other bytes than priced")
    ]


def optimizer_states(t: Training) -> tuple[list[str], list[str]]:
    """Adam's bytes a parameter (``optimizer_bytes``): 12 is Megatron-LM's default (fp32
    master weights and both moments); 8, DeepSeek-V3's fp32 master weights with bf16
    moments, is Transformer Engine's FusedAdam under --use-precision-aware-optimizer with
    both moments' dtypes bf16 (OptimizerConfig asserts fp32 moments without it)."""
    if t.optimizer_bytes == 12:
        return [], []
    if t.optimizer_bytes == 8:
        return ["--use-precision-aware-optimizer", "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"], []
    return [], [
        f"the plan holds {t.optimizer_bytes:g} bytes of optimizer state a parameter (optimizer_bytes); Megatron-LM's Adam "
        "holds 12 (fp32 master weights and moments), or 8 with --use-precision-aware-optimizer --exp-avg-dtype bf16 "
        "--exp-avg-sq-dtype bf16"
    ]
