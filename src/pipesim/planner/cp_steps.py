"""Context parallelism's attention as the implementations launch it: a rank's share of a
layer's attention runs as several fused-attention kernels, each with its own grid, with
passes between them that merge the partial outputs (forward) and accumulate the gradients
(backward), and with more launches than one attention kernel. What each scheme launches
per layer and micro-batch on one GPU, read from its source:

- Transformer Engine 2.7 (NVIDIA/TransformerEngine v2.7, commit fedd9ddc, transformer_engine/
  pytorch/attention/dot_product_attention/context_parallel.py), which Megatron-Core runs
  (``--cp-comm-type``) and Megatron-Bridge 25.09 built on (its "build: Upgrade TE to 2.7",
  91967d13):

  - ``p2p``, ``AttnFuncWithCPAndKVP2P``: cp steps of a ring. Step 0 is causal attention of
    the rank's two chunks (seq/cp rows) on themselves; each later step is either all its
    queries against the first half of the arriving keys (seq/cp rows x seq/2cp keys) or the
    second half of its queries against all of them (seq/2cp x seq/cp), without a mask; the
    ranks holding one or the other differ at every step, so the ring moves at the slower.
    The forward alternates the steps over two streams ("to resolve wave quantization issue
    of Flash Attn in each step"), so a step's grid shares the GPU with the next's; the
    backward runs its steps on one stream. Passes: the keys and values concatenated into
    the send buffer; after the loop the output corrected step by step (a torch.compile'd
    ``flash_attn_fwd_out_correction``: read the output and the step's, write the output,
    bf16); backward the keys and values copied into the ring buffer, and each step's dq,
    dk, dv copied or added into bf16 accumulators (``dq.add_``, ``dkv.add_``), dk, dv
    passed on round the ring. The per-step log-sum-exp merges move 1/head_dim of the
    output's bytes and are left out.
  - ``all_gather``, ``AttnFuncWithCPAndKVAllGather``: keys and values made contiguous,
    all-gathered and reordered (``index_select``) into the whole sequence; one causal
    kernel per local chunk (seq/2cp rows against the keys up to the chunk's end), the two on
    two streams at once; the outputs copied into place. Backward: zeroed full-length dk, dv,
    the keys and values gathered and reordered again, two backward kernels, dq copied, dk,
    dv added into the full-length buffers, reordered, reduce-scattered and made contiguous.
  - ``a2a``, ``AttnFuncWithCPAndQKVOA2A`` and ``flash_attn_a2a_communicate``: each of q, k,
    v made contiguous, all-to-all'ed and reordered into the whole sequence and seq x
    heads/cp, one causal kernel over it, the output reordered, all-to-all'ed back and made
    contiguous; the backward does it for the output and its gradient before and for dq,
    dk, dv after. ``a2a+p2p`` runs the all-to-all, then the ring on the gathered heads.

- PyTorch's ring (torchtitan's context parallelism; ``Training.torch_context_parallel``):
  pytorch/pytorch torch/distributed/tensor/experimental/_attention.py, read at 0123248a
  (2025; the December 2024 version torchtitan's published rows ran, 1963fc8, is not in
  reach: ``_templated_ring_attention`` and its backward, the ``_SDPAMerger`` and the
  allgather rotation are taken as unchanged). cp steps of SDPA with the same sub-blocks as
  TE's ring, on one stream; each step's output merged into an fp32 one
  (``convert_to_f32``), cast back once at the end; backward each step's dq, dk, dv added
  into fp32 accumulators (dk, dv passed round the ring in fp32), cast back at the end. The
  published rows compile the blocks, and the ring's ops are traced into the graph
  (functional collectives), so each merge and accumulation is priced as one fused pass
  (eager, each merge is about four passes over the fp32 output).

Only cp > 1 with fused attention; ``compute.attention_core`` prices the kernels,
``layer_costs`` adds the passes and ``floors`` the launches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import PipesimError
from .attention_window import band_pairs, window_problem
from .collectives import a2a_ranks, kv_width
from .layout import Layout
from .params import attention_dims
from .specs import Cluster, Model, Training


@dataclass(frozen=True)
class Kernel:
    """One fused-attention launch on each (sequence, head) of a micro-batch: ``rows``
    queries against ``keys`` keys, ``causal`` with the mask's diagonal at the bottom right
    (query i sees the keys up to keys - rows + i: the causal square when rows == keys),
    and with a sliding ``window`` (causal only) the last ``window`` of them."""

    rows: float
    keys: float
    causal: bool
    window: int = 0

    def pairs(self) -> float:
        """Query-key products the kernel computes per (sequence, head)."""
        if self.window:
            return band_pairs(self.keys - self.rows, self.rows, self.window)
        return self.rows * self.keys - (self.rows * self.rows / 2 if self.causal else 0.0)

    def blocks(self, tile: int, backward: bool) -> tuple[float, ...]:
        """The work of each thread block (keys read per query row forward, over blocks of
        ``tile`` query rows; query rows per key backward, over blocks of ``tile`` keys), in
        launch order: under the causal mask the forward's blocks grow along the sequence and
        the backward's shrink (``attention_grid.attention_grid_fill``)."""
        if not backward:
            n = math.ceil(self.rows / tile)
            if not self.causal:
                return (self.keys,) * n
            before, w = self.keys - self.rows, self.window
            ends = [before + min(self.rows, (j + 1) * tile) for j in range(n)]
            # a windowed block reads from the window before its first row to its last
            return tuple(min(end, end - before - j * tile + w) if w else end for j, end in enumerate(ends))
        n = math.ceil(self.keys / tile)
        if not self.causal:
            return (self.rows,) * n
        before = self.keys - self.rows
        if self.window:
            # a key block is read by the queries from its first key to the window past its
            # last; blocks no query reads are not launched (TE slices the keys to the window)
            ends = [min(self.keys, (j + 1) * tile) for j in range(n)]
            rows = (min(self.keys, e + self.window) - max(before, j * tile) for j, e in enumerate(ends))
            return tuple(r for r in rows if r > 0)
        return tuple(self.rows - max(0.0, j * tile - before) for j in range(n))


