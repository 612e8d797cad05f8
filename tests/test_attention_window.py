"""Sliding-window attention (planner/attention_window.py): which layers attend over a
window, and its FLOPs in the step (compute.attention_core), in MFU's model FLOPs and
under context parallelism. The pair counts are checked against a causal sliding-window
mask built with torch in the test (as transformers' sliding_window_causal_mask_function
builds it: key j seen by query i when i - window < j <= i) and against hand counts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.attention_grid import attention_grid_fill
from pipesim.planner.attention_window import band_pairs, causal_pairs
from pipesim.planner.compute import attention_core, layer_flops, model_flops_per_token
from pipesim.planner.cp_steps import Kernel, pass_bytes
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training
from test_hardening import one_line, run

HF = Path(__file__).parent / "data" / "hf"
H100 = load_cluster("h100")
OSS = load_model(str(HF / "gpt-oss-120b.json"))  # 64 heads of 64, layer 0 windowed (128), layer 1 full


def masked_cells(seq: int, window: int, chunk: int = 0) -> int:
    """Cells a causal mask over a window, or within chunks (transformers' chunked_overlay:
    j // chunk == i // chunk), leaves, counted by torch (neither: the causal square)."""
    torch = pytest.importorskip("torch")
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    keep = j <= i
    if window:
        keep &= j > i - window
    if chunk:
        keep &= (j // chunk) == (i // chunk)
    return int(keep.sum())


def test_hand_count_of_a_small_window():
    # 8 tokens, window 3: rows read 1, 2, 3, 3, 3, 3, 3, 3 keys = 21 cells. pipesim counts
    # the causal square as seq^2 / 2 = 32 (not its 36 cells): the area under the staircase,
    # each row of the ramp half a key short; under a window the same area is 8 x 3 - 3^2 / 2
    assert causal_pairs(8, 3) == 19.5 == 21 - 3 / 2
    assert causal_pairs(8, 0) == 32 == causal_pairs(8, 8) == causal_pairs(8, 100)


@pytest.mark.parametrize("seq, window", [(64, 1), (64, 7), (256, 128), (4096, 128), (1000, 999), (512, 512)])
def test_pairs_are_a_torch_windowed_masks_cells(seq, window):
    """pipesim's pairs are the mask's cells less half the diagonal cells of the ramp
    (min(window, seq) / 2), as the causal square's seq^2 / 2 is its seq (seq + 1) / 2 cells
    less seq / 2: the same convention with and without a window."""
    assert causal_pairs(seq, window) == masked_cells(seq, window) - min(window, seq) / 2
    assert causal_pairs(seq, 0) == masked_cells(seq, 0) - seq / 2


def test_a_windowed_layers_flops_are_its_masks_and_a_full_layers_unchanged():
    seq, (qk, v) = 4096, (64, 64)
    per_pair = 2 * (qk + v)  # a pair: qk multiply-adds for its score, v for its share of the output
    windowed = masked_cells(seq, 128) - 128 / 2
    # attn_core is FLOPs per token: 64 heads x pairs x 2 (qk + v) / seq
    assert layer_flops(OSS, 0, seq)["attn_core"] == pytest.approx(64 * windowed * per_pair / seq, rel=1e-12)
    assert layer_flops(OSS, 1, seq)["attn_core"] == 64 * seq * (qk + v)  # the causal square, as before
    # MFU's numerator: 18 windowed layers each save the difference, three times (F, B, W)
    full = replace(OSS, sliding_window=0, layer_types=())
    saved = 3 * 18 * 64 * ((seq * seq / 2) - windowed) * per_pair / seq
    assert model_flops_per_token(full, seq) - model_flops_per_token(OSS, seq) == pytest.approx(saved, rel=1e-9)


def test_a_windowed_layers_fused_attention_time_scales_with_its_pairs():
    # a large grid (micro-batch 16 x 64 heads) keeps the SMs full: time is FLOPs over rate
    t = load_training(base={"seq": 8192})
    lay = Layout(pp=1, dp=1, micro_batch=16)
    (wf, wb), (ff, fb) = attention_core(OSS, H100, t, lay, 0), attention_core(OSS, H100, t, lay, 1)
    share = (masked_cells(8192, 128) - 64) / (masked_cells(8192, 0) - 4096)
    assert wf / ff == pytest.approx(share, rel=1e-3) and wb / fb == pytest.approx(share, rel=1e-3)
    # unfused attention computes the whole square and masks it: a window changes nothing
    eager = replace(t, flash_attention=False)
    assert attention_core(OSS, H100, eager, lay, 0) == attention_core(OSS, H100, eager, lay, 1)


def te_window_cells(seq: int, left: int) -> int:
    """Cells Transformer Engine's window (left, 0) leaves under the causal mask: query i
    reads keys i - left .. i inclusive (dot_product_attention.py's window_size docstring at
    v2.9), counted by torch."""
    torch = pytest.importorskip("torch")
    i = torch.arange(seq)[:, None]
    j = torch.arange(seq)[None, :]
    return int(((j <= i) & (j >= i - left)).sum())


def test_a_run_handing_sliding_window_to_te_as_its_left_edge_prices_a_key_more():
    """Megatron-Bridge's GPT-OSS provider runs gpt-oss's sliding_window 128 as TE's (128, 0):
    129 keys a query, the cells of transformers' mask for a window of 129. The time follows
    those pairs; the model's FLOPs (MFU) stay the model's."""
    t = load_training(base={"seq": 8192})
    lay = Layout(pp=1, dp=1, micro_batch=16)
    te = replace(t, sliding_window_as_te_left=True)
    assert te_window_cells(8192, 128) == masked_cells(8192, 129)
    (hf_f, hf_b), (te_f, te_b) = attention_core(OSS, H100, t, lay, 0), attention_core(OSS, H100, te, lay, 0)
    share = (te_window_cells(8192, 128) - 129 / 2) / (masked_cells(8192, 128) - 128 / 2)
    assert te_f / hf_f == pytest.approx(share, rel=1e-3) and te_b / hf_b == pytest.approx(share, rel=1e-3)
    assert attention_core(OSS, H100, te, lay, 1) == attention_core(OSS, H100, t, lay, 1)  # a full layer


def test_a_windowed_kernels_blocks_stop_at_the_window():
    # 512 rows in blocks of 128, window 128: each block reads its rows and the window before
    # its first row (FlashAttention's n_block_min), capped by the keys before its last row
    assert Kernel(512, 512, True, 128).blocks(128, False) == (128, 256, 256, 256)
    # backward, key blocks: read by their own rows and the window after the last key
    assert Kernel(512, 512, True, 128).blocks(128, True) == (256, 256, 256, 128)
    # a window as long as the sequence is the causal staircase
    assert Kernel(512, 512, True, 512).blocks(128, False) == Kernel(512, 512, True).blocks(128, False)


def test_context_ranks_windowed_work_sums_to_the_sequences():
    """All-gather: rank i's chunks i and 2cp-1-i; a2a: the whole sequence on 1/cp of the
    heads. Over the ranks, the chunks' pairs are the sequence's (torch's mask's)."""
    seq, cp, window = 4096, 4, 128
    chunk = seq // (2 * cp)
    ranks = [
        Kernel(chunk, (i + 1) * chunk, True, window).pairs() + Kernel(chunk, seq - i * chunk, True, window).pairs()
        for i in range(cp)
    ]
    assert sum(ranks) == pytest.approx(masked_cells(seq, window) - window / 2)
    assert Kernel(seq, seq, True, window).pairs() == masked_cells(seq, window) - window / 2
    # a chunk well past the window's start reads the window whole: chunk x window - window^2 / 2 more
    assert band_pairs(3 * chunk, chunk, window) == chunk * window


def test_context_parallel_schemes_run_a_window_only_where_te_does(capsys, tmp_path):
    base = ["plan", "--model", HF / "gpt-oss-120b.json", "--cluster", "h100", "--gpus", "64", "--cp", "2"]
    one_line(*run(capsys, *base)[::2], 'runs a sliding window only with cp_comm "a2a" or "all_gather"')
    ring = tmp_path / "ring.toml"
    ring.write_text("torch_context_parallel = true\n")
    one_line(
        *run(capsys, *base, "--training", ring)[::2], "PyTorch's ring attention (torch_context_parallel) has no sliding window"
    )
    # Gemma 3 1B: windows (512 of 4096) and no sinks, so all_gather runs it
    gemma = ["plan", "--model", HF / "gemma-3-1b.json", "--cluster", "h100", "--gpus", "8", "--cp", "2"]
    code, out, err = run(capsys, *gemma, "--cp-comm", "all_gather", "--json")
    assert code == 0, err
    assert json.loads(out)["recommendation"]["cp"] == 2


def test_context_parallel_runs_attention_sinks_only_over_a2a(capsys):
    """Transformer Engine's get_attention_backend (v2.9, and d0067d0da): with a learnable
    softmax offset (gpt-oss's sinks) FlashAttention is off, and under context parallelism
    its fused attention only with cp_comm_type "a2a": all_gather, which runs the window,
    leaves no backend for the sinks."""
    base = ["plan", "--model", HF / "gpt-oss-120b.json", "--cluster", "h100", "--gpus", "64", "--cp", "2"]
    one_line(*run(capsys, *base, "--cp-comm", "all_gather")[::2], 'runs under context parallelism only with cp_comm "a2a"')
    code, out, err = run(capsys, *base, "--cp-comm", "a2a", "--json")
    assert code == 0, err
    assert json.loads(out)["recommendation"]["cp"] == 2


def test_gpt_oss_plan_and_report_say_how_many_layers_attend_over_the_window(capsys):
    argv = ["plan", "--model", str(HF / "gpt-oss-120b.json"), "--cluster", "h100", "--gpus", "64", "--json"]
    assert main(argv) == 0
    line = json.loads(capsys.readouterr().out)["assumptions"]["sliding window"]
    # 18 of 36 alternate layers (config.json's layer_types); at 4096 tokens the window's pairs
    # are (4096 x 128 - 128^2 / 2) / (4096^2 / 2) = 6.15% of the square's
    assert line.startswith("18 of 36 layers of gpt-oss-120b attend over a 128-token window (sliding_window)")
    assert "6.15% of full causal attention's at 4,096 tokens" in line


BAD_WINDOWS = [
    ("sliding_window = 1000000000", "sliding_window must be"),
    (
        'sliding_window = 128\nlayer_types = ["sliding_attention", "full_attention"]',
        "layer_types lists 2 layers but the model has 4",
    ),
    (
        'sliding_window = 128\nlayer_types = ["sliding_attention", "local", "full_attention", "full_attention"]',
        "'local' is not a layer type",
    ),
    ('layer_types = ["sliding_attention", "full_attention", "full_attention", "full_attention"]', "but no sliding_window"),
    ("layer_types = 3", "layer_types must be a list"),
    # chunked attention (test_chunked_attention.py)
    ('layer_types = ["chunked_attention", "full_attention", "full_attention", "full_attention"]', "but no attention_chunk"),
    ("attention_chunk = 64\nsliding_window = 32", "sliding_window and attention_chunk are both set"),
    ('attention_chunk = 64\nlayer_types = ["chunked", "full_attention", "full_attention", "full_attention"]', "'chunked' is not"),
]


@pytest.mark.parametrize("extra, needle", BAD_WINDOWS)
def test_bad_windows_are_one_line(tmp_path, capsys, extra, needle):
    f = tmp_path / "m.toml"
    f.write_text(f'name = "m"\nlayers = 4\nhidden = 256\nheads = 4\nvocab = 1000\n{extra}\n[mlp]\ndense_ffn = 512\n')
    one_line(*run(capsys, "memory", "--model", f, "--pp", "2")[::2], needle)


def test_bad_windows_in_a_hf_config_are_one_line(tmp_path, capsys):
    config = json.loads((HF / "gpt-oss-20b.json").read_text())
    for change, needle in [
        ({"layer_types": config["layer_types"][:-1]}, "layer_types lists 23 layers but the model has 24"),
        ({"layer_types": ["sliding_attention", "chunked_attention"] * 12}, '"chunked_attention" layers but no attention_chunk'),
        ({"layer_types": ["sliding_attention", "local_attention"] * 12}, "'local_attention' is not a layer type"),
        ({"sliding_window": 10**9}, "sliding_window must be"),
    ]:
        f = tmp_path / "gpt-oss-20b.json"
        f.write_text(json.dumps({**config, **change}))
        one_line(*run(capsys, "memory", "--model", f, "--pp", "2")[::2], needle)


def test_a_windowed_grid_fill_by_hand():
    """One sequence of 1024 tokens, one head, blocks of 128 query rows on 132 SMs: each
    block has an SM of its own, so the kernel lasts its longest block. Full causal: blocks
    read 128, 256, ..., 1024 keys (4608 in all), the last sets the span. Over a 128-token
    window: 128, then 256 (its rows and the window before them) for the other seven (1920)."""
    t = load_training(base={"seq": 1024})
    lay = Layout(pp=1, dp=1, micro_batch=1)
    for order in ("longest-first", "launch"):
        o = replace(t, attention_block_order=order)
        assert attention_grid_fill(H100, o, lay, 1, 128) == pytest.approx(4608 / (132 * 1024))
        assert attention_grid_fill(H100, o, lay, 1, 128, window=128) == pytest.approx(1920 / (132 * 256))


def test_an_all_gather_chunk_launches_only_the_key_blocks_its_window_reaches():
    # the last 512 queries of 8192 keys over a 128-token window: TE's all-gather slices the
    # keys to the 640 the chunk's window reaches (get_kv_seq_info_after_all_gather), 5 key
    # blocks of 128; the first is read by the 128 rows whose window covers it, the last by
    # its own 128 rows
    blocks = Kernel(512, 8192, True, 128).blocks(128, True)
    assert blocks == (128, 256, 256, 256, 128)


def test_all_gather_backward_adds_dk_dv_only_over_the_window_reached():
    """TE's all-gather backward adds each chunk's dk, dv into the full-length buffers over
    the keys its kernel read (6 bytes an element: read 2 and 2, write 2). Rank 0's last chunk
    reads the whole sequence without a window (2cp chunks), its own chunk and the 128-token
    window before it with one (1 + 128 / 1024 chunks at seq 8192, cp 4): 6 / 2 x (8 - 1.125)
    of the rank's key/value elements fewer (2048 tokens x 8 kv heads x 64 x 2)."""
    t = load_training(base={"seq": 8192, "cp_comm": "all_gather"})
    lay = Layout(pp=1, dp=1, cp=4)
    full, windowed = pass_bytes(OSS, H100, t, lay), pass_bytes(OSS, H100, t, lay, 128)
    assert full[0] == windowed[0]
    assert full[1] - windowed[1] == pytest.approx(6 / 2 * (8 - 1.125) * 2048 * 8 * 64 * 2)


def test_gpt_oss_model_flops_are_the_ones_megatron_bridge_publishes():
    """Megatron-Bridge's performance summary (NVIDIA-NeMo/Megatron-Bridge, docs/performance-
    summary-archive.md at 067f987df, 26.06 container, GPT OSS 120B, seq 4096) gives 33,166
    tokens/s and 1,081 model TFLOP/s a GB300 GPU: 32.59 GFLOP a token, which its flop_utils.py
    counts with the windowed layers' average context (w - w(w - 1) / 2T). pipesim's model
    FLOPs come within 0.5% of it; priced as full attention they would be 5.6% over."""
    published = 1081e12 / 33166
    assert model_flops_per_token(OSS, 4096) == pytest.approx(published, rel=0.005)
    full = replace(OSS, sliding_window=0, layer_types=())
    assert model_flops_per_token(full, 4096) > 1.05 * published


def test_the_plan_says_where_gpt_oss_sinks_run(capsys):
    """Transformer Engine 2.9 keeps a learnable softmax offset to its cuDNN fused attention
    (FlashAttention off for any softmax but vanilla; cuDNN 9.13.1 for learnable offsets);
    a model without sinks gets no such line."""
    argv = ["plan", "--model", str(HF / "gpt-oss-20b.json"), "--cluster", "h100", "--gpus", "16", "--json"]
    assert main(argv) == 0
    line = json.loads(capsys.readouterr().out)["assumptions"]["attention sinks"]
    assert line.startswith("gpt-oss-20b has a learned sink logit a head on every layer, inside fused attention")
    assert "cuDNN 9.13.1" in line
    assert main(["plan", "--model", str(HF / "gemma-3-1b.json"), "--cluster", "h100", "--gpus", "8", "--json"]) == 0
    assert "attention sinks" not in json.loads(capsys.readouterr().out)["assumptions"]
