"""Chunked attention (Llama 4's attention_chunk_size; planner/attention_window.py): which
layers attend within chunks, the query-key pairs they compute, their flash grid, and the
context parallelism pipesim refuses for them.

The mask is transformers' (masking_utils.py ``chunked_overlay`` under the causal mask, as
Llama4TextModel hands it to its "chunked_attention" layers, modeling_llama4.py): query i
sees key j when j <= i and j // chunk == i // chunk. Counted by hand: a sequence of seq
tokens is q = seq // chunk whole chunks and one of r = seq mod chunk; a causal chunk of c
tokens has c (c + 1) / 2 cells (row k of it reads k + 1 keys), so the mask has
q chunk (chunk + 1) / 2 + r (r + 1) / 2 cells. pipesim counts the causal square of n tokens
as n^2 / 2 (the area under the staircase, as for full attention and windows), so its pairs
are q chunk^2 / 2 + r^2 / 2: the cells less seq / 2. Examples: seq 20, chunk 8 (chunks 8,
8, 4): 36 + 36 + 10 = 82 cells, 32 + 32 + 8 = 72 pairs; seq 32768, chunk 8192 (four whole
chunks): 4 x 8192^2 / 2 = 134,217,728 pairs, a quarter of the square's 32768^2 / 2."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipesim.planner.attention_grid import attention_grid_fill
from pipesim.planner.attention_window import causal_pairs
from pipesim.planner.compute import attention_core, layer_flops, model_flops_per_token
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.stages import _kinds
from test_attention_window import masked_cells
from test_hardening import one_line, run
from test_hf_llama4 import MAVERICK, SCOUT, config

H100 = load_cluster("h100")


def test_hand_counts():
    # the module docstring's: seq 20 in chunks of 8 is 82 cells, 72 pairs; four whole
    # chunks of 8192 are a quarter of 32768's square
    assert causal_pairs(20, 0, 8) == 72 == 82 - 20 / 2
    assert causal_pairs(32768, 0, 8192) == 134_217_728 == 32768 * 32768 / 2 / 4
    # a sequence within one chunk is the causal square
    assert causal_pairs(8192, 0, 8192) == 8192**2 / 2 and causal_pairs(8000, 0, 8192) == 8000**2 / 2


@pytest.mark.parametrize("seq, chunk", [(20, 8), (64, 1), (64, 7), (100, 32), (4096, 1024), (1000, 999), (512, 512), (300, 1000)])
def test_pairs_are_a_torch_chunked_masks_cells(seq, chunk):
    """The cells torch's mask keeps are the hand count (module docstring), and pipesim's
    pairs are those cells less seq / 2, the convention the causal square and windows keep."""
    q, r = divmod(seq, chunk)
    by_hand = q * chunk * (chunk + 1) // 2 + r * (r + 1) // 2
    assert masked_cells(seq, 0, chunk) == by_hand
    assert causal_pairs(seq, 0, chunk) == by_hand - seq / 2


@pytest.fixture(scope="module")
def maverick(tmp_path_factory):
    return load_model(config(tmp_path_factory.mktemp("m"), MAVERICK, "maverick.json"))


def test_the_rope_layers_are_chunked_and_every_fourth_full(tmp_path, maverick):
    """Llama4TextConfig (transformers 008e5743): no_rope_layers absent or empty is
    int((i + 1) % 4 != 0) a layer, and layer_types "chunked_attention" where it is 1:
    layers 3, 7, ..., 47 full (NoPE), the other 36 chunked. Scout's config lists the same."""
    full = [i for i in range(48) if not maverick.chunk(i)]
    assert full == list(range(3, 48, 4))
    assert {maverick.chunk(i) for i in range(48)} - {0} == {8192}
    scout = load_model(config(tmp_path, SCOUT, "scout.json"))
    assert [scout.chunk(i) for i in range(48)] == [maverick.chunk(i) for i in range(48)]
    # the interval, where no_rope_layers is not given
    every2 = load_model(config(tmp_path, {**MAVERICK, "no_rope_layer_interval": 2}))
    assert [bool(every2.chunk(i)) for i in range(4)] == [True, False, True, False]
    # layer_types, where a config gives it, wins over no_rope_layers (the class keeps it)
    types = ["full_attention"] * 47 + ["chunked_attention"]
    given = load_model(config(tmp_path, {**SCOUT, "layer_types": types}))
    assert [i for i in range(48) if given.chunk(i)] == [47]


