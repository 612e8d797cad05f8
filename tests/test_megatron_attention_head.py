"""What the Megatron-LM-era GPT rows pay beyond their layers' fused kernels: ALiBi's score
bias (BLOOM), the backward scaling of baddbmm's q and k gradients, the final LayerNorm
under ``norm_kernel = "two-pass"``, and the kernel launches of that era's layer.

Bytes are worked by hand from each kernel's reads and writes for a small GPT: hidden 64,
4 heads of 16, sequence 32, one sequence a micro-batch, tensor parallelism 2 without
sequence parallelism (2 heads a rank), 2-byte elements. The multiplies are made free (a
cluster of absurd FLOP/s and no launch floor) so that the seconds left are bytes over the
HBM rate.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner.assumptions import assumptions
from pipesim.planner.compute import attention_core, hbm_rate
from pipesim.planner.floors import layer_kernels
from pipesim.planner.layer_costs import head_costs
from pipesim.planner.layout import Layout
from pipesim.planner.search import Plan
from pipesim.planner.specs import Attention, Model, Training, load_cluster, load_model, model_from_table

GPT = Model("gpt-tiny", 2, 64, 4, 512, Attention(), (), 256, activation="gelu", rotary=False)
BLOOM_LIKE = replace(GPT, alibi=True)
LAY = Layout(pp=1, dp=1, tp=2)
MEGATRON = Training(
    seq=32, flash_attention=False, sequence_parallel=False, hidden_dropout=True,
    norm_kernel="two-pass", fused_kernels="megatron-jit", kernel_floor_us=0.0,
)  # fmt: skip
# the multiplies cost nothing here: what is left is bytes at the HBM rate
FREE_FLOPS = replace(load_cluster("a100"), bf16_tflops=1e12)


def core_bytes(m: Model, t: Training = MEGATRON) -> tuple[float, float]:
    rate = hbm_rate(FREE_FLOPS, t)
    return tuple(x * rate for x in attention_core(m, FREE_FLOPS, t, LAY, 0))


def test_unfused_attention_by_hand():
    """2 heads x 32 x 32 = 2048 scores a rank. With no FLOP cost the two batched
    multiplies cost their operands' bytes: q k^T reads q and k (512 elements each) and
    writes 1024 scores, p v reads 1024 and 512 and writes 512, 4096 bytes each a head,
    16,384 in all (priced twice backward: four multiplies). Forward: the causal softmax
    reads half the scores and writes all (3 bytes a score), dropout reads them, writes
    them and a one-byte mask (5): 16,384 bytes. Backward: dropout's gradient (5) and the
    softmax's (4), 18,432 bytes, and autograd multiplies the q and k gradients (2 heads x
    32 x 16 = 1024 elements each) by baddbmm's alpha, each read and written: 8192."""
    forward, backward = core_bytes(GPT)
    assert forward == pytest.approx(16_384 + 16_384, rel=1e-6)
    assert backward == pytest.approx(2 * 16_384 + 18_432 + 8_192, rel=1e-6)


def test_alibi_copies_its_bias_into_the_scores_forward_only():
    """BLOOM's baddbmm takes the ALiBi bias as input with beta 1: PyTorch writes the
    bias, broadcast, into all 2048 scores (4096 bytes) and cuBLAS reads them back (4096).
    The bias is a plain tensor: its backward asks no gradient of it, nothing more."""
    plain, alibi = core_bytes(GPT), core_bytes(BLOOM_LIKE)
    assert alibi[0] - plain[0] == pytest.approx(8_192, rel=1e-6)
    assert alibi[1] == pytest.approx(plain[1], rel=1e-9)


def test_flash_attention_ignores_alibi():
    """A fused kernel adds the bias in its registers: no bytes either way."""
    flash = replace(MEGATRON, flash_attention=True)
    assert attention_core(BLOOM_LIKE, FREE_FLOPS, flash, LAY, 0) == attention_core(GPT, FREE_FLOPS, flash, LAY, 0)


def test_final_two_pass_layernorm_by_hand():
    """The head's norm runs on all 32 tokens of each tensor rank. cuApplyLayerNorm reads a
    row (128 bytes), writes it (128) and two fp32 statistics (8): 32 x 264 = 8448 bytes.
    Backward cuComputePartGradGammaBeta reads input and gradient (256) and the statistics
    (8), cuComputeGradInput all of it again (264) and writes the gradient (128): 32 x 656
    = 20,992. The default norm: 2h forward and 4h backward, 8192 and 16,384."""
    rate = hbm_rate(FREE_FLOPS, MEGATRON)
    two_pass = head_costs(GPT, FREE_FLOPS, MEGATRON, LAY)
    default = head_costs(GPT, FREE_FLOPS, replace(MEGATRON, norm_kernel="auto"), LAY)
    assert two_pass.attn_f * rate == pytest.approx(8_448)
    assert two_pass.attn_b * rate == pytest.approx(20_992)
    assert default.attn_f * rate == pytest.approx(8_192)
    assert default.attn_b * rate == pytest.approx(16_384)
    sp = head_costs(GPT, FREE_FLOPS, replace(MEGATRON, sequence_parallel=True), LAY)
    assert sp.attn_f * rate == pytest.approx(8_448 / 2)  # sequence parallel: half the tokens


