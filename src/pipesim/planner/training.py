"""The run's fields: the training set-up and every assumption the estimate rests on.

``Training`` is what a training file (``--training``), a model preset's ``[training]``
table and the plan's flags fill; ``specs.load_training`` reads it and ``check_training``
(training_checks.py) checks it. Each field says which module reads it and the public
source of its default.
"""

from __future__ import annotations

from dataclasses import dataclass

#: where ``hashed_once`` keeps an instance's hash, in its ``__dict__``
_HASH = "_hash_once"


def hashed_once(cls: type) -> type:
    """A frozen dataclass whose hash is worked out on first use and kept on the instance:
    the search looks its specs up in its caches hundreds of thousands of times, and the
    generated ``__hash__`` hashes every field each time (Training's dozens of them). The
    value is the generated one's, so every dict and set orders as before; it is left out
    of pickled state (string hashes differ from process to process)."""
    generated = cls.__hash__

    def __hash__(self) -> int:
        h = self._hash_once  # the instance's, once set; the class's None before
        if h is None:
            h = self.__dict__[_HASH] = generated(self)  # frozen: set in the dict, past __setattr__
        return h

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != _HASH}

    cls.__hash__ = __hash__
    cls.__getstate__ = __getstate__
    setattr(cls, _HASH, None)  # a plain class attribute (no field): one attribute read per hash
    return cls


#: how FP8 operands are scaled (``Training.fp8_scaling``)
FP8_SCALINGS = ("block", "tensor")


#: whose kernels make a multiply's FP8 operands (``Training.fp8_casts``)
FP8_CASTS = ("transformer_engine", "torchao")


#: how an MoE layer's expert multiplies are launched (``Training.moe_expert_gemms``)
MOE_EXPERT_GEMMS = ("grouped", "per_expert")


#: how a run's tensor-parallel collectives overlap its multiplies (``Training.tp_overlap``)
TP_OVERLAPS = ("none", "backward", "all", "micro_pipeline")

#: how Transformer Engine's userbuffers run the forward's row-parallel reduce-scatters
#: (``Training.ub_fprop_rs``; te_tensor_parallel.py)
UB_FPROP_RS = ("none", "ring_exchange", "pipeline")

#: the norms' kernels (``Training.norm_kernel``) and the layer's fused kernels (``Training.fused_kernels``)
NORM_KERNELS = ("auto", "fused", "eager", "two-pass")
FUSED_KERNELS = ("te", "megatron-jit", "inductor")
#: whose eager block runs without fused kernels (``Training.eager_block``)
EAGER_BLOCKS = ("torchtitan", "llm-foundry")

#: whose pipeline synchronizes the device after each stage-to-stage exchange (``Training.p2p_sync``)
P2P_SYNCS = ("none", "megatron-core", "megatron-2021")

#: what the optimizer step runs besides the collectives (step.optimizer_seconds)
OPTIMIZER_STEPS = ("adam", "megatron", "megatron-fp16")


#: bytes a logit torchtitan's cross-entropy moves (``Training.logit_bytes``), forward and
#: backward, as PyTorch's own ops run it (tests/test_loss_bytes.py counts them in torch).
#: torchtitan 9dec370's train.py ``loss_fn`` (and 395a52627's model.py ``output(h).float()``
#: before train.py's ``F.cross_entropy``) upcasts the bf16 logits and calls
#: ``F.cross_entropy`` eagerly, uncompiled: the cast 2+4, log_softmax 4+4, nll_loss's
#: backward zero-filling an fp32 gradient 4, log_softmax's backward 4+4+4 and the cast
#: back 4+2: 36 (nll_loss itself reads one logit a token). Under tensor parallelism
#: (loss_parallel, DTensor's torch/distributed/tensor/parallel/loss.py) the shard's
#: log_softmax runs as separate amax, sub, exp, sum and sub kernels (4+8+8+4+8) and one
#: backward as zeros, exp, add and a product (4+8+12+8) before the cast back: 76 a logit
#: of the shard (the handlers as pytorch#119877 wrote them in February 2024, before the
#: torch torchtitan's runs used, and as torch 2.13 still runs them). Counted one read of
#: each input a kernel, as tests/torch_bytes.py counts; PyTorch's CUDA log_softmax over a
#: row wider than shared memory (Llama 3's 128256 fp32 logits) reads it in three passes,
#: which L2 may or may not serve: not priced, no GPU measurement yet
TORCHTITAN_LOGIT_BYTES = 36
TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES = 76

