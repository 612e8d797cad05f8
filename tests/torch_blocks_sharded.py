"""Small PyTorch blocks, in bf16 on the CPU, for the layouts one process cannot run for
real: DeepSeek's multi-head latent attention, and a Llama block's share on one rank of a
sequence-parallel or a context-parallel group. The collectives are stand-ins that move
no data between processes (an all-gather repeats the local shard, a reduce-scatter keeps
the local slice); what they save for the backward is what the frameworks' own autograd
functions save, named on each. tests/test_activations_torch.py counts the bytes with
``torch_blocks.measure``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from torch_blocks import DT, FusedRotary, FusedSwiGLU, Norm, SwiGLU, rotary_tables


def _as_flash_lays_out(out):
    """[b, heads, s, d] stored as [b, s, heads, d], as the flash kernels write it: the
    output projection's input is then a view of it, not a copy."""
    return out.transpose(1, 2).contiguous().transpose(1, 2)


class FlashAttention(torch.autograd.Function):
    """What FlashAttention-2's kernel keeps for its backward: q, k, v, the output and the
    fp32 logsumexp per head and query (flash_attn_interface's save_for_backward). Computed
    here without autograd; MLA's value heads are narrower than its query/key heads, which
    PyTorch's CPU flash kernel does not take (it falls back to the math path in fp32)."""

    @staticmethod
    def forward(ctx, q, k, v):  # [b, heads, s, d]
        with torch.no_grad():
            scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
            s_q, s_k = scores.shape[-2:]
            scores.masked_fill_(torch.ones(s_q, s_k, dtype=torch.bool).triu(1 + s_k - s_q), float("-inf"))
            lse = torch.logsumexp(scores, dim=-1)
            out = _as_flash_lays_out((torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype))
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):  # pragma: no cover - only the forward's saves are measured
        return None, None, None


class MLABlock(nn.Module):
    """DeepSeek-V2/V3's layer with a dense SwiGLU (DeepSeek-V3's model.py, the MLA class):
    q = wq_b(q_norm(wq_a(x))); [kv, k_pe] = wkv_a(x); [k_nope, v] = wkv_b(kv_norm(kv));
    rotary on q_pe and the one shared k_pe head; q and k concatenated from their parts;
    flash attention; wo. Fused norms and rotary (torch_blocks' save sets)."""

    def __init__(self, h, heads, q_lora, kv_lora, nope, rope, v_dim, ffn, selective=False):
        super().__init__()
        self.selective = selective
        self.heads, self.nope, self.rope, self.v, self.kv_lora = heads, nope, rope, v_dim, kv_lora
        self.n1, self.n2 = Norm(h, True), Norm(h, True)
        self.wq_a = nn.Linear(h, q_lora, bias=False, dtype=DT)
        self.q_norm = Norm(q_lora, True)
        self.wq_b = nn.Linear(q_lora, heads * (nope + rope), bias=False, dtype=DT)
        self.wkv_a = nn.Linear(h, kv_lora + rope, bias=False, dtype=DT)
        self.kv_norm = Norm(kv_lora, True)
        self.wkv_b = nn.Linear(kv_lora, heads * (nope + v_dim), bias=False, dtype=DT)
        self.wo = nn.Linear(heads * v_dim, h, bias=False, dtype=DT)
        self.mlp = SwiGLU(h, ffn, True)
        ang = rotary_tables(4096, rope)
        self.register_buffer("cos", ang.cos().to(DT)[:, None])
        self.register_buffer("sin", ang.sin().to(DT)[:, None])

    def attention(self, xn):
        b, s, _ = xn.shape
        q = self.wq_b(self.q_norm(self.wq_a(xn))).view(b, s, self.heads, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        q_pe = FusedRotary.apply(q_pe, self.cos[:s], self.sin[:s])
        kv, k_pe = self.wkv_a(xn).split([self.kv_lora, self.rope], dim=-1)
        k_pe = FusedRotary.apply(k_pe.view(b, s, 1, self.rope), self.cos[:s], self.sin[:s])
        k_nope, v = self.wkv_b(self.kv_norm(kv)).view(b, s, self.heads, self.nope + self.v).split([self.nope, self.v], dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(b, s, self.heads, self.rope)), dim=-1)
        o = FlashAttention.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        return self.wo(o.transpose(1, 2).reshape(b, s, self.heads * self.v))

    def forward(self, x):
        if self.selective:
            return self.recomputing(x)
        x = x + self.attention(self.n1(x))
        return x + self.mlp(self.n2(x))

    def up_projections(self, q_a, kv_a):
        """q_norm, wq_b, kv_norm, wkv_b, rotary, the concatenations: from the latents to
        q, k and v (Megatron-Core's qkv_up_proj_and_rope_apply)."""
        b, s, _ = q_a.shape
        q = self.wq_b(self.q_norm(q_a)).view(b, s, self.heads, self.nope + self.rope)
        q_nope, q_pe = q.split([self.nope, self.rope], dim=-1)
        q_pe = FusedRotary.apply(q_pe, self.cos[:s], self.sin[:s])
        kv, k_pe = kv_a.split([self.kv_lora, self.rope], dim=-1)
        k_pe = FusedRotary.apply(k_pe.reshape(b, s, 1, self.rope), self.cos[:s], self.sin[:s])
        k_nope, v = self.wkv_b(self.kv_norm(kv)).view(b, s, self.heads, self.nope + self.v).split([self.nope, self.v], dim=-1)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(b, s, self.heads, self.rope)), dim=-1)
        return q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()

    def recomputing(self, x):
        """DeepSeek-V3's recomputation (section 3.2.3: every RMSNorm and the MLA
        up-projections), as Megatron-Core runs it (recompute_modules "layernorm" and
        "mla_up_proj"): each recomputed part keeps its inputs, and its outputs are freed
        once their consumers have run (``discarded``)."""
        b, s, _ = x.shape
        xn = checkpoint(self.n1, x, use_reentrant=False)
        q_a, kv_a = self.wq_a(xn), self.wkv_a(xn)
        discarded(xn)
        q, k, v = checkpoint(self.up_projections, q_a, kv_a, use_reentrant=False)
        o = FlashAttention.apply(q, k, v)
        discarded(q, k, v)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, self.heads * self.v))
        yn = checkpoint(self.n2, x, use_reentrant=False)
        gu = self.mlp.w13(yn)
        discarded(yn)
        return x + self.mlp.w2(FusedSwiGLU.apply(gu))


