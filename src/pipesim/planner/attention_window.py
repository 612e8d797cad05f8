"""Sliding-window and chunked attention: which layers attend over a window or within
chunks, and the query-key pairs such a causal layer computes.

A model file (or a HuggingFace config) gives ``sliding_window`` (tokens a query attends
back over, itself included) and, where only some layers use it, ``layer_types``: one
entry a layer, ``"sliding_attention"`` or ``"full_attention"``, as transformers' configs
name them (GptOssConfig, Qwen2Config, Gemma3TextConfig). Without ``layer_types`` every
layer attends over the window (Mistral 7B v0.1: 4096).

Pairs: under the causal mask query row i reads min(window, i + 1) keys (transformers'
``sliding_window_causal_mask_function``: key j is seen when i - window < j <= i;
FlashAttention's ``window_size=(window - 1, 0)``). pipesim counts the causal square as
seq^2 / 2 (``compute.layer_flops``, ``cp_steps.Kernel.pairs``), the area under the
staircase rather than its seq (seq + 1) / 2 cells; a window is counted the same way: the
area under min(window, p) for p from 0 to seq, seq w - w^2 / 2 once the window is shorter
than the sequence. Each differs from the exact count of cells by half the diagonal's
cells on the window's ramp (min(window, seq) / 2), under 1/(2 seq) of the total.
Megatron-Bridge counts a windowed layer's model FLOPs by the same pairs (NVIDIA-NeMo/
Megatron-Bridge, src/megatron/bridge/training/utils/flop_utils.py at 067f987df: average
context w - w (w - 1) / 2T, the exact cells), and its published GPT OSS 120B rows' model
TFLOP/s over tokens/s, 32.59 GFLOP a token, is within 0.4% of pipesim's (5.6% under it
priced as full attention; tests/test_attention_window.py).

Chunked attention (Llama 4): ``attention_chunk`` tokens a chunk, on the layers
``layer_types`` names ``"chunked_attention"`` (every layer without it). A query sees only
the keys of its own chunk, up to itself: transformers' ``chunked_overlay`` (masking_utils.py)
keeps key j for query i when j // chunk == i // chunk, under the causal mask. So a sequence
of seq tokens is seq // chunk causal squares of chunk tokens and one of seq mod chunk,
counted as the causal square is: the sum of c^2 / 2 over the chunks (their exact cells are
c (c + 1) / 2 each, seq / 2 more in all; tests/test_chunked_attention.py builds the mask in
torch). Llama4TextConfig (transformers 008e5743, configuration_llama4.py __post_init__)
sets ``layer_types`` from ``no_rope_layers`` when a config gives none: "chunked_attention"
on the layers that take rotary positions, "full_attention" on the NoPE ones; its
Llama4TextModel (modeling_llama4.py at 63210d0e) hands each layer the mask of its type.
"""

from __future__ import annotations

import math

from ..errors import PipesimError
from ..inputs import shorten

#: transformers' names of a layer's attention, as ``layer_types`` lists them
SLIDING, FULL, CHUNKED = "sliding_attention", "full_attention", "chunked_attention"
LAYER_TYPES = (SLIDING, FULL, CHUNKED)


def read_layer_types(value: object, layers: int, where: str) -> tuple[str, ...]:
    """A model file's ``layer_types``: a list of ``"sliding_attention"``, ``"chunked_attention"``
    or ``"full_attention"``, one a layer of the model's ``layers``. A config.json's list of
    another length is refused here, before a reader that finds no window or chunk in it
    drops it: transformers refuses it too (configuration_utils.layer_type_validation,
    called with num_hidden_layers by Llama4TextConfig and the other classes with
    layer_types: "`num_hidden_layers` (48) must be equal to the number of layer types")."""
    names = f'"{SLIDING}", "{CHUNKED}" or "{FULL}"'
    if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
        raise PipesimError(f"{where}: layer_types must be a list of {names}, one a layer, got {shorten(value)}")
    wrong = [x for x in value if x not in LAYER_TYPES]
    if wrong:
        raise PipesimError(
            f"{where}: layer_types entry {wrong[0]!r} is not a layer type pipesim prices; give "
            f'"{SLIDING}" (attends over sliding_window tokens), "{CHUNKED}" (within attention_chunk tokens) '
            f'or "{FULL}" for each layer'
        )
    _check_length(value, layers, where)
    return tuple(value)


