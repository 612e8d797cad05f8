"""MosaicML's MPT block as llm-foundry v0.3.0 (54cbb8bd10) writes it, small, in bf16 on the
CPU, and the bytes and kernels PyTorch's own ops move in it, counted by tests/torch_bytes.py.

The block (llmfoundry/models/layers/blocks.py ``MPTBlock.forward``) with the settings
llm-foundry b2a43a1477's benchmark table ran (scripts/train/benchmarking/submit_benchmarks.py
sets ``norm_type = low_precision_layernorm``; MPTConfig's defaults otherwise):

- ``norm_1`` and ``norm_2``: ``LPLayerNorm`` (layers/norm.py), F.layer_norm on the bf16
  input, weight and bias outside autocast: one aten op each way;
- attention (layers/attention.py ``GroupedQueryAttention.forward``): one ``Wqkv`` Linear
  with a bias, ``qkv.split`` into q, k, v (views), ``rearrange 'b s (h d) -> b s h d'``
  (views), ``triton_flash_attn_fn``, ``.view`` of the output, ``out_proj`` with a bias.
  llm-foundry's Triton kernel does not run on the CPU; SDPA on the same views stands in
  for it and is left out of the count as a multiply (its memory passes are counted by hand
  in benchmarks/mpt_bytes.py from layers/flash_attn_triton.py);
- ``resid_attn_dropout`` and ``resid_ffn_dropout``: nn.Dropout(0.0) (resid_pdrop 0);
- the residual adds ``x + dropout(b)`` and ``x + dropout(n)``;
- the MLP (layers/ffn.py ``MPTMLP``): ``up_proj`` with a bias, nn.GELU(approximate='none'),
  ``down_proj`` with a bias.

Each part runs under ``mark`` (torch_bytes.ByteCount labels the kernels by it); the
Linears under "bias gradients" so that autograd's sum of each bias's gradient over the
tokens is told from the multiplies (which are ``matmul`` and not counted)."""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

from torch_blocks import DT, _unmarked
from torch_bytes import ByteCount, run_logged


class MPTBlock(nn.Module):
    def __init__(self, h: int, heads: int, expansion: int = 4):
        super().__init__()
        self.heads = heads
        self.norm_1, self.norm_2 = nn.LayerNorm(h, dtype=DT), nn.LayerNorm(h, dtype=DT)
        self.Wqkv = nn.Linear(h, 3 * h, dtype=DT)
        self.out_proj = nn.Linear(h, h, dtype=DT)
        self.up_proj = nn.Linear(h, expansion * h, dtype=DT)
        self.down_proj = nn.Linear(expansion * h, h, dtype=DT)
        self.resid_attn_dropout, self.resid_ffn_dropout = nn.Dropout(0.0), nn.Dropout(0.0)
        self.mark = _unmarked  # torch_bytes.ByteCount.mark labels the parts when counting

    def linear(self, fc: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        with self.mark("bias gradients"):
            return fc(x)

    def attn(self, a: torch.Tensor) -> torch.Tensor:
        b, s, h = a.shape
        qkv = self.linear(self.Wqkv, a)
        with self.mark("attention layout"):
            q, k, v = (t.view(b, s, self.heads, h // self.heads) for t in qkv.split([h, h, h], dim=2))
        # stand-in for triton_flash_attn_fn: [b, s, heads, d] in and out
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        with self.mark("attention layout"):
            o = o.transpose(1, 2).reshape(b, s, h)
        return self.linear(self.out_proj, o)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with self.mark("norm"):
            a = F.layer_norm(x, self.norm_1.normalized_shape, self.norm_1.weight, self.norm_1.bias, self.norm_1.eps)
        b = self.attn(a)
        with self.mark("residual"):
            x = x + self.resid_attn_dropout(b)
        with self.mark("norm"):
            m = F.layer_norm(x, self.norm_2.normalized_shape, self.norm_2.weight, self.norm_2.bias, self.norm_2.eps)
        u = self.linear(self.up_proj, m)
        with self.mark("gelu"):
            g = F.gelu(u)
        n = self.linear(self.down_proj, g)
        with self.mark("residual"):
            return x + self.resid_ffn_dropout(n)


def count_block(h: int, heads: int, batch: int, seq: int) -> ByteCount:
    """One forward and backward of the MPT block on [batch, seq, h], logged."""
    torch.manual_seed(0)
    return run_logged(MPTBlock(h, heads), batch, seq, h)


def tally(log: ByteCount) -> dict[tuple[str, str], tuple[int, int]]:
    """(bytes read plus written, kernels) of the memory-bound ops by (phase, label)."""
    out: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for phase, label, _op, kind, read, written in log.rows:
        if kind == "memory":
            out[phase, label][0] += read + written
            out[phase, label][1] += 1
    return {k: (b, n) for k, (b, n) in out.items()}


def per_token(h: int, heads: int, seq: int = 8) -> dict[tuple[str, str], float]:
    """Memory-bound bytes per token by (phase, label): a batch of two sequences less a
    batch of one (what does not grow with the tokens, the weights' own gradients, drops out)."""
    one, two = (tally(count_block(h, heads, b, seq)) for b in (1, 2))
    return {key: (two.get(key, (0, 0))[0] - one.get(key, (0, 0))[0]) / seq for key in one.keys() | two.keys()}


def kernels(h: int, heads: int, seq: int = 8) -> dict[tuple[str, str], int]:
    """Memory-bound kernels by (phase, label), one micro-batch (they do not grow with it)."""
    return {k: n for k, (_, n) in tally(count_block(h, heads, 1, seq)).items()}
