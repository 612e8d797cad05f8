"""One Megatron-Core MoE layer against pipesim's price for it, printed as a Markdown table.

    python benchmarks/moe_layer.py

The rows are benchmarks/data/moe_layer.toml: Megatron-LM's own MoE-layer benchmark
(router, dispatch, experts, combine; forward and backward of 4,096 tokens a GPU on 8 H100,
EP8), NVIDIA's recorded baselines at a few large experts and the same method re-run at
Qwen3's many small experts. pipesim prices the same layer's GPU work (the MoE block's
share of ``layer_costs``: its multiplies, memory-bound kernels and all-to-alls; Megatron-
Core's per-expert launches, no issue floor), so the last column says how far the measured
layer is above what its GPU work explains: near 1 where the experts are few and large, far
above it where they are many and small, and the same at twice the tokens. That excess is
what ``Training.moe_layer_issue_ms`` states for the Megatron-Core rows (floors.py).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_training, model_from_table

DATA = Path(__file__).parent / "data" / "moe_layer.toml"
EP = 8


def predicted_ms(case: dict) -> tuple[float, float]:
    """(forward, backward) ms pipesim gives the MoE block of one layer for ``case``."""
    moe = {k: case[k] for k in ("experts", "expert_ffn", "top_k")} | {"shared_experts": case.get("shared_experts", 0)}
    table = {
        "name": "moe-layer",
        "layers": 1,
        "hidden": case["hidden"],
        "heads": 32,
        "vocab": 32000,
        "mlp": {"dense_layers": 0},
        "moe": moe,
    }
    m = model_from_table(table, f"{DATA.name} [{case['source']}]")
    mb = case.get("micro_batch", 1)
    t = load_training(
        seq=4096,
        global_batch=EP * mb,
        precision=case["precision"],
        fp8_scaling="block",  # the benchmark's FP8 cases run the blockwise recipe
        moe_dispatcher=case["dispatcher"],
        moe_expert_gemms="per_expert",
        recompute="none",
    )
    lc = layer_costs(m, 0, load_cluster("h100").resized(EP), t, Layout(pp=1, dp=EP, ep=EP, micro_batch=mb), "none")
    forward = lc.mlp_f + lc.dispatch_f + lc.combine_f
    backward = lc.mlp_b + lc.mlp_w + lc.dispatch_b + lc.combine_b
    return forward * 1e3, backward * 1e3


def main() -> None:
    cases = tomllib.loads(DATA.read_text())["case"]
    print(
        "| MoE layer (H100, EP8) | tokens/GPU | dispatch | measured F + B ms | pipesim's GPU work ms | measured / pipesim | source |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        f, b = predicted_ms(case)
        measured = case.get("total_ms") or case["forward_ms"] + case["backward_ms"]
        split = f" ({case['forward_ms']:.2f} + {case['backward_ms']:.2f})" if "forward_ms" in case else ""
        tokens = 4096 * case.get("micro_batch", 1)
        print(
            f"| {case['name']}, {case['precision']} | {tokens:,} | {case['dispatcher']} | {measured:.2f}{split} | "
            f"{f + b:.2f} ({f:.2f} + {b:.2f}) | {measured / (f + b):.2f}x | {case['source']} |"
        )


if __name__ == "__main__":
    main()
