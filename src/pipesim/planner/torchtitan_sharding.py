"""How torchtitan splits a plan's data-parallel and context-parallel ranks: its
``ParallelismConfig`` degrees for them, the context-parallel load balancer, and notes
where what it runs differs from what the plan priced.

Read from pytorch/torchtitan at b5bcd76 (2026-08-21; check them again against the version
you run): torchtitan/distributed/parallel_dims.py (``ParallelDims.build_mesh``: the fsdp
mesh is dp_shard x cp; ``fsdp_enabled`` is dp_shard > 1 or cp > 1), torchtitan/distributed/
fsdp.py (``resolve_fsdp_mesh`` shards over ("dp_shard", "cp") when cp is on), the models'
parallelize.py (llama3, deepseek_v3: ``apply_fsdp_to_decoder`` always runs), and
torchtitan/config/configs.py (``context_parallel_load_balancer``).
"""

from __future__ import annotations

from .layout import Layout
from .specs import Model, Training

#: the old form's ``context_parallel_rotate_method`` for each cp_comm it can run. PyTorch's
#: context_parallel (torch 2.13, distributed/tensor/experimental/_context_parallel/
#: _attention.py) takes "allgather" (_AllGatherRotater: every rank's keys and values
#: gathered) or "alltoall" (_AllToAllRotater: permute_tensor to rank + 1, a ring passing
#: one chunk a step, overlapped with the next block: pipesim's p2p); neither is Ulysses' a2a.
ROTATE_METHODS = {"p2p": "alltoall", "all_gather": "allgather"}

#: the load balancer for FlexAttention, the one attention torchtitan runs a language model's
#: context parallelism with. At b5bcd76: configs.py documents "headtail" (its default) as
#: HeadTailLoadBalancer "for SDPA" and "ptrr" as PTRRLoadBalancer "for FlexAttention";
#: models/common/config_utils.py get_attention_config refuses "sdpa" for language models
#: (their block-causal masks need per-document positions), Decoder.Config.update_from_config
#: (models/common/decoder.py) refuses context parallelism with SDPA or varlen attention
#: ("Use FlexAttention or disable CP"), and the Llama 3, Qwen3 and DeepSeek-V3 model
#: registries build flex attention (attn_backend="flex", their default or their
#: config_registry's). The Trainer passes "headtail" on to the flex BlockMask unchecked
#: (trainer.py post_dataloading_process, context_parallel/api.py cp_shard): it splits each
#: sequence head and tail whatever its documents, where PTRR deals the mask's blocks out by
#: their work; torchtitan's own HFTransformerTrainer refuses it ("'headtail' cannot shard a
#: flex-attention BlockMask", experiments/transformers_modeling_backend/trainer.py).
CP_LOAD_BALANCER = "ptrr"


def experts_borrow_shards(m: Model, lay: Layout) -> bool:
    """Whether the plan's expert ranks reach beyond cp x tp (less the tp ways experts are
    split) into the data-parallel ranks, which torchtitan lends to experts only when
    FSDP shards over them."""
    return bool(m.moe) and lay.ep > 1 and (lay.cp * lay.tp // lay.etp) % lay.ep != 0


def data_parallel(m: Model, lay: Layout, t: Training) -> tuple[dict, list[str]]:
    """(ParallelismConfig's data-parallel settings, notes). ZeRO-0 replicates over dp
    unless experts need its ranks; any other ZeRO stage is FSDP over dp. FSDP shards over
    the context-parallel ranks too whenever cp > 1, whatever the plan priced."""
    notes = reduction_dtype(lay, t)
    if t.zero == 0 and not experts_borrow_shards(m, lay):
        par = {"data_parallel_replicate_degree": lay.dp, "data_parallel_shard_degree": 1}
        if lay.cp > 1:
            notes.append(
                f"torchtitan shards parameters, gradients and optimizer states with FSDP over the context-parallel "
                f"ranks whenever cp > 1 (ParallelDims: its fsdp mesh is dp_shard x cp; resolve_fsdp_mesh shards over "
                f"dp_shard and cp): the plan's ZeRO-0 runs as FSDP over cp{lay.cp}"
                + (f", replicated over dp{lay.dp}" if lay.dp > 1 else "")
                + ", with parameter all-gathers and gradient reduce-scatters over those ranks the plan did not price "
                "and less memory than it counted; pipesim prices no such split (zero = 3 shards over cp x dp)"
            )
        return par, notes
    if t.zero == 0:
        notes.append(
            f"torchtitan's expert parallelism takes its ranks from FSDP's shard dimension with cp and tp "
            f"(ParallelDims: ep divides dp_shard x cp x tp; replicated data parallelism lends none): the "
            f"plan's ep{lay.ep} reaches into its data-parallel ranks, so they shard (FSDP over dp{lay.dp}"
            + (f" x cp{lay.cp}" if lay.cp > 1 else "")
            + ")"
        )
    par = {"data_parallel_shard_degree": lay.dp}
    if t.fsdp_reshard != "default":
        par["fsdp_reshard_after_forward"] = t.fsdp_reshard
    if t.zero != 3 and lay.dp * lay.cp > 1:  # one rank: FSDP has nothing to shard over
        over = f"data and context parallelism (dp{lay.dp} x cp{lay.cp})" if lay.cp > 1 else "data parallelism"
        notes.append(f"torchtitan shards over {over} with FSDP (ZeRO-3), where the plan assumed ZeRO-{t.zero}")
    return par, notes


def reduction_dtype(lay: Layout, t: Training) -> list[str]:
    """A note where the plan reduces gradients in other than fp32: torchtitan's FSDP reduces
    in ``TrainingConfig.mixed_precision_reduce``, whose one value is "float32" (configs.py at
    b5bcd76: Literal["float32"]), and its replicated data parallelism keeps fp32 parameters
    (mixed_precision_param applies through autocast there), so fp32 gradients."""
    if lay.dp * lay.cp == 1 or t.grad_reduce_bytes == 4:
        return []
    return [
        f'torchtitan reduces gradients in fp32 (training.mixed_precision_reduce takes only "float32"), where the plan '
        f"reduced them in {t.grad_reduce_bytes:g} bytes an element (grad_reduce_bytes): price it with grad_reduce_bytes = 4"
    ]


def context_parallel(lay: Layout, t: Training) -> tuple[dict, list[str]]:
    """(ParallelismConfig's context-parallel settings, notes) for cp > 1: the degree, the
    load balancer, and a note where the plan priced another exchange of keys and values
    than the all-gather PyTorch's context_parallel runs."""
    if lay.cp == 1:
        return {}, []
    par = {"context_parallel_degree": lay.cp, "context_parallel_load_balancer": CP_LOAD_BALANCER}
    notes = []
    if t.cp_comm != "all_gather":
        notes.append(
            f"torchtitan's context parallelism all-gathers keys and values (PyTorch's context_parallel), where the "
            f"plan assumed cp_comm = {t.cp_comm}: price it with cp_comm = all_gather"
            + (
                '; the TOML form passes them in a ring (context_parallel_rotate_method = "alltoall", '
                "which torchtitan took until #3666, 2026-06-14)"
                if t.cp_comm in ROTATE_METHODS
                else " (neither form splits heads over the context ranks)"
            )
        )
    return par, notes
