"""torchtitan's cross-entropy as PyTorch runs it, beside pipesim's loss fields, per logit
of a GPU's vocabulary shard at the published models' vocabularies.

    PYTHONPATH=src python benchmarks/loss_bytes.py

The count (tests/torch_loss.py) runs torchtitan 9dec370's ``loss_fn``,
``F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` on bf16 logits, in bf16 on
the CPU, forward and backward: on one GPU, and under DTensor's loss_parallel on a fake
mesh of eight tensor-parallel ranks (the 70B and 405B rows' TP8). Per logit, the vocabulary
less half of it at the same tokens: the memory-bound bytes PyTorch's ops move (beside
``Training.logit_bytes``), the bytes saved for the backward (beside ``head_saved``'s fp32
log-softmax) and what the backward holds at its peak beyond them (the CPU allocator's
events, beside ``loss_transient``). Needs torch (pip install 'pipesim[torch]').
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pipesim.planner.activations import head_saved, loss_transient  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model  # noqa: E402
from pipesim.planner.training import Training, torchtitan_loss  # noqa: E402

TOKENS = 8
CASES = (("Llama 3", 128256, 1), ("Llama 3", 128256, 8), ("Llama 2", 32000, 1))


def priced(vocab: int, tp: int) -> tuple[float, float, float, float]:
    """pipesim's (bytes moved, of them forward, saved, held by the backward) per logit of
    the shard."""
    t, lay = Training(seq=TOKENS, **torchtitan_loss(tp)), Layout(1, 1, tp=tp, micro_batch=1)
    m = Model("m", 1, 4096, 32, vocab, Attention(), (), 14336)
    shard = vocab / tp
    forward = t.logit_bytes * t.loss_forward_share
    return t.logit_bytes, forward, head_saved(m, t, tp)["loss softmax"] / shard, loss_transient(m, t, lay) / (TOKENS * shard)


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("benchmarks/loss_bytes.py needs torch: pip install 'pipesim[torch]'")
        return 2
    from torch_blocks import fake_mesh
    from torch_loss import per_logit

    print(
        "| vocabulary | TP | PyTorch bytes/logit (fwd + bwd) | pipesim logit_bytes (fwd + bwd) | saved: PyTorch / pipesim | backward peak: PyTorch / pipesim |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, vocab, tp in CASES:
        with fake_mesh(tp) if tp > 1 else contextlib.nullcontext() as mesh:
            c = per_logit((vocab // 2, vocab), TOKENS, mesh)
        logit_bytes, forward, saved, held = priced(vocab, tp)
        moved = c["forward"] + c["backward"]
        print(
            f"| {name} {vocab:,} | {tp} | {moved:g} ({c['forward']:g} + {c['backward']:g}) "
            f"| {logit_bytes:g} ({forward:g} + {logit_bytes - forward:g}) "
            f"| {c['saved']:g} / {saved:g} | {c['peak']:g} / {held:g} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
