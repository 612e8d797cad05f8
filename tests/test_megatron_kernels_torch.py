"""The passes ``fused_kernels = "megatron-jit"`` adds outside the fused kernels, against
the aten ops PyTorch itself runs for them (tests/torch_bytes.py's counter, bf16, CPU).

A skeleton of Megatron-LM 2021-22's attention and MLP data flow (megatron/model/
transformer.py and mpu/layers.py at 9aad9203aa, written here from their shapes, one tensor
rank): the QKV multiply with its bias added after it (``output = output + bias``), the
[s, b, heads, 3 * d] view split into q, k and v, the [s, b * heads, d] views the batched
multiplies take, the context's ``permute(2, 0, 1, 3).contiguous()``, the output bias
handed to bias-dropout-add as ``expand_as``, FC1's bias through an autograd Function that
returns the whole gradient for it, as ``GeLUFunction`` does. The softmax and the fused
kernels themselves are left out (their bytes are the kernels', not torch's). Per token:
a batch of two sequences less one, over a sequence's tokens.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pipesim.planner.elementwise import megatron_jit_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training  # noqa: E402
from torch_blocks import DT  # noqa: E402
from torch_bytes import ByteCount  # noqa: E402

H, HEADS, FFN, SEQ = 64, 4, 256, 8


class BiasOwnGradient(torch.autograd.Function):
    """y + bias whose backward returns the whole gradient as the bias's (autograd sums it)."""

    @staticmethod
    def forward(ctx, y, bias):
        return y + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


def run(batch: int) -> ByteCount:
    torch.manual_seed(0)
    d = H // HEADS
    p = {
        name: torch.randn(*shape, dtype=DT, requires_grad=True)
        for name, shape in {
            "w_qkv": (3 * H, H), "b_qkv": (3 * H,), "w_o": (H, H), "b_o": (H,),
            "w_1": (FFN, H), "b_1": (FFN,),
        }.items()
    }  # fmt: skip
    x = torch.randn(SEQ, batch, H, dtype=DT, requires_grad=True)
    grad = torch.randn(SEQ, batch, FFN, dtype=DT)
    log = ByteCount()
    with log:
        mixed = torch.matmul(x, p["w_qkv"].t())
        with log.mark("qkv bias"):
            mixed = mixed + p["b_qkv"]
        mixed = mixed.view(SEQ, batch, HEADS, 3 * d)
        with log.mark("split"):
            q, k, v = torch.split(mixed, d, dim=-1)
        q, k, v = (t.view(SEQ, batch * HEADS, d).transpose(0, 1) for t in (q, k, v))
        probs = torch.bmm(q, k.transpose(1, 2))  # the softmax and dropout are the kernels'
        ctx = torch.bmm(probs, v).view(batch, HEADS, SEQ, d)
        with log.mark("context copy"):
            ctx = ctx.permute(2, 0, 1, 3).contiguous().view(SEQ, batch, H)
        out = torch.matmul(ctx, p["w_o"].t())
        with log.mark("output bias"):
            bias = p["b_o"].expand_as(out)
        hidden = out + bias  # bias-dropout-add: the kernel's
        fc1 = torch.matmul(hidden, p["w_1"].t())
        with log.mark("fc1 bias"):
            act = BiasOwnGradient.apply(fc1, p["b_1"])
        log.watch(act.grad_fn)
        log.phase = "backward"
        act.backward(grad)
    return log


def measured() -> dict[tuple[str, str], float]:
    """Memory-bound bytes per token by (phase, label) of the marked parts."""
    one, two = ({}, {})
    for log, out in ((run(1), one), (run(2), two)):
        for phase, label, _op, kind, read, written in log.rows:
            if kind == "memory":
                out[phase, label] = out.get((phase, label), 0) + read + written
    return {key: (two.get(key, 0) - one.get(key, 0)) / SEQ for key in one.keys() | two.keys()}


def test_torch_moves_what_megatron_jit_terms_count():
    """pipesim's rows (2-byte elements) against torch's ops for the same passes."""
    got = measured()
    m = Model("gpt", 1, H, HEADS, 512, Attention(), (), FFN, activation="gelu", rotary=False)
    t = Training(seq=SEQ, sequence_parallel=False, fused_kernels="megatron-jit")
    rows = {(b, term): (2 * f, 2 * bw) for b, term, f, bw in megatron_jit_terms(m, 0, t, Layout(pp=1, dp=1))}
    # forward: the bias add after the multiply, the context copy; nothing else moves
    assert rows["attention", "qkv bias"][0] == got["forward", "qkv bias"]
    assert rows["attention", "layout copies"][0] == got["forward", "context copy"]
    assert not got.get(("forward", "split")) and not got.get(("forward", "output bias"))
    # backward: split's cat, and the three bias-gradient sums; the views copy nothing
    assert rows["attention", "layout copies"][1] == got["backward", "split"]
    assert rows["attention", "bias gradients"][1] == got["backward", "qkv bias"] + got["backward", "output bias"]
    assert rows["mlp", "bias gradients"][1] == got["backward", "fc1 bias"] + got["backward", "output bias"]
    assert not got.get(("backward", "context copy"))
    # the q, k, v and context views reach the multiplies and their gradients uncopied
    assert {key for key, moved in got.items() if moved and key[0] == "backward"} == {
        ("backward", label) for label in ("split", "qkv bias", "output bias", "fc1 bias")
    }
