"""What the GPU benchmarks (attention_gpu.py, gemm_gpu.py) share: finding PyTorch with a
CUDA GPU, or saying in one line why there is nothing to measure, and timing a kernel."""

from __future__ import annotations

import argparse


def preset_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--preset", default="h200", help="the cluster preset to price the shapes on (default h200)")
    return ap.parse_args(argv)


def cuda_torch():
    """PyTorch when it is installed and sees a CUDA GPU; else None, having said why."""
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed (pip install 'pipesim[torch]'): nothing to measure.")
        return None
    if not torch.cuda.is_available():
        print("no CUDA GPU here: this benchmark times kernels on one; nothing to measure.")
        return None
    return torch


def seconds(torch, fn, warmup: int = 3, iters: int = 10) -> float:
    """Mean seconds of ``fn`` over ``iters`` calls after ``warmup``, by CUDA events."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters
