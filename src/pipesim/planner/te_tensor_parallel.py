"""What Transformer Engine's tensor-parallel linears add on the compute stream besides the
multiplies, casts and collectives priced elsewhere: the amax all-reduces that per-tensor
FP8 casts wait for under sequence parallelism, and the copies, reduce kernel and SM
margin of its userbuffers (Megatron-Core's --tp-comm-overlap).

Read in Transformer Engine 2.7 (fedd9ddc, the version Megatron-Bridge 25.09 built on) and
Megatron-Bridge v0.1.0rc4 (its 25.09 performance scripts):

- Amax all-reduce. Under current scaling a column-parallel linear's input quantizer and a
  row-parallel linear's output-gradient quantizer get ``with_amax_reduction`` over the
  tensor group when sequence parallelism gathers what they cast
  (pytorch/module/linear.py:1614-1638, layernorm_linear.py:1720-1745): the shard is cast
  before its all-gather, so every rank needs the same scale. quantize_impl computes the
  local amax, then all-reduces it (MAX, one fp32) and waits before it computes the scale
  and casts (pytorch/csrc/quantizer.cpp:520-538): a latency-bound collective the cast,
  and so the gather and the multiply after it, wait for. One per gathered cast: forward
  the column-parallel inputs, backward the row-parallel outputs' gradients
  (``elementwise.te_linears`` says which multiply is which).
- Userbuffers copies. A ring-exchange all-gather (the forward's qkv_fprop and fc1_fprop,
  the backward's proj_dgrad and fc2_dgrad: initialize_ub's defaults, module/base.py:262-272,
  and the Bridge configs) first casts the shard, then copies it into the registered
  buffer (base.py:446-498, ``fill_userbuffers_buffer_for_all_gather``; grad_output_preprocess
  :1104-1123 backward) with a device-to-device cudaMemcpyAsync on the current stream
  (pytorch/csrc/extensions/comm_gemm_overlap.cpp:275-277, CommOverlapP2P::copy_into_buffer):
  a read and a write of the shard, at the gather's width. The bulk input gather behind
  the column-parallel dgrad copies on the communication stream instead
  (comm_gemm_overlap.cpp:176-181): beside the multiply, not priced. The bulk
  reduce-scatter of that dgrad behind the weight-gradient multiply leaves its shard in the
  buffer, and the layer takes a copy of it on the compute stream (layernorm_linear.py:903,
  ``get_buffer(local_chunk=True).clone()``, the buffer being BF16 there): a read and a
  write of two bytes an element. Megatron-Core's defaults choose the bulk overlaps
  (tp_comm_bulk_dgrad and tp_comm_bulk_wgrad true, tp_comm_overlap_rs_dgrad false), and
  passes them to TELayerNormColumnParallelLinear alone (core_v0.14.0
  extensions/transformer_engine.py:482-483): a column-parallel TELinear (an MoE layer's
  shared-expert fc1, after the layer's own norm) gets ub_overlap_ag and ub_overlap_rs only
  (:272-289), so its backward collectives are TE's ordinary asynchronous NCCL ones and
  leave no buffer to copy out of.
- The forward's row-parallel reduce-scatter (proj_fprop, fc2_fprop; ``Training.ub_fprop_rs``).
  As a ring exchange (CommOverlapP2PBase::split_overlap_rs,
  common/comm_gemm_overlap/comm_gemm_overlap.cpp:1052-1140) the multiply runs in tp chunks
  whose outputs copy engines send to their owners, and once all have arrived one kernel on
  the main stream sums the tp chunks into the output shard (reduce_bf16,
  userbuffers/userbuffers.cu:2730): it reads tp shards of BF16 and writes one. As TE's
  default "pipeline" (CommOverlapBase::split_overlap_rs, :459-598) an SM kernel reduces
  as it sends: no such pass. Either way, with set_sm_margin the chunks run on the SMs less
  the communication's num_sm (``_math_sms``, :90): ``Training.ub_fprop_sm_margin``.

Megatron-Bridge 25.09's dense H100 FP8 rows run ``userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192``
(Llama 3 70B) and ``userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192`` (Llama 3.1 405B):
src/megatron/bridge/training/comm_overlap.py:108-119 and :161-172, picked by
scripts/performance/utils/helpers.py's COMM_OVERLAP_CONFIG_MAP in run_script.py:120-125.
Both set proj_fprop and fc2_fprop to ``RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True)``:
``ub_fprop_rs = "ring_exchange"``, ``ub_fprop_sm_margin = 1``. The Qwen3 rows pass no
config, so TE's defaults run: "pipeline" with 16 SMs (base.py:296-299).

Only the four linears initialize_ub names (qkv, proj, fc1, fc2) use userbuffers: GQA
attention, a dense MLP and an MoE layer's shared experts; MLA's projections and MoE
layers' routed experts are left out, and in
a model with MLA the dense MLPs too (Megatron-Core turns the overlap off on the shared
config when it builds MLA's first projection: tp_overlap.py). The
output head is Megatron's own column-parallel linear, not Transformer Engine's: nothing
here. Not priced: the chunked multiplies' own efficiency (TE runs the chunks on up to
three streams, so a chunk's last wave can share the SMs with the next chunk's), and the
generic ``comm_sms`` share that ``tp_overlap = "all"`` charges the collectives beside the
other half micro-batch, where the ring exchanges move on copy engines and the bulk
reduce-scatters hold the config's num_sm (24 and 4 SMs for 70B's qkv and fc1).
"""

