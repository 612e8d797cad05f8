"""torchtitan's eager element-wise kernels: the bytes PyTorch's own ops move beside what
pipesim prices for them, per token of one layer, forward and backward, term by term; and
MosaicML's MPT-7B block (tests/mpt_block.py) beside ``eager_block = "llm-foundry"``.

    PYTHONPATH=src python benchmarks/eager_bytes.py

The count runs torchtitan's eager Llama block (tests/torch_blocks.py ``TitanBlock``, as
torchtitan 9dec370 wrote it) at the model's real width, in bf16 on the CPU, forward and
backward under a TorchDispatchMode (tests/torch_bytes.py): every memory-bound aten op's
inputs and outputs, matrix multiplies and attention left out, views moving nothing, per
token from a batch of two sequences less a batch of one. pipesim's side is
``elementwise.elementwise_terms`` (``fused_elementwise = false``, one GPU, no sequence
parallelism). Needs torch (pip install 'pipesim[torch]'); about 2 GB of memory.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pipesim.planner.elementwise import elementwise_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training, load_model  # noqa: E402

SEQ = 8


def models() -> dict[str, Model]:
    """Llama 3 8B (grouped-query, 4 query heads a kv head) and Llama 2 13B (multi-head, as
    benchmarks/data/published_runs.toml's torchtitan A100 rows give it)."""
    return {
        "Llama 3 8B": load_model("llama3-8b"),
        "Llama 2 13B": Model("llama2-13b", 40, 5120, 40, 32000, Attention(), (), 13824),
    }


def side_by_side(m: Model, t: Training, counted: dict[tuple[str, str], float]):
    """(term, phase, torch bytes a token, pipesim bytes a token) of one layer: torch's
    ``counted`` (by phase and label) beside ``elementwise_terms`` under ``t``."""
    priced: dict[tuple[str, str], float] = {}
    for _block, term, fwd, bwd in elementwise_terms(m, 0, t, Layout(pp=1, dp=1)):
        for phase, elements in (("forward", fwd), ("backward", bwd)):
            priced[term, phase] = priced.get((term, phase), 0.0) + 2 * elements
    keys = sorted({(label, phase) for (phase, label), b in counted.items() if b} | {k for k, b in priced.items() if b})
    for term, phase in keys:
        yield term, phase, counted.get((phase, term), 0.0), priced.get((term, phase), 0.0)


def rows(m: Model):
    """torchtitan's eager block of one model."""
    from torch_bytes import per_token

    counted = per_token(m.hidden, m.heads, m.attention.kv_heads or m.heads, m.dense_ffn, seq=SEQ)
    return side_by_side(m, Training(seq=SEQ, fused_elementwise=False, sequence_parallel=False), counted)


def mpt_rows():
    """MosaicML's MPT-7B block as llm-foundry v0.3.0 writes it (tests/mpt_block.py: bf16
    LayerNorm, one Wqkv, biases, GELU) against ``eager_block = "llm-foundry"``; the Triton
    attention's own backward passes do not run on the CPU and show as pipesim's alone."""
    from mpt_block import per_token as mpt_per_token

    m = Model("mpt-7b", 32, 4096, 32, 50368, Attention(), (), 16384, activation="gelu", rotary=False)
    t = Training(seq=SEQ, fused_elementwise=False, norm_kernel="fused", eager_block="llm-foundry", sequence_parallel=False)
    return side_by_side(m, t, mpt_per_token(m.hidden, m.heads, seq=SEQ))


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("benchmarks/eager_bytes.py needs torch: pip install 'pipesim[torch]'")
        return 2
    print("| model | term | phase | PyTorch bytes/token | pipesim bytes/token | error |")
    print("|---|---|---|---:|---:|---:|")
    blocks = [(name, rows(m)) for name, m in models().items()] + [("MPT-7B (llm-foundry)", mpt_rows())]
    for name, counted in blocks:
        totals = {"forward": [0.0, 0.0], "backward": [0.0, 0.0]}
        for term, phase, measured, priced in counted:
            totals[phase][0] += measured
            totals[phase][1] += priced
            err = f"{priced / measured - 1:+.1%}" if measured else "-"
            print(f"| {name} | {term} | {phase} | {measured:,.0f} | {priced:,.0f} | {err} |")
        for phase, (measured, priced) in totals.items():
            print(f"| {name} | **all** | {phase} | {measured:,.0f} | {priced:,.0f} | {priced / measured - 1:+.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
