"""Widths and modes the forward's saved set (``activations``) and a deferred weight
gradient's (``weight_grad_saved``) both read: the bytes of an element, the width of a
column-parallel multiply's kept input, the FP8 SwiGLU cache, and which recomputation mode
a layer runs under."""

from __future__ import annotations

from ..errors import PipesimError
from .specs import Model, Training

#: bytes of an element: 16-bit activations, fp32 statistics, int64 routing indices, a
#: one-byte dropout mask
BF16, FP32, INDEX, MASK = 2, 4, 8, 1


def gathered_width(m: Model, t: Training, hid: float) -> float:
    """The width of a column-parallel multiply's saved input per token: the sequence
    shard ``hid`` under Megatron-LM's sequence parallelism (its backward gathers the
    input again), the whole hidden under DTensor's (``Training.sp_saves_gathered``:
    PrepareModuleInput and ColwiseParallel(input_layouts=Shard(1)) all-gather it into a
    replicated tensor, which the multiply's autograd node keeps; measured by
    tests/test_sp_gathered_torch.py on a fake process group)."""
    return m.hidden if t.sp_saves_gathered else hid


def layer_mode(recompute: str, layer: int) -> str:
    """The mode one layer runs under: ``every-N`` is ``full`` for every Nth layer (counted
    from one, as torchtitan's checkpoint wrapper counts blocks) and ``none`` for the rest."""
    if not recompute.startswith("every-"):
        return recompute
    n = recompute.removeprefix("every-")
    if not n.isdigit() or int(n) < 1:
        raise PipesimError(f"recompute {recompute!r}: every-N needs a whole N >= 1 (every-2 checkpoints every second layer)")
    return "full" if (layer + 1) % int(n) == 0 else "none"


def fp8_swiglu_cache(t: Training) -> bool:
    """DeepSeek-V3's FP8 training caches the SwiGLU input in FP8 and recomputes its output;
    per-tensor FP8 (Transformer Engine, torchao) keeps the bf16 activation as BF16 training does."""
    return t.precision == "fp8" and t.fp8_scaling == "block"
