"""What Transformer Engine's tensor-parallel linears add on the compute stream besides the
multiplies, casts and collectives priced elsewhere: the amax all-reduces that per-tensor
FP8 casts wait for under sequence parallelism.

Read in Transformer Engine 2.7 (fedd9ddc, the version Megatron-Bridge 25.09 built on):

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
"""

from __future__ import annotations

from . import nccl
from .elementwise import te_linears
from .layout import Layout
from .specs import Cluster, Model, Training
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


def te_tp_seconds(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Seconds all of the above adds to one micro-batch of a layer: (attention forward,
    attention backward, MLP forward, MLP backward)."""
    reduce = nccl.collective_seconds(c, "all_reduce", AMAX_BYTES, lay.tp, lay.span("tp", c.domain))
    af, ab, mf, mb = (n * reduce for n in amax_reductions(m, layer, t, lay))
    return af, ab, mf, mb