def discarded(*tensors):
    """Megatron-Core's CheckpointWithoutOutput.discard_output_and_register_recompute: the
    outputs' storage is freed after the forward has used them, and refilled by the
    recomputation before the backward reads them."""
    for t in tensors:
        t.untyped_storage().resize_(0)


# --------------------------------------------------------------------------------------
# sequence parallelism (Megatron-Core): one rank of a tensor group of ``tp``


class GatheredLinear(torch.autograd.Function):
    """Megatron-Core's column-parallel linear under sequence parallelism
    (LinearWithGradAccumulationAndAsyncCommunication): all-gathers the sequence shard,
    multiplies, and saves the shard only, all-gathering it again in the backward
    (Korthikanti et al. 2022, section 4.2.2)."""

    @staticmethod
    def forward(ctx, x, w, tp):  # x: [b, s/tp, h]
        ctx.save_for_backward(x, w)
        return torch.cat([x] * tp, dim=1) @ w.t()

    @staticmethod
    def backward(ctx, g):  # pragma: no cover
        return None, None, None


class Column(nn.Module):
    def __init__(self, h, out, tp):
        super().__init__()
        self.tp = tp
        self.weight = nn.Parameter(torch.randn(out, h, dtype=DT) * h**-0.5)

    def forward(self, x):
        return GatheredLinear.apply(x, self.weight, self.tp)


