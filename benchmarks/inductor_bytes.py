"""torch.compile's kernels in torchtitan's Llama block: the bytes Inductor's own
scheduler assigns to them beside what pipesim prices, per token of one layer, forward and
backward, term by term.

    PYTHONPATH=src python benchmarks/inductor_bytes.py

The count compiles torchtitan's Llama block (tests/torch_blocks.py ``TitanBlock``, as
torchtitan 9dec370 wrote it and compiled it, one ``torch.compile`` a block) at the model's
real width, in bf16 on the CPU, runs it forward and backward, and reads each kernel's
bytes from Inductor's scheduler (tests/inductor_bytes.py): generated kernels and the
extern kernels that compute, multiplies and attention left out, per token from a batch
of two sequences less a batch of one. pipesim's side is ``elementwise.elementwise_terms``
with ``fused_kernels = "inductor"`` (the count's rows) and with the hand-fused default
("te", TransformerEngine-style kernels), one GPU, no sequence parallelism. Needs torch
(pip install 'pipesim[torch]') and a C++ compiler; about 3 GB of memory, a few minutes
(the block is compiled plain, under op and under full checkpointing).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from pipesim.planner.elementwise import elementwise_terms, inductor_recompute_terms  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Model, Training, load_model  # noqa: E402

SEQ = 8
#: the count labels the norms' weight-gradient kernel "norm" (it runs the norm's lines)
LABEL = {"norm weight gradients": "norm"}


def priced(m: Model, fused_kernels: str) -> dict[tuple[str, str], float]:
    """pipesim's bytes a token by (term, phase)."""
    out: dict[tuple[str, str], float] = {}
    t = Training(seq=SEQ, fused_kernels=fused_kernels, sequence_parallel=False)
    for _block, term, fwd, bwd in elementwise_terms(m, 0, t, Layout(pp=1, dp=1)):
        term = LABEL.get(term, term) if fused_kernels == "inductor" else term
        for phase, elements in (("forward", fwd), ("backward", bwd)):
            out[term, phase] = out.get((term, phase), 0.0) + 2 * elements
    return out


def main() -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print("benchmarks/inductor_bytes.py needs torch: pip install 'pipesim[torch]'")
        return 2
    from inductor_bytes import per_token

    warnings.filterwarnings("ignore")
    m = load_model("llama3-8b")
    counted = per_token(m.hidden, m.heads, m.attention.kv_heads or m.heads, m.dense_ffn, seq=SEQ)
    compiled, fused = priced(m, "inductor"), priced(m, "te")
    print(f"Llama 3 8B layer (h {m.hidden}, ffn {m.dense_ffn}, {m.heads} heads, {m.attention.kv_heads} kv heads), bytes a token")
    print()
    print("| term | phase | Inductor | pipesim inductor | error | pipesim te (hand-fused) |")
    print("|---|---|---:|---:|---:|---:|")
    terms = sorted({label for (_, label), b in counted.items() if b} | {t for (t, _), b in compiled.items() if b})
    for phase in ("forward", "backward"):
        for term in terms:
            row = counted.get((phase, term), 0.0), compiled.get((term, phase), 0.0)
            if not any(row):
                continue
            err = f"{row[1] / row[0] - 1:+.1%}" if row[0] else "-"
            print(f"| {term} | {phase} | {row[0]:,.0f} | {row[1]:,.0f} | {err} | |")
        total = sum(b for (ph, _), b in counted.items() if ph == phase)
        mine = sum(b for (_, ph), b in compiled.items() if ph == phase)
        te = sum(b for (_, ph), b in fused.items() if ph == phase)
        print(f"| **all** | {phase} | {total:,.0f} | {mine:,.0f} | {mine / total - 1:+.1%} | {te:,.0f} ({te / total - 1:+.1%}) |")
    recomputed(m, counted)
    return 0


def recomputed(m: Model, plain: dict[tuple[str, str], float]) -> None:
    """Under torchtitan's activation checkpointing (op, as its compile rows ran, or full),
    applied before compile, the compiled backward graph holds the recomputation: what it
    moves beyond the plain compiled backward, term by term, beside
    ``elementwise.inductor_recompute_terms`` and beside the forward again (what an eager
    block's recompute moves, and what pipesim priced before it counted this)."""
    from inductor_bytes import JOINED, per_token, recomputed_per_token

    t = Training(seq=SEQ, fused_kernels="inductor", sequence_parallel=False)
    forward = sum(b for (ph, _), b in plain.items() if ph == "forward")
    for ac in ("op", "full"):
        counted = recomputed_per_token(
            plain, per_token(m.hidden, m.heads, m.attention.kv_heads or m.heads, m.dense_ffn, seq=SEQ, ac=ac)
        )
        mine: dict[str, float] = {}
        for _block, term, elements in inductor_recompute_terms(m, 0, t, Layout(pp=1, dp=1), ac):
            mine[JOINED.get(term, term)] = mine.get(JOINED.get(term, term), 0.0) + 2 * elements
        print()
        print(f'Recomputed in the backward under recompute = "{ac}" (beyond the plain compiled backward)')
        print()
        print("| term | Inductor | pipesim inductor | error |")
        print("|---|---:|---:|---:|")
        for term in sorted(counted.keys() | mine.keys()):
            row = counted.get(term, 0.0), mine.get(term, 0.0)
            err = f"{row[1] / row[0] - 1:+.1%}" if row[0] else "-"
            print(f"| {term}{' (with repeat_kv)' if term in JOINED.values() else ''} | {row[0]:,.0f} | {row[1]:,.0f} | {err} |")
        total, priced_total = sum(counted.values()), sum(mine.values())
        print(f"| **all** | {total:,.0f} | {priced_total:,.0f} | {priced_total / total - 1:+.1%} |")
        print(f"| the forward again | {forward:,.0f} ({total / forward:.0%} of it recomputed) | | |")


if __name__ == "__main__":
    sys.exit(main())
