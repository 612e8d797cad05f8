"""Megatron-LM's flags for a plan, or why it has no equivalent schedule.

The flags were read from NVIDIA/Megatron-LM at d98e8a6 (2026-08-22; check them again
against the version you run): megatron/training/arguments.py and the TransformerConfig
fields it turns into flags; the layout syntax (E embedding, t layer, m MTP, L loss,
stages split by |) in megatron/core/transformer/pipeline_parallel_layer_layout.py. Its
schedules are 1F1B, interleaved 1F1B (virtual stages) and combined 1F1B
(``--overlap-moe-expert-parallel-comm``, which needs virtual stages when pp > 1); it has
no GPipe, Zero Bubble, V or DualPipe schedule.
"""

from __future__ import annotations

import re

from .attention_window import chunked_layers, run_window
from .collectives import a2a_size
from .megatron_data_parallel import data_parallel_flags
from .moe_layers import megatron_moe_layer_freq
from .naming import every_nth_layer
from .plan_stages import Part, placement_of
from .results import Plan, Result
from .runnable import COMBINED, chunks_problem, combined_problem
from .specs import Model, Training


def megatron_layout(parts: list[Part]) -> str:
    """``--pipeline-model-parallel-layout``: the stages in model order, split by |, a run
    of three or more alike written once as Megatron-Core's parser unrolls it
    (``(t*2|)*30``: pipeline_parallel_layer_layout.py, parse_str_to_list)."""

    def one(p: Part) -> str:
        n = len(p.layers)
        body = ("E" if p.embedding else "") + ("t" if n == 1 else f"t*{n}" if n else "")
        return body + "m" * p.mtp + ("L" if p.head else "")

    stages = [one(p) for p in parts]
    out, i = [], 0
    while i < len(stages) - 1:  # the last stage ends the string, with no | after it
        j = i
        while j + 1 < len(stages) - 1 and stages[j + 1] == stages[i]:
            j += 1
        run = j - i + 1
        out.append(f"({stages[i]}|)*{run}" if run >= 3 else "".join(x + "|" for x in stages[i : j + 1]))
        i = j + 1
    return "".join(out) + stages[-1]


def blackwell_or_later(gpu: str) -> bool:
    """Whether a cluster's GPU is a Blackwell data-center part (B100, B200, B300, GB200,
    GB300: compute capability 10). Megatron-LM's validate_args (d98e8a6,
    megatron/training/arguments.py) asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or
    context parallelism only where get_device_arch_version() (the device's major compute
    capability) is below 10: "CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since
    the Blackwell architecture". A GPU not named so (an older part, or a custom cluster file's
    own name) keeps the note, which says it applies before Blackwell."""
    return re.fullmatch(r"G?B[123]\d\d\b.*", gpu.strip().upper()) is not None


