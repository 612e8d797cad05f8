"""MosaicML's MPT rows on H100 beside the same software on A100: where pipesim's gap lies.

    python benchmarks/mpt_same_stack.py            # the rows both tables ran
    python benchmarks/mpt_same_stack.py --table    # every A100 row of the table, by model

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

#: every row of llm-foundry b2a43a1477 scripts/train/benchmarking/README.md's "A100 80GB"
#: table on 8 GPUs at amp_bf16 / DEFAULT, in the table's order: (model, seq, micro-batch,
#: grad accum, checkpointing, tokens/s/GPU); shapes from scripts/train/yamls/pretrain/
#: mpt-*.yaml at v0.3.0
A100_TABLE = (
    ("30b", 8192, 1, 21, True, 574),
    ("30b", 4096, 1, 21, True, 814),
    ("30b", 2048, 3, 21, True, 916),
    ("30b", 1024, 6, 21, True, 946),
    ("30b", 512, 12, 21, True, 967),
    ("13b", 32768, 1, 3, True, 1016),
    ("13b", 16384, 3, 3, True, 1431),
    ("13b", 8192, 5, 3, True, 1795),
    ("13b", 4096, 10, 3, True, 2060),
    ("13b", 2048, 2, 3, False, 2262),
    ("13b", 1024, 40, 3, True, 2330),
    ("7b", 65536, 1, 2, True, 1013),
    ("7b", 32768, 2, 2, True, 1672),
    ("7b", 16384, 4, 2, True, 2453),
    ("7b", 8192, 8, 2, True, 3206),
    ("7b", 4096, 16, 2, True, 3684),
    ("7b", 2048, 6, 2, False, 4641),
    ("7b", 1024, 64, 2, True, 4357),
    ("3b", 65536, 1, 2, True, 1767),
    ("3b", 32768, 3, 6, True, 3029),
    ("3b", 16384, 1, 6, False, 5529),
    ("3b", 8192, 3, 6, False, 7695),
    ("3b", 4096, 5, 6, False, 9457),
    ("3b", 2048, 10, 2, False, 10811),
    ("3b", 1024, 20, 6, False, 11580),
    ("3b", 512, 40, 6, False, 12127),
    ("1b", 65536, 1, 2, True, 3044),
    ("1b", 32768, 1, 4, False, 6275),
    ("1b", 16384, 2, 4, False, 9956),
    ("1b", 8192, 3, 4, False, 13814),
    ("1b", 4096, 7, 4, False, 17807),
    ("1b", 2048, 14, 4, False, 20513),
    ("1b", 1024, 18, 4, False, 22112),
    ("1b", 512, 56, 4, False, 23148),
    ("760m", 65536, 1, 2, True, 4143),
    ("760m", 32768, 1, 2, False, 8802),
    ("760m", 16384, 3, 2, False, 14274),
    ("760m", 8192, 6, 2, False, 20933),
    ("760m", 4096, 12, 2, False, 27351),
    ("760m", 2048, 24, 2, False, 32434),
    ("760m", 1024, 48, 2, False, 29765),
    ("760m", 512, 96, 2, False, 29446),
    ("350m", 65536, 1, 2, False, 7524),
    ("350m", 32768, 2, 2, False, 13652),
    ("350m", 16384, 4, 2, False, 23559),
    ("350m", 8192, 8, 2, False, 36569),
    ("350m", 4096, 16, 2, False, 49555),
    ("350m", 2048, 32, 2, False, 58782),
    ("350m", 1024, 64, 2, False, 64813),
    ("350m", 512, 128, 2, False, 69330),
    ("125m", 65536, 1, 2, False, 20368),
    ("125m", 32768, 2, 2, False, 36407),
    ("125m", 16384, 4, 2, False, 60040),
    ("125m", 8192, 8, 2, False, 90392),
    ("125m", 4096, 16, 2, False, 118396),
    ("125m", 2048, 40, 2, False, 142830),
    ("125m", 2048, 32, 2, False, 141737),
    ("125m", 1024, 64, 2, False, 156468),
    ("125m", 512, 128, 2, False, 165681),
)
#: the (model, seq) of those rows that the H100 table also ran on the same stack
SAME_AS_H100 = {("1b", 2048), ("3b", 2048), ("7b", 2048), ("13b", 2048), ("30b", 2048), ("7b", 8192), ("13b", 8192)}
A100_ROWS = tuple(r for r in A100_TABLE if (r[0], r[1]) in SAME_AS_H100)
#: (d_model, n_heads, n_layers) of those yamls
SHAPES = {
    "125m": (768, 12, 12),
    "350m": (1024, 16, 24),
    "760m": (1536, 12, 24),
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


def whole_table(stack: dict) -> None:
    """Every A100 row of the table at amp_bf16 / DEFAULT on 8 GPUs, and the mean error of
    each model with and without checkpointing: whether the gap follows the checkpointing
    or the model's width and the tokens a micro-batch."""
    print("| model | d_model | seq | micro-batch tokens | checkpointing | error |")
    print("|---|---|---|---|---|---|")
    groups: dict[tuple[str, bool], list[float]] = {}
    for size, seq, mb, accum, ckpt, value in A100_TABLE:
        error = run_row(a100_row(stack, size, seq, mb, accum, ckpt, value))["error"]
        print(f"| {size} | {SHAPES[size][0]} | {seq} | {mb * seq} | {'full' if ckpt else 'none'} | {error:+.1%} |")
        groups.setdefault((size, ckpt), []).append(error)
    print()
    for (size, ckpt), errors in sorted(groups.items(), key=lambda kv: (SHAPES[kv[0][0]][0], kv[0][1])):
        what = "checkpointed" if ckpt else "not checkpointed"
        print(
            f"MPT-{size.upper()} (d_model {SHAPES[size][0]}), {what}: {len(errors)} rows, mean error "
            f"{statistics.mean(errors):+.1%} ({min(errors):+.1%} to {max(errors):+.1%})"
        )


def main(argv: list[str]) -> int:
    h100 = [r for r in tomllib.loads(DATA.read_text())["run"] if r["name"].startswith("MPT-")]
    stack = {k: v for k, v in h100[0]["training"].items() if k not in PER_ROW}
    if argv == ["--table"]:
        whole_table(stack)
        return 0
    if argv:
        print(f"mpt_same_stack.py: unknown arguments {' '.join(argv)}; give none, or --table for every A100 row", file=sys.stderr)
        return 2
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
