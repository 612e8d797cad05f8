"""Layouts the Zero Bubble paper ran (Qi et al., ICLR 2024, Table 4) that the planner pins:
interleaved 1F1B with one layer per virtual stage on a padded layer count, ZB-1p's
activation cap, and a searched order past the search's size limit when priced alone.

Expected values come from the authors' Megatron-LM fork, sail-sg/zero-bubble-pipeline-
parallelism at 77b9eed9 (the paper's time), derived by hand in each test."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.calibrate import evaluate_layout
from pipesim.planner.candidates import Pins
from pipesim.planner.search import search
from pipesim.planner.specs import load_cluster, load_training, model_from_table
from pipesim.planner.split import partition

# a small GPT of the paper's kind (LayerNorm, GELU MLP of 4h, learned positions, unfused attention)
GPT = {"name": "gpt-6l", "layers": 6, "hidden": 512, "heads": 8, "vocab": 32000, "mlp": {"dense_ffn": 2048, "activation": "gelu"}}
TRAINING = {"seq": 1024, "global_batch": 8, "precision": "bf16", "flash_attention": False, "sequence_parallel": False, "zero": 0}


def _specs(gpus: int = 4, **training):
    m = model_from_table(GPT, "test model")
    return m, load_cluster("a100").resized(gpus), load_training(base={**TRAINING, **training})


def _sizes(parts) -> list[int]:
    return [len(r) for r in parts]


def test_padding_leaves_the_end_chunks_empty_as_the_fork_does():
    # arguments.py pads 22 layers to 24 over pp 8; with one layer per virtual stage that is
    # 24 chunks of one, and get_offset takes the padding off chunks -1 and 0
    # (range(-1, num_padding - 1) = -1, 0): the first and last chunk hold none
    assert _sizes(partition(22, 24, padded=True)) == [0] + [1] * 22 + [0]
    # one layer of padding: range(-1, 0) takes it off the last chunk only
    assert _sizes(partition(22, 23, padded=True)) == [1] * 22 + [0]
    # the paper's other models: 30 layers on 32 chunks (6.2B), 62 on 64 (28.3B)
    assert _sizes(partition(30, 32, padded=True)) == [0] + [1] * 30 + [0]
    assert _sizes(partition(62, 64, padded=True)) == [0] + [1] * 62 + [0]
    with pytest.raises(PipesimError, match="25 stages need at least 23 layers, the model has 22"):
        partition(22, 25, padded=True)
    # unpadded, a stage needs a layer
    with pytest.raises(PipesimError, match="24 stages need at least 24 layers, the model has 22"):
        partition(22, 24)


def test_interleaved_one_layer_per_chunk_is_pinned_under_an_even_split():
    # 6 layers on pp 4 with --num-layers-per-virtual-pipeline-stage 1: padded to 8, two
    # chunks a rank; the first and last chunk hold only the embedding and the head
    m, c, t = _specs(stage_split="even")
    lay = {"tp": 1, "pp": 4, "dp": 1, "micro_batch": 1, "schedule": "interleaved-1f1b", "chunks": 2}
    r = evaluate_layout(m, c, t, lay)
    assert r.stage_layers == (0, 1, 1, 1, 1, 1, 1, 0)
    # the balanced split gives every stage a layer, so it needs as many layers as stages
    with pytest.raises(PipesimError, match="needs 8 stages, the model has 6 layers"):
        evaluate_layout(m, c, replace(t, stage_split="balanced"), lay)


def test_the_pending_backward_cap_sets_zb_autos_room():
    # zb_schedules.py: mem_limit = zero_bubble_max_pending_backward x a stage's forward
    # memory, on every rank; its example script passes 2 x pp (ZB-2p), the paper's ZB-1p pp
    m, c, t = _specs()
    lay = {"tp": 1, "pp": 4, "dp": 1, "micro_batch": 1, "schedule": "zb-auto"}
    one = evaluate_layout(m, c, replace(t, zb_max_pending_backward=4), lay).options
    assert one["memory_limit"] == pytest.approx(4 * one["activation_bytes"])
    default = evaluate_layout(m, c, t, lay).options
    assert default["memory_limit"] == pytest.approx(8 * default["activation_bytes"])


def test_a_bad_pending_backward_cap_is_refused_by_name():
    with pytest.raises(PipesimError, match="zb_max_pending_backward must be a whole number from 0"):
        load_training(base={"zb_max_pending_backward": -1})


def test_a_searched_order_past_the_search_limit_is_built_when_pinned_alone():
    # pp 4 x M 300 = 1200 slots, past the 1024 the search builds zb-auto for
    m, c, t = _specs(global_batch=300)
    lay = {"tp": 1, "pp": 4, "dp": 1, "micro_batch": 1, "schedule": "zb-auto"}
    assert evaluate_layout(m, c, t, lay).step_time > 0
    with pytest.raises(PipesimError, match="built for pp x M up to 1024, not 4 x 300"):
        search(m, c, t, ["zb-auto"], pins=Pins(tp=1, pp=4, dp=1, micro_batch=1))