@dataclass(frozen=True)
class Step:
    """What a step of a scheme runs: the kernels of each kind of rank (``variants``; the
    slowest sets the step, the ranks waiting on each other's keys), each variant's kernels
    sharing the GPU at once; ``together`` such steps in flight on separate streams."""

    variants: tuple[tuple[Kernel, ...], ...]
    together: int = 1


def ring_steps(rows: float, n: int, together: int) -> tuple[Step, ...]:
    """The n steps of a load-balanced causal ring over ranks holding ``rows`` queries (two
    chunks): the local causal step, then n - 1 of the two half-blocks."""
    half = (Kernel(rows, rows / 2, False),), (Kernel(rows / 2, rows, False),)
    return (Step(((Kernel(rows, rows, True),),), together),) + (Step(half, together),) * (n - 1)


def attention_steps(t: Training, lay: Layout, a2a: int, backward: bool, window: int = 0) -> tuple[tuple[Step, ...], float]:
    """(steps, heads of a kernel per sequence as a share of the tensor rank's) one rank runs
    for a layer's attention, forward or backward; ``a2a`` the all-to-all's ranks
    (``collectives.a2a_size``: cp for ``a2a``, 1 without one). A sliding ``window`` runs
    only under ``all_gather`` and ``a2a`` (``window_problem``)."""
    seq = t.seq
    if window and window_problem(t):
        raise PipesimError(window_problem(t))
    if t.torch_context_parallel:
        return ring_steps(seq / lay.cp, lay.cp, 1), 1.0
    if t.cp_comm == "all_gather":
        # rank 0's two chunks, the first and the last of 2cp: the longest blocks any rank
        # has for the same work, so the slowest; on two streams at once. Under a window a
        # chunk's rows read at most the window, so the work is no longer even: rank 1's
        # chunks (the second and the last but one) may read more than rank 0's first one
        # does, and the step goes at the slower of the two ranks
        chunk = seq / (2 * lay.cp)
        rank0 = (Kernel(chunk, chunk, True, window), Kernel(chunk, seq, True, window))
        if not window:
            return (Step((rank0,)),), 1.0
        rank1 = (Kernel(chunk, 2 * chunk, True, window), Kernel(chunk, seq - chunk, True, window))
        return (Step((rank0, rank1)),), 1.0
    if t.cp_comm == "a2a":
        return (Step(((Kernel(seq, seq, True, window),),)),), 1 / lay.cp
    n = lay.cp // a2a
    return ring_steps(seq / n, n, 1 if backward else 2), 1 / a2a


