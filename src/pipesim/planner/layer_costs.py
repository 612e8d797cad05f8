"""Each layer (and the embedding, the head, the MTP modules) as the component cost model's
``LayerCosts``: compute from ``compute``, communication from ``collectives``."""

from __future__ import annotations

from dataclasses import fields, replace

from ..components import LayerCosts
from .attention_window import run_window
from .collectives import cp_exchange, moe_comm, tp_allreduce, tp_halves
from .compute import (
    accumulation_seconds,
    attention_core,
    attention_gemms,
    gemm_fbw,
    gemms,
    hbm_rate,
    mla_up_shapes,
    mlp_gemms,
    mlp_shapes,
)
from .cp_steps import extra_kernels, pass_bytes
from .elementwise import elementwise_bytes, elementwise_terms, inductor_recompute_bytes, two_pass_norm
from .floors import expert_casts, floored, issue_floor, layer_kernels
from .layout import Layout
from .moe_bias import bias_bytes, bias_kernels
from .params import attention_params, mlp_params
from .recompute_modules import rerun_bytes, rerun_kernels
from .saved_widths import layer_mode
from .specs import Cluster, Model, Training
from .te_tensor_parallel import te_tp_seconds
from .tp_overlap import column_exposed, half_forward, layer_backward, layer_forward, unfused_backward


def _op_recomputed_share(m: Model) -> tuple[float, float]:
    """(share of the attention projections' forward, of the MLP's) that torchtitan's op
    checkpointing runs again in the backward: the multiplies its cache skips, wk and wo of
    wq, wk, wv, wo and w3 of w1, w3, w2 (activations._op_saved), by their FLOPs."""
    kv = m.attention.kv_heads or m.heads
    return (kv + m.heads) / (2 * m.heads + 2 * kv), 1 / 3


