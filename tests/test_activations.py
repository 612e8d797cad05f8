"""Activation bytes against the closed forms of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", Table 2), for a GPT-3-like layer
at every sharding the paper derives. (tests/test_activations_torch.py holds the same
formula against real PyTorch blocks.)"""

from __future__ import annotations

import pytest

from pipesim.planner.activations import head_activation, layer_activation, layer_saved
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training, load_model

s, b, h, a, t_ = 2048, 1, 12288, 96, 8  # GPT-3 175B's layer, tp 8
GPT = Model("gpt3", 96, h, a, 51200, Attention(), 96, 4 * h, activation="gelu", rotary=False)


def bytes_(recompute, tp=1, sp=False):
    t = Training(seq=s, flash_attention=False, hidden_dropout=True, sequence_parallel=sp)
    return layer_activation(GPT, 0, t, Layout(1, 1, tp=tp, micro_batch=b), recompute)[0]


@pytest.mark.parametrize(
    "recompute,tp,sp,paper",
    [
        ("none", 1, False, s * b * h * (34 + 5 * a * s / h)),
        ("none", t_, False, s * b * h * (10 + 24 / t_ + 5 * a * s / (h * t_))),
        ("none", t_, True, s * b * h / t_ * (34 + 5 * a * s / h)),
        ("selective", t_, True, s * b * h / t_ * 34),
        ("full", 1, False, 2 * s * b * h),
    ],
)
def test_gpt_layer_is_the_papers_closed_form(recompute, tp, sp, paper):
    assert bytes_(recompute, tp, sp) == pytest.approx(paper, rel=0.01)


def test_tensors_are_named():
    t = Training(seq=s, flash_attention=True)
    names = layer_saved(load_model("llama3-8b"), 0, t)
    for key in ("attention norm input", "attention norm output", "logsumexp", "mlp norm output", "swiglu output"):
        assert key in names
    assert "logsumexp" not in layer_saved(load_model("llama3-8b"), 0, t, recompute="selective")


def test_fp32_loss_keeps_twice_the_bf16_softmax():
    m, lay = load_model("llama3-8b"), Layout(1, 1)
    fp32 = head_activation(m, Training(seq=2048, logit_bytes=52), lay)
    bf16 = head_activation(m, Training(seq=2048, logit_bytes=10), lay)
    assert fp32 - bf16 == pytest.approx(2048 * m.vocab * 2)  # 4 bytes a logit against 2
    assert fp32 > 1e9  # the "about 1 GB" at s=2048 and a 128K vocabulary
