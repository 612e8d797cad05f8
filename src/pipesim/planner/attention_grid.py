"""The share of the GPU a fused-attention kernel's grid of thread blocks keeps busy: the
blocks' work (keys read per query row forward, query rows per key backward) shared out over
the SMs, by the least span any schedule reaches or by launch order (``compute.attention_core``
and ``cp_attention_core`` divide a kernel's FLOP rate by it)."""

from __future__ import annotations

import functools
import heapq
import math

from .attention_window import chunk_lengths
from .layout import Layout
from .specs import Cluster, Training


def attention_grid_fill(
    c: Cluster, t: Training, lay: Layout, heads: float, rows: int, backward: bool = False, window: int = 0, chunk: int = 0
) -> float:
    """The share of the GPU a causal fused-attention kernel can keep busy: 1 when its grid
    is large, less when few thread blocks share out the SMs (``t.attention_waves``).

    FlashAttention launches one thread block per (block of ``rows`` query rows, head,
    sequence) forward (flash_fwd_launch_template.h: grid(num_m_block, b, h)), one per key
    block backward, and a block runs on one SM. Under the causal mask block i of m reads
    the keys up to its last row, so the blocks' work is a staircase up to the whole
    sequence. The share is the total work over the SMs' time to the earliest end any
    schedule of the blocks could reach (``causal_grid_span``), or, with
    ``t.attention_block_order = "launch"`` (FlashAttention-2: flash_fwd_kernel.h takes
    m_block = blockIdx.x, no tile scheduler), the span of the blocks handed out in launch
    order, each to the first SM free (``launch_grid_span``; the forward's blocks grow along
    a sequence, the backward's key blocks shrink; under a sliding ``window`` each block's
    keys stop growing at its rows plus the window; within ``chunk``-token chunks each chunk
    is a staircase of its own, as a varlen grid of one sequence a chunk launches it).
    Tensor parallelism (few
    heads a GPU), micro-batch 1 and short sequences (seq / cp rows taken as one causal
    kernel if called for a context rank; the estimate prices a context rank's kernels one
    by one, ``cp_attention_core``) shrink the grid; large grids keep
    ``attention_efficiency``, the term only lowers it. Evidence: MooreThreads/SimuMax's
    measured TransformerEngine attention on B200 and A100, which
    benchmarks/attention_grid.py prints beside it."""
    if not t.attention_waves:
        return 1.0
    seq = t.seq / lay.cp
    copies = lay.micro_batch * math.ceil(heads)
    m = math.ceil(seq / rows)
    if chunk and chunk < seq:
        work, window = copies * sum(_staircase(seq, rows, 0, chunk)), 0
    elif window and window < seq:
        chunk = 0
        work = copies * sum(_staircase(seq, rows, window))
    else:
        chunk = 0
        work = copies * (rows * (m - 1) * m / 2 + seq)  # keys read, a row of each block: sum of min(seq, (i + 1) rows)
        window = 0  # a window as long as the sequence is the whole causal square
    if t.attention_block_order == "launch":
        span = launch_grid_span(seq, rows, copies, c.sms, not backward, window, chunk)
    else:
        span = causal_grid_span(seq, rows, copies, c.sms, window, chunk)
    return 1.0 if work >= c.sms * span else work / (c.sms * span)


def _staircase(seq: float, rows: int, window: int = 0, chunk: int = 0, growing: bool = True) -> list[float]:
    """A causal sequence's blocks of ``rows`` query rows, by the keys each row reads up to;
    under a sliding ``window`` a block reads from ``window`` before its first row to its last;
    within ``chunk``-token chunks, each chunk's blocks as a sequence of its own, in
    sequence order (``growing`` false: each chunk's shrinking, as backward's key blocks)."""
    if chunk and chunk < seq:
        return [x for n in chunk_lengths(seq, chunk) for x in _staircase(n, rows, growing=growing)]
    if not growing:
        return _staircase(seq, rows, window)[::-1]
    ends = [min(seq, (i + 1) * rows) for i in range(math.ceil(seq / rows))]
    return [min(end, end - i * rows + window) for i, end in enumerate(ends)] if window else ends


def _launch_span(sizes, copies: int, sms: int) -> float:
    """The longest any SM works when ``copies`` copies of blocks of work ``sizes`` are handed
    out in launch order (a copy's blocks one after another), each to the first SM to come
    free: the greedy list schedule of a kernel without a tile scheduler."""
    free = [0.0] * min(sms, copies * len(sizes))
    for _ in range(copies):
        for size in sizes:
            heapq.heapreplace(free, free[0] + size)
    return max(free)


def _bound_span(sizes, copies: int, sms: int) -> float:
    """The longest some SM must work whatever the schedule of ``copies`` copies of blocks of
    work ``sizes``: it holds k + 1 of the k x sms + 1 largest blocks, for every k."""
    ordered = sorted(sizes, reverse=True)
    return max((k + 1) * ordered[k * sms // copies] for k in range(math.ceil(copies * len(sizes) / sms)))


@functools.lru_cache(maxsize=4096)
def launch_grid_span(seq: float, rows: int, copies: int, sms: int, growing: bool, window: int = 0, chunk: int = 0) -> float:
    """The longest any SM works (in keys read per query row) when ``copies`` causal
    sequences of ``seq`` rows, cut into blocks of ``rows``, are handed out in launch order
    (a sequence's blocks one after another, growing or shrinking along it), each to the
    first SM to come free (``_launch_span``). Never shorter than ``causal_grid_span``, the
    least any order allows."""
    return _launch_span(_staircase(seq, rows, window, chunk, growing), copies, sms)


@functools.lru_cache(maxsize=4096)
def causal_grid_span(seq: float, rows: int, copies: int, sms: int, window: int = 0, chunk: int = 0) -> float:
    """The longest any SM must work (in keys read per query row) when ``copies`` causal
    sequences of ``seq`` rows are cut into blocks of ``rows`` and shared out over ``sms``
    (``_bound_span``; k = 0: the longest block; whole waves of equal blocks, NVIDIA's wave
    quantization, when a sequence fits one block). The total work over the SMs is the
    other bound ``attention_grid_fill`` takes. So the fill is the most a schedule can
    reach: a longest-first one (FlashAttention-3 and -4's SingleTileLPTScheduler) reaches
    it on the smallest and the largest grids and comes within 15% between, at two to
    four blocks an SM (tests/test_attention_grid.py)."""
    return _bound_span(_staircase(seq, rows, window, chunk), copies, sms)


@functools.lru_cache(maxsize=8192)
def grid_fill(kernels: tuple, tile: int, backward: bool, copies: int, sms: int, launch: bool) -> float:
    """The share of the SMs ``copies`` copies of the grids of ``kernels`` (launched at once,
    ``cp_steps.Kernel``: a context rank's per-step kernels, ``cp_attention_core``) keep busy:
    their blocks' work (``Kernel.blocks`` over ``tile`` rows) over the SMs' time to the end,
    the least any schedule reaches (``_bound_span``) or, with ``launch``, the blocks handed
    out in launch order (``_launch_span``). Keyed by the kernels, not their blocks: a long
    sequence has hundreds of thousands of blocks, which every candidate would otherwise
    list and hash again."""
    sizes = tuple(x for k in kernels for x in k.blocks(tile, backward))
    span = (_launch_span if launch else _bound_span)(sizes, copies, sms)
    return min(1.0, copies * sum(sizes) / (sms * span))
