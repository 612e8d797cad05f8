"""What the GPU benchmarks (attention_gpu.py, gemm_gpu.py, layer_gpu.py, ub_chunks_gpu.py and
gpu_checks.py, which runs them all) share:
finding PyTorch with a CUDA GPU, or saying in one line why there is nothing to measure, and timing a kernel."""

from __future__ import annotations

import argparse


def preset_args(doc: str, argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--preset", default="h200", help="the cluster preset to price the shapes on (default h200)")
    return ap.parse_args(argv)


NO_GPU = "no CUDA GPU here"


def no_gpu_reason() -> str | None:
    """Why there is nothing to measure here (no PyTorch, or no CUDA GPU it sees), or None."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed (pip install 'pipesim[torch]')"
    if not torch.cuda.is_available():
        return NO_GPU
    return None


def cuda_torch():
    """PyTorch when it is installed and sees a CUDA GPU; else None, having said why."""
    why = no_gpu_reason()
    if why is not None:
        on_one = ": this benchmark times kernels on one;" if why == NO_GPU else ":"
        print(f"{why}{on_one} nothing to measure.")
        return None
    import torch

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