def _check_length(layer_types, layers: int, where: str) -> None:
    if layer_types and len(layer_types) != layers:
        raise PipesimError(
            f"{where}: layer_types lists {len(layer_types)} layers but the model has {layers}; give one entry a layer"
        )


def check_windows(layers: int, window: int, chunk: int, layer_types: tuple[str, ...], where: str) -> None:
    """Refuse a ``layer_types`` of the wrong length, sliding layers without a window,
    chunked layers without a chunk, or a window and a chunk with no ``layer_types`` to
    say which layers take which."""
    _check_length(layer_types, layers, where)
    if SLIDING in layer_types and not window:
        raise PipesimError(
            f'{where}: layer_types has "{SLIDING}" layers but no sliding_window; give the window in tokens (gpt-oss: 128)'
        )
    if CHUNKED in layer_types and not chunk:
        raise PipesimError(
            f'{where}: layer_types has "{CHUNKED}" layers but no attention_chunk; give the chunk in tokens (Llama 4: 8192)'
        )
    if window and chunk and not layer_types:
        raise PipesimError(
            f"{where}: sliding_window and attention_chunk are both set; give layer_types to say which layers take which"
        )


def layer_window(window: int, layer_types: tuple[str, ...], layer: int) -> int:
    """Tokens layer ``layer`` attends back over (0: the whole sequence)."""
    if not window or (layer_types and layer_types[layer] != SLIDING):
        return 0
    return window


def layer_chunk(chunk: int, layer_types: tuple[str, ...], layer: int) -> int:
    """Tokens a chunk of layer ``layer``'s chunked attention holds (0: not chunked)."""
    if not chunk or (layer_types and layer_types[layer] != CHUNKED):
        return 0
    return chunk


def chunked_layers(m, seq: float = math.inf) -> int:
    """How many of model ``m``'s layers attend within chunks shorter than ``seq`` tokens
    (any chunks, without ``seq``): past one chunk a layer computes less than the causal
    square, and no context-parallel scheme runs it; within one it is the causal square."""
    if not m.attention_chunk or m.attention_chunk >= seq:
        return 0
    return sum(1 for i in range(m.layers) if m.chunk(i))


def run_window(m, t, layer: int) -> int:
    """Keys a query of ``layer`` reads as the run runs it (0: the whole sequence): the
    model's ``sliding_window`` w in transformers' meaning, or w + 1 where the run hands w to
    Transformer Engine as its left window (``Training.sliding_window_as_te_left``). TE's
    ``window_size`` (left, right) lets query i read keys i - left to i + right inclusive
    (NVIDIA/TransformerEngine v2.9, pytorch/attention/dot_product_attention/
    dot_product_attention.py, the ``window_size`` docstring; its cuDNN path sets
    ``set_diagonal_band_left_bound(window_size_left + 1)``, common/fused_attn/
    fused_attn_f16_arbitrary_seqlen.cu), so (128, 0) reads 129 keys, where transformers'
    mask for sliding_window 128 reads 128 (huggingface/transformers 2ccc6cae,
    src/transformers/masking_utils.py ``sliding_window_overlay``: kv_idx > q_idx -
    sliding_window), as does OpenAI's reference (openai/gpt-oss a194b990,
    gpt_oss/torch/model.py ``sdpa``: ``tril(..., diagonal=-sliding_window)`` masked).
    Megatron-Bridge's GPT-OSS provider sets window_size (128, 0) for gpt-oss's 128
    (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py at v0.2.1)."""
    window = m.window(layer)
    return window + 1 if window and t.sliding_window_as_te_left else window


def windowed_layers(window: int, layer_types: tuple[str, ...], layers: int) -> int:
    """How many of the model's layers attend over the window."""
    return sum(1 for i in range(layers) if layer_window(window, layer_types, i))


def _area(p: float, window: int) -> float:
    """The area under min(window, x) for x from 0 to p (window 0: x)."""
    if not window or p <= window:
        return p * p / 2
    return window * p - window * window / 2


