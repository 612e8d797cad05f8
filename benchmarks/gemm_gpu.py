"""Matrix multiplies and memory-bound kernels of training shapes, measured on this machine's
GPU, beside pipesim's price.

    python benchmarks/gemm_gpu.py                 # needs PyTorch and a CUDA GPU
    python benchmarks/gemm_gpu.py --preset h100   # the cluster preset to price them on

Times, with CUDA events after warm-up, the forward multiplies of Llama 3 8B, 70B and 405B
layers (QKV, attention output, gate and up, down) at tensor-parallel degrees 1 to 8 and
4,096 to 16,384 tokens, in bf16 (``torch.matmul``) and, where the GPU has FP8, with one
scale per tensor (``torch._scaled_mm``, what per-tensor FP8 training runs), and three
memory-bound kernels (a residual add, an eager SwiGLU ``silu(gate) * up``, ``F.rms_norm``) over
the same tokens. Beside each it prints pipesim's ``compute.gemm`` on the preset (default
h200), and for the memory-bound kernels the bytes they move at the preset's HBM bandwidth
times ``hbm_efficiency``. Measured and predicted in the same run; nothing is fitted.
Without PyTorch or a CUDA GPU it says so in one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_timing import cuda_torch, preset_args, seconds  # noqa: E402

from pipesim.planner.compute import gemm, hbm_rate  # noqa: E402
from pipesim.planner.specs import load_cluster, load_training  # noqa: E402

#: (model, hidden, heads, kv heads, ffn): the published configs' shapes
MODELS = (("llama3-8b", 4096, 32, 8, 14336), ("llama3-70b", 8192, 64, 8, 28672), ("llama3-405b", 16384, 128, 8, 53248))
TOKENS = (4096, 16384)
TPS = (1, 2, 4, 8)
HEAD = 128


def shapes():
    """(model, tp, tokens, name, m, n, k) of each forward multiply."""
    for name, h, heads, kv, ffn in MODELS:
        for tp in TPS:
            for tokens in TOKENS:
                qkv = (heads + 2 * kv) * HEAD // tp
                for what, n, k in (
                    ("qkv", qkv, h),
                    ("out", h, heads * HEAD // tp),
                    ("gate+up", 2 * ffn // tp, h),
                    ("down", h, ffn // tp),
                ):
                    yield name, tp, tokens, what, tokens, n, k


def fp8_matmul(torch, m: int, n: int, k: int):
    """A per-tensor-scaled FP8 multiply of (m x k) by (k x n), or None where unsupported."""
    try:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
        one = torch.ones((), device="cuda")
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, AttributeError, TypeError):
        return None


def summary(label: str, errors: list[float]) -> str:
    if not errors:
        return f"{label}: none measured"
    mean = sum(errors) / len(errors)
    return f"{label}: {len(errors)} shapes, bias {mean:+.1%}, mean |err| {sum(map(abs, errors)) / len(errors):.1%}, worst {max(errors, key=abs):+.1%}"


def main(argv: list[str] | None = None) -> int:
    args = preset_args(__doc__, argv)
    torch = cuda_torch()
    if torch is None:
        return 0
    c, t = load_cluster(args.preset), load_training()
    props = torch.cuda.get_device_properties(0)
    print(f"# Training-shape kernels on {props.name} (torch {torch.__version__}) beside pipesim on {args.preset} (us)\n")
    print(
        "| model | tp | tokens | multiply | m x n x k | bf16 measured | pipesim | err | TFLOP/s | fp8 measured | pipesim | err |"
    )
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    errs: dict[str, list[float]] = {"bf16": [], "fp8": []}
    for name, tp, tokens, what, m, n, k in shapes():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bf = seconds(torch, lambda a=a, b=b: torch.matmul(a, b))
        p_bf = gemm(c, t, m, n, k, fp8=False)
        errs["bf16"].append(p_bf / bf - 1)
        cells = f"{bf * 1e6:.0f} | {p_bf * 1e6:.0f} | {p_bf / bf - 1:+.0%} | {2 * m * n * k / bf / 1e12:.0f}"
        f8 = fp8_matmul(torch, m, n, k) if c.fp8_tflops else None
        if f8 is not None:
            s8, p8 = (
                seconds(torch, f8),
                gemm(c, load_training(base={"precision": "fp8", "fp8_scaling": "tensor"}), m, n, k, fp8=True),
            )
            errs["fp8"].append(p8 / s8 - 1)
            cells += f" | {s8 * 1e6:.0f} | {p8 * 1e6:.0f} | {p8 / s8 - 1:+.0%}"
        else:
            cells += " | - | - | -"
        print(f"| {name} | {tp} | {tokens} | {what} | {m} x {n} x {k} | {cells} |")
    print()
    print(summary("bf16 multiplies", errs["bf16"]))
    print(summary("fp8 multiplies (one scale per tensor)", errs["fp8"]))
    print("\n| kernel | tokens x hidden | measured us | bytes | pipesim us | err | measured TB/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    mem = []
    for _, h, *_ in MODELS:
        for tokens in TOKENS:
            x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
            y = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
            w = torch.ones(h, device="cuda", dtype=torch.bfloat16)
            unit = tokens * h * 2
            for kernel, fn, moved in (
                ("add", lambda x=x, y=y: x + y, 3 * unit),
                # eager: silu writes its output, the product reads it back (two kernels)
                ("silu(gate) * up, eager", lambda x=x, y=y: torch.nn.functional.silu(x) * y, 5 * unit),
                ("rms_norm", lambda x=x, h=h, w=w: torch.nn.functional.rms_norm(x, (h,), w), 2 * unit),
            ):
                s = seconds(torch, fn)
                p = moved / hbm_rate(c, t)
                mem.append(p / s - 1)
                print(
                    f"| {kernel} | {tokens} x {h} | {s * 1e6:.0f} | {moved / 1e6:.0f} MB | {p * 1e6:.0f} | {p / s - 1:+.0%} | {moved / s / 1e12:.2f} |"
                )
    print()
    print(summary("memory-bound kernels", mem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