#: of those, the forward's (``Training.loss_forward_share``): the cast and log_softmax,
#: 2+4 and 4+4 (14; its backward 22), or under loss_parallel the cast and the five
#: log_softmax kernels, 6 + 4+8+8+4+8 (38; its backward 38); counted in torch by
#: tests/test_loss_bytes.py, forward and backward apart
TORCHTITAN_LOGIT_FORWARD_BYTES = 14
TORCHTITAN_LOSS_PARALLEL_LOGIT_FORWARD_BYTES = 38

#: bytes a logit Megatron-LM 2021's eager fp32 loss moves (``Training.logit_bytes``, the
#: kernels listed there), and of those its forward's: the cast 2+4, max 4, sub_ 8, exp 8,
#: sum 4 and div_ 8 forward (38), mul_ 8 and the cast back 4+2 backward (14), all in place
#: on one fp32 copy (NVIDIA/Megatron-LM de7dc40f88 megatron/mpu/cross_entropy.py); counted
#: in torch by tests/test_megatron_loss_bytes.py. Its rows set loss_forward_share to 38 / 52
MEGATRON_2021_LOGIT_BYTES = 52
MEGATRON_2021_LOGIT_FORWARD_BYTES = 38


def torchtitan_loss(tp: int) -> dict[str, float]:
    """``Training``'s loss fields for torchtitan's cross-entropy at tensor-parallel degree
    ``tp`` (loss_parallel is on whenever tp > 1: parallel_dims.loss_parallel_enabled at
    9dec370): the bytes a logit its kernels move, and the fp32 logit-sized tensors its
    backward holds beside the saved log-softmax (activations.loss_transient), both counted
    in torch by tests/test_loss_bytes.py."""
    parallel = tp > 1
    moved = TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES if parallel else TORCHTITAN_LOGIT_BYTES
    forward = TORCHTITAN_LOSS_PARALLEL_LOGIT_FORWARD_BYTES if parallel else TORCHTITAN_LOGIT_FORWARD_BYTES
    return {
        "logit_bytes": moved,
        "loss_forward_share": forward / moved,
        "loss_backward_copies": 3 if parallel else 2,
    }


#: context-parallel schemes (``Training.cp_comm``), as Megatron-Core's --cp-comm-type names them
CP_COMMS = ("p2p", "all_gather", "a2a", "a2a+p2p")
ATTENTION_BLOCK_ORDERS = ("longest-first", "launch")


