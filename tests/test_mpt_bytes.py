"""pipesim's bytes for MosaicML's MPT block (``eager_block = "llm-foundry"``) against what
PyTorch's own ops move in it.

tests/mpt_block.py writes the block as llm-foundry v0.3.0 does (bf16 LayerNorm, one Wqkv,
a bias on every Linear, GELU, dropout 0) and tests/torch_bytes.py counts, per token and
per part of the block, the bytes each memory-bound aten op reads and writes, forward and
backward, in bf16 on the CPU. ``elementwise_terms`` for the same shape must be within 5% of
that count, term by term and in total. The Triton attention's own passes do not run on the
CPU (SDPA stands in for the kernel and is not counted); their expected bytes are counted
by hand from llmfoundry/models/layers/flash_attn_triton.py at v0.3.0."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from mpt_block import kernels, per_token  # noqa: E402
from pipesim.errors import PipesimError  # noqa: E402
from pipesim.planner.elementwise import elementwise_bytes, elementwise_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training, check_training  # noqa: E402

SEQ = 8
H, HEADS = 256, 4
MPT = Training(seq=SEQ, fused_elementwise=False, norm_kernel="fused", eager_block="llm-foundry", sequence_parallel=False)
LAYOUT = Layout(pp=1, dp=1, micro_batch=1)
TRITON = "attention backward passes"


def model() -> Model:
    return Model("mpt", 1, H, HEADS, 1000, Attention(), (), 4 * H, activation="gelu", rotary=False)


def priced(phase: str) -> dict[str, float]:
    col = 2 if phase == "forward" else 3
    out: dict[str, float] = {}
    for row in elementwise_terms(model(), 0, MPT, LAYOUT):
        out[row[1]] = out.get(row[1], 0.0) + 2 * row[col]  # elements of 2 bytes
    return {k: v for k, v in out.items() if v}


@pytest.fixture(scope="module")
def counted():
    return per_token(H, HEADS, seq=SEQ)


def within(predicted: float, measured: float, what: str) -> None:
    assert abs(predicted / measured - 1) <= 0.05, f"{what}: pipesim {predicted:.0f} B a token, PyTorch {measured:.0f}"


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_each_term(counted, phase):
    """norm, residual, GELU, the Wqkv gradient's join, the bias gradients and autograd's
    sums, each as torch counts it; nothing torch counts is left unpriced."""
    seen = {label: b for (ph, label), b in counted.items() if ph == phase and b}
    mine = {k: v for k, v in priced(phase).items() if k != TRITON}
    assert set(seen) == set(mine), (seen, mine)
    for term, b in seen.items():
        within(mine[term], b, f"{phase} {term}")


def test_triton_backward_passes():
    """flash_attn_triton.py v0.3.0, per q element: the fp32 dq accumulator zeroed by the
    autotuned configs' pre_hook (write 4 bytes), ``_bwd_preprocess_do_o_dot`` reading the
    output and its gradient (2 + 2 bytes), ``dq.copy_(dq_accum)`` (read 4, write 2):
    14 bytes; multi-head attention has h q elements a token."""
    assert priced("backward")[TRITON] == pytest.approx(14 * H)
    assert TRITON not in priced("forward")


def test_backward_total(counted):
    """elementwise_bytes (what layer_costs prices) against torch's total plus the Triton
    kernel's passes counted by hand."""
    measured = sum(b for (ph, _), b in counted.items() if ph == "backward") + 14 * H
    attn, mlp = elementwise_bytes(model(), 0, MPT, LAYOUT, backward=True)
    within((attn + mlp) / SEQ, measured, "backward total")


def test_torchtitan_block_prices_more_sums_and_no_biases():
    """The same shape as torchtitan's eager block (the default) prices the input-gradient
    sums of separate wq, wk, wv and w1, w3, and neither the join nor the bias gradients:
    the switch is what tells the two apart."""
    titan = {r[1]: r[3] for r in elementwise_terms(model(), 0, Training(seq=SEQ, fused_elementwise=False), LAYOUT)}
    mpt = {r[1]: r[3] for r in elementwise_terms(model(), 0, MPT, LAYOUT)}
    assert "bias gradients" not in titan and "attention layout" not in titan
    assert titan["gradient sums"] - mpt["gradient sums"] == pytest.approx(9 * H)


def test_kernels_counted():
    """What the count's kernels are, one micro-batch: two LayerNorms and two residual adds
    forward, one GELU; backward a bias sum per Linear (4), the join (1), GELU, two norms,
    two gradient sums. Dropout at p = 0 launches nothing."""
    k = kernels(H, HEADS, seq=SEQ)
    assert k["forward", "norm"] == 2 and k["forward", "residual"] == 2 and k["forward", "gelu"] == 1
    assert k["backward", "bias gradients"] == 4 and k["backward", "attention layout"] == 1
    assert sum(n for (ph, _), n in k.items() if ph == "backward") == 10


def test_eager_block_needs_eager_ops():
    with pytest.raises(PipesimError, match="eager_block"):
        check_training(Training(eager_block="llm-foundry"), "run.toml")
    with pytest.raises(PipesimError, match="eager_block must be one of"):
        check_training(Training(fused_elementwise=False, eager_block="mpt"), "run.toml")
