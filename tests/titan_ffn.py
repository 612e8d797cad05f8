"""torchtitan's Llama feed-forward half (its norm, then SwiGLU with w1, w3 and w2 as
model.py names them, and the residual), for the tests that run it tensor-parallel on
gloo ranks (test_tp_overlap_torch.py, test_micro_pipeline_tp_torch.py)."""

from __future__ import annotations

from torch import nn


class FeedForward(nn.Module):
    def __init__(self, h: int, f: int):
        super().__init__()
        self.w1, self.w3 = nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False)
        self.w2 = nn.Linear(f, h, bias=False)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class Half(nn.Module):
    def __init__(self, h: int, f: int):
        super().__init__()
        self.ffn_norm, self.feed_forward = nn.RMSNorm(h), FeedForward(h, f)

    def forward(self, x):
        return x + self.feed_forward(self.ffn_norm(x))