class Row(nn.Module):
    """Row-parallel linear and the reduce-scatter of its output over the sequence."""

    def __init__(self, inp, h, tp):
        super().__init__()
        self.tp = tp
        self.lin = nn.Linear(inp, h, bias=False, dtype=DT)

    def forward(self, x):  # x: [b, s, inp]
        y = self.lin(x)
        return y[:, : y.shape[1] // self.tp].contiguous()


class LlamaSPBlock(nn.Module):
    """A fused Llama block on one rank of ``tp`` with sequence parallelism: norms and
    residuals on [b, s/tp, h], attention and the MLP on the whole sequence with heads/tp,
    kv_heads/tp and ffn/tp."""

    def __init__(self, h, heads, kv_heads, ffn, tp):
        super().__init__()
        self.heads, self.kv, self.d = heads // tp, kv_heads // tp, h // heads
        self.n1, self.n2 = Norm(h, True), Norm(h, True)
        self.wqkv = Column(h, (self.heads + 2 * self.kv) * self.d, tp)
        self.wo = Row(self.heads * self.d, h, tp)
        self.w13 = Column(h, 2 * (ffn // tp), tp)
        self.w2 = Row(ffn // tp, h, tp)
        ang = rotary_tables(4096, self.d)
        self.register_buffer("cos", ang.cos().to(DT)[:, None])
        self.register_buffer("sin", ang.sin().to(DT)[:, None])

    def rotate(self, x):
        s = x.shape[1]
        return FusedRotary.apply(x, self.cos[:s], self.sin[:s])

    def attention(self, xn):
        qkv = self.wqkv(xn)
        b, s, _ = qkv.shape
        q, k, v = qkv.split([self.heads * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = self.rotate(q.view(b, s, self.heads, self.d))
        k = self.rotate(k.view(b, s, self.kv, self.d))
        v = v.view(b, s, self.kv, self.d)
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
        )
        return self.wo(o.transpose(1, 2).reshape(b, s, self.heads * self.d))

    def forward(self, x):  # x: [b, s/tp, h]
        x = x + self.attention(self.n1(x))
        return x + self.w2(FusedSwiGLU.apply(self.w13(self.n2(x))))


# --------------------------------------------------------------------------------------
# context parallelism: one rank of a context group of ``cp``


class ContextAttention(torch.autograd.Function):
    """Attention of the local queries over the whole sequence's keys and values, keeping
    only the local k and v: Megatron-Core's AttnFuncWithCPAndKVP2P and PyTorch's
    context_parallel pass K/V around the group again in the backward rather than keep
    what they received, so the saved set is flash attention's on the local shard."""

    @staticmethod
    def forward(ctx, q, k, v, cp):  # [b, heads, s/cp, d]
        with torch.no_grad():
            rep = q.shape[1] // k.shape[1]  # grouped-query heads read each kv head in place
            kf = torch.cat([k] * cp, dim=2).float().repeat_interleave(rep, dim=1)
            vf = torch.cat([v] * cp, dim=2).float().repeat_interleave(rep, dim=1)
            scores = (q.float() @ kf.transpose(-1, -2)) / math.sqrt(q.shape[-1])
            lse = torch.logsumexp(scores, dim=-1)
            out = _as_flash_lays_out((torch.softmax(scores, dim=-1) @ vf).to(q.dtype))
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):  # pragma: no cover
        return None, None, None, None


class LlamaCPBlock(nn.Module):
    """A fused Llama block on one rank of ``cp``: everything on the local s/cp tokens, the
    attention over the whole sequence."""

    def __init__(self, h, heads, kv_heads, ffn, cp):
        super().__init__()
        self.heads, self.kv, self.d, self.cp = heads, kv_heads, h // heads, cp
        self.n1, self.n2 = Norm(h, True), Norm(h, True)
        self.wqkv = nn.Linear(h, (heads + 2 * kv_heads) * self.d, bias=False, dtype=DT)
        self.wo = nn.Linear(heads * self.d, h, bias=False, dtype=DT)
        self.mlp = SwiGLU(h, ffn, True)
        ang = rotary_tables(4096, self.d)
        self.register_buffer("cos", ang.cos().to(DT)[:, None])
        self.register_buffer("sin", ang.sin().to(DT)[:, None])

    def attention(self, xn):
        b, s, _ = xn.shape
        q, k, v = self.wqkv(xn).split([self.heads * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = FusedRotary.apply(q.view(b, s, self.heads, self.d), self.cos[:s], self.sin[:s])
        k = FusedRotary.apply(k.view(b, s, self.kv, self.d), self.cos[:s], self.sin[:s])
        v = v.view(b, s, self.kv, self.d)
        o = ContextAttention.apply(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.cp)
        return self.wo(o.transpose(1, 2).reshape(b, s, self.heads * self.d))

    def forward(self, x):  # x: [b, s/cp, h]
        x = x + self.attention(self.n1(x))
        return x + self.mlp(self.n2(x))
