"""benchmarks/ub_chunks_gpu.py's multiplies are the Bridge Llama rows' ring-exchange
linears, by hand from the models' configs (Llama 3 70B: hidden 8192, 64 heads, 8 kv heads,
ffn 28672; Llama 3.1 405B: 16384, 128, 8, 53248; head size 128) at 8,192 tokens a
sequence, tp 4 for 70B and tp 8 with cp 2 (4,096 tokens a GPU) for 405B."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("ub_chunks_gpu", BENCH / "ub_chunks_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def by_hand(hidden: int, heads: int, kv: int, ffn: int, tokens: int, tp: int) -> dict:
    """(m, n, k) of each ring-exchange multiply of a Llama layer: tokens x k by k x n."""
    qkv, attn = (heads + 2 * kv) * 128 / tp, heads * 128 / tp
    return {
        "qkv": (tokens, qkv, hidden),
        "proj": (tokens, hidden, attn),
        "fc1": (tokens, 2 * ffn / tp, hidden),
        "fc2": (tokens, hidden, ffn / tp),
        "proj dgrad": (tokens, attn, hidden),  # the output projection's input gradient
        "fc2 dgrad": (tokens, ffn / tp, hidden),
    }


def test_ring_exchange_multiplies_by_hand():
    mod = load()
    (m70, lay70), (m405, lay405) = mod.ROWS
    assert {name: (m, n, k) for name, m, n, k in mod.ring_multiplies(m70, lay70)} == by_hand(8192, 64, 8, 28672, 8192, 4)
    assert {name: (m, n, k) for name, m, n, k in mod.ring_multiplies(m405, lay405)} == by_hand(16384, 128, 8, 53248, 4096, 8)
