"""Fused attention by shape, measured on this machine's GPU, beside pipesim's price.

    python benchmarks/attention_gpu.py                 # needs PyTorch and a CUDA GPU
    python benchmarks/attention_gpu.py --preset h100   # the cluster preset to price it on

Times PyTorch's own causal ``scaled_dot_product_attention`` on its flash backend (the
kernel torchtitan's runs call: FlashAttention-2's, 128 query rows a forward block for head
size 128), bf16, one layer's q, k and v of shape [batch, heads, seq, 128], forward alone
and forward plus backward (the backward is their difference), with CUDA events after
warm-up, over a grid of sequence lengths and head counts. It then prints the same table
as benchmarks/attention_grid.py: each shape's measured microseconds beside pipesim's
``attention_core`` on the preset (default h200) with the grid term (``attention_waves``)
off and on, and the measured rate as a share of the largest grid's at that sequence length
("rel") beside the share of the SMs the grid term keeps busy ("fill"), first with the
blocks handed out in launch order as FlashAttention-2 runs them (``attention_block_order =
"launch"``), then longest first (the term's default, FlashAttention-3/-4). Measured and
predicted in the same run; nothing is fitted. Without PyTorch or a CUDA GPU it says so in
one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import attention_grid  # noqa: E402
from gpu_timing import cuda_torch, preset_args, seconds  # noqa: E402

SEQS = (1024, 2048, 4096, 8192)
HEADS = (1, 2, 4, 8, 16, 32, 64, 128)
HEAD_DIM = 128


def time_attention(torch, b: int, h: int, s: int) -> tuple[float, float]:
    """(forward, backward) seconds of causal flash attention on [b, h, s, HEAD_DIM]."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(b, h, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, h, s, HEAD_DIM, device="cuda", dtype=torch.bfloat16)

    def forward():
        with torch.no_grad():
            sdpa(q, k, v, is_causal=True)

    def both():
        sdpa(q, k, v, is_causal=True).backward(grad)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        f = seconds(torch, forward)
        fb = seconds(torch, both)
    return f, max(fb - f, 0.0)


def measured_rows(torch) -> list[dict]:
    rows = []
    for s in SEQS:
        for h in HEADS:
            f, b = time_attention(torch, 1, h, s)
            rows.append({"b": 1, "s": s, "h": h, "kv": h, "qk": HEAD_DIM, "v": HEAD_DIM, "fwd": f, "bwd": b})
    return sorted(rows, key=lambda r: (r["s"], r["qk"], -r["h"]))


def main(argv: list[str] | None = None) -> int:
    args = preset_args(__doc__, argv)
    torch = cuda_torch()
    if torch is None:
        return 0
    name = torch.cuda.get_device_properties(0)
    print(
        f"# Causal flash attention on {name.name} ({name.multi_processor_count} SMs, torch {torch.__version__}) beside pipesim (us)"
    )
    rows = measured_rows(torch)
    # PyTorch's flash backend is FlashAttention-2's kernel: no tile scheduler, blocks in
    # launch order; the longest-first bound (FlashAttention-3/-4) printed after it
    attention_grid.print_device(args.preset, rows, attention_block_order="launch")
    attention_grid.print_device(args.preset, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
