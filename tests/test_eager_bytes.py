"""pipesim's bytes for torchtitan's eager element-wise kernels against what PyTorch's own
ops move.

tests/torch_bytes.py runs torchtitan's eager Llama block (tests/torch_blocks.py
``TitanBlock``, written as torchtitan 9dec370 wrote its model) forward and backward under
a TorchDispatchMode in bf16 on the CPU and adds up, per token and per part of the block,
the bytes each memory-bound aten op reads and writes (matrix multiplies and attention
left to the rest of pipesim, views moving nothing). The expected numbers come from that
run; ``elementwise.elementwise_terms`` and ``elementwise_bytes`` for the same shape must be
within 5% of them, term by term and in total, forward and backward.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pipesim.planner.elementwise import elementwise_bytes, elementwise_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training  # noqa: E402
from torch_bytes import count_block, per_token  # noqa: E402

SEQ = 8
# (hidden, heads, kv heads, ffn): Llama 3 8B's proportions (4 query heads a kv head, ffn
# 3.5 h) and a multi-head model (no repeat_kv), both small
SHAPES = {"gqa": (256, 8, 2, 896), "mha": (256, 4, 4, 688)}
EAGER = Training(seq=SEQ, fused_elementwise=False, sequence_parallel=False)
LAYOUT = Layout(pp=1, dp=1, micro_batch=1)


def model(h, heads, kv, ffn) -> Model:
    return Model("titan", 1, h, heads, 1000, Attention(kv_heads=kv), (), ffn)


def within(predicted: float, measured: float, what: str) -> None:
    assert abs(predicted / measured - 1) <= 0.05, f"{what}: pipesim {predicted:.0f} B a token, PyTorch {measured:.0f}"


@pytest.fixture(scope="module", params=sorted(SHAPES))
def counted(request):
    shape = SHAPES[request.param]
    return shape, per_token(*shape, seq=SEQ)


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_each_term(counted, phase):
    """norm, residual, rotary, repeat_kv, SwiGLU and autograd's gradient sums, each."""
    shape, measured = counted
    col = 2 if phase == "forward" else 3
    priced: dict[str, float] = {}
    for row in elementwise_terms(model(*shape), 0, EAGER, LAYOUT):
        priced[row[1]] = priced.get(row[1], 0.0) + 2 * row[col]  # elements of 2 bytes
    seen = {label: b for (ph, label), b in measured.items() if ph == phase and b}
    assert set(seen) == {term for term, b in priced.items() if b}, (seen, priced)
    for term, b in seen.items():
        within(priced[term], b, f"{phase} {term}")


def layer_total_within(counted, phase: str, t, seq: int = SEQ, layout=LAYOUT) -> None:
    """What layer_costs prices, elementwise_bytes for one micro-batch of ``seq`` tokens, within
    the tolerance of the count's total for the phase."""
    shape, measured = counted
    total = sum(b for (ph, _), b in measured.items() if ph == phase)
    attn, mlp = elementwise_bytes(model(*shape), 0, t, layout, backward=phase == "backward")
    within((attn + mlp) / seq, total, f"{phase} total")


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_layer_total(counted, phase):
    layer_total_within(counted, phase, EAGER)


def test_backward_is_not_twice_the_forward():
    """The eager backward is not a blanket 2x: the norm's is more than twice its forward,
    rotary's and repeat_kv's the same as theirs, SwiGLU's less than twice."""
    measured = per_token(*SHAPES["gqa"], seq=SEQ)
    ratio = {k: measured["backward", k] / measured["forward", k] for k in ("norm", "rotary", "repeat_kv", "swiglu")}
    assert ratio["norm"] > 2.1 and ratio["swiglu"] < 1.9
    assert ratio["rotary"] == pytest.approx(1.0, rel=0.01) and ratio["repeat_kv"] == pytest.approx(1.0)


def test_no_copy_after_attention():
    """torchtitan's ``.transpose(1, 2).contiguous()`` after SDPA copies nothing: the flash
    kernel's output is laid out [batch, seq, heads, dim] already."""
    log = count_block(*SHAPES["gqa"], batch=1, seq=SEQ)
    ops = [r for r in log.rows if r[1] == "attention output"]
    assert ops and all(kind == "view" for _, _, _, kind, _, _ in ops)
