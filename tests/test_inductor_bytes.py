"""pipesim's rows for torch.compile's kernels (``fused_kernels = "inductor"``) against the
bytes Inductor's own scheduler assigns to each kernel it generates.

tests/inductor_bytes.py compiles torchtitan's Llama block (tests/torch_blocks.py
``TitanBlock``, one ``torch.compile`` a block as torchtitan 9dec370's ``apply_compile``
does) in bf16 on the CPU, runs it forward and backward, and adds up per token and per
part of the block the bytes each generated kernel (and each extern kernel that computes:
the rotary's complex multiply) reads and writes, per Inductor's
``get_read_write_buffer_accesses``; multiplies and attention are left to the rest of
pipesim. The expected numbers come from that run; ``elementwise.elementwise_terms``
for the same shape must be within 5% of them, term by term and in total. Under
torchtitan's selective op checkpointing (tests/compiled_saved.py ``OpCheckpointed``) or
its full checkpointing, compiled the same way, the backward graph holds the
recomputation: what it moves beyond the plain compiled backward is held to
``elementwise.inductor_recompute_terms`` alike.
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
    pytest.skip("Inductor's CPU backend needs a C++ compiler", allow_module_level=True)

from inductor_bytes import JOINED, per_token, recomputed_per_token  # noqa: E402
from pipesim.planner.elementwise import elementwise_terms, inductor_recompute_bytes, inductor_recompute_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Training  # noqa: E402
from test_eager_bytes import layer_total_within, model, within  # noqa: E402

SEQ = 8
# (hidden, heads, kv heads, ffn): Llama 3 8B's proportions (4 query heads a kv head, ffn
# 3.5 h) and a multi-head model of other widths (no repeat_kv), both small
SHAPES = {"gqa": (256, 8, 2, 896), "mha": (192, 3, 3, 512)}
COMPILED = Training(seq=SEQ, fused_kernels="inductor", sequence_parallel=False)
FUSED = Training(seq=SEQ, sequence_parallel=False)
LAYOUT = Layout(pp=1, dp=1, micro_batch=1)
# the norms' weight gradients run in a kernel the count labels "norm" (its lines are the norm's)
LABEL = {"norm weight gradients": "norm"}


def count(shape, ac: str = "none"):
    try:
        return per_token(*shape, seq=SEQ, ac=ac)
    except Exception as e:  # noqa: BLE001
        # a machine whose C++ toolchain cannot build Inductor's kernels (no OpenMP headers,
        # say) is not a failure of the count; anything else is
        if "CppCompileError" in f"{type(e).__name__}: {e}":
            pytest.skip(f"Inductor could not compile its C++ kernels here: {str(e).splitlines()[0][:200]}")
        raise


@pytest.fixture(scope="module", params=sorted(SHAPES))
def counted(request):
    shape = SHAPES[request.param]
    return shape, count(shape)


def priced(shape, t: Training, phase: str) -> dict[str, float]:
    col = 2 if phase == "forward" else 3
    out: dict[str, float] = {}
    for row in elementwise_terms(model(*shape), 0, t, LAYOUT):
        term = LABEL.get(row[1], row[1])
        out[term] = out.get(term, 0.0) + 2 * row[col]  # elements of 2 bytes
    return {term: b for term, b in out.items() if b}


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_each_term(counted, phase):
    """norm (with the residual add and the gradient sums Inductor fuses into it, and the
    weight gradients' own kernel), residual, rotary, repeat_kv and SwiGLU, each."""
    shape, measured = counted
    mine = priced(shape, COMPILED, phase)
    seen = {label: b for (ph, label), b in measured.items() if ph == phase and b}
    assert set(seen) == set(mine), (seen, mine)
    for term, b in seen.items():
        within(mine[term], b, f"{phase} {term}")


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_layer_total(counted, phase):
    layer_total_within(counted, phase, COMPILED, SEQ, LAYOUT)


def test_compiled_moves_more_than_hand_fused_kernels(counted):
    """Inductor's kernels move at least a fifth more than the hand-fused rows (te) price,
    each way: the complex rotary runs as eager's, and the norms' weight gradients re-read
    their inputs."""
    shape, measured = counted
    for phase in ("forward", "backward"):
        total = sum(b for (ph, _), b in measured.items() if ph == phase)
        assert total > 1.2 * sum(priced(shape, FUSED, phase).values()), phase


@pytest.fixture(scope="module", params=["op", "full"])
def recomputed(counted, request):
    shape, none = counted
    return shape, request.param, recomputed_per_token(none, count(shape, ac=request.param))


def test_recompute_each_term(recomputed):
    """The norms (under op AC one rides in the other's backward), rotary with repeat_kv
    (their forward again), SwiGLU (its product only) and no residual add, each."""
    shape, ac, measured = recomputed
    mine: dict[str, float] = {}
    for _block, term, elements in inductor_recompute_terms(model(*shape), 0, COMPILED, LAYOUT, ac):
        mine[JOINED.get(term, term)] = mine.get(JOINED.get(term, term), 0.0) + 2 * elements
    assert set(measured) == set(mine), (measured, mine)
    for term, b in measured.items():
        within(mine[term], b, f"{ac} recomputed {term}")


def test_recompute_total_and_share_of_forward(counted, recomputed):
    """The micro-batch's recompute bytes layer_costs adds are the count's, within 5%, and
    both are well under the forward's memory-bound bytes (what eager's recompute moves)."""
    shape, ac, measured = recomputed
    total = sum(measured.values())
    attn, mlp = inductor_recompute_bytes(model(*shape), 0, COMPILED, LAYOUT, ac)
    within((attn + mlp) / SEQ, total, f"{ac} recomputed total")
    forward = sum(b for (ph, _), b in counted[1].items() if ph == "forward")
    assert total < 0.8 * forward and (attn + mlp) / SEQ < 0.8 * forward, (total, (attn + mlp) / SEQ, forward)
