"""Compute time of a layer's kernels on one GPU for one micro-batch, and FLOPs per token.

FLOPs: a matrix multiply of an n-vector by an n x m matrix costs 2nm. The backward for
inputs (B) and for weights (W) each cost what the forward's matrix multiplies cost;
causal attention scores cost heads * seq/2 * (qk_dim + v_dim) * 2 forward and twice that
backward (all of it in B: no weights); over a sliding window, the window's pairs in place
of seq/2 a token (``attention_window.causal_pairs``).

Every part of a layer is priced by what bounds it: a matrix multiply by the roofline of
its FLOPs (at the share of peak large multiplies reach) and its bytes (at HBM bandwidth),
which is the one shape- and precision-dependent efficiency curve; attention by its FLOPs
at the fused kernel's share of peak; norms, activations, residual adds, rotary
embeddings, routing permutes and FP8 casts by the bytes they move at HBM bandwidth.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ..errors import PipesimError
from .attention_grid import attention_grid_fill, grid_fill
from .attention_window import causal_pairs, chunk_problem, run_window
from .collectives import a2a_ranks
from .cp_steps import attention_steps
from .floors import kernel_floor
from .layout import Layout
from .params import attention_dims, attention_params, mlp_params
from .specs import Cluster, Model, Training
from .training import te_current_scaling


def layer_flops(m: Model, layer: int, seq: int) -> dict[str, float]:
    """Forward FLOPs per token: attention projections, attention scores (causal, over the
    layer's window or within its chunks if it has them: ``attention_window.causal_pairs``), MLP."""
    qk, v = attention_dims(m)
    dense, _ = mlp_params(m, layer)
    if m.is_moe_layer(layer):
        e = m.moe
        mlp = 2 * (3 * m.hidden * e.expert_ffn * (e.top_k + e.shared_experts) + m.hidden * e.experts)
    else:
        mlp = 2 * dense
    return {
        "attn_proj": 2 * attention_params(m),
        "attn_core": m.heads * _core_rows(seq, m.window(layer), m.chunk(layer)) * (qk + v),
        "mlp": mlp,
    }


def _core_rows(seq: float, window: int, chunk: int = 0) -> float:
    """Twice the query-key pairs a token computes on average (seq for the causal square's
    seq^2 / 2; a layer's window or chunks shorten it: ``attention_window.causal_pairs``)."""
    if chunk and chunk < seq:
        return 2 * causal_pairs(seq, 0, chunk) / seq
    if not window or window >= seq:
        return seq  # the causal square, as before windows were priced: bit for bit
    return 2 * causal_pairs(seq, window) / seq


@lru_cache(maxsize=64)
def model_flops_per_token(m: Model, seq: int) -> float:
    """Training FLOPs per token without recomputation (forward, B and W: three times the
    forward, attention scores included since their backward costs twice their forward):
    the numerator of MFU. Kept per model and length: a search reads it for every result."""
    forward = sum(sum(layer_flops(m, i, seq).values()) for i in range(m.layers)) + 2 * m.hidden * m.vocab
    return 3 * forward


#: bytes an unfused attention moves per element of the score square besides its two
#: multiplies' own reads and writes, in fp16, as Megatron-LM 2021's ParallelAttention runs
#: it (baddbmm, FusedScaleMaskSoftmax, dropout, bmm; the same in Megatron-LM 2022 and
#: Megatron-DeepSpeed's forks). A causal mask takes the fused
#: scaled_upper_triang_masked_softmax kernel (megatron/fused_kernels/
#: scaled_upper_triang_masked_softmax.h at de7dc40f88): row i reads only its i + 1 unmasked
#: scores and writes the whole row, zeros past the diagonal. Forward it reads half the
#: square and writes all of it (1 + 2) and torch's dropout reads the probabilities and
#: writes them and a one-byte mask (5) ...
FORWARD_SCORE_BYTES = 8


#: ... backward the dropout's gradient reads the gradient and the mask and writes (5) and
#: the softmax's backward reads the gradient and its saved output below the diagonal and
#: writes the whole row, in place (1 + 1 + 2)
BACKWARD_SCORE_BYTES = 9


#: ... and with ALiBi (BLOOM: bigscience-workshop/Megatron-DeepSpeed 497aa1bf,
#: megatron/model/transformer.py) the scores come from ``torch.baddbmm`` with the bias as
#: its input and beta != 0: out of place, PyTorch first copies the bias, broadcast over
#: the query rows, into the whole score buffer (write 2) and cuBLAS, its beta not 0, reads
#: it back (2) (pytorch/pytorch 002253ce, aten/src/ATen/native/cuda/Blas.cpp,
#: ``baddbmm_out_cuda_impl``: ``result.copy_(self)`` when beta != 0; with beta 0 neither
#: happens). The bias itself is one row a head (1/seq of the square, left out). Backward
#: nothing more: the bias is a plain tensor, no gradient is asked of it
ALIBI_SCORE_BYTES = 4


#: output tile of a matrix-multiply kernel (rows x columns), for wave quantization
TILE = 128


#: the backward of fused attention runs at this share of its forward's FLOP rate
#: (FlashAttention-2: 73% vs 63% of A100 peak; FlashAttention-3: about 75% vs 55% on H100)
FLASH_BACKWARD_SHARE = 0.75


#: key rows a thread block of fused attention's backward holds (its grid runs over key
#: blocks): FlashAttention-2's sm80 backward (kBlockN 128 for head dims up to 128),
#: FlashAttention-3's on Hopper and FlashAttention-4's on Blackwell (n_block_size 128)
FLASH_BACKWARD_TILE_ROWS = 128


#: block-scaled FP8 weight-gradient multiplies (both operands scaled along the token
#: dimension, accumulated into FP32) run at this share of the forward multiplies' rate:
#: in DeepSeek's public training profile (deepseek-ai/profile-data, train.json, H800) the
#: grouped expert wgrad kernels take 5.8 ms per layer against 2.9 ms forward, same FLOPs
FP8_WGRAD_SHARE = 0.5


#: BF16 weight-gradient multiplies that accumulate into an fp32 main_grad (Megatron-LM's
#: gradient_accumulation_fusion: layout NT, beta = 1, fp32 output) run at this share of the
#: forward multiplies' rate. Measured per shape in MooreThreads/SimuMax's system files
#: (configs/system/b200_bf16_ceperm.json and a100_pcie.json, commit 4dcaae51): the median
#: over every shape of the weight gradient's efficiency over the mean of the forward's and
#: the input gradient's is 0.939 on B200 (144 shapes) and 0.949 on A100 PCIe (61), slower
#: in about 4 shapes of 5 on both; on B200 the same multiplies accumulating into bf16 run
#: 6.7% faster (82 shapes), the fp32 accumulator's traffic
FP32_ACCUMULATE_WGRAD_SHARE = 0.94


#: bytes a weight-gradient multiply moves per weight element when it accumulates into an
#: fp32 main_grad: it reads the running sum and writes it back (4 + 4), in place of the
#: bf16 gradient (2) ``gemm`` counts
FP32_ACCUMULATOR_BYTES = 8


def gemm_efficiency(c: Cluster, t: Training, fp8: bool) -> float:
    if t.compute_efficiency:
        return t.compute_efficiency
    if not fp8:
        return c.gemm_efficiency
    return c.fp8_tensor_gemm_efficiency if t.fp8_scaling == "tensor" else c.fp8_gemm_efficiency


def runs_fp8(c: Cluster, t: Training, fp8: bool | None) -> bool:
    """Whether a multiply runs in FP8: as the run's precision unless ``fp8`` says, and only
    on a GPU that has FP8."""
    return (t.precision == "fp8" if fp8 is None else fp8) and c.fp8_tflops > 0


def hbm_rate(c: Cluster, t: Training) -> float:
    """Bytes per second memory-bound kernels move."""
    return c.hbm_tbps * 1e12 * t.hbm_efficiency


def gemm(
    c: Cluster, t: Training, m: float, n: float, k: float, fp8: bool | None = None, count: float = 1, floor: bool = True
) -> float:
    """Seconds of ``count`` (m x k) @ (k x n) multiplies run as one (grouped) kernel.

    The one efficiency curve: 2mnk FLOPs at the achieved share of dense peak, times the
    wave quantization of the output's 128 x 128 tiles over the GPU's SMs (a last partial
    wave idles the rest: NVIDIA's matrix-multiplication performance guide), or the bytes
    (inputs at their width, a bf16 output) at HBM bandwidth, whichever is longer. Thin
    multiplies (few tokens per expert, narrow shards) fall below the peak share this way,
    large ones reach it (with ``gemm_tile_fill_us`` a BF16 tile also pays a fixed fill:
    ``tile_fill_factor``); FP8 has its own peak and share. No kernel takes less than its
    launch (``floors.kernel_floor``)."""
    low = runs_fp8(c, t, fp8)
    peak = (c.fp8_tflops if low else c.bf16_tflops) * 1e12 * gemm_efficiency(c, t, low)
    tiles = count * math.ceil(m / TILE) * math.ceil(n / TILE)
    if tiles == 0 or k <= 0:  # an empty dimension: nothing to multiply
        return 0.0
    waves = tiles / (math.ceil(tiles / c.sms) * c.sms)
    width = 1 if low else 2
    flops = 2 * m * n * k / (peak * waves) * (1 if low else tile_fill_factor(c, peak, k))
    moved = (width * (m * k + k * n) + 2 * m * n) / hbm_rate(c, t)
    # a grouped BF16 multiply streams each expert's weights for its few tokens: the
    # bytes add to the loop rather than hide under it (``grouped_bf16``)
    seconds = count * (flops + moved if grouped_bf16(count, low) else max(flops, moved))
    return max(seconds, kernel_floor(t)) if floor else seconds


def grouped_bf16(count: float, low: bool) -> bool:
    """Whether a multiply is priced as a grouped BF16 expert kernel: its time the loop's
    plus its bytes' at HBM bandwidth, not the longer of the two.

    Evidence: MooreThreads/SimuMax's measured B200 grouped-multiply table
    (configs/system/b200_bf16_ceperm.json, commit 4dcaae51; TransformerEngine 2.11
    GroupedLinear, bf16) over its 20 expert shapes of DeepSeek-V2 and V3 (20-256 experts,
    128-9832 tokens an expert): for the forward and the input gradient the sum is 4.3% slow
    at the median (13.7% mean absolute), the longer of the two 24% fast (28%), 45-70%
    fast at 128-256 tokens an expert, where each expert's weights are read for few
    tokens. Single multiplies keep the roofline (the dense table, test_b200_preset.py);
    FP8 grouped multiplies (DeepGEMM) have no such table here."""
    return count > 1 and not low


def tile_fill_factor(c: Cluster, peak: float, k: float) -> float:
    """How much longer than its k loop an output tile of a BF16 multiply takes: each
    TILE x TILE tile also pays ``c.gemm_tile_fill_us`` (filling the operand pipeline from
    HBM before the first step, writing the tile back after the last), so short reductions
    fall further below the loop's share of peak (``gemm_efficiency``) than long ones.

    Evidence: the measured per-shape H100 BF16 table that XLA's GPU cost model ships
    (tensorflow/tensorflow, third_party/xla/xla/service/gpu/model/
    matmul_interpolator_data.h, ``sm_90``, bf16 x bf16 -> bf16). On its 11
    shapes of 40 us or more, a 0.8 us fill at 0.82 for the loop puts every shape within 5%
    of its measured time (2.6% RMS), where the best single share (0.75) is 9.7% RMS and 21%
    worst (tests/test_gemm_shapes.py holds them). Training's multiplies are large (k is a
    hidden size, a shard of it, or the micro-batch's tokens), so on the published rows the
    term moves the step by under 1% and the presets leave it off (0); a cluster file turns
    it on. FP8 keeps one share: ``fp8_gemm_efficiency`` is DeepGEMM's rate on the training
    shapes, ``fp8_tensor_gemm_efficiency`` the best-shape figure."""
    if not c.gemm_tile_fill_us:
        return 1.0
    loop = k * 2 * TILE * TILE / (peak / c.sms)  # seconds one SM spends on a tile's k loop
    return 1 + c.gemm_tile_fill_us * 1e-6 / loop


def gemm_fbw(
    c: Cluster, t: Training, m: float, n: float, k: float, fp8: bool | None = None, count: float = 1
) -> tuple[float, float, float]:
    """(forward, input gradient, weight gradient) of a multiply of m tokens by a k x n
    weight: dX = dY W^T is m x n by n x k, dW = X^T dY is k x m by m x n.

    A BF16 weight gradient accumulated into fp32 (``t.wgrad_fp32_accumulate``): a single
    multiply runs at ``FP32_ACCUMULATE_WGRAD_SHARE`` of the rate; a grouped one (``count``
    experts, each reducing over only its own m tokens) moves every expert's fp32 sum
    (``FP32_ACCUMULATOR_BYTES`` a weight) in place of a bf16 gradient, added to its loop
    like its other bytes (``grouped_bf16``), so the fewer tokens an expert gets, the more
    of its time that takes. Evidence: the same measured grouped table (fp32 main_grad):
    the weight gradient runs at 0.36-0.91 of the forward's and input gradient's rate,
    falling with the tokens per expert (0.36 at 128, 0.65 at 1024, 0.91 at 9832); priced so
    it is 7.9% slow at the median, 9.0% mean absolute, where the single multiplies' share
    (0.94) made them 29% fast at the median and 62% at 128 tokens (test_b200_preset.py)."""
    w = gemm(c, t, k, n, m, fp8, count)
    if t.wgrad_fp32_accumulate and not runs_fp8(c, t, fp8):
        if grouped_bf16(count, False):
            w += count * k * n * (FP32_ACCUMULATOR_BYTES - 2) / hbm_rate(c, t)
        else:
            w /= FP32_ACCUMULATE_WGRAD_SHARE
    return gemm(c, t, m, n, k, fp8, count), gemm(c, t, m, k, n, fp8, count), w


def _sum3(parts) -> tuple[float, float, float]:
    f = b = w = 0.0
    for x, y, z in parts:
        f, b, w = f + x, b + y, w + z
    return f, b, w


def attention_shapes(m: Model, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """The attention block's multiplies as (tokens, n, k, count): tokens x k by k x n."""
    a, h, tp, T = m.attention, m.hidden, lay.tp, lay.tokens(t.seq)
    if a.kind == "mla":
        qk = a.qk_nope_dim + a.qk_rope_dim
        shapes = [(a.kv_lora_rank + a.qk_rope_dim, h), (m.heads * (a.qk_nope_dim + a.v_head_dim) / tp, a.kv_lora_rank)]
        shapes += [(a.q_lora_rank, h), (m.heads * qk / tp, a.q_lora_rank)] if a.q_lora_rank else [(m.heads * qk / tp, h)]
        shapes.append((h, m.heads * a.v_head_dim / tp))
    else:
        hd, kv = attention_dims(m)[0], a.kv_heads or m.heads
        shapes = [((m.heads + 2 * kv) * hd / tp, h), (h, m.heads * hd / tp)]  # fused q, k, v; output
    return [(T, n, k, 1) for n, k in shapes]


def mla_up_shapes(m: Model, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """MLA's up-projections (query and key/value), which DeepSeek-V3 recomputes in the
    backward rather than keep their outputs."""
    a, T = m.attention, lay.tokens(t.seq)
    if a.kind != "mla":
        return []
    up = [(m.heads * (a.qk_nope_dim + a.v_head_dim) / lay.tp, a.kv_lora_rank)]
    if a.q_lora_rank:
        up.append((m.heads * (a.qk_nope_dim + a.qk_rope_dim) / lay.tp, a.q_lora_rank))
    return [(T, n, k, 1) for n, k in up]


def mlp_shapes(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[float, float, float, float]]:
    """The MLP's multiplies as (tokens, n, k, count). With balanced routing each GPU of
    an ep group receives as many token copies as it sends (top_k per token it routes,
    ``Layout.expert_tokens``), spread over its experts / ep local experts; with expert
    tensor parallelism the etp GPUs of a shard gather each other's copies and each runs
    1/etp of every expert's width (Megatron-Core's MoE parallel folding). Shared experts
    are tensor-parallel over tp like a dense MLP. The router's multiply is priced apart,
    in BF16."""
    h, T = m.hidden, lay.tokens(t.seq)
    if not m.is_moe_layer(layer):
        f = m.dense_ffn / lay.tp
        return [(T, 2 * f if m.activation == "swiglu" else f, h, 1), (T, h, f, 1)]
    e = m.moe
    local = e.experts / lay.ep
    tokens = lay.etp * lay.expert_tokens(t.seq) * e.top_k / local  # token copies per local expert
    ffn = e.expert_ffn / lay.etp
    out = [(tokens, 2 * ffn, h, local), (tokens, h, ffn, local)]
    if e.shared_experts:
        f = e.expert_ffn * e.shared_experts / lay.tp
        out += [(T, 2 * f, h, 1), (T, h, f, 1)]
    return out


def gemms(c: Cluster, t: Training, shapes) -> tuple[float, float, float]:
    """(F, B, W) seconds of a list of multiplies; under FP8 the weight gradient also casts
    both of its operands (the input and the output's gradient) to FP8 along the token
    dimension: read 2 bytes, write 1 and a scale per element, at HBM bandwidth (block
    scaling re-quantizes them along the other axis). Block-scaled weight gradients run at
    ``FP8_WGRAD_SHARE`` of the forward's rate; with one scale per tensor the weight
    gradient is an ordinary FP8 multiply at the forward's, and casts no operand here:
    Transformer Engine's current scaling writes the transposed copies with its casts
    (``elementwise.te_current_cast_terms``), as torchao's Float8Linear does
    (``fp8_casts = "torchao"``, ``elementwise.fp8_cast_terms``)."""
    f, b, w = _sum3(gemm_fbw(c, t, tok, out, k, count=n) for tok, out, k, n in shapes)
    if t.precision == "fp8":
        share = FP8_WGRAD_SHARE if t.fp8_scaling == "block" else 1.0
        per_tensor = t.fp8_casts == "torchao" or te_current_scaling(t)
        casts = 0.0 if per_tensor else sum(n * tok * (out + k) * 3 for tok, out, k, n in shapes)
        w = w / share + casts / hbm_rate(c, t)
    return f, b, w


def attention_gemms(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float]:
    """The attention block's projections: (F, B, W) seconds for one micro-batch."""
    return gemms(c, t, attention_shapes(m, t, lay))


def mlp_gemms(m: Model, layer: int, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float]:
    """The MLP's multiplies and, for an MoE layer, the router's (BF16)."""
    f, b, w = gemms(c, t, mlp_shapes(m, layer, t, lay))
    if m.is_moe_layer(layer):
        rf, rb, rw = gemm_fbw(c, t, lay.expert_tokens(t.seq), m.moe.experts, m.hidden, fp8=False)
        f, b, w = f + rf, b + rb, w + rw
    return f, b, w


def attention_core(m: Model, c: Cluster, t: Training, lay: Layout, layer: int) -> tuple[float, float]:
    """(forward, backward) seconds of layer ``layer``'s attention scores and their product
    with values.

    Fused (flash) attention: the causal half of the scores, heads * seq * (qk + v) FLOPs
    per token forward at ``attention_efficiency`` of BF16 peak, 2.5 times that backward
    (it recomputes the scores) at ``FLASH_BACKWARD_SHARE`` of the forward's rate, each
    times the share of the SMs its grid keeps busy (``attention_grid_fill``); nothing
    goes through HBM. Unfused (Megatron 2021): the whole square as batched multiplies,
    twice that backward (four multiplies), and each score element moves
    ``FORWARD_SCORE_BYTES`` through HBM forward and ``BACKWARD_SCORE_BYTES`` backward
    for the softmax and dropout between them (``ALIBI_SCORE_BYTES`` more forward with
    ALiBi's bias), and backward the q and k gradients are scaled by the score's 1/sqrt(d).

    Under context parallelism a GPU holds 1/cp of each sequence's queries and, with the
    causal load balancing (each rank takes chunks i and 2cp-1-i of 2cp), 1/cp of the
    causal work: its tokens against the whole sequence's keys, half of them masked. Fused,
    it runs that as its scheme's kernels (``cp_attention_core``); unfused, as one.

    A layer attending over a sliding window (``attention_window.run_window``: the model's,
    or a key more where the run hands it to Transformer Engine as its left edge): fused,
    each query row reads min(window, position + 1) keys (FlashAttention's ``window_size``:
    its blocks skip the key blocks left of the window, flash_fwd_kernel.h's n_block_min),
    so the FLOPs are the
    window's pairs (``attention_window.causal_pairs``) and each block's work is capped at
    its rows plus the window. Unfused, the score square is computed whole and masked
    (Megatron's and transformers' eager attention add the mask to the full square), so a
    window changes nothing there.

    A layer attending within chunks shorter than the sequence (``Model.chunk``: Llama 4's
    rope layers), fused: each chunk is a causal square of its own, so the FLOPs are the
    chunks' pairs (``attention_window.causal_pairs``) and the grid each chunk's blocks of
    rows, reading from the chunk's first key to their last row (``attention_grid.
    _staircase``), backward each chunk's key blocks read by the rows after them in it: a
    varlen call with one sequence a chunk (cu_seqlens), and FlexAttention's block mask
    (torchtitan's Llama 4), which skips the blocks a mask leaves empty, forward and
    backward. FlashAttention-3's forward ``attention_chunk`` starts a block at its chunk
    (Dao-AILab/flash-attention 0f25c7b, hopper/block.h get_n_block_min_max); its backward's
    get_m_block_min_max does not yet ("TODO: support attention_chunk"). Unfused, the
    square is masked whole, as for a window. Context ranks do not run chunks
    (``attention_window.chunk_problem``: the layout is refused before it is priced)."""
    qk, v = attention_dims(m)
    T, heads, window = lay.tokens(t.seq), m.heads / lay.tp, run_window(m, t, layer)
    window = window if window < t.seq else 0  # a window as long as the sequence is none
    chunk = m.chunk(layer) if m.chunk(layer) < t.seq else 0  # so is a chunk
    if chunk and lay.cp > 1:  # cp_problem refuses the layout; never priced as the causal square
        raise PipesimError(chunk_problem(m, t, lay.cp) or f"--cp {lay.cp}: chunked attention under context parallelism")
    if t.flash_attention and lay.cp > 1:
        return cp_attention_core(m, c, t, lay, window)
    if t.flash_attention:
        f = T * heads * _core_rows(t.seq, window, chunk) * (qk + v) / (c.bf16_tflops * 1e12 * t.attention_efficiency)
        forward = attention_grid_fill(c, t, lay, heads, c.attention_tile_rows, window=window, chunk=chunk)
        backward = attention_grid_fill(c, t, lay, heads, FLASH_BACKWARD_TILE_ROWS, backward=True, window=window, chunk=chunk)
        return f / forward, 2.5 * f / FLASH_BACKWARD_SHARE / backward
    per_seq, rows = lay.micro_batch * heads, t.seq // lay.cp
    # each product is one batched kernel over the micro-batch's heads: one launch floor
    batched = [per_seq * gemm(c, t, rows, n, k, fp8=False, floor=False) for n, k in ((t.seq, qk), (v, t.seq))]
    products = sum(max(x, kernel_floor(t)) for x in batched)
    scores = T * heads * t.seq / hbm_rate(c, t)
    forward = FORWARD_SCORE_BYTES + (ALIBI_SCORE_BYTES if m.alibi else 0)
    # baddbmm's alpha (1/sqrt(head_dim)) scales the q and k gradients backward in a pass
    # each: PyTorch's derivatives.yaml, ``maybe_multiply(grad.bmm(...), alpha)`` (read
    # and write 2 bytes an element; only an alpha of 1 skips it)
    scale = T * heads * 2 * qk * 2 * 2 / hbm_rate(c, t)
    return products + scores * forward, 2 * products + scores * BACKWARD_SCORE_BYTES + scale


def cp_attention_core(m: Model, c: Cluster, t: Training, lay: Layout, window: int = 0) -> tuple[float, float]:
    """(forward, backward) seconds of a context rank's fused attention as its scheme
    launches it (``cp_steps.attention_steps``: the ring's per-step sub-blocks, the
    all-gather's two chunks, Ulysses' whole sequence on 1/cp of the heads): each kernel's
    FLOPs at ``attention_efficiency`` (backward 2.5 times them at ``FLASH_BACKWARD_SHARE``)
    over its own grid's fill (``grid_fill``, kernels run at once sharing a grid),
    a step at its slowest kind of rank. Per-step grids are smaller than the rank's whole
    share, so few heads a GPU and short sequences lose more. A sliding ``window`` caps each
    kernel's rows at it (``Kernel.window``; only the schemes that run one, ``cp_steps``)."""
    qk, v = attention_dims(m)
    rate = c.bf16_tflops * 1e12 * t.attention_efficiency
    a2a = a2a_ranks(m, c, t, lay)
    out = []
    for backward in (False, True):
        steps, share = attention_steps(t, lay, a2a, backward, window)
        heads = m.heads / lay.tp * share
        copies = lay.micro_batch * math.ceil(heads)
        tile = FLASH_BACKWARD_TILE_ROWS if backward else c.attention_tile_rows
        speed = rate * FLASH_BACKWARD_SHARE / 2.5 if backward else rate
        seconds = 0.0
        for step in steps:
            times = []
            for kernels in step.variants:
                flops = sum(2 * k.pairs() for k in kernels) * (qk + v) * heads * lay.micro_batch
                launch = t.attention_block_order == "launch"
                fill = grid_fill(kernels, tile, backward, copies * step.together, c.sms, launch) if t.attention_waves else 1.0
                times.append(flops / (speed * fill))
            seconds += max(times)
        out.append(seconds)
    return out[0], out[1]


def accumulation_seconds(c: Cluster, t: Training, params: float) -> float:
    """Seconds one micro-batch spends adding the weight gradients of ``params`` local
    parameters into the step's accumulated ones when the weight-gradient multiply does not
    do it itself: ``grad_accumulation_bytes`` per parameter at HBM bandwidth, besides the
    gradient the multiply writes. Megatron-LM 2021's DDP hook (``main_grad.add_(grad)``;
    its gradient_accumulation_fusion came in 2022) and PyTorch autograd's AccumulateGrad
    under DeepSpeed's fp16 engine read the gradient and the sum and write the sum: 6
    bytes in 16 bits. DeepSpeed's bf16 optimizer (``update_hp_grads`` after every
    micro-batch) upcasts the gradient (read 2, write 4) and adds it into the fp32 sum
    (read 4 + 4, write 4): 18."""
    return params * t.grad_accumulation_bytes / hbm_rate(c, t)
