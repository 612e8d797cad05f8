"""The device memory a training process can fill with tensors.

A cluster file gives each GPU's memory as the device reports it (``memory_mib``, what
``nvidia-smi --query-gpu=memory.total`` prints: an "80 GB" H100 holds 81,559 MiB,
85.5e9 bytes). Not all of it holds parameters, gradients, optimizer states and
activations; each part held back below is a field of the cluster or training file:

- the CUDA context (``cuda_context_mib``): the driver's and PyTorch's kernels and state,
  taken at the first CUDA call; PyTorch users measure it at 723 MiB for a one-element
  tensor (discuss.pytorch.org/t/73021, "What is the reason for pytorch's GPU memory
  floor?");
- NCCL's buffers (``nccl_mib_per_group``), per communicator a rank uses, so they grow
  with the number of parallel groups: one PyTorch process group with an all-reduce run
  on it costs 544 MiB for two ranks and 688 MiB for more on A100s with NVLink
  (NVIDIA/nccl#964); NCCL's maintainers say the memory is per communicator, linear in
  its channels and for rings flat beyond two nodes (NVIDIA/nccl#864, #986);
- the backward's transient, the larger of two moments: the loss's backward on the last
  stage (``activations.loss_transient``), and a recomputing backward re-materialising one
  layer (``activations.recompute_transient``) while FSDP (ZeRO-3) holds that layer's
  gathered gradients in bf16 and their copy in the reduce dtype (``grad_reduce_bytes``:
  torchtitan's mixed_precision_reduce is float32) for the reduce-scatter;
- the parameters FSDP holds gathered beyond its shards when it frees them after each
  forward (ZeRO-3 without ``keeps_gathered``): the root module's (embedding, final norm,
  output), which FSDP2 does not free after the forward since the backward gathers them at
  once, and two layers' (the one running and the next, which FSDP2 prefetches);
- what PyTorch's own parallelism keeps beyond the model's tensors, each behind a switch
  of the training file: the bf16 logits' block the loss's backward cannot reuse
  (``stranded_logits``), and torch.distributed.pipelining's kept outputs and receive
  buffers (``pipeline_buffers``);
- what FSDP2's own CUDA streams keep cached (``fsdp_stream_pools``): its collectives'
  buffers are allocated on side streams, and the caching allocator reuses a freed
  block only for the stream that allocated it, so those blocks stay reserved beside
  everything the default stream's tensors can reuse;
- the caching allocator's fragmentation (``allocator_fragmentation``, a share of what is
  left): memory reserved in cached blocks that no request fits. A PyTorch OOM report on
  an 80 GB card shows 1.83 GiB reserved but unallocated beside 75.31 GiB allocated
  (vllm-project/compressed-tensors#587): 2.4% of what the process held, the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .activations import cp_attention_transient, loss_transient, recompute_transient
from .footprint import float8_gathered
from .layout import keeps_gathered, local_training
from .params import attention_params, embedding_params, mlp_params
from .pipeline_io import boundary

MIB = 2**20
BF16 = 2  # bytes of a gathered gradient before its reduce dtype


#: where each part held back comes from, one clause each: ``pipesim memory`` prints it
#: beside the part, the plan's assumptions quote it (the module docstring has the detail)
SOURCES = {
    "CUDA context": "cuda_context_mib, by default PyTorch users' measurement (discuss.pytorch.org/t/73021)",
    "NCCL buffers": "nccl_mib_per_group a communicator, by default NCCL's on A100s with NVLink (NVIDIA/nccl#964)",
    "backward transient": "the loss's or one recomputed layer's backward, tensor by tensor (activations.py)",
    "FSDP gathered parameters": "FSDP2 keeps the root module and the running and prefetched layers gathered",
    "framework buffers": "torchtitan's del pred, torch.distributed.pipelining's stage.py (loss_frees_logits, pp_keeps_outputs)",
    "FSDP's side-stream pools": "FSDP2's collectives on their own streams (fsdp_stream_pools)",
    "allocator fragmentation": "allocator_fragmentation, by default a PyTorch OOM report's reserved but unallocated share "
    "(vllm-project/compressed-tensors#587)",
}


@dataclass(frozen=True)
class Usable:
    """Bytes a rank can fill, and what was held back from the device's capacity to get
    there, as (what, bytes) in the order they are taken, with each one's source
    (``SOURCES``) in the same order."""

    capacity: float
    held: tuple[tuple[str, float], ...]
    sources: tuple[str, ...] = ()

    @property
    def bytes(self) -> float:
        return self.capacity - sum(b for _, b in self.held)


def communicators(lay) -> list[str]:
    """The process groups a rank runs collectives or transfers on: every parallel
    dimension of the layout larger than one (Megatron-Core and torchtitan build one
    communicator per group; NCCL sets up its buffers on a group's first collective)."""
    sizes = {
        "tensor": lay.tp,
        "context": getattr(lay, "cp", 1),
        "data": lay.dp,
        "pipeline": lay.pp,
        "expert": getattr(lay, "ep", 1),
        "expert data": max(1, lay.dp // max(1, getattr(lay, "ep", 1))) if getattr(lay, "ep", 1) > 1 else 1,
    }
    return [name for name, n in sizes.items() if n > 1]


def _layer_params(m, lay) -> float:
    """The largest layer's parameters on one GPU (experts spread over ep * etp)."""
    kinds = {m.is_moe_layer(i): i for i in range(m.layers)}
    sizes = []
    for i in kinds.values():
        dense, experts = mlp_params(m, i)
        sizes.append((attention_params(m) + dense) / lay.tp + experts / (getattr(lay, "ep", 1) * getattr(lay, "etp", 1)))
    return max(sizes)


def fsdp_gathered(m, t, lay) -> float:
    """Bytes of gathered parameters FSDP holds beyond its shards (see the module docstring)."""
    if t.zero != 3 or keeps_gathered(t, lay):
        return 0.0
    return t.param_bytes * embedding_params(m) / lay.tp + 2 * _gathered_width(t) * _layer_params(m, lay)


def _gathered_width(t) -> float:
    """Bytes an element of a block's gathered weights: one under FSDP's float8 all-gather."""
    return 1.0 if float8_gathered(t) else t.param_bytes


def fsdp_stream_pools(m, t, lay, params: float) -> float:
    """Bytes FSDP2 (ZeRO-3, ``Training.fsdp_stream_pools``) keeps reserved on its side
    streams, for a rank holding ``params`` parameters (its stages', on this GPU).

    PyTorch's caching allocator knows a block only by the stream that allocated it and
    reuses it only there (Tensor.record_stream's docstring; c10/cuda/CUDACachingAllocator
    matches a free block's stream before its size). FSDP2's collectives, as the runs of
    late 2024 had them (torch/distributed/_composable/fsdp/_fsdp_collectives.py, the
    compiled-autograd era of PyTorch 2.6, torchtitan's runs at torch 1963fc8):

    - ``foreach_all_gather`` allocates each group's flat output, the whole layer in the
      all-gather dtype (one byte under ``fsdp_float8_all_gather``), under the all-gather
      copy-in stream, freed after its copy-out;
      the previous all-gather's result stays referenced until the next one's copy-in
      waits on it: two layers' buffers in that stream's pool;
    - ``foreach_reduce`` allocates the reduce-scatter input, the layer's gradients in
      the reduce dtype, and its output, the layer's gradient shard, under the
      reduce-scatter stream; each input is freed before the next layer's is made, the
      shards become the parameters' ``.grad`` until ``zero_grad`` frees them into that
      pool, where the next backward finds them again. With gradients kept through the
      run (no ``zero_grad_frees``) the shards are the gradients counted with the
      static bytes, and only the input is added.

    Measured on the CPU (tests/test_framework_memory_torch.py): the flat all-gather
    output, the reduce-scatter input and the gradient shards FSDP2 hands its collectives,
    in the bytes this counts."""
    if t.zero != 3 or not t.fsdp_stream_pools:
        return 0.0
    layer = _layer_params(m, lay)
    gathered = 2 * _gathered_width(t) * layer
    shards = t.grad_reduce_bytes * params / lay.size("cpdp") if t.zero_grad_frees else 0.0
    return gathered + t.grad_reduce_bytes * layer + shards


def backward_transient(m, t, lay, recompute: str, last_stage: bool = True) -> float:
    """The larger of the loss's backward (on the last stage only) and one recomputed
    layer's with its attention's context-parallel buffers and its FSDP gradient buffers
    (on the local sequence of a context-parallel rank)."""
    local = local_training(t, lay)
    layer = recompute_transient(m, local, lay, recompute) + cp_attention_transient(m, local, lay)
    if layer and t.zero == 3:
        # a stage kept gathered accumulates each bf16 gradient into its unsharded
        # reduce-dtype buffer, counted with the gradients (FSDP2's
        # accumulate_unsharded_grad_if_needed): no second copy for a reduce-scatter;
        # with fsdp_stream_pools the copy is the reduce-scatter stream's input, counted there
        reduce_copy = 0.0 if keeps_gathered(t, lay) or t.fsdp_stream_pools else t.grad_reduce_bytes
        layer += (BF16 + reduce_copy) * _layer_params(m, lay)
    return max(layer, loss_transient(m, local, lay) if last_stage else 0.0)


def _logits(m, t, lay) -> float:
    """Bytes of one micro-batch's bf16 logits on one GPU (its vocabulary shard)."""
    return BF16 * m.vocab / lay.tp * lay.tokens(t.seq)


def stranded_logits(m, t, lay) -> float:
    """The block of the bf16 logits that the loss frees before its backward
    (``Training.loss_frees_logits``: torchtitan's train.py ``del pred``, 9dec370), which
    the caching allocator keeps reserved through the loss's backward, its peak. The
    forward allocated the logits, their fp32 copy and the log-softmax (and under
    loss_parallel its shifted copy) one after another; the backward then asks for fp32
    tensors twice the logits' size. PyTorch's CUDACachingAllocator serves a request only
    from one free block at least as large, merges a freed block only with free
    neighbours of its own segment, and returns segments to the driver only on an
    out-of-memory retry or ``empty_cache`` (c10/cuda/CUDACachingAllocator.cpp,
    get_free_block, try_merge_blocks, release_cached_blocks); with expandable segments
    the logits and the fp32 copy merge into one free range, which the first fp32 request
    takes from its start, leaving the logits' size free behind it. Either way
    ``max_reserved`` holds the logits' bytes beyond what is allocated at that peak. A
    pipeline keeping its outputs (``pp_keeps_outputs``) never frees them: counted there."""
    if not t.loss_frees_logits or (lay.pp > 1 and t.pp_keeps_outputs):
        return 0.0
    return _logits(m, t, lay)


def pipeline_buffers(
    m, t, lay, microbatches: int, last_stage: bool = True, recv_sets: int = 2, input_stages: int = 1, output_stages: int = 0
) -> float:
    """What torch.distributed.pipelining holds through a step besides the micro-batches
    in flight (``Training.pp_keeps_outputs``; stage.py at PyTorch 1963fc8, the commit
    torchtitan's published runs used, and today; pipeline_io.py has the code):

    - the last stage appends each micro-batch's output, the logits, to ``output_chunks``
      for the step's merged result, cleared only when the next step starts
      (``clear_runtime_states``): ``microbatches`` logits at the last backward;
    - ``_prepare_forward_infra`` and ``_prepare_backward_infra`` allocate, once, a
      receive buffer per micro-batch for a stage's input (every stage but the first) and
      for its output's gradient (every stage but the last), kept across steps, each the
      stage boundary (``pipeline_io.boundary``). ``recv_sets`` counts the (stage,
      direction) pairs a rank holds: 2 for a middle stage. A micro-batch in flight holds
      its input buffer as its first layer's saved input: ``pipeline_io`` takes that off
      the activation, so the buffers are counted here whole;
    - with ``Training.pp_keeps_stage_outputs`` (torch before pytorch/pytorch#153383, May
      2025), every stage's outputs in ``output_chunks`` until the next step:
      ``output_stages`` counts the stages a rank holds that send one (all but the last),
      whose outputs are then no part of the activation in flight;
    - with ``Training.pp_keeps_input_grads``, each micro-batch's gradient of a stage's
      input, the stage boundary's size, left as the receive buffer's ``.grad`` until the
      next step's ``clear_runtime_states``: ``input_stages`` counts the stages a rank
      holds that receive an input (every stage but the first)."""
    if lay.pp == 1:
        return 0.0
    b = boundary(m, t, lay)
    kept = 0.0
    if t.pp_keeps_outputs:
        kept = (_logits(m, t, lay) if last_stage else 0.0) + recv_sets * b
        kept += output_stages * b if t.pp_keeps_stage_outputs else 0.0
    return microbatches * (kept + (input_stages * b if t.pp_keeps_input_grads else 0.0))


@dataclass(frozen=True)
class LayoutHeld:
    """What a layout's ranks hold back that depends on no placement: the backward's
    transient on a rank without the last stage and on the one with it, FSDP's gathered
    parameters and the stranded logits' block (the last stage's). The search works it out
    once a layout and recomputation, not once a rank (the transient is summed layer by
    layer)."""

    transient: tuple[float, float]  # without, with the last stage
    gathered: float
    stranded: float


def layout_held(m, t, lay, recompute: str) -> LayoutHeld:
    transient = (backward_transient(m, t, lay, recompute, False), backward_transient(m, t, lay, recompute, True))
    return LayoutHeld(transient, fsdp_gathered(m, t, lay), stranded_logits(m, t, lay))


def usable_on_rank(
    m,
    c,
    t,
    lay,
    recompute: str,
    held: tuple[int, ...],
    stages: int,
    microbatches: int,
    params: float,
    common: LayoutHeld | None = None,
) -> Usable:
    """``usable`` for one pipeline rank of a built schedule: the rank holding model stages
    ``held`` of ``stages`` (``Placement.held``) and ``params`` parameters, over
    ``microbatches`` micro-batches a step. The loss's transient and the logits are held
    only where the last stage is; a receive buffer per micro-batch for each held stage's
    input (all but the first stage) and output gradient (all but the last); FSDP2's
    side-stream pools for this rank's own parameters. The search and ``pipesim memory``
    hold each rank's peak to it. ``common``: the layout's ``layout_held``, where the
    caller has it already."""
    common = common or layout_held(m, t, lay, recompute)
    last = stages - 1 in held
    recv = sum((st > 0) + (st < stages - 1) for st in held)
    inputs = sum(st > 0 for st in held)
    outputs = sum(st < stages - 1 for st in held)
    kept = pipeline_buffers(m, t, lay, microbatches, last, recv, inputs, outputs) + (common.stranded if last else 0.0)
    pools = fsdp_stream_pools(m, t, lay, params)
    return usable(c, t, lay, common.transient[last], common.gathered, kept, pools)


def rank_usables(
    m, c, t, lay, recompute: str, held: tuple, stages: int, microbatches: int, mm, common: LayoutHeld | None = None
) -> tuple[Usable, ...]:
    """``usable_on_rank`` for each rank of a placement holding ``held`` (``Placement.held``)
    on memory model ``mm`` (``footprint.memory_model``), each rank with its own stages'
    parameters on one GPU."""
    common = common or layout_held(m, t, lay, recompute)
    reads = pools_read_params(t)  # elsewhere a rank's own parameters change nothing here: not summed
    # a rank's stages reach its usable memory only through whether it holds the last, how
    # many receive an input and how many send an output: ranks alike in those (a
    # pipeline's middle ranks) are worked out once
    seen: dict[tuple, Usable] = {}
    out = []
    for own, ends in zip(held, rank_ends(held, stages)):
        key = (*ends, held_params(mm, own) if reads else 0.0)
        got = seen.get(key)
        if got is None:
            got = seen[key] = usable_on_rank(m, c, t, lay, recompute, own, stages, microbatches, key[3], common)
        out.append(got)
    return tuple(out)


@lru_cache(maxsize=1 << 10)
def rank_ends(held: tuple, stages: int) -> tuple[tuple[bool, int, int], ...]:
    """Per rank of a placement holding ``held``: whether it holds the last stage, how many
    of its stages receive an input and how many send an output (what ``usable_on_rank``
    reads of them). Kept: the same for every split and layout of a placement, which the
    search asks about thousands of times."""
    return tuple((stages - 1 in own, sum(st > 0 for st in own), sum(st < stages - 1 for st in own)) for own in held)


def pools_read_params(t) -> bool:
    """Whether ``fsdp_stream_pools`` (the one part of ``usable_on_rank`` a rank's own
    parameters reach) reads them: only its gradient shards, under ZeRO-3 with the pools
    counted and the gradients freed each step. The search asks for every rank of every
    placement and split; without them each rank's sum over its stages is skipped."""
    return t.zero == 3 and t.fsdp_stream_pools and t.zero_grad_frees


def held_params(mm, own) -> float:
    """Parameters (dense and experts, every copy) of the model stages ``own`` a rank holds,
    on memory model ``mm``."""
    return sum(sum(mm.params_at(st)) for st in own)


def roomiest(m, c, t, lay, recompute: str, common: LayoutHeld | None = None) -> Usable:
    """No rank of this layout, on any placement or split, has more than this to fill: the
    least ``usable_on_rank`` can hold back. Each part is its smallest over the ranks: one
    recomputed layer's transient without the loss's (the rank without the last stage),
    no framework buffers (the first stage's rank of a flat pipeline keeps one receive
    set, and none without ``pp_keeps_outputs``), FSDP's pools for no parameters of its
    own; the CUDA context, NCCL's and FSDP's gathered parameters are every rank's. A
    layout that some rank cannot fit in this is refused before its placements are
    looked at (the search's static floor). ``common``: the layout's ``layout_held``."""
    common = common or layout_held(m, t, lay, recompute)
    return usable(c, t, lay, common.transient[False], common.gathered, 0.0, fsdp_stream_pools(m, t, lay, 0.0))


@lru_cache(maxsize=1 << 12)
def usable(c, t, lay, transient: float = 0.0, gathered: float = 0.0, kept: float = 0.0, pools: float = 0.0) -> Usable:
    """The bytes a rank of this layout can fill on one of the cluster's GPUs. Kept (it is
    frozen): a search asks it for every rank of every placement, most ranks alike."""
    capacity = c.hbm_gb * 1e9
    groups = communicators(lay)
    held = [
        ("CUDA context", "", c.cuda_context_mib * MIB),
        (
            "NCCL buffers",
            f" ({len(groups)} communicator{'' if len(groups) == 1 else 's'}: {', '.join(groups) or 'none'})",
            len(groups) * c.nccl_mib_per_group * MIB,
        ),
        ("backward transient", " (the loss or one recomputed layer)", transient),
        ("FSDP gathered parameters", "", gathered),
    ]
    if kept:
        held.append(("framework buffers", " (stranded logits, pipeline outputs and receive buffers)", kept))
    if pools:
        held.append(("FSDP's side-stream pools", " (all-gather outputs, reduce-scatter input, gradient shards)", pools))
    rest = capacity - sum(b for *_, b in held)
    share = t.allocator_fragmentation
    held.append(("allocator fragmentation", f" ({share:.1%} of the rest)", max(0.0, rest) * share))
    return Usable(capacity, tuple((what + detail, b) for what, detail, b in held), tuple(SOURCES[what] for what, _, _ in held))