def pass_bytes(m: Model, c: Cluster, t: Training, lay: Layout, window: int = 0) -> tuple[float, float]:
    """(forward, backward) bytes the scheme's memory-bound passes move on one rank per layer
    and micro-batch, besides the attention kernels (module docstring names each). The
    elements are the rank's before any all-to-all: queries, outputs and keys with values
    (``collectives.kv_width``); after an all-to-all a rank holds a times the tokens of 1/a
    of the heads, the same count. Under a sliding ``window`` the all-gather's dk, dv adds
    cover only the keys each chunk's window reaches."""
    if lay.cp <= 1 or not t.flash_attention:
        return 0.0, 0.0
    qk, v = attention_dims(m)
    a2a, T = a2a_ranks(m, c, t, lay), lay.tokens(t.seq)
    q, o, kv = T * m.heads / lay.tp * qk, T * m.heads / lay.tp * v, T * kv_width(m) / lay.tp
    if t.torch_context_parallel:
        n = lay.cp
        # forward: k, v concatenated for the all-gather; the first output upcast (read 2,
        # write 4), n - 1 merges into the fp32 output (read 4 and the step's 2, write 4),
        # the cast back (read 4, write 2); backward: the concatenation again, dq and dk, dv
        # each step added into fp32 accumulators (the first a write of 4 from 2, then read
        # 4 and 2, write 4), cast back at the end
        forward = 4 * kv + (6 + 10 * (n - 1) + 6) * o
        backward = 4 * kv + (6 + 10 * (n - 1) + 6) * (q + kv)
        return forward, backward
    if t.cp_comm == "all_gather":
        n = lay.cp
        # forward: k, v made contiguous (4), the gathered ones reordered (4 x cp), the two
        # chunks' outputs copied into place (4); backward: zeroed dk, dv (2 x cp), the
        # gather reordered again (4 x cp), dq copied (4), each chunk's dk, dv added over
        # its keys (6 x (2cp + 1)/2: rank 0's chunks reach 1/2cp and all of the sequence),
        # reordered (4 x cp) and made contiguous after the reduce-scatter (4)
        forward = (4 + 4 * n) * kv + 4 * o
        # (under a window, TE's get_kv_seq_info_after_all_gather cuts the last chunk's keys
        # to its own and the window's before them: 1 + window / chunk chunks of the 2cp)
        last = 2 * n if not window else min(2 * n, 1 + window * 2 * n / t.seq)
        backward = (2 * n + 4 * n + 6 * (1 + last) / 2 + 4 * n + 4) * kv + 4 * q
        return forward, backward
    forward = backward = 0.0
    if a2a > 1:
        # each tensor made contiguous and reordered around its all-to-all: 8 bytes an
        # element; q, k, v and the output forward, the output, its gradient and dq, dk, dv
        # backward
        forward, backward = 8 * (q + kv + o), 8 * (2 * o + q + kv)
    n = lay.cp // a2a
    if n > 1:
        # TE's ring: k, v into the send buffer (forward) or the ring buffer (backward):
        # 4; the output's first correction (4) and n - 1 more (6), bf16; dq and dk, dv
        # copied at one step (4) and added at the n - 1 others (6), bf16
        forward += 4 * kv + (4 + 6 * (n - 1)) * o
        backward += 4 * kv + (4 + 6 * (n - 1)) * (q + kv)
    return forward, backward


def extra_kernels(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[int, int]:
    """(forward, backward) kernels a layer launches per micro-batch for context parallelism
    beyond the one attention kernel ``floors.layer_kernels`` counts, collectives included
    (the host issues them too); the module docstring names each."""
    if lay.cp <= 1 or not t.flash_attention:
        return 0, 0
    if t.torch_context_parallel:
        n = lay.cp
        # forward: cat, all-gather, n - 1 more SDPA, upcast, n - 1 merges, cast back;
        # backward: all-gather, cat, n - 1 more SDPA backward, n dq and n dk/dv
        # accumulations, n dk/dv passes round the ring, two casts back
        return 2 * n + 2, 4 * n + 3
    a2a = a2a_ranks(m, c, t, lay)
    if t.cp_comm == "all_gather":
        # forward: 2 contiguous, 2 all-gathers, 2 reorders, 1 more kernel, 2 output copies;
        # backward: 2 zeroed buffers, 2 all-gathers, 2 reorders, 1 more kernel, 2 dq copies,
        # 4 dk/dv adds, 2 reorders, 2 reduce-scatters, 2 contiguous
        return 9, 19
    forward = backward = 0
    if a2a > 1:
        # contiguous, all-to-all, reorder for each of q, k, v and the output; backward for
        # the output, its gradient and dq, dk, dv
        forward, backward = 4 * 3, 5 * 3
    n = lay.cp // a2a
    if n > 1:
        # a send and a receive a step, one batched launch at cp 2 (TE batches them on
        # Hopper there: batch_isend_irecv); forward: the send buffer's cat, n - 1 more
        # kernels, n output corrections, the log-sum-exp's clone and n - 2 corrections;
        # backward: the ring buffer's copy, n - 1 more kernels, n dq and n dk/dv
        # accumulations
        p2p = 1 if n == 2 else 2
        forward += 1 + (n - 1) + n + (n - 1) + p2p * (n - 1)
        backward += 1 + (n - 1) + 2 * n + p2p * n
    return forward, backward
