"""Every assumption a plan's numbers rest on, as the report's (name, value) rows: the
training spec's fields, the hardware, and how each cost is modelled, worded for the set-up
given; then the layout's newer dimensions and what the search fixed or left out."""

from __future__ import annotations

from dataclasses import fields

from .attention_window import causal_pairs, chunked_layers
from .candidates import SEARCHED_MAX_SLOTS, fixed_order_families, placement_chunks
from .collectives import float8_gathers
from .compute import (
    ALIBI_SCORE_BYTES,
    BACKWARD_SCORE_BYTES,
    FLASH_BACKWARD_SHARE,
    FLASH_BACKWARD_TILE_ROWS,
    FORWARD_SCORE_BYTES,
    FP8_WGRAD_SHARE,
    gemm_efficiency,
)
from .device_memory import SOURCES
from .footprint import float8_gathered
from .memory_lines import held_text
from .nccl import HOSTS
from .p2p_sync import sync_text
from .parallelism import domain_text, layout_assumptions
from .pipeline_layout import split_text
from .results import Plan
from .specs import Cluster, Training
from .training import te_current_scaling

#: the tensor-parallel line's last words, per ``Training.tp_overlap`` (tp_overlap.py)
TP_OVERLAP_TEXT = {
    "none": "exposed (tp_overlap = none: Megatron-LM before September 2021, DeepSpeed's forks, torchtitan without AsyncTP)",
    "backward": "the backward's column-parallel collectives (the input gradient's all-reduce or reduce-scatter, the "
    "saved input's re-gather) hidden under their own weight- and input-gradient multiplies up to those multiplies' "
    "time, which run slower by comm_sms of the SMs meanwhile, the rest exposed (tp_overlap = backward: Megatron-LM "
    "and Transformer Engine without --tp-comm-overlap)",
    "all": "overlapped with the multiplies around it (tp_overlap = all: Megatron-Core's --tp-comm-overlap, torchtitan's "
    "AsyncTP; in an MoE model those of the halves with Transformer Engine's userbuffers, the attention and dense "
    "layers' MLPs but MLA's, under their own multiplies, the rest as tp_overlap = backward hides them)",
    "micro_pipeline": "overlapped with the multiplies around it where torch Inductor's micro-pipeline pass fuses them, "
    "the backward's input-gradient reduce-scatters exposed (tp_overlap = micro_pipeline: torchtitan's AsyncTP as torch "
    "ran it in late 2024; with no sequence parallelism, or an MoE model, all exposed)",
}


def nccl_between_nodes_text(c: Cluster) -> str:
    """The collectives line's words for NCCL's algorithms and its tuning model's terms
    between nodes (nccl.py), empty where NCCL's protocols are switched off."""
    if not c.nccl_protocols:
        return ""
    posting, two, more = HOSTS[c.host_cpu]
    tree = "; all-reduces at the faster of Ring and Tree by size" if "tree" in c.nccl_algorithms else "; Ring only"
    return (
        f"{tree} (nccl_algorithms); between nodes a ring step at least {posting:g} us ({posting * 3:g} under Simple: "
        f"{c.host_cpu} hosts' network posting), LL at most {two:g} GB/s on two nodes and {more:g} on more, "
        "a Simple all-reduce ring's latency x1.4 (NCCL's tuning.cc)"
    )