def megatron(plan: Plan, r: Result, parts: list[Part]) -> dict:
    """Megatron-LM's flags for this plan, or why it has no equivalent schedule."""
    cand, lay, m, t = r.candidate, r.candidate.layout, plan.model, plan.training
    name = cand.schedule
    pl = placement_of(r)
    if name not in ("1f1b", "interleaved-1f1b", *COMBINED):
        # where else it runs, after the sentence rather than inside it
        shown, elsewhere = {
            "dualpipe": ("DualPipe", "DeepSeek's deepseek-ai/DualPipe runs it (two model copies, bidirectional)"),
            "dualpipev": ("DualPipeV", "PyTorch's ScheduleDualPipeV (torchtitan) runs it"),
        }.get(name, (name, ""))
        return {
            "runs": False,
            "why": f"Megatron-LM has no {shown} schedule (it runs 1F1B, interleaved 1F1B and combined 1F1B)"
            + (f"; {elsewhere}" if elsewhere else ""),
        }
    group = r.group_size  # Megatron's group where its default of pp refuses M (search.megatron_group)
    if name.startswith("interleaved") and cand.microbatches % lay.pp and group is None:
        return {
            "runs": False,
            "why": f"pipesim's interleaved order for M={cand.microbatches} not a multiple of pp={lay.pp} is PyTorch's "
            "rounds, not Megatron's",
        }
    if refused := chunks_problem(lay.pp, pl.chunks):
        # the flags without virtual stages would run the one stage whole, not the chunked
        # order the plan simulated (the search leaves such candidates out: ``runnable``)
        return {"runs": False, "why": f"{name} (v={pl.chunks}): {refused}"}
    if name in COMBINED and (refused := combined_problem(lay.ep, cand.recompute, lay.pp, pl.chunks)):
        return {"runs": False, "why": refused}
    flags = [f"--num-layers {m.layers}", f"--tensor-model-parallel-size {lay.tp}", f"--pipeline-model-parallel-size {lay.pp}"]
    if not m.tied_embeddings:
        # Megatron ties the output head to the embedding unless told (gpt_builders.py at
        # d98e8a6: share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights),
        # which would drop the head's weights the plan counted and, under a pipeline, add the
        # embedding's copy and gradient all-reduce on the last stage
        flags.append("--untie-embeddings-and-output-weights")
    if lay.pp > 1:  # the split, the virtual stages with it (Megatron derives their number)
        flags.append(f'--pipeline-model-parallel-layout "{megatron_layout(parts)}"')
    notes = []
    if lay.tp > 1:
        tp_flags, said = tensor_parallel_flags(t)
        flags += tp_flags
        notes += said
    if lay.cp > 1:
        flags += [f"--context-parallel-size {lay.cp}", f"--cp-comm-type {t.cp_comm}"]
        if t.cp_comm == "a2a+p2p":
            a = a2a_size(m, plan.cluster, lay)
            flags.append(f"--hierarchical-context-parallel-sizes {a} {lay.cp // a}")
    if m.moe:
        # Megatron's expert tensor parallelism defaults to --tensor-model-parallel-size:
        # say it whenever it differs, as the folding the plan assumed needs
        flags.append(f"--expert-model-parallel-size {lay.ep}")
        if lay.etp != lay.tp:
            flags.append(f"--expert-tensor-parallel-size {lay.etp}")
        if freq := megatron_moe_layer_freq(m.moe_layers, m.layers):
            # Megatron builds every layer an MoE one unless told (moe_layer_freq 1,
            # gpt_layer_specs.py get_gpt_decoder_layer_specs): its dense layers are the plan's too
            flags.append(f"--moe-layer-freq {freq}")
        flags += moe_flags(t)
        notes += moe_notes(t, combined=name in COMBINED)
    if m.mtp_layers:
        flags.append(f"--mtp-num-layers {m.mtp_layers}")
    flags += attention_flags(m, t)
    notes += attention_notes(m, t)
    if not t.flash_attention:
        # priced as the score square through HBM: Megatron-Core's own DotProductAttention
        # (TransformerConfig.attention_backend, AttnBackend at d98e8a6: flash, fused, unfused,
        # local, auto; "auto" picks Transformer Engine's fused or flash kernels)
        flags.append("--attention-backend unfused")
    flags += [f"--micro-batch-size {lay.micro_batch}", f"--global-batch-size {t.global_batch}", f"--seq-length {t.seq}"]
    flags += precision_flags(t)
    notes += precision_notes(t)
    if not t.hidden_dropout:
        # priced without dropout (Llama 3, DeepSeek-V3): TransformerConfig's hidden_dropout and
        # attention_dropout default to 0.1 (d98e8a6), whose masks the plan did not price
        flags += ["--attention-dropout 0.0", "--hidden-dropout 0.0"]
    if t.cuda_graphs and not m.moe:
        # the plan launches each layer as one graph: Transformer Engine's per-layer graphs
        # (TransformerConfig.cuda_graph_impl, default "none"; cuda_graph_modules "full")
        flags.append("--cuda-graph-impl transformer_engine")
    elif t.cuda_graphs:
        notes.append(
            "the plan priced each layer launched as one CUDA graph (cuda_graphs = true): Megatron-Core captures an MoE "
            "layer's experts only with static shapes (--cuda-graph-impl transformer_engine with --cuda-graph-modules "
            "attn moe and --moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity), which the flags above "
            "do not set"
        )
    # dense gradients reduce over dp x cp, the experts' over their own data-parallel ranks
    reduces = lay.dp * lay.cp > 1 or (m.moe is not None and lay.edp > 1)
    dp_flags, said = data_parallel_flags(t, reduces)
    flags += dp_flags
    notes += said
    rc_flags, said = recompute_flags(cand.recompute, t)
    flags += rc_flags
    notes += said
    if (lay.tp > 1 or lay.cp > 1) and t.zero != 3 and name not in COMBINED and not blackwell_or_later(plan.cluster.gpu):
        # validate_args (d98e8a6) asserts it before Blackwell unless Megatron-FSDP or the
        # expert all-to-all overlap is on (those only warn)
        notes.append(
            "with tensor or context parallelism on GPUs before Blackwell, Megatron-LM asserts "
            "CUDA_DEVICE_MAX_CONNECTIONS=1: export it before launching"
        )
    if group is not None:
        flags.append(f"--microbatch-group-size-per-virtual-pipeline-stage {group}")
    if name in COMBINED:
        flags.append("--overlap-moe-expert-parallel-comm")
        if (r.options or {}).get("delay_wgrad"):  # the order priced split each W off its B
            flags.append("--delay-wgrad-compute")
        else:
            # the search builds combined orders at their builder's default, each weight
            # gradient inside its backward; the flag would run another order than priced
            notes.append(
                "the plan priced each weight gradient inside its backward; Megatron-LM's --delay-wgrad-compute "
                f"defers them, another order (pipesim simulate --schedule {name} --delay-wgrad prices it)"
            )
    return {"runs": True, "flags": flags, "notes": notes}


