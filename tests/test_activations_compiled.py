"""pipesim's per-layer activation bytes for torch.compile'd blocks (``fused_kernels =
"inductor"``) against what the compiled block really saves for its backward.

tests/compiled_saved.py compiles torchtitan's Llama block as torchtitan 9dec370's
``apply_compile`` does (one ``torch.compile(block, fullgraph=True)`` a block, after its
activation checkpoint), bf16, Inductor on the CPU, with no recomputation and under
torchtitan's selective op checkpointing, and counts with ``saved_tensors_hooks`` the
distinct storages AOTAutograd's compiled function saves, parameters and buffers left out.
The expected bytes come from that run; ``activations.layer_activation`` must be within 5%.
"""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
    pytest.skip("Inductor's CPU backend needs a C++ compiler", allow_module_level=True)

from compiled_saved import compiled_saved  # noqa: E402
from pipesim.planner.activations import layer_activation  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training  # noqa: E402
from test_activations_torch import within  # noqa: E402
from torch_blocks import DT, SACMeter, TitanBlock, measure_titan  # noqa: E402

S, B = 128, 2
# (hidden, heads, kv heads, ffn): grouped-query as Llama 3 (4 query heads a kv head, so
# repeat_kv copies) and multi-head (repeat_kv returns k and v untouched)
SHAPES = {"gqa": (256, 8, 2, 688), "mha": (192, 3, 3, 512)}
COMPILED = Training(seq=S, fused_kernels="inductor", sequence_parallel=False)
LAYOUT = Layout(1, 1, micro_batch=B)


def compiled(shape, ac: str) -> int:
    try:
        return compiled_saved(*shape, B, S, ac)
    except Exception as e:  # noqa: BLE001
        # a C++ toolchain that cannot build Inductor's kernels (no OpenMP headers, say) is
        # not a failure of the count; anything else is
        if "CppCompileError" in f"{type(e).__name__}: {e}":
            pytest.skip(f"Inductor could not compile its C++ kernels here: {str(e).splitlines()[0][:200]}")
        raise


def model(h, heads, kv, ffn) -> Model:
    return Model("llama", 1, h, heads, 1000, Attention(kv_heads=kv), (), ffn)


@pytest.fixture(scope="module", params=sorted(SHAPES))
def shape(request):
    return SHAPES[request.param]


@pytest.mark.parametrize("ac", ["none", "op"])
def test_compiled_block(shape, ac):
    """No recomputation: the norms' inputs, statistics and outputs, the rotated q and the
    (repeated) k and v flash attention reads, its output and logsumexp, the gate, the up
    projection and their product. Op checkpointing: its input, the first and third
    multiplies' outputs (q, v), the gate and flash attention's outputs."""
    measured = compiled(shape, ac)
    within(layer_activation(model(*shape), 0, COMPILED, LAYOUT, ac)[0], measured)


def test_compiled_op_drops_the_down_projection_output():
    """Eager selective op checkpointing caches every saved multiply's output; compiled,
    the partitioner keeps only what the backward graph reads, and the down projection's
    output (read by the residual add alone) is not: one hidden-sized bf16 tensor less,
    which pipesim's compiled op set leaves out and its eager one counts."""
    h, heads, kv, ffn = SHAPES["gqa"]
    meter = SACMeter()
    torch.manual_seed(0)
    eager = measure_titan([TitanBlock(h, heads, kv, ffn, "op", meter)], meter, torch.randn(B, S, h, dtype=DT))
    kept = compiled(SHAPES["gqa"], "op")
    down = B * S * h * 2  # the down projection's output, bf16
    assert eager - kept == down, (eager, kept)
    m, eager_t = model(h, heads, kv, ffn), Training(seq=S, fused_elementwise=False, sequence_parallel=False)
    priced = layer_activation(m, 0, eager_t, LAYOUT, "op")[0] - layer_activation(m, 0, COMPILED, LAYOUT, "op")[0]
    within(priced, down, 0.01)
