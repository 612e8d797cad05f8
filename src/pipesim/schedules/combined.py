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

import numpy as np

from ..ir import Placement, RankTable, Schedule
from .classic import schedule_table

F, B, W, BW = 0, 1, 2, 3  # indices into ir.KINDS


def warmup(pp: int, rank: int, microbatches: int, chunks: int, group: int) -> int:
    """Forwards before the first pair on ``rank`` (capped by the rank's total)."""
    return min(2 * (pp - rank - 1) + (chunks - 1) * group + 1, microbatches * chunks)


def _rank(warm: int, table_mb: np.ndarray, table_c: np.ndarray, v: int, delay_wgrad: bool) -> list[np.ndarray]:
    """One rank's columns (kind, chunk, mb, kind2, chunk2, mb2) as ``RankTable`` holds
    them: ``warm`` lone forwards, then pairs (forward warm+k, backward k), then the lone
    backwards; with ``delay_wgrad`` each backward's W right after the item holding it.
    Arrays, not an Op per item: a large order (pp=9, M=7680, v=4) has over half a million."""
    total = len(table_mb)
    n = total - warm  # pairs
    back_c = v - 1 - table_c  # backward k runs table entry k with the chunk reversed
    back = B if delay_wgrad else BW
    lone = np.full(warm, -1, np.int8)
    zero = np.zeros(warm, np.int32)  # a lone op's backward columns, as RankTable.of fills them
    cols = [
        np.concatenate([np.full(total, F, np.int8), np.full(warm, back, np.int8)]),
        np.concatenate([table_c, back_c[n:]]),
        np.concatenate([table_mb, table_mb[n:]]),
        np.concatenate([lone, np.full(n, back, np.int8), lone]),
        np.concatenate([zero, back_c[:n], zero]),
        np.concatenate([zero, table_mb[:n], zero]),
    ]
    if not delay_wgrad:
        return cols
    # item warm+k holds backward k (a pair's second half, or a lone B): its W follows it
    zeros = np.zeros(total, np.int32)
    ws = (np.full(total, W, np.int8), back_c, table_mb, np.full(total, -1, np.int8), zeros, zeros)
    return [np.concatenate([col[:warm], np.column_stack([col[warm:], w]).ravel()]) for col, w in zip(cols, ws)]


def _ranks(pp: int, M: int, v: int, g: int, delay_wgrad: bool) -> RankTable:
    table_mb, table_c = np.array(schedule_table(M, v, g), np.int32).reshape(-1, 2).T
    return RankTable.stack([_rank(warmup(pp, r, M, v, g), table_mb, table_c, v, delay_wgrad) for r in range(pp)])


def one_f_one_b_overlap(pp: int, microbatches: int, delay_wgrad: bool = False) -> Schedule:
    """Combined 1F1B with one chunk per rank: 2(pp-r-1)+1 warm-up forwards, then F&B pairs
    (with one chunk the group size changes nothing: the table is 0..M-1)."""
    M = microbatches
    return Schedule("1f1b-overlap", pp, M, Placement.flat(pp, M), _ranks(pp, M, 1, pp, delay_wgrad))


def interleaved_1f1b_overlap(
    pp: int, microbatches: int, chunks: int = 2, delay_wgrad: bool = False, group_size: int | None = None
) -> Schedule:
    """Combined 1F1B on Megatron's interleaved placement (chunk c of rank r is stage c*pp + r)
    in groups of ``group_size`` micro-batches (default pp)."""
    M, v = microbatches, chunks  # chunks >= 2 and Megatron's group checks: the registry's
    g = pp if group_size is None else group_size
    ranks = _ranks(pp, M, v, g, delay_wgrad)
    return Schedule("interleaved-1f1b-overlap", pp, M, Placement.interleaved(pp, M, v), ranks)