@hashed_once
@dataclass(frozen=True)
class Training:
    """The run, and every assumption the estimate rests on."""

    seq: int = 4096  # tokens per sequence
    global_batch: int = 1024  # sequences per step
    precision: str = "bf16"  # "bf16" or "fp8" (matrix multiplies; attention stays bf16)
    # how FP8 operands are scaled (compute.py): "block" as DeepSeek-V3 trains (1x128 and
    # 128x128 tiles, its DeepGEMM kernels), "tensor" one scale per tensor (Transformer
    # Engine's current scaling, as Megatron-Bridge's fp8_cs recipe; delayed scaling, whose
    # casts ride in the producer's kernels, is not modelled apart; torchao's tensorwise
    # Float8, as torchtitan's Float8 rows)
    fp8_scaling: str = "block"
    # whose kernels make the FP8 operands (elementwise.fp8_cast_terms, compute.gemms):
    # "transformer_engine" with fp8_scaling = "tensor", Transformer Engine 2.7's current
    # scaling as Megatron-Bridge's fp8_cs runs it (elementwise.te_current_cast_terms: each
    # input read for its amax unless TE's norm made it, then cast to both layouts at once,
    # or row-wise on its shard before a sequence-parallel gather and transposed in FP8;
    # each output gradient likewise); with "block", DeepSeek-V3's casts (a cast of each
    # input forward, twice that backward, both weight-gradient operands re-quantized);
    # "torchao", torchao's tensorwise Float8Linear
    # under torch.compile (torchtitan's Float8 rows; without fused_elementwise priced the
    # same): each input, weight and output gradient cast once, in both layouts, the
    # weights every micro-batch
    fp8_casts: str = "transformer_engine"
    zero: int = 1  # ZeRO stage over the data-parallel ranks
    recompute: str = (
        "auto"  # "none", "selective" (attention scores), "full", "op", "every-N" (activations.py), or "auto" (search)
    )
    # a full recompute runs as torch's non-reentrant checkpoint with its default early stop
    # (torch.utils.checkpoint at 2.1 and later: recomputation ends once every tensor the
    # backward saved is made again), so a dense layer's last multiply and what follows it
    # are not rerun (layer_costs.recomputed_mlp_shapes; a compiled block, fused_kernels =
    # "inductor", skips them whatever this says); false: the whole forward again
    # (Megatron-LM's and DeepSpeed's own checkpoint functions)
    recompute_early_stop: bool = False
    # Megatron-Core's --recompute-modules beside recompute: "layernorm" (on its Transformer
    # Engine layer, an MoE layer's pre-MLP norm) and "moe_act" (the experts' activation),
    # each rerun in the backward and its output not kept (recompute_modules.py); (): none
    recompute_modules: tuple[str, ...] = ()
    # the run hands the model's sliding_window w to Transformer Engine as its left window,
    # window_size (w, 0), which keeps w + 1 keys a query (Megatron-Bridge's GPT-OSS provider:
    # (128, 0) for gpt-oss's 128); false: w keys, as transformers' mask keeps them
    # (attention_window.run_window)
    sliding_window_as_te_left: bool = False
    tokens: float = 1e12  # tokens of the whole run (for its GPU-hours)
    # share of dense peak every matrix multiply reaches, BF16 or FP8 (compute.gemm_efficiency);
    # 0: the cluster's gemm_efficiency, or for FP8 its fp8_gemm_efficiency / fp8_tensor_gemm_efficiency
    compute_efficiency: float = 0.0
    attention_efficiency: float = 0.5  # share of bf16 peak in fused (flash) attention kernels
    # fused attention's share falls where its grid of thread blocks cannot fill the SMs (few
    # heads a GPU, micro-batch 1, short or context-parallel sequences; attention_grid.attention_grid_fill,
    # held to SimuMax's measured kernels by benchmarks/attention_grid.py); false: every shape
    # at attention_efficiency
    attention_waves: bool = True
    # how the kernel hands its blocks to the SMs: "longest-first" (FlashAttention-3 and -4's
    # tile schedulers; the least time any order allows) or "launch" (FlashAttention-2, PyTorch's
    # SDPA flash backend: blocks in launch order, each SM taking the next as it frees;
    # measured on an H200 by benchmarks/attention_gpu.py)
    attention_block_order: str = "longest-first"
    comm_sms: int = 20  # SMs the communication kernels hold (DeepSeek-V3: 20 of 132)
    comm_held_in_pairs: bool = True  # an overlapped pair's all-to-all kernels hold those SMs for the whole pair
    # where an overlapped pair runs a layer's tensor-parallel collectives (its sequence-parallel
    # gathers and reduce-scatters, what tp_overlap leaves exposed): false, on the
    # communication stream beside the other micro-batch's compute; true, on the compute
    # stream inside the attention or MLP they belong to, as Megatron-Core's combined 1F1B
    # runs them (core_v0.14.0 models/common/model_chunk_schedule_plan.py:141-150: the
    # attn, post_attn and mlp nodes on comp_stream, only moe_dispatch and moe_combine on
    # comm_stream; a dense layer's dispatch and combine nodes are no-ops)
    pair_tp_on_compute: bool = False
    param_bytes: float = 2  # weights (bf16)
    grad_bytes: float = 4  # gradient accumulation (fp32)
    optimizer_bytes: float = 12  # fp32 master weights and Adam moments
    allocator_fragmentation: float = 0.024  # share of free device memory the caching allocator strands (device_memory.py)
    dp_overlap: float = 0.84  # speed compute keeps beside a data-parallel collective (step.exposed: 1/1.189, arXiv 2507.03114)
    p2p_latency_us: float = 10  # fixed cost of one point-to-point transfer
    p2p_overlap: bool = True  # stage-to-stage transfers overlap compute; false: each op waits for its sends and receives
    # the host's torch.cuda.synchronize() after each batched stage-to-stage exchange, which
    # exposes the next op's first launch (p2p_sync.py): "megatron-core" where Megatron-Core
    # batches them (batch_p2p_comm with its default batch_p2p_sync: 1F1B without virtual
    # stages, as Megatron-LM and Megatron-Bridge set it), "megatron-2021" after every
    # exchange of Megatron-LM 2021 (interleaved too); "none": PyTorch's pipelining,
    # DeepSpeed, a run that turns batch_p2p_sync off
    p2p_sync: str = "none"
    # zb-auto's cap on each rank's activations, in micro-batches of the largest stage's: the
    # Zero Bubble fork's --zero-bubble-max-pending-backward (sail-sg/zero-bubble-pipeline-
    # parallelism 77b9eed9, zb_schedules.py: that many times a stage's forward memory;
    # its example script sets 2 x pp). pp is the paper's ZB-1p, 2pp its ZB-2p; 0: 2pp
    zb_max_pending_backward: int = 0
    micro_batch_sizes: tuple[int, ...] = (1, 2)  # sequences per micro-batch, searched
    hbm_efficiency: float = 0.8  # share of HBM bandwidth memory-bound kernels reach
    flash_attention: bool = True  # false: unfused attention (scores go through HBM)
    sequence_parallel: bool = True  # tensor-parallel runs shard norms and dropout over the sequence
    # which tensor-parallel collectives run beside a multiply (tp_overlap.py):
    # "backward": a column-parallel multiply's backward runs its input gradient's
    # all-reduce (with sequence parallelism: the re-gather of its saved input shard, then
    # the input gradient's reduce-scatter) asynchronously beside its own input- and
    # weight-gradient multiplies, the rest exposed: Megatron-LM since 6e1bde1e0f (Sep 2021)
    # and Transformer Engine's Linear, with no flag; "all": every collective chunked under
    # the multiplies (Megatron-Core's --tp-comm-overlap userbuffers, torchtitan's AsyncTP);
    # "micro_pipeline": those torch Inductor's micro-pipeline pass fuses (AsyncTP as torch
    # ran it in late 2024), the backward's input-gradient reduce-scatters exposed;
    # "none": all exposed (Megatron-LM before that commit, DeepSpeed's forks, DTensor's
    # synchronous tensor parallelism in torchtitan). A training file's true and false
    # read as "all" and "none". The default is the one both printed recipes can ask for
    # (megatron_flags.py adds --tp-comm-overlap, torchtitan_config.py names AsyncTP);
    # torchtitan has no "backward"
    tp_overlap: str = "all"
    # Transformer Engine's userbuffers under tp_overlap = "all" (Megatron-Core's
    # --tp-comm-overlap), priced beside the overlap itself (te_tensor_parallel.py): "none"
    # leaves them out; "ring_exchange" (copy engines, then a reduce kernel of its own) or
    # "pipeline" (an SM kernel that reduces as it sends: TE's default) names how the
    # forward's row-parallel reduce-scatters (proj_fprop, fc2_fprop) run, as the run's
    # userbuffer config sets them; either adds the copies every userbuffer all-gather and
    # bulk reduce-scatter makes on the compute stream
    ub_fprop_rs: str = "none"
    # SMs those forward row-parallel multiplies give up to the communication kernel (the
    # config's num_sm where it sets set_sm_margin; TE's default pipeline: 16)
    ub_fprop_sm_margin: int = 0
    grad_reduce_bytes: float = 2  # bytes per gradient element in the data-parallel reduction
    fused_elementwise: bool = True  # fused norm/rotary/activation kernels; false: PyTorch eager ops (torchtitan)
    # whose eager block runs where fused_elementwise is false (elementwise.py): "torchtitan"
    # (separate wq, wk, wv and w1, w3, no biases, SDPA) or "llm-foundry" (MosaicML's MPT
    # block, v0.3.0: one Wqkv, a bias on every Linear, its Triton attention; llm_foundry.py)
    eager_block: str = "torchtitan"
    # the norms' kernel where it differs from the rest, for what they keep (activations.py)
    # and move (elementwise.py): "fused" (input and rstd; torchtitan's norm_type =
    # "fused_rmsnorm"), "eager" (fp32 copies), "two-pass" (Megatron-LM's
    # megatron/fused_kernels/layer_norm_cuda_kernel.cu, from apex, as Megatron-LM 2021,
    # Megatron-DeepSpeed and Megatron-LM 2022 without apex's persistent kernel ran it: keeps
    # what "fused" keeps, its backward reads the input and the gradient twice), "auto" as
    # fused_elementwise
    norm_kernel: str = "auto"
    # whose fused kernels the layer runs where fused_elementwise (elementwise.py): "te"
    # TransformerEngine's and Megatron-Core's; "megatron-jit" Megatron-LM 2021-22's GPT
    # layer (and Megatron-DeepSpeed's): TorchScript bias-GELU and bias-dropout-add whose
    # bias gradients autograd sums in passes of their own, the QKV bias added after its
    # multiply, and the unfused attention's layout copies; "inductor" torchtitan's Llama block
    # as torch.compile generates it (elementwise.inductor_terms: counted by Inductor itself)
    fused_kernels: str = "te"
    grad_accumulation_bytes: float = 0  # bytes a parameter a micro-batch to accumulate gradients (0: fused)
    # layers per stage: "balanced" by cost, "even" (Megatron-LM 2021, DeepSpeed), or the split a
    # run used as a Megatron layout string ("Et|(tt|)*30mL": pipeline_layout.py)
    stage_split: str = "balanced"
    # bytes per logit the cross-entropy moves besides the head's multiply: 10 fused (logits
    # read for the softmax and the loss, their gradient written and read, 2 bytes each);
    # Megatron-LM 2021 without --fp16-lm-cross-entropy (its default) upcasts the logits and
    # runs its vocab-parallel loss as eager fp32 ops (gpt_model.py ``output.float()``,
    # mpu/cross_entropy.py): forward cast 2+4, max 4, sub_ 8, exp 8, sum 4, div_ 8; backward
    # mul_ 8 and the cast back 4+2: 52; torchtitan's eager F.cross_entropy on upcast logits
    # 36, 76 under loss_parallel (TORCHTITAN_LOGIT_BYTES above). Above 10 the loss keeps
    # an fp32 softmax for its backward (activations.head_saved)
    logit_bytes: float = 10
    # the share of logit_bytes the loss's forward moves, the rest backward: half where no
    # count says otherwise; torchtitan's eager loss 14 of 36, 38 of 76 under loss_parallel
    # (torchtitan_loss, counted in torch by tests/test_loss_bytes.py); Megatron-LM 2021's
    # 38 of 52 (MEGATRON_2021_LOGIT_FORWARD_BYTES)
    loss_forward_share: float = 0.5
    # the residual branches' dropout (Megatron-LM's default --hidden-dropout 0.1; Llama 3,
    # DeepSeek-V3 and torchtitan train without): besides the add it is fused into, it writes
    # a one-byte keep mask per element of each block's output forward and reads it backward
    # (Megatron-LM 2021 transformer.py, bias_dropout_add_fused_train, a TorchScript kernel)
    hidden_dropout: bool = False
    # the small-kernel regime (floors.py names the measurements): a kernel takes at least
    # kernel_floor_us on the GPU; the host issues each of a layer's kernels in
    # host_us_per_kernel (eager PyTorch), or a whole layer as one graph launch when the
    # framework captures it with CUDA graphs
    kernel_floor_us: float = 3.4
    # an MoE layer's weighted combine keeps each expert copy's output for the gate's
    # gradient (Megatron-Core, TransformerEngine's fused unpermute); activations.py
    moe_combine_keeps_outputs: bool = True
    # fp32 logit-sized tensors the loss's backward holds at once besides the softmax it saved
    # (activations.loss_transient): 0 for a loss that writes its gradient in place
    # (Megatron's vocab-parallel cross-entropy), 2 for PyTorch's F.cross_entropy on upcast
    # logits (torchtitan), 3 for it under DTensor's loss_parallel (tensor parallelism)
    loss_backward_copies: float = 0
    host_us_per_kernel: float = 3.3
    cuda_graphs: bool = False
    # context parallelism's exchange of keys and values (Megatron-Core --cp-comm-type):
    # "p2p" a ring overlapped with blockwise attention, "all_gather" of K/V before the
    # attention (Llama 3), "a2a" all-to-all over heads (DeepSpeed-Ulysses), "a2a+p2p"
    # all-to-all inside the NVLink domain and the ring between domains
    cp_comm: str = "p2p"
    # ZeRO-3 (FSDP) and the micro-batches: "default" frees each stage's gathered parameters
    # after every forward without pipeline parallelism and keeps them through the step with
    # it (torchtitan's fsdp_reshard_after_forward), "always" frees them, "never" keeps them
    fsdp_reshard: str = "default"
    # --- what PyTorch's own parallelism (DTensor, FSDP2, torch.distributed.pipelining;
    # torchtitan) keeps beyond Megatron-LM's (activations.py, device_memory.py, footprint.py)
    # tensor parallelism's column-parallel multiplies keep their sequence-gathered input:
    # DTensor's all-gather (PrepareModuleInput, ColwiseParallel(input_layouts=Shard(1)))
    # makes a replicated tensor that autograd saves; false: Megatron-LM's sequence
    # parallelism keeps the shard and gathers it again in the backward
    sp_saves_gathered: bool = False
    # FSDP2 keeps each parameter's shard in its fp32 dtype and the optimizer steps it in
    # place: no bf16 shard beside the fp32 one (optimizer_bytes holds that fp32 copy)
    fsdp_fp32_shards: bool = False
    # the loss frees the bf16 logits between its forward and its backward (torchtitan's
    # train.py ``del pred``); the caching allocator keeps their block, which none of the
    # backward's fp32 logit-sized requests fits (device_memory.stranded_logits)
    loss_frees_logits: bool = False
    # the pipeline keeps, on the last stage, every micro-batch's output until the step
    # ends, and on every stage a receive buffer per micro-batch for its input and its
    # output's gradient (torch.distributed.pipelining; device_memory.pipeline_buffers)
    pp_keeps_outputs: bool = False
    # a split backward's W keeps the whole retained graph: torch.distributed.pipelining's
    # stage_backward_input runs autograd with retain_graph=True and keeps the weight
    # nodes, so every tensor the forward saved stays until stage_backward_weight, besides
    # the output gradients it stores (weight_grad_saved.py); false: the Zero Bubble
    # fork's WeightGradStore, which keeps each linear's input and output gradient only
    w_keeps_graph: bool = False
    # context parallelism as PyTorch's context_parallel runs it (torchtitan): attention on
    # keys and values repeated to every query head, its backward accumulating the
    # gradients in fp32 and handing dk, dv round the ring (activations.cp_attention_transient);
    # its cp steps of SDPA, fp32 merges and accumulations (cp_steps.py) and what its
    # exchange leaves exposed (collectives.torch_ring_exposed). cp_comm p2p or all_gather
    # (its alltoall or allgather rotation); false: Transformer Engine's schemes
    torch_context_parallel: bool = False
    # the optimizer's zero_grad(set_to_none=True) frees the gradients after each step
    # (PyTorch's default; torchtitan): FSDP's gradient shards, made as each layer's
    # reduce-scatter ends, are absent at the activations' peak (footprint.py); false:
    # a gradient buffer kept through the run (Megatron-LM's DDP)
    zero_grad_frees: bool = False
    # the memory-bound passes of a step's end (step.optimizer_seconds): "adam" only the
    # fused Adam update and the bf16 weights it writes; "megatron" also Megatron-LM's
    # passes over the gradient buffer and the optimizer shard: zeroing the buffer, the
    # NaN check's norm and the 1/dp scaling before the reduction, the clipping norm and
    # scale, and the copy of the fp32 master weights into the bf16 parameters;
    # "megatron-fp16" Megatron-LM's fp16 optimizer with loss scaling (2021 to 2023:
    # Float16OptimizerWithFloat16Params, no distributed optimizer): the gradients' copy
    # into fp32 ones, their unscaling and overflow check, the clipping, the master copy
    optimizer_step: str = "adam"
    # ZeRO stage 1 all-reduces every gradient instead of reduce-scattering it: DeepSpeed's
    # stage 1 from v0.4.0 (May 2021, "ZeRO stage 1 refresh") to v0.5.x runs on stage2.py's
    # optimizer with contiguous_gradients forced off (runtime/engine.py at v0.5.8,
    # 9aa288d7, lines 1357-1359), so reduce_ipg_grads takes buffered_reduce_fallback's
    # all_reduce over the data-parallel group (zero/stage2.py lines 1179-1194, 1306-1326);
    # the optimizer then steps its own partition and all-gathers the parameters back
    zero1_allreduce: bool = False
    # "megatron" only: Megatron-Core's check_for_nan_in_grad, a norm of every gradient
    # bucket before its reduction (on in Megatron-LM's scripts; Megatron-Bridge's
    # performance configs turn it off)
    grad_nan_check: bool = True
    # Megatron-LM's --ddp-average-in-collective: the 1/dp scaling rides in the reduction
    # (NCCL's average) instead of a pass over the buffer before it (Megatron-Bridge's recipes)
    average_in_collective: bool = False
    # the weight-gradient multiply accumulates into an fp32 main_grad in its epilogue
    # (Megatron-LM's gradient_accumulation_fusion, its default with TransformerEngine):
    # BF16 weight gradients then run at compute.FP32_ACCUMULATE_WGRAD_SHARE of the
    # forward's rate, grouped expert ones pay the fp32 sum's HBM traffic (compute.gemm_fbw); false: the multiply writes a plain bf16 gradient (torchtitan)
    wgrad_fp32_accumulate: bool = False
    # how an MoE layer's token copies reach their experts (collectives.moe_comm): "deepep"
    # sends a token once to each NVLink domain holding one of its experts and forwards it
    # there over NVLink (DeepSeek's DeepEP; Megatron-Core --moe-token-dispatcher-type flex
    # --moe-enable-deepep); "alltoall" sends each of its top_k copies to its expert's GPU
    # (an NCCL all-to-all: Megatron-Core's default --moe-token-dispatcher-type alltoall)
    moe_dispatcher: str = "deepep"
    # --- an MoE layer as its framework issues it (floors.py, layer_costs.py) --------------
    # the expert multiplies' kernels: "grouped", one grouped kernel per multiply (DeepGEMM,
    # CUTLASS grouped GEMMs, torch._grouped_mm); "per_expert", one cuBLASLt multiply per
    # local expert, as Transformer Engine's GroupedLinear runs Megatron-Core's
    # --moe-grouped-gemm experts on Hopper, and under per-tensor FP8 each expert's operand
    # quantized by its own kernels
    moe_expert_gemms: str = "grouped"
    # the least time one MoE layer takes, forward and backward of one micro-batch, when the
    # framework issues it op by op (no CUDA graphs): its host-side issue and
    # synchronisation, which neither the GPU's work nor the tokens set; 0: none.
    # floors.py names the measurement
    moe_layer_issue_ms: float = 0.0
    # Megatron-Core's --moe-pad-expert-input-to-capacity (with a capacity factor): every
    # expert's input padded to its capacity, so the all-to-all's splits are known on the
    # host and its dispatcher never waits for the GPU (cuda_sync_point stays no_sync);
    # false: dropless, and the dispatcher stops the host until the routing is done
    # (layer_costs._floored). Its bytes are the balanced share either way
    moe_pad_to_capacity: bool = False
    # --- torchtitan's peak memory, round two (device_memory.py; benchmarks/peak_memory.py)
    # FSDP2 allocates its collectives' buffers on its own CUDA streams, and the caching
    # allocator reuses a freed block only for the stream it was allocated on: the
    # all-gather copy-in stream keeps two layers' flat gathered buffers, the reduce-scatter
    # stream one layer's reduce-dtype input and every gradient shard, reserved beside what
    # the default stream's tensors can use (device_memory.fsdp_stream_pools)
    fsdp_stream_pools: bool = False
    # torch.compile wraps each transformer block only (torchtitan's apply_compile): the
    # final norm runs eager and keeps the eager RMSNorm's fp32 copies, whatever the
    # blocks' kernels (activations.head_saved)
    final_norm_eager: bool = False
    # torchao's Float8 linears all-gathered in float8 by FSDP2 (torchtitan's
    # float8.enable_fsdp_float8_all_gather, with precompute_float8_dynamic_scale_for_fsdp
    # as docs/float8.md at 9dec370 runs them together): their gathered weights hold one
    # byte an element, the norms, embedding and output head param_bytes (footprint.py);
    # their all-gather and copy-out move one byte an element (step.py), the weights' amax
    # is taken once a step over the shards, and no micro-batch casts a weight again
    # (elementwise.fp8_cast_terms)
    fsdp_float8_all_gather: bool = False
    # torch.distributed.pipelining before pytorch/pytorch#164329 (October 2025; torchtitan's
    # published runs used torch 1963fc8, December 2024): stage_backward takes each
    # micro-batch's input gradient from the receive buffer's ``.grad`` and leaves it
    # there, so a stage holds every micro-batch's input gradient until the next step's
    # clear_runtime_states (device_memory.pipeline_buffers); false: freed once sent
    pp_keeps_input_grads: bool = False
    # torch.distributed.pipelining before pytorch/pytorch#153383 (May 2025; torchtitan's
    # published runs used torch 1963fc8, December 2024): forward_one_chunk appends every
    # stage's output to output_chunks, not the last stage's alone, so each stage keeps
    # all its micro-batches' outputs until the next step's clear_runtime_states
    # (device_memory.pipeline_buffers); false: an output lives from its F to its backward
    # (pipeline_io.stage_boundary_pairs)
    pp_keeps_stage_outputs: bool = False
    # FSDP2 keeping each stage gathered under torch.distributed.pipelining (torchtitan):
    # a stage's unsharded gradients exist from its first backward, which makes them, to
    # its last, whose reduce-scatter drops them (pipesim.memory's _peak_with_grads);
    # false: held through the whole step, as Megatron-LM's gradient buffer is
    grads_from_first_backward: bool = False


def norm_fused(t: Training) -> bool:
    """Whether the norms run as fused kernels, keeping their input and statistics (one
    kernel a pass, or Megatron's two-pass backward), not PyTorch's eager fp32 chain."""
    return t.fused_elementwise if t.norm_kernel == "auto" else t.norm_kernel != "eager"


def te_current_scaling(t: Training) -> bool:
    """Whether the run's FP8 operands are Transformer Engine's current-scaling casts
    (``elementwise.te_current_cast_terms``), as Megatron-Bridge's fp8_cs recipe runs them."""
    return t.precision == "fp8" and t.fp8_casts == "transformer_engine" and t.fp8_scaling == "tensor"
