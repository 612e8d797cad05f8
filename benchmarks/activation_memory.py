"""Activation memory: pipesim's prediction against what PyTorch keeps, and peak memory
against torchtitan's published per-GPU memory.

    PYTHONPATH=src python benchmarks/activation_memory.py

1. Real PyTorch blocks (tests/torch_blocks.py: GPT-style, Llama-style fused and eager,
   MoE top-2 of 8, the output head), in bf16 on the CPU; the bytes autograd saves are
   counted with saved_tensors_hooks, distinct storages once, parameters and buffers out.
   Beside each, ``activations.layer_activation`` (or ``head_activation``) for the shape.
2. torchtitan's rows of ../shared/PUBLISHED_RUNS.md that give memory (GiB, torchtitan's
   max reserved): the planner's peak at the layout benchmarks/published_runs.py pins (its
   recomputation searched where the row does not give it: torchtitan's selective op AC is
   not a mode pipesim has), plus a full-recompute backward's transient layer, plus the
   caching allocator's fragmentation share (reserved = allocated / (1 - share)).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from pipesim.planner.activations import head_activation, layer_activation  # noqa: E402
from pipesim.planner.device_memory import usable_for  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, MoE, Training  # noqa: E402

S, B, H = 256, 2, 512
GIB = 2**30

#: torchtitan's published memory per GPU (GiB, ../shared/PUBLISHED_RUNS.md) by the name
#: of the row in benchmarks/data/published_runs.toml
TORCHTITAN_GIB = {
    "torchtitan Llama 3 8B, 8 H100, FSDP": 82.4,
    "torchtitan Llama 3 8B, 128 H100, FSDP": 67.0,
    "torchtitan Llama 3 8B, 8 H100, FSDP + compile": 77.0,
    "torchtitan Llama 3 8B, 128 H100, FSDP + compile": 62.0,
    "torchtitan Llama 3 8B, 8 H100, FSDP, seq 32768": 83.9,
    "torchtitan Llama 3 70B, 256 H100, FSDP + TP": 71.9,
    "torchtitan Llama 3 70B, 256 H100, FSDP + AsyncTP": 67.6,
    "torchtitan Llama 3 405B, 512 H100, 1F1B": 82.5,
    "torchtitan Llama 3 405B, 512 H100, interleaved 1F1B": 72.7,
}


def block_cases():
    """(name, build the block, input shape, pipesim's bytes)."""
    from torch_blocks import GPTBlock, Head, LlamaBlock

    gpt = Model("gpt", 1, H, 8, 1000, Attention(), 1, 4 * H, activation="gelu", rotary=False)
    llama = Model("llama", 1, H, 8, 1000, Attention(kv_heads=2), 1, 1376)
    moe = Model("moe", 1, H, 8, 1000, Attention(kv_heads=2), 0, 0, moe=MoE(experts=8, expert_ffn=256, top_k=2))
    lay = Layout(1, 1, micro_batch=B)
    gpt_t = Training(seq=S, flash_attention=False, hidden_dropout=True, sequence_parallel=False)
    for rc in ("none", "selective", "full"):
        yield (
            f"GPT (LayerNorm, unfused attention, dropout 0.1, GELU), {rc}",
            lambda rc=rc: GPTBlock(H, 8, 4 * H, rc),
            (
                S,
                B,
                H,
            ),
            layer_activation(gpt, 0, gpt_t, lay, rc)[0],
        )
    for fused in (True, False):
        t = Training(seq=S, fused_elementwise=fused)
        kind = "fused" if fused else "eager (torchtitan)"
        for rc in ("none", "selective", "full"):
            yield (
                f"Llama (RMSNorm, GQA 8/2, rotary, SDPA, SwiGLU) {kind}, {rc}",
                lambda rc=rc, f=fused: LlamaBlock(H, 8, 2, 1376, f, rc),
                (B, S, H),
                layer_activation(llama, 0, t, lay, rc)[0],
            )
        yield (
            f"MoE (top-2 of 8 SwiGLU experts) {kind}, none",
            lambda f=fused: LlamaBlock(H, 8, 2, 0, f, moe=(8, 256, 2)),
            (
                B,
                S,
                H,
            ),
            layer_activation(moe, 0, t, lay, "none")[0],
        )
    for fp32 in (True, False):
        t = Training(seq=S, logit_bytes=52 if fp32 else 10)
        yield (
            f"output head, {'fp32' if fp32 else 'bf16'} loss",
            lambda f=fp32: Head(H, 1000, f),
            (B, S, H),
            head_activation(llama, t, lay),
        )


def print_blocks() -> list[float]:
    import torch

    from torch_blocks import DT, measure

    print(f"## Activation bytes per layer: PyTorch against pipesim (bf16, CPU, s={S}, b={B}, h={H})\n")
    print("| block, recomputation | PyTorch keeps (B) | pipesim (B) | error |")
    print("|---|---|---|---|")
    errors = []
    for name, make, shape, predicted in block_cases():
        torch.manual_seed(0)
        measured = measure(make(), torch.randn(*shape, dtype=DT))
        errors.append(predicted / measured - 1)
        print(f"| {name} | {measured:,} | {predicted:,.0f} | {errors[-1]:+.2%} |")
    worst = max(errors, key=abs)
    print(f"\n{len(errors)} blocks: worst error {worst:+.2%} (target: within 5% for every block and mode).")
    return errors


def print_peaks() -> None:
    import tomllib

    import published_runs as pr

    rows = [r for r in tomllib.loads(pr.DATA.read_text())["run"] if r["name"] in TORCHTITAN_GIB]
    print("\n## Peak memory per GPU: torchtitan's published figure against pipesim\n")
    print("| run | layout simulated | published (GiB) | pipesim peak with transient (GiB) | with fragmentation (GiB) | error |")
    print("|---|---|---|---|---|---|")
    errors = []
    for rec in pr.run_rows(rows):
        r, (m, c, t) = rec["result"], rec["specs"]
        pub = TORCHTITAN_GIB[rec["row"]["name"]]
        # the planner's peak, plus the layer a full-recompute backward re-materialises
        held = dict(usable_for(m, c, t, r.candidate.layout, r.candidate.recompute).held)
        peak = (r.memory_gb * 1e9 + held["full-recompute transient (one layer)"]) / GIB
        reserved = peak / (1 - t.allocator_fragmentation)
        errors.append(reserved / pub - 1)
        print(f"| {rec['row']['name']} | {pr.layout_text(r)} | {pub:.1f} | {peak:.1f} | {reserved:.1f} | {errors[-1]:+.1%} |")
    inside = sum(abs(e) <= 0.10 for e in errors)
    print(f"\n{len(errors)} rows: {inside} within 10% (target: all), mean |error| {sum(map(abs, errors)) / len(errors):.1%}.")


def main() -> None:
    try:
        print_blocks()
    except ImportError:
        print("PyTorch is not installed: the block table needs it (pip install torch)")
    print_peaks()


if __name__ == "__main__":
    main()