def band_pairs(before: float, rows: float, window: int) -> float:
    """Pairs ``rows`` query rows at positions before .. before + rows compute under a causal
    mask over a window (each reads min(window, its position) keys): the causal square when
    before is 0 and there is no window (``rows^2 / 2``)."""
    return _area(before + rows, window) - _area(before, window)


def causal_pairs(seq: float, window: int, chunk: int = 0) -> float:
    """Query-key pairs a causal sequence of ``seq`` tokens computes per head (module
    docstring): over a sliding ``window``, or within chunks of ``chunk`` tokens (each a
    causal square of its own, the last one seq mod chunk long)."""
    if chunk and chunk < seq:
        whole, rest = divmod(seq, chunk)
        return whole * chunk * chunk / 2 + rest * rest / 2
    return band_pairs(0.0, seq, window)


def chunk_lengths(seq: float, chunk: int) -> list[float]:
    """The chunks a sequence of ``seq`` tokens falls into (one, the sequence, without chunks
    or when it fits one)."""
    if not chunk or chunk >= seq:
        return [seq]
    whole, rest = divmod(seq, chunk)
    return [float(chunk)] * int(whole) + ([rest] if rest else [])


def window_problem(t) -> str | None:
    """Why the context-parallel scheme of training ``t`` cannot run a sliding window, or
    None. Transformer Engine's ``attn_forward_func_with_cp`` (NVIDIA/TransformerEngine
    v2.7, the version cp_steps reads, transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py; the same at d0067d0da, 2026) asserts a
    sliding window only under ``a2a`` or ``all_gather`` ("The context parallel running
    configs cannot support sliding window attetnion!"); its all-gather then slices each
    chunk's keys to the window (``get_kv_seq_info_after_all_gather``), which the chunk's
    pairs already count. PyTorch's ring runs SDPA's causal mask only (``is_causal``), with
    no window."""
    if t.torch_context_parallel:
        return "PyTorch's ring attention (torch_context_parallel) has no sliding window: give --cp 1"
    if t.cp_comm not in ("a2a", "all_gather"):
        return (
            f'Transformer Engine\'s context parallelism runs a sliding window only with cp_comm "a2a" or '
            f'"all_gather" (its attn_forward_func_with_cp asserts so), not "{t.cp_comm}": give --cp-comm a2a or '
            "all_gather, or --cp 1"
        )
    return None


def chunk_problem(m, t, cp: int) -> str | None:
    """Why ``cp`` context ranks cannot run model ``m``'s chunked attention over ``t.seq``
    tokens (a ``specs.Model`` and ``Training``; this module does not import specs), or None.
    Only where a chunk is shorter than the sequence: one chunk is the causal square, which
    every scheme runs. Past it, none of the schemes pipesim prices runs the chunk mask:
    Transformer Engine's DotProductAttention takes causal, padding and window masks only
    (its attn_mask_type; a chunk is no sliding window: a query sees from its chunk's start,
    not a fixed count back), so Megatron-Core's p2p, all_gather and a2a context
    parallelism have nothing to run it with; PyTorch's ring attention runs SDPA's
    is_causal only (the same limit ``window_problem`` names); torchtitan's Llama 4 runs
    chunks as a FlexAttention block mask and raised at cp > 1 ("Context Parallel is not
    supported for Llama4 (Llama4 requires FlexAttention, which is not supported with CP)",
    torchtitan/models/llama4/model.py at de329200, quoted in pytorch/torchtitan#2468; later
    FlexAttention context parallelism, pytorch/torchtitan#2145, shards a block mask's
    work in a way pipesim does not price). Refused rather than priced as the causal
    square, several times the chunks' work."""
    why = chunked_past_one(m, t) if cp > 1 else None
    return f"--cp {cp}: {why}: give --cp 1, or --seq {m.attention_chunk} or less" if why else None


def chunked_past_one(m, t) -> str | None:
    """Why no context parallelism can run model ``m`` over ``t.seq`` tokens, as a clause
    (``chunk_problem`` says why), or None where it can: the search leaves every cp > 1
    out for it, which a refusal for memory names, since context parallelism is what
    would split a long sequence's activations."""
    if not chunked_layers(m, t.seq):
        return None
    return (
        f"{m.name} attends within chunks of {m.attention_chunk} tokens (attention_chunk), shorter than "
        f"seq {t.seq}, which no context-parallel scheme pipesim prices runs"
    )
