"""MosaicML's MPT rows on H100 beside the same software on A100: where pipesim's gap lies.

    python benchmarks/mpt_same_stack.py

The six H100 rows of benchmarks/data/published_runs.toml come from llm-foundry b2a43a1477's
README (the "H100 80GB BF16" table). The same commit re-ran its "A100 80GB" table on the
same stack for the rows whose Precision and MP Mode columns read amp_bf16 and DEFAULT
(llm-foundry v0.3.0, Composer 0.16, torch 2.1, FSDP FULL_SHARD, Triton flash attention,
low-precision LayerNorm). Those rows are simulated here with the H100 rows' training
settings on the a100 preset, at pipesim's A100 attention rate (the default 0.5, the
FlashAttention-2 class on A100: Dao 2023, arXiv 2307.08691), each with the micro-batch,
accumulation and checkpointing its table row gives. The errors are split by whether the
run checkpointed its blocks: what both GPUs share is the stack's, what only the H100 rows
show is the H100's.
"""

from __future__ import annotations

import statistics
import sys
import tomllib

from published_runs import DATA, run_row

#: the A100 80GB rows of llm-foundry b2a43a1477 scripts/train/benchmarking/README.md on
#: 8 GPUs at amp_bf16 / DEFAULT: (model, seq, micro-batch, grad accum, checkpointing,
#: tokens/s/GPU); shapes from scripts/train/yamls/pretrain/mpt-*.yaml at v0.3.0
A100_ROWS = (
    ("1b", 2048, 14, 4, False, 20513),
    ("3b", 2048, 10, 2, False, 10811),
    ("7b", 2048, 6, 2, False, 4641),
    ("13b", 2048, 2, 3, False, 2262),
    ("30b", 2048, 3, 21, True, 916),
    ("7b", 8192, 8, 2, True, 3206),
    ("13b", 8192, 5, 3, True, 1795),
)
#: (d_model, n_heads, n_layers) of those yamls
SHAPES = {
    "1b": (2048, 16, 24),
    "3b": (2560, 20, 32),
    "7b": (4096, 32, 32),
    "13b": (5120, 40, 40),
    "30b": (7168, 56, 48),
}
#: the H100 rows' per-row keys; the rest of their training table is the stack's
PER_ROW = ("seq", "global_batch", "recompute", "attention_efficiency")


def a100_row(stack: dict, size: str, seq: int, mb: int, accum: int, ckpt: bool, value: float) -> dict:
    d, heads, layers = SHAPES[size]
    return {
        "name": f"MPT-{size.upper()}, 8 A100, seq {seq}",
        "cluster": "a100",
        "gpus": 8,
        "model": {
            "name": f"mpt-{size}",
            "layers": layers,
            "hidden": d,
            "heads": heads,
            "vocab": 50368,
            "mlp": {"dense_ffn": 4 * d, "activation": "gelu"},
            "tied_embeddings": True,
            "rotary": False,
        },
        "training": {**stack, "seq": seq, "global_batch": 8 * mb * accum, "recompute": "full" if ckpt else "none"},
        "layout": {"tp": 1, "pp": 1, "dp": 8, "schedule": "1f1b", "micro_batch": mb},
        "published": {"metric": "tokens_per_gpu", "value": value},
    }


def main() -> None:
    h100 = [r for r in tomllib.loads(DATA.read_text())["run"] if r["name"].startswith("MPT-")]
    stack = {k: v for k, v in h100[0]["training"].items() if k not in PER_ROW}
    rows = h100 + [a100_row(stack, *r) for r in A100_ROWS]
    print("| run | checkpointing | published tokens/s/GPU | predicted | error |")
    print("|---|---|---|---|---|")
    groups: dict[tuple[str, bool], list[float]] = {}
    for row in rows:
        rec = run_row(row)
        m, c, t = rec["specs"]
        ckpt = t.recompute == "full"
        predicted = t.global_batch * t.seq / (c.gpus * rec["pred"])
        print(
            f"| {row['name']} | {'full' if ckpt else 'none'} | {row['published']['value']:g} | {predicted:.0f} | {rec['error']:+.1%} |"
        )
        groups.setdefault((c.gpu, ckpt), []).append(rec["error"])
    print()
    for (gpu, ckpt), errors in sorted(groups.items()):
        what = "every block checkpointed" if ckpt else "no checkpointing"
        print(f"{gpu}, {what}: {len(errors)} rows, mean error {statistics.mean(errors):+.1%}")


if __name__ == "__main__":
    sys.exit(main())