def test_megatron_layer_kernels_counted_from_the_source():
    """Forward: two norms, QKV, baddbmm, softmax, dropout, bmm, output projection, two
    bias-dropout-adds, FC1, bias-GELU, FC2 (13); megatron-jit adds the QKV bias add and
    the context's permute copy (15); ALiBi the bias copy into the scores (16). Backward:
    one a forward kernel (13), the batched multiplies' second gradients (2) and the q and
    k gradients' alpha scaling (2), the two-pass norms' other two kernels each (4), four
    bias-gradient sums and split's cat (5): 26. Weight gradients: the four weighted
    multiplies."""
    te = replace(MEGATRON, norm_kernel="auto", fused_kernels="te")
    assert layer_kernels(GPT, 0, te) == (13, 17, 4)
    assert layer_kernels(GPT, 0, MEGATRON) == (15, 26, 4)
    assert layer_kernels(BLOOM_LIKE, 0, MEGATRON) == (16, 26, 4)
    flash = replace(te, flash_attention=True)  # one kernel each way
    assert layer_kernels(GPT, 0, flash) == (10, 10, 4)


def attention_rows(model: Model, t: Training) -> dict[str, str]:
    return dict(assumptions(Plan(model, load_cluster("a100", 16), t)))


def test_the_assumptions_name_the_kernels_only_when_on():
    gpt = replace(load_model("llama3-8b"), rotary=False, activation="gelu")
    on = attention_rows(replace(gpt, alibi=True), replace(MEGATRON, kernel_floor_us=3.4))
    off = attention_rows(gpt, Training(flash_attention=False))
    assert "two-pass LayerNorm, the final one too (2h + 4 forward, 5h + 8 backward" in on["memory-bound kernels"]
    assert "QKV bias added and the attention output permuted" in on["memory-bound kernels"]
    assert "4 more forward for ALiBi's bias" in on["attention"]
    assert "q and k gradients scaled by baddbmm's alpha" in on["attention"]
    assert "two-pass" not in off["memory-bound kernels"] and "QKV bias" not in off["memory-bound kernels"]
    assert "ALiBi" not in off["attention"]


def test_alibi_with_rotary_is_one_line(tmp_path, capsys):
    table = {"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 512, "mlp": {"dense_ffn": 256}, "alibi": True}
    with pytest.raises(PipesimError, match="alibi = true needs rotary = false"):
        model_from_table(table, "model x")
    assert model_from_table({**table, "rotary": False}, "model x").alibi
    path = tmp_path / "m.toml"
    path.write_text('name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 512\nalibi = true\n[mlp]\ndense_ffn = 256\n')
    code = main(["plan", "--model", str(path), "--cluster", "a100", "--gpus", "8"])
    err = capsys.readouterr().err
    assert code == 2 and "rotary = false" in err and err.count("\n") == 1


def test_baddbmm_backward_as_torch_runs_it():
    """PyTorch's own autograd for BLOOM's score multiply (bias a plain tensor, beta 1,
    alpha 1/sqrt(d)), logged op by op (tests/torch_bytes.py, bf16): two batched
    multiplies, and the q and k gradients (8 x 32 x 16 = 4096 elements each) multiplied
    by alpha, each read and written (8192 + 8192 bytes); nothing of the bias's size or the
    scores' besides the multiplies."""
    torch = pytest.importorskip("torch")
    from torch_blocks import DT
    from torch_bytes import ByteCount

    q = torch.randn(8, 32, 16, dtype=DT, requires_grad=True)  # [b * heads, s, d]
    k = torch.randn(8, 16, 32, dtype=DT, requires_grad=True)
    bias = torch.randn(8, 1, 32, dtype=DT)  # one row a head, broadcast over the queries
    scores = torch.baddbmm(bias, q, k, beta=1.0, alpha=0.25)
    grad = torch.ones_like(scores)
    log = ByteCount()
    with log:
        scores.backward(grad)
    matmuls = [op for _, _, op, kind, _, _ in log.rows if kind == "matmul"]
    memory = [(op, read, written) for _, _, op, kind, read, written in log.rows if kind == "memory"]
    assert sorted(matmuls) == ["aten.bmm.default", "aten.bmm.default"]
    assert [(read, written) for _, read, written in memory] == [(8192, 8192), (8192, 8192)]
    assert all("mul" in op for op, _, _ in memory)
