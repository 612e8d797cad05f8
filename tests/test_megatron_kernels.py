"""The memory-bound kernels of Megatron-LM 2021-22's GPT layer (``fused_kernels =
"megatron-jit"``, ``norm_kernel = "two-pass"``): each term's bytes worked out by hand from
what the kernel reads and writes, per token, for a small GPT layer.

The layer: hidden 64, 4 heads of 16, FFN 256 with GELU, tensor parallelism 2 without
sequence parallelism (every rank runs the norms and residual adds on all tokens), fp16
(2-byte elements). Per token on one rank: q, k and v 32 elements each (96), the attention
output 32, the FFN shard 128.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner.activations import layer_activation
from pipesim.planner.elementwise import elementwise_bytes, elementwise_terms
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training, load_training

GPT = Model("gpt-tiny", 2, 64, 4, 512, Attention(), (), 256, activation="gelu", rotary=False)
LAY = Layout(pp=1, dp=1, tp=2)
MEGATRON = Training(
    seq=32, flash_attention=False, sequence_parallel=False, hidden_dropout=True,
    norm_kernel="two-pass", fused_kernels="megatron-jit",
)  # fmt: skip


def terms(t: Training, lay: Layout = LAY) -> dict[tuple[str, str], tuple[float, float]]:
    """(block, term) -> (forward, backward) bytes per token (the rows are 2-byte elements)."""
    return {(b, term): (2 * f, 2 * bw) for b, term, f, bw in elementwise_terms(GPT, 0, t, lay)}


def test_two_pass_layernorm_by_hand():
    """cuApplyLayerNorm reads the row (64 x 2 = 128 bytes; its second read is from cache),
    writes the output (128) and the row's fp32 mean and invvar (8): 264 bytes.
    Backward cuComputePartGradGammaBeta reads the input and the output gradient (256) and
    the two statistics (8); cuComputeGradGammaBeta sums 16 rows of partials (nothing per
    token); cuComputeGradInput reads the input, the gradient and the statistics again
    (264) and writes the input gradient (128): 656 bytes. Apex's persistent kernel and
    TransformerEngine's read them once: 128 + 128 + 128 = 384."""
    got = terms(MEGATRON)
    assert got["attention", "norm"] == pytest.approx((264, 656))
    assert got["mlp", "norm"] == pytest.approx((264, 656))
    assert terms(replace(MEGATRON, norm_kernel="auto"))["mlp", "norm"] == pytest.approx((256, 384))


def test_megatron_jit_passes_by_hand():
    """The QKV multiply's output (96 elements, 192 bytes) gets its bias in a pass of its
    own: read 192, write 192. Forward, the attention output's permute(...).contiguous()
    reads 64 bytes and writes 64; backward torch.split's gradient is a cat of q, k and v's
    gradients, read 192 and write 192. The bias gradients autograd sums: the QKV bias
    reads the 192-byte gradient; bias-dropout-add's (expand_as) the 128-byte gradient of
    the block's output, in each block; GeLUFunction's FC1 bias the 256-byte gradient."""
    got = terms(MEGATRON)
    assert got["attention", "qkv bias"] == pytest.approx((384, 0))
    assert got["attention", "layout copies"] == pytest.approx((128, 384))
    assert got["attention", "bias gradients"] == pytest.approx((0, 192 + 128))
    assert got["mlp", "bias gradients"] == pytest.approx((0, 256 + 128))


def test_fused_kernels_move_what_their_sources_read_and_write():
    """The jit kernels themselves, as the fused rows count them. bias_dropout_add_fused_train
    reads the branch output and the residual (128 each) and writes the sum (128); its
    backward reads the gradient and writes the branch's, times the mask (128 + 128; the
    one-byte mask is layer_costs'). bias_gelu reads the FC1 output (256) and writes (256);
    bias_gelu_back reads the gradient and the input (512) and writes (256). Autograd adds
    the residual stream's two gradients: read 256, write 128."""
    got = terms(MEGATRON)
    assert got["attention", "residual"] == pytest.approx((384, 256))
    assert got["mlp", "gelu"] == pytest.approx((512, 768))
    assert got["mlp", "gradient sums"] == pytest.approx((0, 384))


def test_sequence_parallel_shards_the_output_bias_not_the_qkv_one():
    """With sequence parallelism bias-dropout-add runs on half the tokens, so its bias
    gradient reads 64 bytes a token; the QKV bias is added to the gathered projection's
    output (all tokens, 1/tp of the heads) and stays 192."""
    got = terms(replace(MEGATRON, sequence_parallel=True))
    assert got["attention", "bias gradients"] == pytest.approx((0, 192 + 64))
    assert got["attention", "norm"] == pytest.approx((132, 328))


def test_the_layer_sums_its_terms():
    """elementwise_bytes of a micro-batch of 32 tokens: the rows above summed, times 32."""
    attn_f, mlp_f = elementwise_bytes(GPT, 0, MEGATRON, LAY)
    attn_b, mlp_b = elementwise_bytes(GPT, 0, MEGATRON, LAY, backward=True)
    assert attn_f == pytest.approx(32 * (264 + 384 + 384 + 128))
    assert attn_b == pytest.approx(32 * (656 + 256 + 384 + 384 + 320))
    assert mlp_f == pytest.approx(32 * (264 + 384 + 512))
    assert mlp_b == pytest.approx(32 * (656 + 256 + 768 + 384 + 384))


def test_the_default_is_transformer_engines():
    """Unset, the kernels are TransformerEngine's: no extra passes, the one-pass norm."""
    t = replace(MEGATRON, norm_kernel="auto", fused_kernels="te")
    got = terms(t)
    assert Training().fused_kernels == "te" and Training().norm_kernel == "auto"
    assert not {term for _, term in got} & {"qkv bias", "layout copies", "bias gradients"}
    assert got["attention", "norm"] == pytest.approx((256, 384))


def test_the_two_pass_norm_keeps_what_the_fused_one_keeps():
    """Its forward saves the input and the fp32 statistics, as a one-pass kernel does, not
    the eager chain's fp32 copies: among eager ops (an RMSNorm model, where they differ)
    "two-pass" keeps what "fused" keeps."""
    llama = replace(GPT, activation="swiglu", rotary=True)
    eager = Training(seq=32, fused_elementwise=False)
    for mode in ("none", "selective"):
        fused, two_pass, chain = (
            layer_activation(llama, 0, replace(eager, norm_kernel=k), LAY, mode)[0] for k in ("fused", "two-pass", "eager")
        )
        assert two_pass == fused < chain


@pytest.mark.parametrize(
    "fields,needle",
    [
        ({"norm_kernel": "apex"}, "norm_kernel must be one of auto, fused, eager, two-pass, got 'apex'"),
        ({"fused_kernels": "megatron"}, 'fused_kernels must be "te"'),
        ({"fused_kernels": "megatron-jit", "fused_elementwise": False}, "set fused_elementwise = true"),
    ],
)
def test_bad_kernel_names_are_one_line(tmp_path, capsys, fields, needle):
    with pytest.raises(PipesimError, match="training"):
        load_training(base=fields)
    path = tmp_path / "run.toml"
    path.write_text("".join(f"{k} = {str(v).lower() if isinstance(v, bool) else repr(v)}\n" for k, v in fields.items()))
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--training", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1
