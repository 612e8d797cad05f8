"""Megatron-LM 2021's eager fp32 cross-entropy as PyTorch runs it, held against the loss
fields its rows take (``training.MEGATRON_2021_LOGIT_BYTES`` and its forward share).

tests/megatron_loss.py writes the vocabulary-parallel loss out as NVIDIA/Megatron-LM
de7dc40f88 (the SC21 launch script's commit) computes it; microsoft/Megatron-DeepSpeed
b56b50bb (MT-NLG) and bigscience-workshop/Megatron-DeepSpeed 497aa1bf (BLOOM) carry
megatron/mpu/cross_entropy.py unchanged. The expected numbers are what torch counts."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from megatron_loss import count_loss, per_logit  # noqa: E402
from pipesim.planner.compute import hbm_rate  # noqa: E402
from pipesim.planner.layer_costs import head_costs  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, load_cluster  # noqa: E402
from pipesim.planner.training import (  # noqa: E402
    MEGATRON_2021_LOGIT_BYTES,
    MEGATRON_2021_LOGIT_FORWARD_BYTES,
    Training,
)

TOKENS, VOCABS = 16, (256, 512)
RUNS = Path(__file__).parent.parent / "benchmarks" / "data" / "published_runs.toml"


@pytest.fixture(scope="module")
def measured():
    return per_logit(VOCABS, TOKENS)


def test_the_loss_moves_its_logit_bytes_forward_and_backward(measured):
    """Forward the cast, max, sub_, exp, sum and div_ (38 a logit); backward mul_ and the
    cast back (14): 52."""
    assert measured == {"forward": 38, "backward": 14}
    assert (MEGATRON_2021_LOGIT_FORWARD_BYTES, MEGATRON_2021_LOGIT_BYTES) == (measured["forward"], 38 + 14)


def test_the_forward_does_most_of_it():
    """The softmax is made forward, in place, and is the gradient: the backward only
    scales it."""
    ops = {op for phase, _, op, kind, _, _ in count_loss(VOCABS[0], TOKENS).rows if phase == "backward" and kind == "memory"}
    assert "aten.mul_.Tensor" in ops and not ops & {"aten.exp.default", "aten.exp.out", "aten.div_.Tensor"}


def test_the_head_prices_the_forward_and_backward_apart(measured):
    """head_costs at a Megatron row's loss fields moves torch's forward count forward and
    the backward's backward."""
    c, lay = load_cluster("a100"), Layout(1, 1, tp=1, micro_batch=1)
    m = Model("m", 1, 64, 4, VOCABS[1], Attention(), (), 128)
    share = MEGATRON_2021_LOGIT_FORWARD_BYTES / MEGATRON_2021_LOGIT_BYTES
    with_loss, without = (Training(seq=TOKENS, logit_bytes=b, loss_forward_share=share) for b in (MEGATRON_2021_LOGIT_BYTES, 0))
    a, b = head_costs(m, c, with_loss, lay), head_costs(m, c, without, lay)
    per_logit_bytes = hbm_rate(c, with_loss) / (TOKENS * VOCABS[1])
    assert (a.mlp_f - b.mlp_f) * per_logit_bytes == pytest.approx(measured["forward"])
    assert (a.mlp_b - b.mlp_b) * per_logit_bytes == pytest.approx(measured["backward"])


def test_every_megatron_2021_row_pins_the_counted_split():
    """benchmarks/data/published_runs.toml: each row that runs this loss (logit_bytes = 52:
    SC21, MT-NLG, BLOOM) takes its forward share."""
    rows = [r for r in tomllib.loads(RUNS.read_text())["run"] if r["training"].get("logit_bytes") == MEGATRON_2021_LOGIT_BYTES]
    assert len(rows) == 14
    for r in rows:
        assert r["training"]["loss_forward_share"] == MEGATRON_2021_LOGIT_FORWARD_BYTES / MEGATRON_2021_LOGIT_BYTES, r["name"]
