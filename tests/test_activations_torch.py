"""pipesim's per-layer activation bytes against what real PyTorch blocks keep.

Each case builds a block in tests/torch_blocks.py (bf16, CPU, small shapes), runs its
forward under ``saved_tensors_hooks`` and counts the distinct storages autograd keeps,
parameters and buffers left out. The expected number comes from that run; pipesim's
``activations.layer_activation`` for the same shape must be within 5% of it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pipesim.planner.activations import head_activation, layer_activation, recompute_transient  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, MoE, Training  # noqa: E402
from torch_blocks import DT, GPTBlock, Head, LlamaBlock, measure  # noqa: E402

S, B, H = 128, 2, 256


def gpt_model(heads=8):
    return Model("gpt", 1, H, heads, 1000, Attention(), (), 4 * H, activation="gelu", rotary=False)


def llama_model(moe=None):
    kv = Attention(kv_heads=2)
    if moe:
        return Model("moe", 1, H, 8, 1000, kv, (0,), 0, moe=MoE(experts=8, expert_ffn=128, top_k=2))
    return Model("llama", 1, H, 8, 1000, kv, (), 688)


def gpt_training(**kw):
    return Training(seq=S, flash_attention=False, hidden_dropout=True, sequence_parallel=False, **kw)


def within(predicted: float, measured: int, share: float = 0.05) -> None:
    assert abs(predicted / measured - 1) <= share, f"predicted {predicted:.0f} B, PyTorch kept {measured} B"


def run(block, shape):
    torch.manual_seed(0)
    return measure(block, torch.randn(*shape, dtype=DT))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("tp", [1, 2])
def test_gpt_block(recompute, tp):
    """Megatron-LM 2021's layer on one tensor rank (no sequence parallelism): measures
    Korthikanti et al.'s 34sbh + 5as^2b at tp 1."""
    m = gpt_model()
    measured = run(GPTBlock(H, m.heads // tp, 4 * H // tp, recompute, head_dim=H // m.heads), (S, B, H))
    within(layer_activation(m, 0, gpt_training(), Layout(1, 1, tp=tp, micro_batch=B), recompute)[0], measured)


def test_gpt_block_is_korthikanti():
    measured = run(GPTBlock(H, 8, 4 * H), (S, B, H))
    within(34 * S * B * H + 5 * 8 * S * S * B, measured, 0.01)  # the paper's closed form, from torch


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("tp", [1, 2])
def test_llama_block(recompute, fused, tp):
    """RMSNorm, GQA (8 heads, 2 kv heads), rotary, flash-style SDPA, SwiGLU; fused kernels'
    save sets, or torchtitan's eager code."""
    m = llama_model()
    block = LlamaBlock(H, 8 // tp, 2 // tp, 688 // tp, fused, recompute, head_dim=H // 8)
    t = Training(seq=S, fused_elementwise=fused, sequence_parallel=False)
    within(layer_activation(m, 0, t, Layout(1, 1, tp=tp, micro_batch=B), recompute)[0], run(block, (B, S, H)))


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("fused", [True, False])
def test_moe_block(recompute, fused):
    """Top-2 of 8 SwiGLU experts behind the Llama block's attention."""
    m = llama_model(moe=True)
    block = LlamaBlock(H, 8, 2, 0, fused, recompute, moe=(8, 128, 2))
    t = Training(seq=S, fused_elementwise=fused)
    within(layer_activation(m, 0, t, Layout(1, 1, micro_batch=B), recompute)[0], run(block, (B, S, H)))


def test_moe_block_with_the_weights_in_the_activation():
    """Megatron-Core's grouped experts multiply each copy's routing weight into the fused
    SwiGLU (activation_func_with_probs) and combine without it: no expert output is kept
    (``moe_combine_keeps_outputs = false``, deepseek-v3's preset)."""
    m = llama_model(moe=True)
    block = LlamaBlock(H, 8, 2, 0, True, moe=(8, 128, 2), weighted_act=True)
    t = Training(seq=S, moe_combine_keeps_outputs=False)
    measured = run(block, (B, S, H))
    within(layer_activation(m, 0, t, Layout(1, 1, micro_batch=B), "none")[0], measured)
    keeping = layer_activation(m, 0, Training(seq=S), Layout(1, 1, micro_batch=B), "none")[0]
    assert keeping > measured * 1.05  # the other form's kept outputs are not there


@pytest.mark.parametrize("fp32_loss", [True, False])
def test_head(fp32_loss):
    """The final norm, the output layer and the loss: the fp32 softmax over the vocabulary
    when the logits are upcast."""
    m = llama_model()
    t = Training(seq=S, logit_bytes=52 if fp32_loss else 10)
    within(head_activation(m, t, Layout(1, 1, micro_batch=B)), run(Head(H, m.vocab, fp32_loss), (B, S, H)))


def test_final_norm_runs_eager_under_compiled_blocks():
    """torchtitan's apply_compile (9dec370) compiles each block, not the final norm: the
    head keeps the eager RMSNorm's fp32 input copy and bf16 normalised value where the
    fused norm keeps its input. The difference PyTorch measures between the two heads
    is what final_norm_eager adds to the fused blocks' head."""
    m = llama_model()
    t = Training(seq=S, logit_bytes=52)
    lay = Layout(1, 1, micro_batch=B)
    eager, fused = (run(Head(H, m.vocab, True, fused_norm=f), (B, S, H)) for f in (False, True))
    added = head_activation(m, replace(t, final_norm_eager=True), lay) - head_activation(m, t, lay)
    assert added > 0
    within(added, eager - fused, 0.01)


def test_full_recompute_transient_is_one_layer_kept_whole():
    """A full-recompute backward reruns one layer's forward with autograd on: what it keeps
    then is what the layer keeps without recomputation."""
    m = llama_model()
    t = Training(seq=S)
    within(recompute_transient(m, t, Layout(1, 1, micro_batch=B), "full"), run(LlamaBlock(H, 8, 2, 688), (B, S, H)))
    assert recompute_transient(m, t, Layout(1, 1, micro_batch=B), "selective") == 0


@pytest.mark.parametrize("ac", ["none", "op", "full", "every-2", "every-3"])
def test_torchtitan_checkpointing(ac):
    """torchtitan's eager blocks (separate wq, wk, wv; w1, w3, w2) under each of its
    activation checkpointing modes, four blocks deep: selective op keeps every other
    multiply's output and flash attention's in the checkpoint's cache (counted from the
    cache itself), every-N checkpoints the Nth, 2Nth, ... block whole."""
    from pipesim.planner.activations import layer_mode
    from torch_blocks import SACMeter, TitanBlock, measure_titan

    m = Model("llama", 4, H, 8, 1000, Attention(kv_heads=2), (), 688)
    meter = SACMeter()
    torch.manual_seed(0)
    blocks = [TitanBlock(H, 8, 2, 688, layer_mode(ac, i), meter) for i in range(4)]
    measured = measure_titan(blocks, meter, torch.randn(B, S, H, dtype=DT))
    t = Training(seq=S, fused_elementwise=False)
    within(sum(layer_activation(m, i, t, Layout(1, 1, micro_batch=B), ac)[0] for i in range(4)), measured)


def test_every_n_counts_blocks_from_one():
    from pipesim.planner.activations import layer_mode

    assert [layer_mode("every-2", i) for i in range(4)] == ["none", "full", "none", "full"]
    with pytest.raises(Exception, match="every-N"):
        layer_mode("every-0", 0)


# --------------------------------------------------------------------------------------
# MLA, sequence and context parallelism (tests/torch_blocks_sharded.py)

MLA = Attention(kind="mla", q_lora_rank=96, kv_lora_rank=64, qk_nope_dim=32, qk_rope_dim=16, v_head_dim=32)


@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_mla_block(recompute):
    """DeepSeek-V3's attention (scaled down). Without recomputation: the q and kv
    down-projections' outputs (the latent norms' inputs; kv_norm's input is a view of the
    whole wkv_a output, k_pe with it), the latent norms' outputs, the concatenated q and k,
    the kv up-projection's output (v is a view of it), the output and the logsumexp.
    Selective, DeepSeek-V3's recomputation of every RMSNorm and the up-projections: the
    norms' inputs, the two latents, the output and the logsumexp."""
    from torch_blocks_sharded import MLABlock

    m = Model("mla", 1, H, 8, 1000, MLA, (), 688)
    block = MLABlock(H, 8, 96, 64, 32, 16, 32, 688, selective=recompute == "selective")
    t = Training(seq=S)
    within(layer_activation(m, 0, t, Layout(1, 1, micro_batch=B), recompute)[0], run(block, (B, S, H)))


@pytest.mark.parametrize("tp,kv", [(2, 2), (4, 4)])
def test_llama_block_sequence_parallel(tp, kv):
    """One rank of a Megatron-Core tensor group with sequence parallelism: the norms and
    residuals on s/tp tokens, the column-parallel layers saving their sequence shard (and
    gathering it again in the backward), attention and MLP on heads/tp and ffn/tp."""
    from torch_blocks_sharded import LlamaSPBlock

    m = Model("llama", 1, H, 8, 1000, Attention(kv_heads=kv), (), 688)
    block = LlamaSPBlock(H, 8, kv, 688, tp)
    t = Training(seq=S, sequence_parallel=True)
    within(layer_activation(m, 0, t, Layout(1, 1, tp=tp, micro_batch=B), "none")[0], run(block, (B, S // tp, H)))


@pytest.mark.parametrize("cp", [2, 4])
def test_llama_block_context_parallel(cp):
    """One rank of a context group: every tensor on its s/cp tokens, the attention over the
    whole sequence keeping only the local keys and values. pipesim is handed the local
    sequence, as footprint.memory_model hands it."""
    from torch_blocks_sharded import LlamaCPBlock

    m = llama_model()
    block = LlamaCPBlock(H, 8, 2, 688, cp)
    lay = Layout(1, 1, cp=cp, micro_batch=B)
    t = Training(seq=S // cp)
    within(layer_activation(m, 0, t, lay, "none")[0], run(block, (B, S // cp, H)))
