"""torchtitan's Llama block (tests/titan_ffn.py's feed-forward half after an attention half)
and its tensor-parallel plan, for the tests that run it on gloo ranks
(test_compiled_recompute_torch.py). The attention computes its causal softmax in plain ops:
torch 2.13 cannot compile scaled_dot_product_attention's CPU kernel on DTensor-traced
inputs under checkpointing (it saves the device mesh for the backward), and nothing here
depends on the attention kernel, only on where the collectives sit."""

from __future__ import annotations

import torch
from torch import nn

from titan_ffn import Half


class Attention(nn.Module):
    """wq, wk, wv, the causal attention of each head, wo (torchtitan's model.py names)."""

    def __init__(self, h: int, heads: int):
        super().__init__()
        self.head_dim = h // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-1, -2) / self.head_dim**0.5
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class Block(nn.Module):
    def __init__(self, h: int, heads: int, f: int):
        super().__init__()
        self.attention_norm, self.attention = nn.RMSNorm(h), Attention(h, heads)
        self.mlp = Half(h, f)

    def forward(self, x):
        return self.mlp(x + self.attention(self.attention_norm(x)))


def titan_plan(sequence_parallel: bool) -> dict:
    """torchtitan 9dec370's apply_tp layer plan (BF16 styles); without sequence parallelism
    the block input stays replicated and the row-parallel outputs are all-reduced."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "mlp.feed_forward.w1": ColwiseParallel(),
        "mlp.feed_forward.w3": ColwiseParallel(),
    }
    if not sequence_parallel:
        return {**plan, "attention.wo": RowwiseParallel(), "mlp.feed_forward.w2": RowwiseParallel()}
    gather = {"input_layouts": (Shard(1),), "desired_input_layouts": (Replicate(),)}
    return {
        **plan,
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(**gather),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "mlp.ffn_norm": SequenceParallel(),
        "mlp.feed_forward": PrepareModuleInput(**gather),
        "mlp.feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