#: Megatron-Core's FP8 recipe and format for each of pipesim's scalings (TransformerConfig at
#: d98e8a6: fp8, "--fp8-format", Literal e4m3 or hybrid; fp8_recipe, Literal tensorwise,
#: delayed, mxfp8, blockwise or custom, default "delayed", which pipesim does not price):
#: "block" is Transformer Engine's Float8BlockScaling, 1x128 and 128x128 tiles in E4M3, as
#: Megatron-Core's MoE README gives it ("--fp8-format e4m3 --fp8-recipe blockwise");
#: "tensor" its per-tensor current scaling, in the hybrid format its tensorwise functional
#: tests run (tests/functional_tests/test_cases/.../model_config.yaml)
FP8_RECIPES = {"block": ("e4m3", "blockwise"), "tensor": ("hybrid", "tensorwise")}


def precision_flags(t: Training) -> list[str]:
    """The multiplies' precision the plan priced. Without ``--bf16`` Megatron-LM keeps its
    parameters and runs its multiplies in fp32 (ModelParallelConfig.bf16 defaults to
    False); FP8 runs through Transformer Engine on top of it."""
    if t.precision != "fp8":
        return ["--bf16"]
    fmt, recipe = FP8_RECIPES[t.fp8_scaling]
    return ["--bf16", f"--fp8-format {fmt}", f"--fp8-recipe {recipe}"]


def precision_notes(t: Training) -> list[str]:
    """Where the plan's FP8 casts are not the kernels Megatron-LM runs."""
    if t.precision == "fp8" and t.fp8_casts == "torchao":
        return [
            "the plan priced torchao's FP8 casts (fp8_casts = torchao); Megatron-LM makes its FP8 operands with "
            "Transformer Engine's kernels (fp8_casts = transformer_engine prices those)"
        ]
    return []


def recompute_flags(recompute: str, t: Training) -> tuple[list[str], list[str]]:
    """(flags, notes) for the plan's recomputation: full layers (uniform, one a group) or
    Megatron-Core's selective recomputation of the attention core, with the recompute
    modules the plan priced; torchtitan's per-op policy (``op``) and a checkpoint every Nth
    layer (``every-N``) have no Megatron-LM setting, which a note says rather than leave
    the recipe without recomputation unsaid."""
    modules = t.recompute_modules if recompute in ("none", "selective") else ()
    if recompute == "full":
        return ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"], []
    if recompute == "selective" or modules:
        flags = ["--recompute-granularity selective"]
        if modules:  # the list replaces Megatron's default ["core_attn"], which selective prices
            kept = ("core_attn",) if recompute == "selective" else ()
            flags.append("--recompute-modules " + " ".join(kept + modules))
        return flags, []
    if recompute == "op":
        return [], [
            "the plan recomputes torchtitan's per-op selection (recompute = op), which Megatron-LM has no setting for: "
            "the flags above recompute nothing, so its activations outgrow the plan's (plan with --recompute selective "
            "or full for a Megatron-LM run)"
        ]
    if recompute.startswith("every-"):
        n = recompute.removeprefix("every-")
        return [], [
            f"the plan checkpoints {every_nth_layer(n)} whole (recompute = {recompute}), which Megatron-LM has no setting "
            "for: --recompute-method block --recompute-num-layers K checkpoints the first K layers of each stage "
            "instead, and the flags above recompute nothing (plan with --recompute full or selective for a Megatron-LM "
            "run)"
        ]
    return [], []


