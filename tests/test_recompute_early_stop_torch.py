"""Which multiplies a full recompute runs again, as torch's own non-reentrant checkpoint
runs them (``recompute_early_stop``), against ``layer_costs.recomputed_mlp_shapes``.

The MPT block as llm-foundry v0.3.0 writes it (tests/mpt_block.py), checkpointed whole as
Composer 0.16's ``checkpoint_wrapper(CheckpointImpl.NO_REENTRANT)`` does (torch's
``checkpoint(use_reentrant=False)``), runs forward and backward in bf16 on the CPU under a
dispatch mode that logs every ``addmm`` (a Linear with a bias: the forward's and the
recomputation's; the backward's own multiplies are ``mm``) with its (tokens, n, k). With
torch's default early stop the backward's addmms must be the shapes pipesim reruns with
``recompute_early_stop``; with early stop off, all of the forward's, as pipesim reruns
without it."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop  # noqa: E402

from mpt_block import MPTBlock  # noqa: E402
from pipesim.planner.compute import attention_shapes  # noqa: E402
from pipesim.planner.layer_costs import recomputed_mlp_shapes  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training  # noqa: E402
from torch_blocks import DT  # noqa: E402

H, HEADS, BATCH, SEQ = 64, 2, 2, 8


class Multiplies(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.phase, self.rows = "forward", []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.addmm.default:
            _, a, b = args[:3]
            self.rows.append((self.phase, (a.shape[0], b.shape[1], a.shape[1])))
        return func(*args, **(kwargs or {}))


def rerun_by_torch(early_stop: bool) -> list[tuple[int, int, int]]:
    torch.manual_seed(0)
    block = MPTBlock(H, HEADS)
    x = torch.randn(BATCH, SEQ, H, dtype=DT, requires_grad=True)
    log = Multiplies()
    with set_checkpoint_early_stop(early_stop), log:
        y = checkpoint(block, x, use_reentrant=False)
        log.phase = "backward"
        y.backward(torch.randn_like(y))
    return sorted(shape for phase, shape in log.rows if phase == "backward")


def rerun_by_pipesim(early_stop: bool) -> list[tuple[int, int, int]]:
    m = Model("mpt", 1, H, HEADS, 1000, Attention(), (), 4 * H, activation="gelu", rotary=False)
    t = Training(seq=SEQ, recompute_early_stop=early_stop)
    lay = Layout(pp=1, dp=1, micro_batch=BATCH)
    shapes = attention_shapes(m, t, lay) + recomputed_mlp_shapes(m, 0, t, lay)
    return sorted((int(tok), int(n), int(k)) for tok, n, k, count in shapes for _ in range(int(count)))


def test_early_stop_skips_the_last_multiply():
    """torch reruns Wqkv, out_proj and up_proj, not down_proj: pipesim reruns the same."""
    assert rerun_by_torch(True) == rerun_by_pipesim(True)
    assert (BATCH * SEQ, H, 4 * H) not in rerun_by_torch(True)


def test_without_early_stop_the_whole_forward():
    assert rerun_by_torch(False) == rerun_by_pipesim(False)
    assert (BATCH * SEQ, H, 4 * H) in rerun_by_torch(False)
