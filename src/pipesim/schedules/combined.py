"""Megatron-LM's combined 1F1B (``--overlap-moe-expert-parallel-comm``): in the steady
state of interleaved 1F1B, the forward of one micro-batch and the backward of another run
as one overlapped unit, so that each one's expert-parallel dispatch/combine all-to-all
hides behind the other's attention and MLP, with one copy of the parameters.

The order is the one ``forward_backward_pipelining_with_interleaving`` runs when that
flag is on (megatron/core/pipeline_parallel/schedules.py, ``get_pp_rank_microbatches`` and
``get_schedule_table``):

* the virtual micro-batches of a rank follow Megatron's schedule table
  (``classic.schedule_table``): groups of g micro-batches (``group_size``, Megatron's
  ``microbatch_group_size_per_vp_stage``, default pp), each group through chunk 0, then
  chunk 1, ...; the last group takes whatever is left; backward k is table entry k with
  the chunk reversed. Megatron asks pp <= g <= M and M % g either 0 or >= pp;
* rank r runs ``2(pp-r-1) + (v-1)g + 1`` forwards first: interleaved 1F1B's warm-up plus
  the one extra forward Megatron adds "to ensure the forward and backward computations
  are independent in all 1f1b steps";
* then step k runs forward ``warm + k`` and backward k as one pipesim ``Pair`` (Megatron's
  ``combined_forward_backward_step``), and the backwards left over run alone.

Inside a pair, Megatron's layer schedule (``TransformerLayerSchedulePlan.run``) pairs
forward layer i with backward layer L-1-i and runs, on the compute stream, attention(F),
MLP(B), MLP(W), MLP(F), attention(B), and on the communication stream combine(B),
dispatch(F), dispatch(B), combine(F): the order of DeepSeek-V3's Figure 4, which is what
``components.pair_plan`` prices on two streams.

``delay_wgrad`` (Megatron's ``--delay-wgrad-compute``) splits the weight gradient off
the backward: each step's backward is a B and its W runs as its own op right after it,
in the same step. (In Megatron the delayed W still runs inside that step, the experts'
part overlapping the backward dispatch; pipesim's pair prices the fused BW with that
overlap already, so ``delay_wgrad`` moves the W out of the two-stream unit.)

``1f1b-overlap`` is the same program with one chunk per rank (Megatron-core's
interleaved schedule at virtual_pipeline_model_parallel_size = 1; at pp = 1 it is exactly
``combined_1f1b_schedule_for_no_pipelining``: F0, then B_i & F_(i+1), then the last B).
Megatron's training arguments ask for vp >= 2 when pp > 1.
"""

from __future__ import annotations

from ..ir import Item, Op, Pair, Placement, Schedule
from .classic import schedule_table


def warmup(pp: int, rank: int, microbatches: int, chunks: int, group: int) -> int:
    """Forwards before the first pair on ``rank`` (capped by the rank's total)."""
    return min(2 * (pp - rank - 1) + (chunks - 1) * group + 1, microbatches * chunks)


def _rank(pp: int, r: int, M: int, v: int, g: int, delay_wgrad: bool) -> tuple[Item, ...]:
    table = schedule_table(M, v, g)
    total = len(table)
    bkind = "B" if delay_wgrad else "BW"

    def fwd(k: int) -> Op:
        mb, c = table[k]
        return Op("F", c, mb)

    def bwd(k: int) -> tuple[Op, tuple[Op, ...]]:
        mb, c = table[k]
        c = v - 1 - c
        return Op(bkind, c, mb), ((Op("W", c, mb),) if delay_wgrad else ())

    warm = warmup(pp, r, M, v, g)
    items: list[Item] = [fwd(k) for k in range(warm)]
    for k in range(total - warm):
        b, w = bwd(k)
        items += [Pair(fwd(warm + k), b), *w]
    for k in range(total - warm, total):
        b, w = bwd(k)
        items += [b, *w]
    return tuple(items)


def one_f_one_b_overlap(pp: int, microbatches: int, delay_wgrad: bool = False) -> Schedule:
    """Combined 1F1B with one chunk per rank: 2(pp-r-1)+1 warm-up forwards, then F&B pairs
    (with one chunk the group size changes nothing: the table is 0..M-1)."""
    M = microbatches
    ranks = tuple(_rank(pp, r, M, 1, pp, delay_wgrad) for r in range(pp))
    return Schedule("1f1b-overlap", pp, M, Placement.flat(pp, M), ranks)


def interleaved_1f1b_overlap(
    pp: int, microbatches: int, chunks: int = 2, delay_wgrad: bool = False, group_size: int | None = None
) -> Schedule:
    """Combined 1F1B on Megatron's interleaved placement (chunk c of rank r is stage c*pp + r)
    in groups of ``group_size`` micro-batches (default pp)."""
    M, v = microbatches, chunks  # chunks >= 2 and Megatron's group checks: the registry's
    g = pp if group_size is None else group_size
    ranks = tuple(_rank(pp, r, M, v, g, delay_wgrad) for r in range(pp))
    return Schedule("interleaved-1f1b-overlap", pp, M, Placement.interleaved(pp, M, v), ranks)