def layer_costs(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, recompute: str) -> LayerCosts:
    if recompute.startswith("every-"):
        # a full checkpoint on every Nth layer: priced as the mean layer, 1/N of the way from
        # none to full, so that a stage's sum is right however its layers fall (the
        # planner prices one layer of each kind for all of them)
        layer_mode(recompute, layer)  # a malformed every-N is one line naming the form
        n = int(recompute.removeprefix("every-"))
        none, full = (layer_costs(m, layer, c, t, lay, rc) for rc in ("none", "full"))
        return LayerCosts(
            **{f.name: getattr(none, f.name) + (getattr(full, f.name) - getattr(none, f.name)) / n for f in fields(LayerCosts)}
        )
    proj_f, proj_b, proj_w = attention_gemms(m, c, t, lay)
    mlp_f, mlp_b, mlp_w = mlp_gemms(m, layer, c, t, lay)
    dense, experts = mlp_params(m, layer)
    proj_w += accumulation_seconds(c, t, attention_params(m) / lay.tp)
    mlp_w += accumulation_seconds(c, t, dense / lay.tp + experts / (lay.ep * lay.etp))
    core_f, core_b = attention_core(m, c, t, lay, layer)
    cp_f, cp_b = cp_exchange(m, c, t, lay, core_f, core_b)  # what the context ranks' exchange leaves exposed
    # and the merges and accumulations between its per-step kernels (cp_steps.pass_bytes)
    window = run_window(m, t, layer) if run_window(m, t, layer) < t.seq else 0
    merge_f, merge_b = (x / hbm_rate(c, t) for x in pass_bytes(m, c, t, lay, window))
    ew_attn, ew_mlp = (x / hbm_rate(c, t) for x in elementwise_bytes(m, layer, t, lay))
    ew_attn_b, ew_mlp_b = (x / hbm_rate(c, t) for x in elementwise_bytes(m, layer, t, lay, backward=True))
    attn_f = proj_f + core_f + ew_attn + cp_f + merge_f
    regroup = local_sort_seconds(m, layer, c, t, lay)
    # the experts' output bias, added expert by expert (moe_bias.py)
    bias_f, bias_b = (x / hbm_rate(c, t) for x in bias_bytes(m, layer, t, lay))
    mlp_fwd = mlp_f + ew_mlp + regroup + bias_f
    attn_b = proj_b + core_b + ew_attn_b + cp_b + merge_b
    mlp_bwd = mlp_b + ew_mlp_b + regroup + bias_b
    # Megatron-Core's recompute modules run their forward again (recompute_modules.py)
    mlp_bwd += rerun_bytes(m, layer, t, lay, recompute, elementwise_terms(m, layer, t, lay)) / hbm_rate(c, t)
    # Transformer Engine's amax all-reduces and userbuffers' copies, reduce and SM margin
    # (te_tensor_parallel.py), on the compute stream: a full recompute runs the forward's again
    te_af, te_ab, te_mf, te_mb = te_tp_seconds(m, layer, c, t, lay)
    attn_f, mlp_fwd, attn_b, mlp_bwd = attn_f + te_af, mlp_fwd + te_mf, attn_b + te_ab, mlp_bwd + te_mb
    if t.hidden_dropout:  # each block's dropout mask: one byte an element, written forward, read backward
        mask = lay.tokens(t.seq) * m.hidden * (1 / lay.tp if t.sequence_parallel else 1.0) / hbm_rate(c, t)
        attn_f, mlp_fwd, attn_b, mlp_bwd = attn_f + mask, mlp_fwd + mask, attn_b + mask, mlp_bwd + mask
    if recompute == "selective":
        # unfused attention recomputes its scores in the backward (flash always does);
        # MLA recomputes its up-projections (DeepSeek-V3, section 3.3.2)
        attn_b += (0.0 if t.flash_attention else core_f) + gemms(c, t, mla_up_shapes(m, t, lay))[0]
    elif recompute in ("full", "op"):
        # the memory-bound kernels again (fused into the backward's under torch.compile)
        re_attn, re_mlp = ew_attn, ew_mlp
        if t.fused_kernels == "inductor":
            re_attn, re_mlp = (x / hbm_rate(c, t) for x in inductor_recompute_bytes(m, layer, t, lay, recompute))
        if recompute == "full":  # and the rest of the layer's forward
            attn_b += attn_f - ew_attn + re_attn
            mlp_bwd += mlp_fwd - ew_mlp + re_mlp - early_stop_skips(m, layer, c, t, lay, mlp_f)
        else:  # and the multiplies the op cache skips
            a, f = _op_recomputed_share(m)
            attn_b += re_attn + a * proj_f
            mlp_bwd += re_mlp + f * mlp_f
    # tensor parallelism: an all-reduce (or all-gather and reduce-scatter) around attention
    # and around the MLP, forward and backward, less what of them the multiplies beside
    # them hide (tp_overlap.py)
    tp_attn_f, tp_mlp_f = layer_forward(m, layer, c, t, lay)
    tp_attn_b, tp_mlp_b = layer_backward(m, layer, c, t, lay)
    if m.is_moe_layer(layer):
        # attention's collectives (the routed tokens stay sequence-sharded into the
        # all-to-all), then the dispatch; the shared experts' gather and reduce-scatter
        # run inside the MoE block, after the dispatch (tp_overlap.py): with the combine
        dispatch, combine, dispatch_b, combine_b = moe_comm(m, c, t, lay)
        a2a = dispatch + combine + tp_mlp_f  # what the MoE block's own forward waits for
        tp = tp_attn_f
        dispatch, dispatch_b = dispatch + tp, dispatch_b + tp_attn_b
        combine, combine_b = combine + tp_mlp_f, combine_b + tp_mlp_b
    else:
        dispatch, combine = tp_attn_f, tp_mlp_f
        dispatch_b, combine_b = tp_attn_b, tp_mlp_b
        a2a = 0.0
    if recompute == "full":  # the recomputed forward communicates again
        dispatch_b, combine_b = dispatch_b + dispatch, combine_b + rerun_combine(m, layer, c, t, lay, combine)
    comm = (a2a, dispatch + combine, dispatch_b + combine_b)
    attn_f, mlp_fwd, attn_b, mlp_bwd, proj_w, mlp_w = _floored(
        m, layer, c, t, lay, recompute, comm, attn_f, mlp_fwd, attn_b, mlp_bwd, proj_w, mlp_w
    )
    # the backward reduce-scatters the micro-pipeline pass does not fuse (tp_overlap.py)
    # wait on the compute stream instead of running beside the other half micro-batch
    unfused = unfused_backward(m, c, t, lay)
    attn_b, mlp_bwd, dispatch_b, combine_b = attn_b + unfused, mlp_bwd + unfused, dispatch_b - unfused, combine_b - unfused
    if t.pair_tp_on_compute and lay.tp > 1:
        # the tensor-parallel parts of the communication wait on the compute stream
        # (Training.pair_tp_on_compute): all of a dense layer's; of an MoE one the
        # attention's, and its shared experts', which combined 1F1B runs in the "mlp" node
        # on comp_stream (core_v0.14.0 models/gpt/fine_grained_callables.py:384-412,
        # experts_compute; models/common/model_chunk_schedule_plan.py:141-142)
        if m.is_moe_layer(layer):
            tp_b = max(0.0, tp_attn_b + (tp if recompute == "full" else 0.0) - unfused)
            attn_f, dispatch, attn_b, dispatch_b = attn_f + tp, dispatch - tp, attn_b + tp_b, dispatch_b - tp_b
            shared_b = tp_mlp_b + (tp_mlp_f if recompute == "full" else 0.0)
            mlp_fwd, combine, mlp_bwd, combine_b = (
                mlp_fwd + tp_mlp_f,
                combine - tp_mlp_f,
                mlp_bwd + shared_b,
                combine_b - shared_b,
            )
        else:
            attn_f, mlp_fwd, attn_b, mlp_bwd = attn_f + dispatch, mlp_fwd + combine, attn_b + dispatch_b, mlp_bwd + combine_b
            dispatch = combine = dispatch_b = combine_b = 0.0
    return LayerCosts(
        attn_f=attn_f,
        mlp_f=mlp_fwd,
        dispatch_f=dispatch,
        combine_f=combine,
        attn_b=attn_b,
        attn_w=proj_w,
        mlp_b=mlp_bwd,
        mlp_w=mlp_w,
        dispatch_b=dispatch_b,
        combine_b=combine_b,
    )


