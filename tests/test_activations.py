"""Activation bytes against the closed forms of Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", Table 2), for a GPT-3-like layer
at every sharding the paper derives. (tests/test_activations_torch.py holds the same
formula against real PyTorch blocks.)"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.activations import head_activation, layer_activation, layer_saved
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training, load_model

s, b, h, a, t_ = 2048, 1, 12288, 96, 8  # GPT-3 175B's layer, tp 8
GPT = Model("gpt3", 96, h, a, 51200, Attention(), (), 4 * h, activation="gelu", rotary=False)


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


@pytest.mark.parametrize("bad", ["every-0", "every-x", "every-", "sometimes"])
def test_a_recompute_mode_outside_the_forms_is_one_line(bad):
    from pipesim.errors import PipesimError
    from pipesim.planner.specs import load_training

    with pytest.raises(PipesimError, match="every-N") as e:
        load_training(recompute=bad)
    assert "\n" not in str(e.value)
    assert load_training(recompute="every-3").recompute == "every-3"
    assert load_training(recompute="op").recompute == "op"


def test_op_checkpointing_is_for_dense_bf16_blocks():
    """torchtitan's op policy names aten.mm and the flash kernels: an MoE layer, MLA or
    block-scaled FP8 (DeepSeek's, not torchtitan's) is not what it was written for, and
    says so."""
    from pipesim.errors import PipesimError

    with pytest.raises(PipesimError, match="op"):
        layer_saved(load_model("deepseek-v3"), 5, Training(seq=4096), recompute="op")
    with pytest.raises(PipesimError, match="op"):
        layer_saved(load_model("llama3-8b"), 0, Training(seq=4096, precision="fp8", fp8_scaling="block"), recompute="op")


def test_op_checkpointing_under_tensorwise_float8_keeps_the_bf16_set():
    """torchao's Float8Linear runs torch.mm on Float8Tensor arguments: the policy sees
    aten.mm and caches every other multiply's bf16 output, as in bf16 training. Nothing
    of the set shrinks to FP8 bytes (under none, a linear's saved input does)."""
    m = load_model("llama3-8b")
    bf16 = layer_saved(m, 0, Training(seq=4096), recompute="op")
    fp8 = layer_saved(m, 0, Training(seq=4096, precision="fp8", fp8_scaling="tensor"), recompute="op")
    assert fp8 == bf16
    # the four cached multiplies are wq, wv, w1, w2: q (4096), v (1024), gate and down outputs
    assert bf16["q projection output"] == 2 * 4096 and bf16["v projection output"] == 2 * 1024
    assert bf16["gate projection output"] == 2 * 14336 and bf16["down projection output"] == 2 * 4096
    assert "k projection output" not in bf16 and "up projection output" not in bf16


def test_checkpointing_prices_what_it_runs_again():
    """The backward of a layer under op checkpointing reruns the elementwise ops and the
    multiplies the cache skips: more than none, less than full; every-2 is, per layer on
    average, half-way from none to full."""
    from pipesim.planner.layer_costs import layer_costs
    from pipesim.planner.specs import load_cluster

    m, c, lay = load_model("llama3-8b"), load_cluster("h100"), Layout(1, 8, micro_batch=2)
    t = Training(seq=8192, fused_elementwise=False)
    cost = {rc: layer_costs(m, 0, c, t, lay, rc) for rc in ("none", "op", "every-2", "full")}
    back = {rc: x.attn_b + x.mlp_b for rc, x in cost.items()}
    assert back["none"] < back["op"] < back["full"]
    assert back["every-2"] == pytest.approx((back["none"] + back["full"]) / 2)
    assert all(x.attn_f == cost["none"].attn_f for x in cost.values())  # the forward is the same


def test_loss_backward_copies_and_fsdp_buffers_are_held_back():
    """torchtitan's loss (F.cross_entropy on fp32 logits) writes two more logit-sized fp32
    tensors in its backward; FSDP without pipeline parallelism holds the root module's and
    two layers' parameters gathered: both are held back from the usable memory."""
    from pipesim.planner.device_memory import backward_transient, fsdp_gathered, usable_on_rank
    from pipesim.planner.params import attention_params, mlp_params
    from pipesim.planner.specs import load_cluster

    m, c, lay = load_model("llama3-8b"), load_cluster("h100"), Layout(1, 8, micro_batch=2)
    t = Training(seq=8192, zero=3, loss_backward_copies=2)
    assert backward_transient(m, t, lay, "none") == pytest.approx(2 * 4 * m.vocab * 2 * 8192)
    layer = attention_params(m) + mlp_params(m, 0)[0]
    assert fsdp_gathered(m, t, lay) == pytest.approx(2 * (2 * m.vocab * m.hidden + 2 * layer))
    assert fsdp_gathered(m, t, Layout(2, 8, micro_batch=2)) == 0  # under PP the stage stays gathered: static
    # the one rank holds the only stage; without FSDP's stream pools its parameters do not enter
    held = dict(usable_on_rank(m, c, t, lay, "none", held=(0,), stages=1, microbatches=1, params=0.0).held)
    assert held["FSDP gathered parameters"] == pytest.approx(2 * (2 * m.vocab * m.hidden + 2 * layer))
    assert held["backward transient (the loss or one recomputed layer)"] == pytest.approx(2 * 4 * m.vocab * 2 * 8192)


def test_the_last_stage_keeps_the_head():
    """The planner's last stage keeps the final norm and the loss's softmax beside its
    layers (an even split of llama3-8b's 32 layers: the two stages differ by the head)."""
    from pipesim.planner.footprint import memory_model

    m, lay = load_model("llama3-8b"), Layout(2, 8, micro_batch=1)
    t = Training(seq=4096, logit_bytes=52)
    mm = memory_model(m, t, lay, 2, "full")
    assert mm.activation[1] - mm.activation[0] == pytest.approx(head_activation(m, t, lay))


def test_norm_kernel_picks_the_norms_save_set_alone():
    """torchtitan's early configs ran fused_rmsnorm with eager SwiGLU and rotary: the norms
    keep what the fused kernels keep, the rest what the eager ops keep."""
    m = load_model("llama3-8b")
    eager, fused = Training(seq=4096, fused_elementwise=False), Training(seq=4096)
    mixed = Training(seq=4096, fused_elementwise=False, norm_kernel="fused")
    a, b, c = (layer_saved(m, 0, t) for t in (eager, fused, mixed))
    assert {k: v for k, v in c.items() if "norm" in k} == {k: v for k, v in b.items() if "norm" in k}
    assert {k: v for k, v in c.items() if "norm" not in k} == {k: v for k, v in a.items() if "norm" not in k}


def test_only_block_scaled_fp8_caches_the_swiglu_input():
    """DeepSeek-V3 keeps its experts' SwiGLU input in FP8 and recomputes the product;
    Transformer Engine's per-tensor FP8 keeps the bf16 gate and up projections as bf16 does."""
    m = load_model("deepseek-v3")
    layer = m.layers - 1  # an MoE layer
    block = layer_saved(m, layer, Training(precision="fp8", fp8_scaling="block"))
    tensor = layer_saved(m, layer, Training(precision="fp8", fp8_scaling="tensor"))
    bf16 = layer_saved(m, layer, Training(precision="bf16"))
    assert sum(block.values()) < sum(tensor.values()) <= sum(bf16.values())


@pytest.mark.parametrize("modules", [(), ("moe_act",)])
def test_shared_expert_activation_is_tp_wide_whatever_etp_and_moe_act(modules):
    """A shared expert is an MLP tensor-parallel over tp (Megatron-Core core_v0.14.0
    moe/shared_experts.py, an MLP built with is_expert false): a fused SwiGLU keeps its
    [gate, up] input and the down projection its product, 2 bytes each in BF16, 3 x 2 x
    16384 / tp bytes a token for Mixtral's width, which expert tensor parallelism does not
    split and whose activation "moe_act" does not rerun (that module is the routed
    TEGroupedMLP's alone: moe/experts.py:806)."""
    base = load_model("mixtral-8x22b")
    m = replace(base, moe=replace(base.moe, shared_experts=1))
    t = Training(seq=4096, global_batch=8, recompute_modules=modules)
    saved = layer_saved(m, 0, t, tp=2, recompute="selective" if modules else "none", etp=2)
    assert saved["shared expert MLPs"] == pytest.approx(3 * 2 * 16384 / 2)


def test_moe_norm_output_stays_bf16_under_te_fp8():
    """Megatron-Core's router keeps the MoE block's input in BF16 (core_v0.14.0
    moe/moe_utils.py:914-924: RouterGatingLinearFunction saves ``inp``), and under FP8 the
    shared expert's fc1 keeps that same tensor rather than its FP8 cast
    (moe/shared_experts.py:65-86, set_save_original_input): 2 bytes an element of the
    sequence shard, 6144 / 2 wide at tp2, where a dense layer's fused-norm multiply keeps
    its 1-byte FP8 input."""
    base = load_model("mixtral-8x22b")
    m = replace(base, moe=replace(base.moe, shared_experts=1), moe_layers=base.moe_layers[1:], dense_ffn=16384)
    t = Training(seq=4096, global_batch=8, precision="fp8", fp8_scaling="tensor", fp8_casts="transformer_engine")
    assert layer_saved(m, 1, t, tp=2)["mlp norm output"] == 2 * 6144 / 2
    assert layer_saved(m, 0, t, tp=2)["mlp norm output"] == 1 * 6144 / 2
