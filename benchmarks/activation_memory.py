"""Activation memory: pipesim's prediction against what PyTorch keeps, and peak memory
against torchtitan's published per-GPU memory.

    PYTHONPATH=src python benchmarks/activation_memory.py

1. Real PyTorch blocks (tests/torch_blocks.py and tests/torch_blocks_sharded.py), in bf16
   on the CPU: GPT-style, Llama-style fused and eager, MoE top-2 of 8 with the routing
   weights in the combine or in the experts' activation, torchtitan's eager blocks four
   deep under its op and every-N checkpointing, one torch.compile'd (no checkpointing and
   op; needs a C++ compiler), DeepSeek's MLA with and without its
   recomputation, one rank of a sequence-parallel and of a context-parallel group, the
   output head. The bytes autograd saves are counted with saved_tensors_hooks (a selective
   checkpoint's cache from the cache itself), distinct storages once, parameters and
   buffers out. Beside each, ``activations.layer_activation`` (or ``head_activation``).
2. benchmarks/peak_memory.py's table: torchtitan's published memory figures beside
   pipesim's peak at those runs' layouts and checkpointing.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import peak_memory  # noqa: E402

from pipesim.planner.activations import head_activation, layer_activation, layer_mode  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, MoE, Training  # noqa: E402

S, B, H = 256, 2, 512
MLA = Attention(kind="mla", q_lora_rank=192, kv_lora_rank=128, qk_nope_dim=64, qk_rope_dim=32, v_head_dim=64)


def block_cases():
    """(name, measure it in PyTorch, pipesim's bytes)."""
    import torch

    from torch_blocks import DT, GPTBlock, Head, LlamaBlock, SACMeter, TitanBlock, measure, measure_titan
    from torch_blocks_sharded import LlamaCPBlock, LlamaSPBlock, MLABlock

    def run(make, shape):
        def go():
            torch.manual_seed(0)
            return measure(make(), torch.randn(*shape, dtype=DT))

        return go

    gpt = Model("gpt", 1, H, 8, 1000, Attention(), (), 4 * H, activation="gelu", rotary=False)
    llama = Model("llama", 1, H, 8, 1000, Attention(kv_heads=2), (), 1376)
    moe = Model("moe", 1, H, 8, 1000, Attention(kv_heads=2), (0,), 0, moe=MoE(experts=8, expert_ffn=256, top_k=2))
    lay = Layout(1, 1, micro_batch=B)
    gpt_t = Training(seq=S, flash_attention=False, hidden_dropout=True, sequence_parallel=False)
    for rc in ("none", "selective", "full"):
        name = f"GPT (LayerNorm, unfused attention, dropout 0.1, GELU), {rc}"
        yield name, run(lambda rc=rc: GPTBlock(H, 8, 4 * H, rc), (S, B, H)), layer_activation(gpt, 0, gpt_t, lay, rc)[0]
    for fused in (True, False):
        t = Training(seq=S, fused_elementwise=fused)
        kind = "fused" if fused else "eager (torchtitan)"
        for rc in ("none", "selective", "full"):
            name = f"Llama (RMSNorm, GQA 8/2, rotary, SDPA, SwiGLU) {kind}, {rc}"
            yield (
                name,
                run(lambda rc=rc, f=fused: LlamaBlock(H, 8, 2, 1376, f, rc), (B, S, H)),
                layer_activation(llama, 0, t, lay, rc)[0],
            )
        name = f"MoE (top-2 of 8 SwiGLU experts) {kind}, none"
        yield (
            name,
            run(lambda f=fused: LlamaBlock(H, 8, 2, 0, f, moe=(8, 256, 2)), (B, S, H)),
            layer_activation(moe, 0, t, lay, "none")[0],
        )
    weighted = Training(seq=S, moe_combine_keeps_outputs=False)
    yield (
        "MoE, routing weights in the experts' SwiGLU (Megatron-Core grouped experts), none",
        run(lambda: LlamaBlock(H, 8, 2, 0, True, moe=(8, 256, 2), weighted_act=True), (B, S, H)),
        layer_activation(moe, 0, weighted, lay, "none")[0],
    )
    titan = Model("llama", 4, H, 8, 1000, Attention(kv_heads=2), (), 1376)
    eager = Training(seq=S, fused_elementwise=False)
    for ac in ("none", "op", "every-2", "full"):

        def stack(ac=ac):
            torch.manual_seed(0)
            meter = SACMeter()
            blocks = [TitanBlock(H, 8, 2, 1376, layer_mode(ac, i), meter) for i in range(4)]
            return measure_titan(blocks, meter, torch.randn(B, S, H, dtype=DT))

        predicted = sum(layer_activation(titan, i, eager, lay, ac)[0] for i in range(4))
        yield f"torchtitan eager blocks x4 (wq, wk, wv; w1, w3, w2), AC {ac}", stack, predicted
    yield from compiled_cases(titan, lay)
    mla = Model("mla", 1, H, 8, 1000, MLA, (), 1376)
    for rc in ("none", "selective"):
        make = lambda rc=rc: MLABlock(H, 8, 192, 128, 64, 32, 64, 1376, selective=rc == "selective")  # noqa: E731
        yield (
            f"MLA (DeepSeek-V3's attention, latents 192/128), {rc}",
            run(make, (B, S, H)),
            layer_activation(mla, 0, Training(seq=S), lay, rc)[0],
        )
    for tp in (2, 4):
        kv = Model("llama", 1, H, 8, 1000, Attention(kv_heads=4), (), 1376)
        t = Training(seq=S, sequence_parallel=True)
        yield (
            f"Llama fused, one rank of tp{tp} with sequence parallelism (Megatron-Core), none",
            run(lambda tp=tp: LlamaSPBlock(H, 8, 4, 1376, tp), (B, S // tp, H)),
            layer_activation(kv, 0, t, Layout(1, 1, tp=tp, micro_batch=B), "none")[0],
        )
    for cp in (2, 4):
        yield (
            f"Llama fused, one rank of cp{cp} (local K/V kept), none",
            run(lambda cp=cp: LlamaCPBlock(H, 8, 2, 1376, cp), (B, S // cp, H)),
            layer_activation(llama, 0, Training(seq=S // cp), Layout(1, 1, cp=cp, micro_batch=B), "none")[0],
        )
    for fp32 in (True, False):
        t = Training(seq=S, logit_bytes=52 if fp32 else 10)
        yield (
            f"output head, {'fp32' if fp32 else 'bf16'} loss",
            run(lambda f=fp32: Head(H, 1000, f), (B, S, H)),
            head_activation(llama, t, lay),
        )


def compiled_cases(titan: Model, lay: Layout):
    """torchtitan's block torch.compile'd as its apply_compile does (tests/compiled_saved.py:
    what AOTAutograd's partitioner saves, seen by saved_tensors_hooks); left out where
    Inductor's CPU backend has no C++ compiler."""
    import shutil

    if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
        return
    from compiled_saved import compiled_saved

    def quietly(ac):  # Inductor's complex-rotary warning and the SAC-under-compile notice aside
        import logging
        import warnings

        notice = logging.getLogger("torch._higher_order_ops.wrap")  # SAC under compile
        level = notice.level
        notice.setLevel(logging.ERROR)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return compiled_saved(H, 8, 2, 1376, B, S, ac)
        finally:
            notice.setLevel(level)

    t = Training(seq=S, fused_kernels="inductor")
    for ac in ("none", "op"):
        yield (
            f"torchtitan block torch.compile'd (Inductor), AC {ac}",
            lambda ac=ac: quietly(ac),
            layer_activation(titan, 0, t, lay, ac)[0],
        )


def print_blocks() -> list[float]:
    print(f"## Activation bytes per layer: PyTorch against pipesim (bf16, CPU, s={S}, b={B}, h={H})\n")
    print("| block, recomputation | PyTorch keeps (B) | pipesim (B) | error |")
    print("|---|---|---|---|")
    errors = []
    for name, measured_by, predicted in block_cases():
        measured = measured_by()
        errors.append(predicted / measured - 1)
        print(f"| {name} | {measured:,} | {predicted:,.0f} | {errors[-1]:+.2%} |")
    worst = max(errors, key=abs)
    print(f"\n{len(errors)} blocks: worst error {worst:+.2%} (target: within 5% for every block and mode).")
    return errors


def main() -> None:
    try:
        print_blocks()
    except ImportError:
        print("PyTorch is not installed: the block table needs it (pip install torch)")
    print()
    peak_memory.main()


if __name__ == "__main__":
    main()