def recomputed_mlp_shapes(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """The MLP multiplies (``compute.mlp_shapes``) a full recompute runs again.

    torch's non-reentrant checkpoint (torch/utils/checkpoint.py at 2.1.0, the
    ``_recomputation_hook`` pack hook) counts the tensors the forward saved and, with early
    stop on (``_enable_checkpoint_early_stop``, the default since 2.1), raises
    ``_StopRecomputationError`` as soon as the recomputation has saved the last of them.
    A dense layer's last saving op is its final multiply (the MLP's down projection, w2),
    which saves its inputs before it runs: that multiply and everything after it in the
    layer are not rerun. torch 2.1.0 and 2.13 both rerun Wqkv, out_proj and up_proj of
    the MPT block, not down_proj (tests/test_recompute_early_stop_torch.py). A compiled
    block (``fused_kernels = "inductor"``) skips it too: the partitioner keeps of the
    recomputed forward only what a gradient reads, and w2's output is the block's output
    (torch 2.13 reruns 8 of a torchtitan block's 9 forward multiplies,
    tests/test_compiled_recompute_torch.py). ``recompute_early_stop`` false and not
    compiled (Megatron-LM's checkpoint reruns the whole forward) or an MoE layer (not
    counted): all of them."""
    shapes = mlp_shapes(m, layer, t, lay)
    if not skips_last_multiply(t) or m.is_moe_layer(layer):
        return shapes
    return shapes[:-1]


def skips_last_multiply(t: Training) -> bool:
    """Whether a full recompute leaves out a dense layer's last multiply and what follows
    it: torch's eager checkpoint with early stop, or a compiled block."""
    return t.recompute_early_stop or t.fused_kernels == "inductor"


def early_stop_skips(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, mlp_f: float) -> float:
    """Seconds of a dense layer's forward a full recompute does not rerun under
    ``recompute_early_stop`` (``recomputed_mlp_shapes``): the last multiply, of ``mlp_f``
    the MLP's multiplies, and the residual add after it (read two, write one hidden-sized
    tensor, on the tokens the add runs on; Inductor's recomputed bytes leave the add out
    already, ``elementwise.inductor_recompute_terms``)."""
    if not skips_last_multiply(t) or m.is_moe_layer(layer):
        return 0.0
    rerun = gemms(c, t, recomputed_mlp_shapes(m, layer, t, lay))[0]
    if t.fused_kernels == "inductor":
        return mlp_f - rerun
    hs = m.hidden * (1 / lay.tp if t.sequence_parallel else 1.0)
    residual = lay.tokens(t.seq) * 3 * hs * 2 / hbm_rate(c, t)
    return mlp_f - rerun + residual


def rerun_combine(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, combine: float) -> float:
    """Seconds of the MLP's forward collectives (``combine``) a full recompute runs again.

    Compiled (``fused_kernels = "inductor"``: torchtitan wraps each block in non-reentrant
    checkpointing, then compiles it), the backward graph keeps only the recomputed ops a
    gradient needs, and the block's last row-parallel collective (w2's reduce-scatter, or
    its all-reduce without sequence parallelism) feeds only the block's output: it is not
    run again. torch 2.13's own graphs of torchtitan's block on two gloo ranks say so
    (tests/test_compiled_recompute_torch.py: the backward reruns wo's and neither of w2's).
    Megatron-LM's checkpointing (its own CheckpointFunction) reruns the whole forward;
    torch's eager non-reentrant checkpoint with early stop (``recompute_early_stop``)
    stops before the last multiply and so before its collective too
    (``recomputed_mlp_shapes``). A dense layer's; an MoE layer's combine is its all-to-all,
    not counted there."""
    if not skips_last_multiply(t) or m.is_moe_layer(layer):
        return combine
    return combine - half_forward(m, layer, c, t, lay, 1)[1]


def local_sort_seconds(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds (forward, and the same backward) of the copies Megatron-Core's all-to-all
    dispatcher makes to regroup an MoE layer's received tokens by local expert.

    Its all-to-all delivers the token copies ordered by the rank that sent them; with
    more than one local expert they are sorted by expert before the grouped multiplies
    and back after them (``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` and
    ``combine_preprocess``, Megatron-Core 0.14: a ``transpose(0, 1).contiguous()`` of the
    capacity-padded buffer under token dropping, ``sort_chunks_by_idxs`` without), each a
    read and a write of every received copy, and their gradients the same backward. The
    first permutation (a token to its top_k copies, before the all-to-all) is the routing
    ``elementwise.elementwise_bytes`` counts; DeepEP's dispatch (``moe_dispatcher = "deepep"``)
    hands over the tokens for one permutation into expert order, which that also counts.
    Balanced routing: a GPU receives the copies it sends, times the etp shards that
    gather them."""
    e = m.moe
    if not m.is_moe_layer(layer) or t.moe_dispatcher != "alltoall" or lay.ep <= 1 or e.experts // lay.ep <= 1:
        return 0.0
    copies = lay.etp * lay.expert_tokens(t.seq) * e.top_k
    return 2 * copies * m.hidden * 2 * 2 / hbm_rate(c, t)  # sort and unsort, each reads and writes 2-byte elements


def _floored(m: Model, layer: int, c: Cluster, t: Training, lay: Layout, recompute: str, comm, af, mf, ab, mb, aw, mw):
    """Each pass of the layer (forward, input gradient, weight gradient) at least its
    kernels' launch floors and the host's time to issue them (``floors``), the attention
    and MLP halves scaled up together where a floor binds; a full-recompute backward
    launches the forward's kernels again. Context parallelism adds its scheme's launches
    (``cp_steps.extra_kernels``).

    An MoE layer's passes also take at least their share (by kernels) of
    ``moe_layer_issue_ms``, the time Megatron-LM's benchmark measures for a bare
    ``MoELayer`` (router, dispatcher, experts; no attention:
    tests/functional_tests/test_cases/common/moe_perf/__main__.py at d98e8a6), and the
    issue of the kernels the benchmark's layer does not run (BF16, no biases, no
    recompute): per-expert FP8 casts, the experts' output bias added expert by expert
    (``moe_bias``) and the recompute modules' reruns (``recompute_modules``), less the
    collectives they wait for
    (the GPU is busy with them meanwhile). Where the attention sits depends on whether
    the host waits inside the block:

    - forward, where the dispatcher stops the host until the GPU has routed the tokens
      (``dispatch_stops_host``: the all-to-all dispatcher's ``d2h_event.synchronize()`` at
      its cuda_sync_point unless its input is padded to capacity; DeepEP's dispatch
      busy-waits on the host for the received counts: token_dispatcher.py and
      fused_a2a.py at d98e8a6): everything queued before it, the attention's forward
      included, has run by then, so the host issues the rest of the block from an empty
      queue. The MoE half takes its share less its own all-to-alls and its shared experts'
      collectives (``comm[0]``), and the attention comes on top;
    - otherwise, and in the backward (nothing stops the host, which issues the next
      layer's MoE backward while the GPU runs this one's attention): the whole pass takes
      its share, less every collective it waits for (``comm[1]``, ``comm[2]``), as one
      stream of kernels."""
    local = m.moe.experts // max(1, lay.ep) if m.is_moe_layer(layer) else 1
    kf, kb, kw = layer_kernels(m, layer, t, local)
    ring_f, ring_b = extra_kernels(m, c, t, lay)
    # beyond what the issue floor measured: the experts' biases and the recompute modules
    bias_f, bias_b = bias_kernels(m, layer, t, local)
    rerun = rerun_kernels(m, layer, t, recompute)
    kf, kb = kf + ring_f + bias_f, kb + ring_b + bias_b + rerun
    if recompute in ("full", "op"):  # op reruns every kernel but the cached multiplies and attention
        kb += kf
    out = []
    for a, b, k in ((af, mf, kf), (ab, mb, kb), (aw, mw, kw)):
        total = a + b
        need = floored(total, k, t)
        scale = need / total if total > 0 else 1.0
        out += [a * scale, b * scale] if total > 0 else [need / 2, need / 2]
    if not m.is_moe_layer(layer):
        return tuple(out)
    casts = expert_casts(m, layer, t, local)
    cf = casts + bias_f
    cb = casts + bias_b + rerun + (cf if recompute in ("full", "op") else 0)
    # the floor was measured in BF16 on bias-free experts without recompute: shared by
    # those kernels, the rest issued on top
    bf16 = (kf - cf, kb - cb + kw)
    stops = dispatch_stops_host(t)
    waits = (comm[0] if stops else comm[1], comm[2])
    least = [issue_floor(t, k / sum(bf16), n) - x for k, n, x in zip(bf16, (cf, cb), waits)]
    if stops and least[0] > out[1] > 0:  # the MoE half alone, the attention's forward before it
        out[1] = least[0]
    elif not stops and least[0] > sum(out[:2]) > 0:
        out[:2] = [x * least[0] / sum(out[:2]) for x in out[:2]]
    backward = sum(out[2:])
    if least[1] > backward > 0:
        out[2:] = [x * least[1] / backward for x in out[2:]]
    return tuple(out)


def dispatch_stops_host(t: Training) -> bool:
    """Whether an MoE layer's forward stops the host until the GPU has routed its tokens
    (``_floored``): DeepEP's dispatch always does, the all-to-all dispatcher unless its input
    is padded to capacity (``moe_pad_to_capacity``)."""
    return t.moe_dispatcher == "deepep" or not t.moe_pad_to_capacity


def embedding_costs(m: Model, c: Cluster, t: Training, lay: Layout) -> LayerCosts:
    """The token embedding, a pseudo-layer on the first stage: a row gather forward (read
    and write h per token), a scatter-add into the fp32 gradient table backward, and with
    tensor parallelism the all-reduce of the vocabulary-parallel lookup, forward only: its
    backward is the identity (Megatron-LM 2021 mpu/layers.py VocabParallelEmbedding,
    ``reduce_from_tensor_model_parallel_region``); with sequence parallelism a
    reduce-scatter forward whose backward is an all-gather (Megatron-Core)."""
    T = lay.tokens(t.seq)
    f = T * m.hidden * 2 * 2 / hbm_rate(c, t)
    ar = tp_allreduce(m, c, t, lay, layer=False)
    back = ar if t.sequence_parallel else 0.0
    return LayerCosts(attn_f=f, mlp_f=0.0, attn_b=3 * f, attn_w=0.0, mlp_b=0.0, mlp_w=0.0, dispatch_f=ar, dispatch_b=back)


def head_costs(m: Model, c: Cluster, t: Training, lay: Layout) -> LayerCosts:
    """The final norm, the output projection (BF16 even under FP8 training, as DeepSeek-V3
    keeps it) and the cross-entropy, a pseudo-layer on the last stage. The loss over the
    vocabulary shard moves ``t.logit_bytes`` per logit (fused, or Megatron-LM 2021's eager
    fp32 ops: see ``Training``), ``t.loss_forward_share`` of them forward and the rest
    backward (torchtitan's eager loss 14 of 36 bytes forward, as torch counts its kernels:
    ``training.torchtitan_loss``); with tensor parallelism the
    vocabulary-parallel loss all-reduces two numbers per token (neglected), and the
    projection's input gradient is all-reduced backward (Megatron-LM 2021's
    ``parallel_lm_logits``: ``copy_to_tensor_model_parallel_region``, identity forward);
    with sequence parallelism its input is all-gathered forward and the gradient
    reduce-scattered backward (the input gathered again for the weight gradient where the
    forward kept its shard), and the norm runs on 1/tp of the tokens (without it, on all
    of them on every tensor rank), as the layers' norm where ``norm_kernel = "two-pass"``
    (``elementwise.two_pass_norm``). The projection is a column-parallel multiply
    (Megatron-Core's output_layer), its backward collectives hidden as a layer's
    (``tp_overlap.column_exposed``)."""
    T, h = lay.tokens(t.seq), m.hidden
    f, b, w = gemm_fbw(c, t, T, m.vocab / lay.tp, h, fp8=False)
    share = 1 / lay.tp if t.sequence_parallel else 1.0
    # elements of 2 bytes per token; Megatron-LM's final LayerNorm is the layers' own
    # MixedFusedLayerNorm (megatron/model/transformer.py, gpt_model.py's GPTModelPipe)
    norm_f, norm_b = two_pass_norm(h, share) if t.norm_kernel == "two-pass" else (2 * h * share, 4 * h * share)
    norm_f, norm_b = (T * 2 * x / hbm_rate(c, t) for x in (norm_f, norm_b))
    loss = T * m.vocab / lay.tp * t.logit_bytes / hbm_rate(c, t)
    back = column_exposed(m, c, t, lay, b, w, row_parallel=False, layer=False) if lay.tp > 1 else 0.0
    w += accumulation_seconds(c, t, m.vocab * h / lay.tp)
    ar = tp_allreduce(m, c, t, lay, layer=False)
    return _tp_placed(
        t,
        LayerCosts(
            attn_f=norm_f,
            mlp_f=f + loss * t.loss_forward_share,
            attn_b=norm_b,
            attn_w=0.0,
            mlp_b=b + loss * (1 - t.loss_forward_share),
            mlp_w=w,
            dispatch_f=ar if t.sequence_parallel else 0.0,
            dispatch_b=back,
        ),
    )


def _tp_placed(t: Training, lc: LayerCosts) -> LayerCosts:
    """A pseudo-layer whose only communication is tensor-parallel (the head, an MTP
    module's join): on the compute stream where ``Training.pair_tp_on_compute`` says
    so (Megatron-Core's combined 1F1B runs the post-process node on comp_stream,
    core_v0.14.0 models/common/model_chunk_schedule_plan.py)."""
    if not t.pair_tp_on_compute:
        return lc
    return replace(lc, attn_f=lc.attn_f + lc.dispatch_f, attn_b=lc.attn_b + lc.dispatch_b, dispatch_f=0.0, dispatch_b=0.0)


def mtp_costs(m: Model, c: Cluster, t: Training, lay: Layout, recompute: str, kind: int | None = None) -> tuple[LayerCosts, ...]:
    """DeepSeek-V3's multi-token prediction modules, on the last stage: each looks up the
    next token's embedding, joins it to the hidden state (two norms and a 2h -> h
    projection), runs one more transformer layer and the shared output head. That layer
    is built as the model's last decoder layer is, MoE or dense (Megatron-LM at d98e8a6,
    gpt_builders.py: "Use spec of the last layer in decoder block as spec of the
    transformer layer in MTP"), so it is priced as layer ``layers - 1``, or as ``kind``
    where the last stage holds no decoder layer (``moe_layers.mtp_layer_kind``).

    As Megatron-Core runs it (core_v0.14.0 transformer/multi_token_prediction.py): the
    lookup is the model's embedding again on the last stage (``_get_embeddings``, :480-509;
    under sequence parallelism its vocabulary-parallel output is reduce-scattered, an
    all-gather backward, as ``embedding_costs``); the projection ``eh_proj`` is a
    column-parallel linear with gather_output=False (:457-467), 1/tp of the multiply on
    each tensor rank, its 2h-wide input all-gathered under sequence parallelism (a layer's
    gather: FP8 under per-tensor FP8) and its input gradient reduce-scattered; its h/tp
    outputs are then all-gathered over the tensor group
    (``gather_from_tensor_model_parallel_region``, BF16) and split back to the sequence
    shard, whose backward is an all-gather (``_concat_embeddings``, :511-532). The
    re-gather of the saved input for the weight gradient runs beside the input gradient's
    multiply (``tp_overlap = "backward"``), unpriced as a layer's is."""
    if not m.mtp_layers:
        return ()
    T, h = lay.tokens(t.seq), m.hidden
    block = layer_costs(m, m.layers - 1 if kind is None else kind, c, t, lay, recompute)
    pf, pb, pw = gemm_fbw(c, t, T, h / lay.tp, 2 * h)
    norms = T * 2 * 2 * 2 * h / hbm_rate(c, t)
    emb = embedding_costs(m, c, t, lay)
    fp8_gather, _ = tp_halves(m, c, t, lay)
    gather, scatter = tp_halves(m, c, t, lay, layer=False)
    sp = t.sequence_parallel and lay.tp > 1
    comm_f = emb.dispatch_f + (2 * fp8_gather + gather if sp else 0.0)
    comm_b = emb.dispatch_b + (2 * scatter + gather if sp else 0.0)
    joined = replace(
        block,
        attn_f=block.attn_f + pf + norms + emb.attn_f,
        attn_b=block.attn_b + pb + 2 * norms + emb.attn_b,
        attn_w=block.attn_w + pw,
    )
    if t.pair_tp_on_compute:
        joined = replace(joined, attn_f=joined.attn_f + comm_f, attn_b=joined.attn_b + comm_b)
    else:
        joined = replace(joined, dispatch_f=joined.dispatch_f + comm_f, dispatch_b=joined.dispatch_b + comm_b)
    return (joined, head_costs(m, c, t, lay)) * m.mtp_layers


def blocking_p2p(stage: int, stages: int, p2p: float) -> LayerCosts:
    """The transfers of a stage whose schedule waits for them (Megatron-LM 2021's
    ``batch_isend_irecv`` then ``wait`` before each op; DeepSpeed's pipeline engine's
    blocking send and recv instructions), as a pseudo-layer on the compute stream: a
    forward receives its input and sends its output, a backward receives the output's
    gradient and sends the input's, each one transfer per neighbouring stage (one for the
    end stages, two for the middle ones)."""
    hops = (stage > 0) + (stage < stages - 1)
    return LayerCosts(attn_f=hops * p2p, mlp_f=0.0, attn_b=hops * p2p, attn_w=0.0, mlp_b=0.0, mlp_w=0.0)
