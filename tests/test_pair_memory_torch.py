"""An overlapped pair's activation peak against what PyTorch's autograd really keeps when
a chunk's forward and another micro-batch's backward run layer by layer in Megatron-Core's
order (NVIDIA/Megatron-LM d98e8a6, model_chunk_schedule_plan.py
``TransformerModelChunkSchedulePlan.run``: forward layer i, then backward layer L-1-i;
each schedule node detaches its input, so its backward, run with keep_graph=False, frees
that layer's saved tensors alone). The bytes live come from autograd: every tensor it
saves is wrapped as it is saved and counted until autograd drops it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pipesim.memory import MemoryModel, pair_peak  # noqa: E402

H, TOKENS = 16, 8
WIDTHS = (8, 64, 24, 40)  # four layers of distinct sizes


class _Held:
    """A saved tensor, counted while autograd holds it."""

    live = 0
    peak = 0

    def __init__(self, t):
        self.kept, self.n = t, t.numel() * t.element_size()
        _Held.live += self.n
        _Held.peak = max(_Held.peak, _Held.live)

    def __del__(self):
        _Held.live -= self.n


def _layers():
    torch.manual_seed(0)
    return [(torch.randn(H, f, requires_grad=True), torch.randn(f, H, requires_grad=True)) for f in WIDTHS]


def _forward(layer, x):
    """One layer as a schedule node: its input detached, so its backward stops there."""
    x = x.detach().requires_grad_()
    params = {id(p) for p in layer}
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: t if id(t) in params else _Held(t), lambda h: h.kept if isinstance(h, _Held) else h
    ):
        y = torch.nn.functional.gelu(x @ layer[0]) @ layer[1]
    return x, y


def test_a_pair_holds_what_autograd_keeps_layer_by_layer():
    """Each layer keeps its input, the GELU's input and its output in fp32: 8 tokens x
    (16 + 2f) x 4 bytes, 1024, 4608, 2048 and 3072 B. In the pair the forward's layers
    0-1 (5632 B) beside the backward's 0-2 (7680 B) are the worst, 2560 B above the
    backward's whole chunk (10752 B); ``pair_peak`` must say what autograd held."""
    layers = _layers()
    sizes = []
    for layer in layers:  # each layer's saved bytes, run alone
        before = _Held.live
        kept = _forward(layer, torch.randn(TOKENS, H))
        sizes.append(_Held.live - before)
        del kept
    assert sizes == [TOKENS * (H + 2 * f) * 4 for f in WIDTHS] and _Held.live == 0
    # micro-batch 0's forward, whole; then the pair: micro-batch 1's forward layer i
    # beside micro-batch 0's backward layer 3 - i
    x, mb0 = torch.randn(TOKENS, H), []
    for layer in layers:
        mb0.append(_forward(layer, x))
        x = mb0[-1][1]
    before, _Held.peak = _Held.live, _Held.live
    x, grad, mb1 = torch.randn(TOKENS, H), torch.ones(TOKENS, H), []
    for i, layer in enumerate(layers):
        mb1.append(_forward(layer, x))
        x = mb1[-1][1]
        inp, out = mb0[3 - i]
        torch.autograd.backward(out, grad)  # frees that layer's saved tensors
        grad, mb0[3 - i] = inp.grad, None
        del inp, out
    mm = MemoryModel(params=0.0, activation=float(sum(sizes)), layer_bytes=tuple(float(s) for s in sizes))
    assert _Held.peak - before == 2560 == pytest.approx(pair_peak(mm, 0, 0, 0.0))
    # the forward made whole before the backward frees anything would add a whole chunk
    assert _Held.peak - before < sum(sizes)
