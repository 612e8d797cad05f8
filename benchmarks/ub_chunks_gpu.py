"""Transformer Engine's ring-exchange multiplies in chunks, measured on this machine's GPU,
beside pipesim's price of the whole multiply and of its chunks run one after another.

    python benchmarks/ub_chunks_gpu.py                 # needs PyTorch and a CUDA GPU
    python benchmarks/ub_chunks_gpu.py --preset h100   # the cluster preset to price them on

Under userbuffers' ring exchange (Megatron-Core --tp-comm-overlap; the Megatron-Bridge 25.09
Llama rows run it for qkv_fprop, fc1_fprop, proj_fprop, fc2_fprop, proj_dgrad and fc2_dgrad)
Transformer Engine 2.7 does not run a linear as one multiply: it issues tp cuBLAS
multiplies of tokens / tp rows each, round-robin over min(3, tp) compute streams
(comm_gemm_overlap.cpp at fedd9ddc: split_overlap_ag :824, split_overlap_rs :1052, the
streams :77; pytorch/module/base.py ``_NUM_MAX_UB_STREAMS = 3``), under
``CUDA_DEVICE_MAX_CONNECTIONS=1`` (Megatron-Bridge comm_overlap.py sets it on Hopper). At
tp 8 the chunks of Llama 3.1 405B (CP2: 4,096 tokens a GPU) have 512 rows, at tp 4 those of
Llama 3 70B 2,048. How much a chunk's last partial wave costs depends on how far the next
chunk, on another stream, fills it; pipesim's wave term (``compute.gemm``) gives the two
ends, the whole multiply and the chunks one after another. This times the whole multiply,
the chunks on three streams as TE issues them (without the transfers), and the chunks on one
stream, per-tensor FP8 (``torch._scaled_mm``), so the chunks' own cost can be read off.
Nothing is fitted. Without PyTorch or a CUDA GPU it says so in one line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gemm_gpu import fp8_matmul  # noqa: E402
from gpu_timing import cuda_torch, preset_args, seconds  # noqa: E402

from pipesim.planner.compute import attention_shapes, gemm, mlp_shapes  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import load_cluster, load_model, load_training  # noqa: E402

#: the rows' models and layouts (benchmarks/data/published_runs.toml)
ROWS = (("llama3-70b", Layout(pp=8, dp=2, tp=4)), ("llama3-405b", Layout(pp=8, dp=8, tp=8, cp=2)))
#: TE's compute streams for a ring exchange: min(_NUM_MAX_UB_STREAMS, tp)
STREAMS = 3


def ring_multiplies(model: str, lay: Layout):
    """(name, tokens, n, k) of each multiply a layer runs as ring-exchange chunks: the four
    forward ones, and the input gradients of the attention output and of fc2 (tokens x k
    from n)."""
    m, t = load_model(model), load_training(seq=8192, precision="fp8", fp8_scaling="tensor")
    (tq, nq, kq, _), (to, no, ko, _) = attention_shapes(m, t, lay)
    (t1, n1, k1, _), (t2, n2, k2, _) = mlp_shapes(m, 0, t, lay)
    return (
        ("qkv", tq, nq, kq),
        ("proj", to, no, ko),
        ("fc1", t1, n1, k1),
        ("fc2", t2, n2, k2),
        ("proj dgrad", to, ko, no),
        ("fc2 dgrad", t2, k2, n2),
    )


def chunked(torch, parts, streams):
    """Run the chunk multiplies round-robin over ``streams``, then join them to the caller's."""
    main = torch.cuda.current_stream()

    def run():
        for s in streams:
            s.wait_stream(main)
        for i, part in enumerate(parts):
            with torch.cuda.stream(streams[i % len(streams)]):
                part()
        for s in streams:
            main.wait_stream(s)

    return run


def main(argv: list[str] | None = None) -> int:
    args = preset_args(__doc__, argv)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # as the runs had it; before CUDA starts
    torch = cuda_torch()
    if torch is None:
        return 0
    c, t = load_cluster(args.preset), load_training(precision="fp8", fp8_scaling="tensor")
    print(f"# Ring-exchange chunks on {torch.cuda.get_device_properties(0).name} beside pipesim on {args.preset} (us)\n")
    print("| model | tp | multiply | m x n x k | whole | 3 streams | 1 stream | pipesim whole | pipesim chunks in turn |")
    print("|---|---|---|---|---|---|---|---|---|")
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    for model, lay in ROWS:
        for name, m, n, k in ring_multiplies(model, lay):
            m, n, k, rows = int(m), int(n), int(k), int(m) // lay.tp
            whole = fp8_matmul(torch, m, n, k)
            parts = [fp8_matmul(torch, rows, n, k) for _ in range(lay.tp)]
            if whole is None or None in parts:
                print(f"| {model} | {lay.tp} | {name} | {m} x {n} x {k} | no FP8 here | | | | |")
                continue
            ours = (seconds(torch, whole), seconds(torch, chunked(torch, parts, streams)))
            ours += (seconds(torch, chunked(torch, parts, streams[:1])),)
            priced = (gemm(c, t, m, n, k, fp8=True), lay.tp * gemm(c, t, rows, n, k, fp8=True))
            cells = " | ".join(f"{x * 1e6:.0f}" for x in ours + priced)
            print(f"| {model} | {lay.tp} | {name} | {m} x {n} x {k} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