def test_a_chunked_layers_flops_are_its_masks_and_a_full_layers_unchanged(maverick):
    seq, (qk, v) = 32768, (128, 128)
    # 40 heads x pairs x 2 (qk + v) / seq a token: four chunks' squares
    pairs = 4 * 8192 * 8192 / 2
    assert layer_flops(maverick, 0, seq)["attn_core"] == pytest.approx(40 * pairs * 2 * (qk + v) / seq, rel=1e-12)
    assert layer_flops(maverick, 3, seq)["attn_core"] == 40 * seq * (qk + v)  # NoPE: the causal square
    # MFU's numerator: 36 chunked layers each save three quarters of the square, three times
    full = replace(maverick, attention_chunk=0, layer_types=())
    saved = 3 * 36 * 40 * (seq * seq / 2 - pairs) * 2 * (qk + v) / seq
    assert model_flops_per_token(full, seq) - model_flops_per_token(maverick, seq) == pytest.approx(saved, rel=1e-9)
    # within one chunk every layer is the causal square
    assert model_flops_per_token(full, 8192) == model_flops_per_token(maverick, 8192)


def test_a_chunked_layers_fused_attention_time_scales_with_its_pairs(maverick):
    # a large grid (micro-batch 4 x 40 heads x 256 blocks) keeps the SMs full
    t = load_training(base={"seq": 32768})
    lay = Layout(pp=1, dp=1, micro_batch=4)
    (cf, cb), (ff, fb) = attention_core(maverick, H100, t, lay, 0), attention_core(maverick, H100, t, lay, 3)
    share = 4 * (8192 * 8192 / 2) / (32768 * 32768 / 2)  # four chunks' squares of the sequence's: 1/4
    assert cf / ff == pytest.approx(share, rel=1e-3) and cb / fb == pytest.approx(share, rel=1e-3)
    # unfused attention computes the whole square and masks it: chunks change nothing
    eager = replace(t, flash_attention=False)
    assert attention_core(maverick, H100, eager, lay, 0) == attention_core(maverick, H100, eager, lay, 3)


def test_a_chunked_grid_fill_by_hand():
    """One sequence of 1024 tokens, one head, blocks of 128 rows on 132 SMs: each block has
    an SM of its own, so the kernel lasts its longest block. Full causal: 128, 256, ...,
    1024 keys (4608), span 1024. In chunks of 256 each chunk is a staircase of its own (a
    varlen grid of one sequence a chunk): 128, 256 four times (1536), span 256. Backward
    the key blocks are the same sizes in the other order."""
    t = load_training(base={"seq": 1024})
    lay = Layout(pp=1, dp=1, micro_batch=1)
    for order in ("longest-first", "launch"):
        o = replace(t, attention_block_order=order)
        assert attention_grid_fill(H100, o, lay, 1, 128) == pytest.approx(4608 / (132 * 1024))
        for backward in (False, True):
            fill = attention_grid_fill(H100, o, lay, 1, 128, backward=backward, chunk=256)
            assert fill == pytest.approx(1536 / (132 * 256))
        # a chunk as long as the sequence is the causal staircase
        assert attention_grid_fill(H100, o, lay, 1, 128, chunk=1024) == attention_grid_fill(H100, o, lay, 1, 128)


def test_chunked_and_full_layers_are_priced_as_kinds_of_their_own(maverick):
    """The planner prices one layer of each kind: MoE or dense, window, chunk."""
    kinds = _kinds(maverick)
    assert kinds[1] != kinds[3]  # an MoE layer chunked, an MoE layer full (NoPE)
    # dense chunked (0, 2, ...), MoE chunked (1, 5, ...), MoE full (3, 7, ...: every full layer is odd)
    assert len(set(kinds)) == 3


def test_a_plan_past_one_chunk_answers(tmp_path, capsys):
    """What was refused before chunks were priced: plan, memory and compare of Maverick at
    a sequence of several chunks, and the report says what is priced."""
    path = config(tmp_path, MAVERICK, "maverick.json")
    base = ["--model", path, "--cluster", "h100", "--gpus", "512"]
    code, out, err = run(capsys, "memory", *base, "--pp", "4", "--seq", "16384", "--json")
    assert code == 0, err
    code, out, err = run(capsys, "compare", "--model", path, "--cluster", "h100", "--pp", "4", "--seq", "16384")
    assert code == 0, err
    code, out, err = run(capsys, "plan", *base, "--seq", "32768", "--json")
    assert code == 0, err
    plan = json.loads(out)
    line = plan["assumptions"]["chunked attention"]
    assert line.startswith("36 of 48 layers of maverick attend within 8,192-token chunks (attention_chunk)")
    assert "25% of full causal attention's at 32,768 tokens" in line
    assert plan["recommendation"]["cp"] == 1