def tensor_parallel_flags(t: Training) -> tuple[list[str], list[str]]:
    """(flags, notes) for tensor parallelism: sequence parallelism where the plan priced it
    (``sequence_parallel``) and the collectives' overlap, which validate_args (d98e8a6)
    asserts only beside sequence parallelism ("Tensor parallel communication/GEMM overlap
    can happen only when sequence parallelism is enabled")."""
    if t.sequence_parallel:
        return ["--sequence-parallel", *tp_overlap_flags(t)], tp_overlap_notes(t)
    notes = tp_overlap_notes(t)
    if t.tp_overlap == "all":
        notes.append(
            "the plan overlaps every tensor-parallel all-reduce (tp_overlap = all) without sequence parallelism "
            "(sequence_parallel = false), which Megatron-LM refuses (--tp-comm-overlap needs --sequence-parallel): "
            "without it the backward's collectives alone run beside their multiplies (tp_overlap = backward prices that)"
        )
    return [], notes


def tp_overlap_flags(t: Training) -> list[str]:
    """Megatron-Core's userbuffers overlap of every tensor-parallel collective with its
    multiply (the ModelParallelConfig field tp_comm_overlap; it needs --sequence-parallel
    and Transformer Engine) where the plan priced it (``tp_overlap = "all"``); without it
    Megatron runs the backward's asynchronously (``"backward"``)."""
    return ["--tp-comm-overlap"] if t.tp_overlap == "all" else []


def tp_overlap_notes(t: Training) -> list[str]:
    """What the plan assumed of the tensor-parallel collectives that no flag sets."""
    if t.tp_overlap == "micro_pipeline":
        return [
            "the plan priced torch Inductor's micro-pipeline tensor parallelism (tp_overlap = micro_pipeline), which "
            "Megatron-LM does not run: --tp-comm-overlap overlaps every collective (tp_overlap = all), without it the "
            "backward's run asynchronously (tp_overlap = backward)"
        ]
    if t.tp_overlap != "none":
        return []
    return [
        "the plan priced every tensor-parallel collective exposed (tp_overlap = none); Megatron-LM runs the backward's "
        "asynchronously beside their multiplies whatever its flags, so its backward will be shorter than priced "
        "(tp_overlap = backward prices that)"
    ]


def moe_flags(t: Training) -> list[str]:
    """The token dispatcher the plan priced (``moe_dispatcher``) and the grouped experts:
    ``alltoall`` is Megatron's NCCL all-to-all dispatcher, ``deepep`` its flex dispatcher
    on DeepEP (Megatron-Core up to 0.15 spells the backend ``--moe-enable-deepep``)."""
    dispatch = {
        "alltoall": ["--moe-token-dispatcher-type alltoall"],
        "deepep": ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"],
    }[t.moe_dispatcher]
    if t.moe_pad_to_capacity and t.moe_dispatcher == "alltoall":
        # padded to a capacity of the balanced share, as the plan priced the bytes
        dispatch += ["--moe-expert-capacity-factor 1.0", "--moe-pad-expert-input-to-capacity"]
    return [*dispatch, "--moe-grouped-gemm"]


def moe_notes(t: Training, combined: bool = False) -> list[str]:
    """What the plan assumed of the experts' kernels and the MoE layer's issue that no
    flag above sets. The graph capture it names must pass Megatron-Core's checks
    (TransformerConfig at d98e8a6): the flex dispatcher on DeepEP refuses
    moe_pad_expert_input_to_capacity, and combined 1F1B (``combined``,
    overlap_moe_expert_parallel_comm) refuses the moe scope under Transformer Engine's graphs."""
    notes = []
    if t.moe_expert_gemms == "grouped":
        notes.append(
            "the plan priced each expert multiply as one grouped kernel; Megatron-Core's --moe-grouped-gemm on Hopper "
            "runs Transformer Engine's one multiply per local expert (moe_expert_gemms = per_expert)"
        )
    if t.moe_layer_issue_ms and not t.cuda_graphs:
        issued = (
            f"the plan prices each MoE layer issued op by op, at least {t.moe_layer_issue_ms:g} ms a micro-batch "
            "(moe_layer_issue_ms, no CUDA graphs); "
        )
        if combined:
            notes.append(
                issued + "with --overlap-moe-expert-parallel-comm Megatron-Core refuses the moe and mlp modules in "
                "Transformer Engine's CUDA graphs, so no setting captures the MoE layer (--cuda-graph-modules attn "
                "captures the attention)"
            )
        else:
            static = "--moe-expert-capacity-factor 1 --moe-pad-expert-input-to-capacity"
            if t.moe_dispatcher == "deepep":  # flex on DeepEP refuses the padding
                static = f"--moe-token-dispatcher-type alltoall {static}: the flex dispatcher on DeepEP refuses the padding"
            notes.append(
                issued + "--cuda-graph-impl transformer_engine with --cuda-graph-modules attn moe "
                f"(static shapes: {static}) captures it"
            )
    return notes