def field_text(value: object) -> str:
    """A training field as the training file writes it: true/false, lists comma-separated,
    whole numbers with thousands separators (tokens: 1,000,000,000,000, not 1000000000000.0)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ", ".join(map(field_text, value))
    if isinstance(value, float) and value.is_integer():
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def assumptions(plan: Plan) -> list[tuple[str, str]]:
    t, c = plan.training, plan.cluster
    rows = [(f.name, field_text(getattr(t, f.name))) for f in fields(Training)]
    if t.recompute == "auto" and plan.best is not None:  # the search's pick, as the recommendation runs it
        rows[rows.index(("recompute", "auto"))] = ("recompute", f"auto: the plan chose {plan.best.candidate.recompute}")
    if plan.pins.micro_batch:  # the pin replaced the training's list: say what was searched
        rows[[r[0] for r in rows].index("micro_batch_sizes")] = (
            "micro_batch_sizes",
            f"{plan.pins.micro_batch} alone (--micro-batch-size, in place of the training's {field_text(t.micro_batch_sizes)})",
        )
    bf16, fp8 = gemm_efficiency(c, t, False), gemm_efficiency(c, t, True)
    rows[rows.index(("compute_efficiency", field_text(t.compute_efficiency)))] = (
        "compute_efficiency",
        f"{bf16:g} of BF16 peak"
        + (f", {fp8:g} of FP8 peak ({t.fp8_scaling}-scaled)" if c.fp8_tflops else "")
        + " on large matrix multiplies",
    )
    rows += [
        (
            "gpu",
            f"{c.gpu}: {c.bf16_tflops:g} BF16 / {c.fp8_tflops:g} FP8 dense TFLOP/s, {c.hbm_gb:.3g} GB at {c.hbm_tbps:g} TB/s",
        ),
        (
            "links",
            f"NVLink {c.nvlink_gbps:g} GB/s as NCCL reaches it, network {c.network_gbps:g} GB/s line rate, per GPU, one way",
        ),
        (
            "collectives",
            f"NCCL's alpha-beta: {c.nccl_base_us:g} us a collective and {c.nvlink_hop_us:g} us a ring step or peer on "
            f"NVLink, {c.network_hop_us:g} us over the network (its tuning model's LL ring latencies)"
            + ("; rings at the fastest of LL, LL128 and Simple, each its own latencies and bandwidth" * c.nccl_protocols)
            + nccl_between_nodes_text(c)
            + "; the network at "
            f"network_share {c.network_share:g} of line rate for rings and send/recv, network_alltoall_share "
            f"{c.network_alltoall_share:g} for an all-to-all (nccl.py names the measurements)",
        ),
        (
            "usable memory",
            (held_text(plan, plan.best) + "; " if plan.best else "")
            + "each pipeline rank's peak against its own usable memory: only the last stage's rank holds back the "
            "loss's transient and the logits, each rank its own stages' receive buffers and FSDP pools; "
            + f"CUDA context {c.cuda_context_mib:g} MiB, NCCL {c.nccl_mib_per_group:g} MiB per communicator, "
            f"allocator_fragmentation {t.allocator_fragmentation:g} of the rest, the full-recompute transient; "
            "where each comes from: " + "; ".join(f"{what}: {source}" for what, source in SOURCES.items()),
        ),
        (
            "activations",
            "each tensor PyTorch and the fused kernels save, norm outputs, flash's fp32 logsumexp, dropout masks, MoE "
            "routing and combine state and the head's loss softmax included (activations.py; held within 1% of real "
            "PyTorch blocks by tests/test_activations_torch.py)",
        ),
        (
            "small kernels",
            f"a kernel at least kernel_floor_us {t.kernel_floor_us:g} us, a layer's pass at least its kernels times "
            f"host_us_per_kernel {t.host_us_per_kernel:g} us"
            + (" (one graph launch under cuda_graphs)" if t.cuda_graphs else ""),
        ),
        *moe_issue_assumptions(plan),
        (
            "stragglers",
            f"a step runs at the slowest of its {c.gpus} GPUs: speeds spread by gpu_speed_sd {c.gpu_speed_sd:g} "
            "(Sinha et al. SC'22), the expected slowest of N normal draws"
            if c.gpus > 1
            else "one GPU: no slower peer to wait for (stragglers.expected_max_z of one draw is 0)",
        ),
        ("nodes", domain_text(c)),
        (
            "flops",
            "matrix multiplies 2nm; B and W each as the forward's multiplies; causal attention scores heads*seq/2*(qk+v)*2",
        ),
        (
            "matrix multiplies",
            "one curve: FLOPs at the efficiency above times the wave quantization of 128x128 output tiles over the SMs, "
            "or bytes at HBM bandwidth if longer (thin shards and few tokens per expert fall below peak)"
            # the FP8 weight-gradient terms apply only where the multiplies run in FP8
            # (compute.py gemm_times): a bf16 plan's report must not claim them
            + (
                "; per-tensor FP8 weight gradients at the forward's rate"
                if t.precision == "fp8" and t.fp8_scaling == "tensor"
                else f"; block-scaled FP8 weight gradients at {FP8_WGRAD_SHARE:g} of the forward's rate plus their operand casts"
                if t.precision == "fp8"
                else ""
            )
            + (f"; plus gemm_tile_fill_us {c.gemm_tile_fill_us:g} per output tile" if c.gemm_tile_fill_us else ""),
        ),
        (
            "attention",
            f"flash: forward at attention_efficiency of BF16 peak, backward 2.5x the FLOPs at {FLASH_BACKWARD_SHARE:g} of that "
            + (
                f"rate, each times the share of the {c.sms} SMs its causal grid keeps busy ({c.attention_tile_rows}-row query "
                f"blocks forward, {FLASH_BACKWARD_TILE_ROWS}-row key blocks backward, a block per head and sequence, "
                + ("handed out in launch order (FlashAttention-2)" if t.attention_block_order == "launch" else "longest first")
                + ": attention_waves, attention_block_order); "
                if t.attention_waves
                else "rate; "
            )
            + f"unfused: the whole score square as multiplies, {FORWARD_SCORE_BYTES} bytes per score through HBM "
            f"forward and {BACKWARD_SCORE_BYTES} backward for the softmax and dropout (Megatron-LM 2021's kernels), "
            "the q and k gradients scaled by baddbmm's alpha in a pass each"
            + (
                f", {ALIBI_SCORE_BYTES} more forward for ALiBi's bias, copied into the scores by baddbmm (alibi)"
                if plan.model.alibi and not t.flash_attention
                else ""
            ),
        ),
        (
            "memory-bound kernels",
            "norms, residual adds, rotary, activations, MoE routing permutes and FP8 casts priced by their bytes at "
            "hbm_efficiency of HBM bandwidth, "
            + (
                "as fused kernels (backward from what TransformerEngine's and Megatron-Core's kernels read and "
                "write: norm 3h against 2h forward, SwiGLU 5 ffn against 3, rotary as forward, the residual "
                "stream's gradients added; routing and FP8 casts twice their forward)"
                if t.fused_elementwise
                else "as PyTorch's eager ops (fp32 RMSNorm chain, complex rotary, repeat_kv copies: torchtitan's model code), "
                "forward and backward as counted op by op in torch (norm 18h forward, 40h backward plus autograd's "
                "gradient sums; rotary 10 per element each way; SwiGLU 5 ffn forward, 9 backward)"
            )
            + (
                "; the norms torchtitan's fused_rmsnorm kernel (2h forward, 3h backward: norm_kernel)"
                if t.norm_kernel == "fused" and not t.fused_elementwise
                else ""
            )
            + (
                "; Megatron-LM's two-pass LayerNorm, the final one too (2h + 4 forward, 5h + 8 backward, three "
                "kernels: norm_kernel)"
                if t.norm_kernel == "two-pass"
                else ""
            )
            + (
                "; Megatron-LM 2021-22's layer (fused_kernels): the QKV bias added and the attention output permuted "
                "in passes of their own, autograd's bias-gradient sums and split's cat backward"
                if t.fused_kernels == "megatron-jit"
                else ""
            )
            + (
                "; as torch.compile (Inductor) generates torchtitan's block, counted by Inductor's own scheduler "
                "(fused_kernels): each norm's weight gradient a reduction of its own re-reading its inputs, the complex "
                "rotary an upcast, PyTorch's complex multiply and a downcast (10 per element each way), the gradient "
                "sums folded into the norms' backward; under op or full checkpointing the recomputed ops fused into the "
                "backward's kernels (the norms and rotary again, SwiGLU's product only, no residual add)"
                if t.fused_kernels == "inductor"
                else ""
            )
            + (
                "; hidden dropout's one-byte masks, written forward and read backward (Megatron-LM's --hidden-dropout)"
                if t.hidden_dropout
                else ""
            )
            + (
                "; FP8 casts as torchao's Float8Linear makes them under torch.compile (fp8_casts): each input, weight "
                "and output gradient cast once into both layouts, 5 bytes an element (7 for a weight), "
                + (
                    "the weights gathered by FSDP in float8 and only transposed each backward"
                    if float8_gathered(t)
                    else "the weights every micro-batch"
                )
                if t.precision == "fp8" and t.fp8_casts == "torchao"
                else ""
            )
            + (
                "; FP8 casts as Transformer Engine 2.7's current scaling launches them (fp8_scaling tensor): "
                "each input read for its amax (fused into TE's norm) and cast into both layouts at once, 6 bytes an "
                "element (4 after a norm), or row-wise on its shard before a sequence-parallel gather and transposed "
                "in FP8 backward; each output gradient likewise; the weights once a step (not priced)"
                if te_current_scaling(t)
                else ""
            ),
        ),
        (
            "stage imbalance",
            f"the embedding on the first stage, the output head and loss ({t.logit_bytes:g} bytes a logit at HBM bandwidth) "
            + ("and the MTP modules " if plan.model.mtp_layers else "")
            + "on the last; "
            + split_text(t.stage_split),
        ),
        (
            "tensor parallelism",
            "an all-reduce (or, with sequence parallelism, all-gather + reduce-scatter) of the hidden states after "
            "attention and after the MLP, forward and backward, and at the model's ends (the embedding's lookup forward, the "
            "head's input gradient backward; with sequence parallelism both ways at both), over NVLink; "
            + (
                "the backward gathers each column-parallel multiply's input again from the shard the forward kept "
                "(sp_saves_gathered = false, Megatron-LM's sequence parallelism); "
                if t.sequence_parallel and not t.sp_saves_gathered
                else ""
            )
            + (
                "each layer's all-gathers move FP8, one byte an element (torchao's Float8 tensor parallelism and Transformer "
                "Engine's current scaling cast the sequence shard first, and the output's gradient backward), its "
                "reduce-scatters BF16; "
                if float8_gathers(t)
                else ""
            )
            + (
                "each cast of a gathered shard first all-reduces its amax over the tensor group and waits (Transformer "
                "Engine's current scaling: one float, NCCL's latency, exposed); "
                if te_current_scaling(t) and t.sequence_parallel
                else ""
            )
            + (
                "each tensorwise cast of a sharded activation, output gradient "
                + ("or weight " if not float8_gathered(t) else "")
                + "all-reduces its amax over the tensor group and waits (torchao's Float8 tensor parallelism: DTensor "
                "reduces the shard's max; one float, NCCL's latency, exposed); "
                if t.precision == "fp8" and t.fp8_scaling == "tensor" and t.fp8_casts == "torchao"
                else ""
            )
            + (
                f"Transformer Engine's userbuffers (ub_fprop_rs = {t.ub_fprop_rs}) copy each all-gathered shard into "
                "their buffer and the bulk-reduce-scattered input gradient out of it on the compute stream"
                + (
                    ", and sum the forward's reduce-scatter chunks in a kernel of their own"
                    if t.ub_fprop_rs == "ring_exchange"
                    else ""
                )
                + (
                    f"; the forward's row-parallel multiplies leave {t.ub_fprop_sm_margin} of the SMs to it (set_sm_margin)"
                    if t.ub_fprop_sm_margin
                    else ""
                )
                + "; "
                if t.ub_fprop_rs != "none" and t.sequence_parallel
                else ""
            )
            + (
                "a full recompute runs the forward's collectives again but the MLP's row-parallel one, which feeds only "
                "the block's output and which the compiled backward graph drops (fused_kernels = inductor); "
                if t.fused_kernels == "inductor"
                else ""
            )
            + TP_OVERLAP_TEXT[t.tp_overlap],
        ),
        (
            "all-to-all",
            (
                "each of a token's top-k copies goes straight to its expert's GPU, over the network where that GPU is "
                "in another node (moe_dispatcher = alltoall: Megatron's NCCL all-to-all dispatcher)"
                if t.moe_dispatcher == "alltoall"
                else "a token crosses the network once per destination node (node-limited routing caps them), then NVLink"
            )
            + "; the slower link sets the time; overlapped only inside DualPipe's F&B pairs, whose all-to-all kernels "
            + (
                f"hold {t.comm_sms} of the {c.sms} SMs for the whole pair (DeepSeek-V3 section 3.2.2; its training "
                "profile's pair within 1%)"
                if t.comm_held_in_pairs
                else f"take {t.comm_sms} of the {c.sms} SMs while they move data"
            ),
        ),
        ("p2p", "each activation and its gradient between stages: latency plus its bytes (1/tp per shard) at network bandwidth"),
        *p2p_sync_assumptions(plan),
        (
            "data parallelism",
            (
                "gradients all-reduced (DeepSpeed's ZeRO stage 1 of v0.4-v0.5: zero1_allreduce) and their partition stepped"
                if t.zero1_allreduce
                else "gradients reduce-scattered (ZeRO >= 1) or all-reduced"
            )
            + ", parameters all-gathered back, behind the last backward "
            "and the first forward (where they overlap, Megatron-Core's way chunk by chunk on the simulated order: "
            "each chunk's reduction from its last backward, its gather from where the schedule launches it to its "
            f"first forward), the compute beside them at {t.dp_overlap:g} of its speed (dp_overlap; 18.9% slower on "
            "average, arXiv 2507.03114); ZeRO-3 per micro-batch, or with pipeline parallelism "
            "once a step per stage, its parameters kept gathered from the first forward to the last backward (fsdp_reshard "
            f"= {plan.training.fsdp_reshard}), each gather copied out on the compute stream (FSDP2); NVLink inside a "
            "node, else one network interface per member of the ring in a node (NCCL's channels), at most NVLink",
        ),
        (
            "gradient accumulation",
            "fused into the weight-gradient multiply"
            if not t.grad_accumulation_bytes
            else f"{t.grad_accumulation_bytes:g} bytes a parameter a micro-batch at HBM bandwidth on the W part "
            "(an unfused add into the accumulated gradients)",
        ),
        (
            "optimizer",
            "Adam step over the local shard: gradients, master weights and moments read and written at HBM bandwidth"
            + (
                "; with Megatron-LM's passes (optimizer_step = megatron): the gradient buffer zeroed, NaN-checked and "
                "scaled by 1/dp, the shard's gradients clipped, the bf16 weights copied from the fp32 masters"
                if t.optimizer_step == "megatron"
                else ""
            ),
        ),
        (
            "not modelled",
            # the steady spread of GPU speeds is priced (the stragglers row): only what varies
            # from step to step is left out
            "load imbalance between experts, jitter and transient stragglers (beyond the steady spread of GPU speeds in "
            "the stragglers row), host gaps beyond the floors stated above, data loading, restarts",
        ),
    ]
    return rows + window_assumptions(plan) + sink_assumptions(plan) + layout_assumptions(plan) + search_assumptions(plan)


def p2p_sync_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """Megatron's device synchronize after each stage-to-stage exchange, where the plan's
    best layout runs one (p2p_sync.py)."""
    best = plan.best
    if best is None:
        return []
    cand = best.candidate
    pp = cand.layout.pp
    text = sync_text(plan.training, pp * placement_chunks(cand.schedule, cand.chunks), pp)
    return [("p2p sync", text)] if text else []


def window_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """A model whose layers (some or all) attend over a sliding window or within chunks
    shorter than the sequence (Llama 4): how many, and what is priced for them."""
    m, seq = plan.model, plan.training.seq
    rows = []
    windowed = sum(1 for i in range(m.layers) if 0 < m.window(i) < seq)
    if windowed:
        w = m.sliding_window
        what = f"attend over a {w:,}-token window (sliding_window)"
        how = "the window's causal pairs (each query reads min(window, position + 1) keys"
        rows += _masked_row(
            plan, "sliding window", windowed, what, how, causal_pairs(seq, w), "the window", "so a window saves none"
        )
    chunked = chunked_layers(m, seq)
    if chunked:
        ch = m.attention_chunk
        what, how = (
            f"attend within {ch:,}-token chunks (attention_chunk)",
            "the chunks' causal pairs (each a causal square of its own",
        )
        rows += _masked_row(plan, "chunked attention", chunked, what, how, causal_pairs(seq, 0, ch), "chunks", "")
    return rows


def _masked_row(plan: Plan, key: str, layers: int, what: str, how: str, pairs: float, without: str, saves: str):
    """One assumption row for ``layers`` layers whose mask computes ``pairs`` pairs a head."""
    m, seq = plan.model, plan.training.seq
    which = f"all {m.layers} layers" if layers == m.layers else f"{layers} of {m.layers} layers"
    text = (
        f"priced as {how}: {100 * pairs / (seq * seq / 2):.3g}% of full causal attention's at {seq:,} tokens), "
        f"in the step and in the model FLOPs of MFU; memory as without {without} (flash attention saves no score "
        f"square{', ' + saves if saves else ''})"
        if plan.training.flash_attention
        else "priced as full attention: unfused attention computes the whole score square and masks it"
    )
    return [(key, f"{which} of {m.name} {what}, {text}")]


def sink_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """A model with attention sinks (gpt-oss): where they run and what is priced for them.
    Transformer Engine (2.9; the same at d0067d0da) runs a learned softmax offset in its
    cuDNN fused attention alone once cuDNN is 9.13.1 or later (get_attention_backend,
    nvte_get_fused_attn_backend); FlashAttention takes none."""
    m = plan.model
    if not m.attention_sinks:
        return []
    where = (
        "inside fused attention, priced as without them: Transformer Engine runs them only in its cuDNN fused attention "
        "(cuDNN 9.13.1 or later; FlashAttention takes none)"
        if plan.training.flash_attention
        else "one more column of each unfused softmax, not priced apart"
    )
    return [("attention sinks", f"{m.name} has a learned sink logit a head on every layer, {where}")]


def search_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """What the search fixed or left out: pins, and the searched orders not chosen for
    the candidate's own costs."""
    rows = [("pinned", plan.pins.flags())] if plan.pins else []
    fixed = fixed_order_families(plan.searched)
    if fixed:
        rows.append(
            (
                "searched orders",
                f"{', '.join(fixed)}: orders chosen at F = B = W = 1 by their builders, which take no costs, then simulated "
                "under each candidate's costs (a conservative verdict on them); zb-auto is ordered under each candidate's "
                f"own per-stage F/B/W and memory; searched orders are built for pp x M up to {SEARCHED_MAX_SLOTS}",
            )
        )
    return rows


def moe_issue_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """How an MoE model's expert kernels are launched and issued (floors.py)."""
    t = plan.training
    if plan.model.moe is None:
        return []
    kernels = (
        "one multiply per local expert (Transformer Engine's GroupedLinear on Hopper)"
        + (
            ", each expert's operands quantized by their own amax, scale and cast kernels"
            if t.precision == "fp8" and t.fp8_scaling == "tensor"
            else ""
        )
        if t.moe_expert_gemms == "per_expert"
        else "one grouped kernel per expert multiply"
    )
    issue = (
        f"; an MoE layer at least moe_layer_issue_ms {t.moe_layer_issue_ms:g} ms a micro-batch, forward and backward, "
        "however few its tokens: issued op by op (Megatron-LM's moe_perf benchmark at Qwen3-30B-A3B's layer on H100, "
        "marin-community/marin#3666)"
        if t.moe_layer_issue_ms and not t.cuda_graphs
        else ""
    )
    return [("MoE kernels", kernels + issue)]