from __future__ import annotations

from ..errors import PipesimError
from . import nccl
from .collectives import float8_gathers
from .compute import attention_shapes, gemms, hbm_rate, mlp_shapes
from .elementwise import te_linears
from .layout import Layout
from .specs import Cluster, Model, Training
from .torchao_tensor_parallel import amax_reductions as torchao_amax_reductions
from .tp_overlap import userbuffer_halves
from .training import te_current_scaling

#: bytes of the scale each rank contributes to an amax all-reduce (one fp32)
AMAX_BYTES = 4


def amax_reductions(m: Model, layer: int, t: Training, lay: Layout) -> tuple[int, int, int, int]:
    """How many amax all-reduces one micro-batch of a layer waits for: (attention
    forward, attention backward, MLP forward, MLP backward); see above."""
    if not (te_current_scaling(t) and t.sequence_parallel and lay.tp > 1):
        return 0, 0, 0, 0
    out: list[int] = []
    for kinds in te_linears(m, layer):
        out += [sum(p == "column" for _, p in kinds), sum(p == "row" for _, p in kinds)]
    return out[0], out[1], out[2], out[3]


def userbuffers(m: Model, layer: int, t: Training, lay: Layout) -> tuple[bool, bool]:
    """Whether the (attention, MLP) block's linears run Transformer Engine's userbuffers
    (which ones Megatron-Core gives them: ``tp_overlap.userbuffer_halves``)."""
    on = t.ub_fprop_rs != "none" and t.tp_overlap == "all" and t.sequence_parallel and lay.tp > 1
    attn, mlp = userbuffer_halves(m, layer)
    return on and attn, on and mlp


def userbuffer_bytes(m: Model, layer: int, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Bytes the userbuffers' copies and reduce kernel move on the compute stream for one
    micro-batch: (attention forward, attention backward, MLP forward, MLP backward)."""
    width = 1 if float8_gathers(t) else 2  # what the all-gathers move an element
    out: list[float] = []
    blocks = (attention_shapes(m, t, lay), mlp_shapes(m, layer, t, lay))
    for on, shapes, kinds in zip(userbuffers(m, layer, t, lay), blocks, te_linears(m, layer), strict=True):
        forward = backward = 0.0
        for (tokens, n, k, _), (normed, parallel) in zip(shapes, kinds, strict=True):
            if not on:
                break
            if parallel == "column":
                shard = tokens * k / lay.tp
                forward += 2 * width * shard  # the input shard copied into the buffer
                if normed:  # the bulk reduce-scattered dgrad copied out of it (see above)
                    backward += 2 * 2 * shard
            elif parallel == "row":
                shard = tokens * n / lay.tp
                backward += 2 * width * shard  # the output gradient's shard copied in
                if t.ub_fprop_rs == "ring_exchange":  # tp chunks summed into one
                    forward += (lay.tp + 1) * 2 * shard
        out += [forward, backward]
    return out[0], out[1], out[2], out[3]


def margin_seconds(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float]:
    """Seconds the forward's row-parallel multiplies (attention, MLP) take longer on the
    SMs ``ub_fprop_sm_margin`` leaves them, for one micro-batch."""
    if not t.ub_fprop_sm_margin:
        return 0.0, 0.0
    if t.ub_fprop_sm_margin >= c.sms:
        raise PipesimError(
            f"ub_fprop_sm_margin = {t.ub_fprop_sm_margin} leaves none of the cluster's {c.sms} SMs to the multiplies; "
            f"give fewer than {c.sms}"
        )
    slower = t.ub_fprop_sm_margin / (c.sms - t.ub_fprop_sm_margin)
    out = []
    blocks = (attention_shapes(m, t, lay), mlp_shapes(m, layer, t, lay))
    for on, shapes, kinds in zip(userbuffers(m, layer, t, lay), blocks, te_linears(m, layer), strict=True):
        rows = [s for s, (_, parallel) in zip(shapes, kinds, strict=True) if on and parallel == "row"]
        out.append(gemms(c, t, rows)[0] * slower if rows else 0.0)
    return out[0], out[1]


def te_tp_seconds(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Seconds all of the above adds to one micro-batch of a layer: (attention forward,
    attention backward, MLP forward, MLP backward), with torchao's amax all-reduces priced
    alike (``torchao_tensor_parallel``)."""
    counts = [a + b for a, b in zip(amax_reductions(m, layer, t, lay), torchao_amax_reductions(m, layer, t, lay), strict=True)]
    if not any(counts) and not any(userbuffers(m, layer, t, lay)):
        # the usual case (BF16, or no tensor parallelism): nothing here, and layer_costs
        # calls this for every layer of every cost model the search builds
        return 0.0, 0.0, 0.0, 0.0
    reduce = nccl.collective_seconds(c, "all_reduce", AMAX_BYTES, lay.tp, lay.span("tp", c.domain))
    moved = userbuffer_bytes(m, layer, t, lay)
    attn_margin, mlp_margin = margin_seconds(m, layer, c, t, lay)
    af, ab, mf, mb = (n * reduce + b / hbm_rate(c, t) for n, b in zip(counts, moved, strict=True))
    return af + attn_margin, ab, mf + mlp_margin, mb