def attention_flags(m: Model, t: Training) -> list[str]:
    """The attention the plan priced that Megatron-LM must be told of (arguments.py at
    d98e8a6): the sliding window and the layers that take it, and gpt-oss's sinks.

    ``--window-size`` is Transformer Engine's (left, right) window, which Megatron-Core
    passes to its attention as it is (extensions/transformer_engine.py): a query at i reads
    the keys from i - left to i + right, inclusive (TE's DotProductAttention docstring,
    dot_product_attention.py at d0067d0da),
    so the model file's ``sliding_window`` w (keys read, the query's own included, as
    transformers' mask keeps them) is (w - 1, 0), and a run that hands w to TE as its left
    window (``Training.sliding_window_as_te_left``) is (w, 0): the keys priced, less one
    (``attention_window.run_window``). ``--window-attn-skip-freq`` N leaves
    full attention on the layers whose 1-indexed number is a multiple of N, a list one
    entry a layer, 1 for a windowed one (core/transformer/utils.py
    is_layer_window_attention; arguments.py moe_freq_type reads either). Megatron-Bridge's
    gpt-oss provider writes (128, 0), a key more than transformers' 128 and OpenAI's
    reference mask (gpt_oss/torch/model.py ``sdpa``). ``--softmax-type learnable`` is
    TransformerConfig.softmax_type, the sinks' learned offset a head."""
    flags = []
    windows = [run_window(m, t, i) for i in range(m.layers)]
    if any(windows):
        flags.append(f"--window-size {max(windows) - 1},0")
        windowed = [bool(w) for w in windows]
        if not all(windowed):
            flags.append(f"--window-attn-skip-freq {_skip_freq(windowed)}")
    if m.attention_sinks:
        flags.append("--softmax-type learnable")
    return flags


def _skip_freq(windowed: list[bool]) -> str:
    """``--window-attn-skip-freq`` for the windowed layers: N where every Nth layer alone
    attends fully, else the list."""
    n = len(windowed)
    for every in range(2, n + 1):
        if all(w == ((i + 1) % every != 0) for i, w in enumerate(windowed)):
            return str(every)
    return '"[' + ",".join("1" if w else "0" for w in windowed) + ']"'


def attention_notes(m: Model, t: Training) -> list[str]:
    """What the sinks need of the software beneath Megatron-LM (Transformer Engine 2.9, and
    the same at d0067d0da): get_attention_backend turns FlashAttention off for a softmax
    other than vanilla, and nvte_get_fused_attn_backend takes learnable offsets in the cuDNN
    fused attention only from cuDNN 9.13.1; Megatron-Core asserts TE 2.8 for softmax_type.

    And chunked attention (Llama 4) past one chunk: Megatron-Core at d98e8a6 takes Llama 4's
    NoPE layers (TransformerConfig.no_rope_freq) but has no chunk mask for training (its
    only ``attention_chunk`` is the 0 it hands FlashAttention's KV-cache kernel at inference,
    core/transformer/attention.py), so its run attends over the whole sequence there. A
    config.json prices that with attention_chunk_size null: absent, it is Llama4TextConfig's
    8192 (hf_llama4)."""
    notes = []
    if m.attention_sinks:
        notes.append(
            "the plan priced the sinks inside fused attention: Transformer Engine runs --softmax-type learnable only in "
            "its cuDNN fused attention (TE 2.8 or later, cuDNN 9.13.1 or later); with an older cuDNN it falls back to "
            "unfused attention, which writes the whole score square (flash_attention = false prices that)"
        )
    chunked = chunked_layers(m, t.seq)
    if chunked:
        notes.append(
            f"the plan priced chunked attention on {chunked} of {m.layers} layers (chunks of {m.attention_chunk} tokens); "
            "Megatron-Core has no chunk mask for training, so these flags attend over the whole sequence there, more "
            "attention work than priced (attention_chunk_size null in its config.json, or attention_chunk = 0 in a model "
            f"file, prices that; or --seq {m.attention_chunk})"
        )
    return notes