def test_context_parallelism_with_chunks_past_one_is_refused(tmp_path, capsys):
    path = config(tmp_path, MAVERICK, "maverick.json")
    base = ["plan", "--model", path, "--cluster", "h100", "--gpus", "512", "--cp", "2"]
    one_line(*run(capsys, *base, "--seq", "32768")[::2], "which no context-parallel scheme pipesim prices runs")
    # within one chunk it is the causal square, which every scheme runs
    code, out, err = run(capsys, *base, "--seq", "8192", "--json")
    assert code == 0, err


def test_a_model_file_gives_chunks_by_layer_types(tmp_path):
    f = tmp_path / "m.toml"
    types = '["chunked_attention", "full_attention", "chunked_attention", "full_attention"]'
    f.write_text(
        f'name = "m"\nlayers = 4\nhidden = 256\nheads = 4\nvocab = 1000\nattention_chunk = 64\nlayer_types = {types}\n'
        "[mlp]\ndense_ffn = 512\n"
    )
    m = load_model(str(f))
    assert [m.chunk(i) for i in range(4)] == [64, 0, 64, 0]


def test_a_llama4_config_with_sliding_layers_is_refused(tmp_path):
    from pipesim.errors import PipesimError

    with pytest.raises(PipesimError, match='layer_types of Llama 4 are "chunked_attention" or "full_attention"'):
        load_model(config(tmp_path, {**SCOUT, "layer_types": ["sliding_attention"] * 48}))


def test_megatrons_flags_say_they_attend_over_the_whole_sequence(maverick):
    # Megatron-Core (d98e8a6) has no chunk mask for training: past one chunk its run does the
    # 36 rope layers' full attention, which the recipe must say; within one chunk nothing differs
    from pipesim.planner.megatron_flags import attention_notes

    long, short = load_training(seq=32768), load_training(seq=8192)
    (note,) = attention_notes(maverick, long)
    assert "chunked attention on 36 of 48 layers" in note and "whole sequence" in note
    assert attention_notes(maverick, short) == []


def test_the_megatron_notes_remedy_prices_full_attention(tmp_path, maverick):
    # transformers' Llama4TextConfig defaults attention_chunk_size to 8192, so a config
    # without the key is still chunked (the note said "a config without attention_chunk_size
    # prices that"); null is what turns chunks off, as attention_chunk = 0 does in a model file
    from pipesim.planner.megatron_flags import attention_notes

    (note,) = attention_notes(maverick, load_training(seq=32768))
    assert "attention_chunk_size null in its config.json" in note and "attention_chunk = 0" in note
    assert "without attention_chunk_size" not in note
    nulled = load_model(config(tmp_path, {**MAVERICK, "attention_chunk_size": None}, "nulled.json"))
    assert attention_notes(nulled, load_training(seq=32768)) == []


@pytest.mark.parametrize("kind", ["full_attention", "chunked_attention"])
def test_a_layer_types_list_of_the_wrong_length_is_refused(tmp_path, capsys, kind):
    # transformers refuses it (configuration_utils.layer_type_validation, which
    # Llama4TextConfig calls with num_hidden_layers): "`num_hidden_layers` (48) must be equal
    # to the number of layer types (47)"; a list without a chunked entry was dropped unread
    path = config(tmp_path, {**MAVERICK, "layer_types": [kind] * 47})
    code, _, err = run(capsys, "memory", "--model", path, "--cluster", "h100", "--gpus", "64", "--pp", "4")
    one_line(code, err, "layer_types lists 47 layers but the model has 48; give one entry a layer")


def test_nothing_fits_says_context_parallelism_was_left_out(capsys):
    """Scout at 1M tokens on 256 H100s fits no layout, and every cp > 1 was refused for its
    chunks (attention_chunk_size 8192 in its config.json): the refusal said "add GPUs ... or
    lower the global batch", neither of which fits it (2048 GPUs and a global batch of 16
    still do not), and not that the one split of a sequence's activations was off."""
    args = ["plan", "--model", "tests/data/hf/llama-4-scout.json", "--cluster", "h100", "--gpus", "256", "--seq", "1048576"]
    code, out, err = run(capsys, *args)
    error = err.splitlines()[-1]  # after the search's progress lines
    assert code == 2 and out == "" and error.startswith("pipesim: error: nothing fits llama-4-scout"), err
    assert "; context parallelism, which would split each sequence's activations, was left out: llama-4-scout " in err, err
    assert "attends within chunks of 8192 tokens (attention_chunk), shorter than seq 1048576" in err, err
    assert err.endswith("; give a shorter --seq or use a larger-memory GPU\n") and "add GPUs" not in err, err
