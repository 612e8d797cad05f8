"""GPipe, 1F1B and Megatron's interleaved 1F1B: the schedules with a fused backward (BW).

Built as arrays (``RankTable``): at pp=64, M=1024 a Python object per op would cost more
than simulating them."""

from __future__ import annotations

import numpy as np

from ..ir import Placement, RankTable, Schedule
from .torch_orders import interleaved

F, BW = 0, 3  # indices into ir.KINDS


def gpipe(pp: int, microbatches: int) -> Schedule:
    """Every rank runs all forwards, then all backwards in micro-batch order."""
    M = microbatches
    kind = np.repeat(np.array([F, BW], np.int8), M)
    mb = np.tile(np.arange(M, dtype=np.int32), 2)
    row = (kind, np.zeros(2 * M, np.int32), mb)
    return Schedule("gpipe", pp, M, Placement.flat(pp, M), RankTable.stack([row] * pp))


def warm_then_alternate(warm: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """A rank that runs ``warm`` forwards, then alternates a forward and a backward, then
    drains the backwards: per item, (is it a forward, its index among the forwards or
    among the backwards)."""
    j = np.arange(2 * total)
    steady_end = 2 * total - warm
    d = j - warm
    fwd = (j < warm) | ((j < steady_end) & (d % 2 == 0))
    k = np.where(j < warm, j, np.where(j < steady_end, np.where(fwd, warm + d // 2, d // 2), j - total))
    return fwd, k


def one_f_one_b(pp: int, microbatches: int) -> Schedule:
    """Rank r runs pp-r-1 warm-up forwards, then alternates forward and backward, then
    drains the backwards: at most pp-r activations alive."""
    M = microbatches
    rows = []
    for r in range(pp):
        fwd, k = warm_then_alternate(min(pp - r - 1, M), M)
        rows.append((np.where(fwd, F, BW), np.zeros(len(k), np.int32), k))
    return Schedule("1f1b", pp, M, Placement.flat(pp, M), RankTable.stack(rows))


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """(micro-batch, chunk) of each virtual micro-batch, as Megatron's get_schedule_table:
    groups of ``group`` micro-batches, each through chunk 0, then chunk 1, ...; the last
    group takes whatever is left. The k-th backward is entry k with the chunk reversed."""
    table = []
    for lo in range(0, microbatches, group):
        hi = microbatches if lo + group >= microbatches else lo + group
        table += [(mb, c) for c in range(chunks) for mb in range(lo, hi)]
    return table


def group_refused(name: str, pp: int, microbatches: int, group: object) -> str | None:
    """Why Megatron refuses microbatch_group_size_per_vp_stage ``group`` (None: its
    default, pp) at (pp, M), as forward_backward_pipelining_with_interleaving checks it;
    None when it runs. The registry's check for the families that take a group."""
    M, g = microbatches, pp if group is None else group
    flag = "--group-size (Megatron's --microbatch-group-size-per-virtual-pipeline-stage)"
    if group is None and M % pp:
        return (
            f"{name} needs --microbatches a multiple of --pp={pp} (Megatron's default group of pp), or a {flag} g "
            f"from pp to M with M % g 0 or >= pp; got M={M}"
        )
    if not isinstance(g, int) or not pp <= g <= M:
        return f"{name} needs {flag} from --pp={pp} to --microbatches={M}, got {g}"
    if 0 < M % g < pp:
        return f"{name} needs M % {flag} to be 0 or >= --pp={pp}: groups of {g} leave a last group of {M % g} < pp={pp}"
    return None


def smallest_group(pp: int, microbatches: int) -> int | None:
    """The smallest group size Megatron accepts at (pp, M) (None: M < pp): the fewest
    warm-up forwards, hence activations, and for combined 1F1B the most pairs."""
    M = microbatches
    return next((g for g in range(pp, M + 1) if M % g == 0 or M % g >= pp), None)


def interleaved_1f1b(pp: int, microbatches: int, chunks: int = 2, group_size: int | None = None) -> Schedule:
    """Megatron-LM's interleaved 1F1B: each rank holds ``chunks`` model chunks (chunk c of
    rank r is stage c*pp + r) and walks them in groups of ``group_size`` micro-batches
    (Megatron's microbatch_group_size_per_vp_stage, default pp; ``schedule_table``),
    forwards in chunk order and backwards in reverse chunk order, after
    2(pp-r-1) + (v-1)g warm-up forwards. For M not a multiple of pp and no group size,
    the order of PyTorch's Interleaved1F1B, which groups micro-batches in rounds of
    M // max(1, M // pp) (it refuses M that its rounds do not divide, and so does this)."""
    M, v = microbatches, chunks
    if M % pp and group_size is None:  # PyTorch's generalisation: rounds of M // max(1, M // pp) micro-batches
        return interleaved("interleaved-1f1b", pp, M, v, zero_bubble=False)
    g = pp if group_size is None else group_size  # checked by the registry (group_refused)
    table_mb, table_c = np.array(schedule_table(M, v, g), np.int32).T
    total = M * v
    rows = []
    for r in range(pp):
        fwd, k = warm_then_alternate(min((pp - r - 1) * 2 + (v - 1) * g, total), total)
        rows.append((np.where(fwd, F, BW), np.where(fwd, table_c[k], v - 1 - table_c[k]), table_mb[k]))
    return Schedule("interleaved-1f1b", pp, M, Placement.interleaved(pp, M, v), RankTable.stack(rows))
