"""Real PyTorch transformer blocks, small, in bf16 on the CPU, and a counter of the bytes
autograd keeps for their backward. The activation-memory tests and
benchmarks/activation_memory.py hold pipesim's formula against what these measure.

The blocks are written the way the frameworks pipesim models write them:
- ``gpt``: Megatron-LM 2021's layer: LayerNorm, fused QKV, unfused attention as
  ``baddbmm`` / softmax / dropout / ``bmm`` on the [s, b*heads, d] layout (no copies),
  a bias-dropout-add after each block, GELU;
- ``llama``: RMSNorm, grouped-query attention with rotary embeddings and
  ``scaled_dot_product_attention`` (its CPU kernel is a flash kernel: it keeps q, k, v,
  the output and a fp32 logsumexp), SwiGLU; ``fused=True`` uses autograd Functions that
  keep what the fused kernels keep (TransformerEngine's RMSNorm keeps its input and
  rsigma; fused rotary keeps nothing; a fused SwiGLU keeps its gate and up input),
  ``fused=False`` is torchtitan's eager code (fp32 RMSNorm, complex rotary, repeat_kv,
  ``silu(w1 x) * w3 x``);
- ``moe``: the Llama block's attention and a top-k router over SwiGLU experts, tokens
  permuted to their experts and combined with the routing weights (fp32 softmax, as
  Mixtral and DeepSeek route).
Recomputation: ``selective`` checkpoints the attention core, ``full`` the whole block
(torch.utils.checkpoint, non-reentrant).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

DT = torch.bfloat16


def dropout(x, p):
    """Dropout as CUDA runs it: ``native_dropout`` keeps a bool mask (F.dropout on the CPU
    keeps a mask of the input's dtype instead)."""
    return torch.native_dropout(x, p, True)[0] if p else x


def saved_bytes(run, owned=()) -> int:
    """Bytes of the distinct storages autograd saves while ``run()`` executes, leaving out
    the storages of ``owned`` tensors (parameters and buffers: not activations); a saved
    DTensor counts as its local tensor (what this rank holds)."""
    from torch.distributed.tensor import DTensor

    skip = {t.untyped_storage().data_ptr() for t in owned}
    seen: dict[int, torch.UntypedStorage] = {}

    def pack(t):
        s = (t._local_tensor if isinstance(t, DTensor) else t).untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    # sized when the forward is over: a storage freed after its consumers ran (Megatron's
    # CheckpointWithoutOutput) holds nothing by then
    return sum(s.nbytes() for s in seen.values())


@contextlib.contextmanager
def fake_mesh(size: int):
    """A device mesh of ``size`` ranks on the CPU over a fake process group
    (``torch.testing._internal.distributed.fake_pg``): every collective gives its real
    output shape without other ranks. Torn down on leaving."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield init_device_mesh("cpu", (size,))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def measure(block: nn.Module, x: torch.Tensor) -> int:
    """Bytes one forward of ``block`` on ``x`` keeps for its backward."""
    x = x.detach().requires_grad_(True)
    owned = [*block.parameters(), *block.buffers()]
    return saved_bytes(lambda: block(x), owned)


# --------------------------------------------------------------------------------------
# fused kernels' save sets


class FusedRMSNorm(torch.autograd.Function):
    """Keeps the input and the fp32 reciprocal RMS per token (TransformerEngine rmsnorm)."""

    @staticmethod
    def forward(ctx, x, w):
        rs = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        ctx.save_for_backward(x, w, rs)
        return (x.float() * rs).to(x.dtype) * w

    @staticmethod
    def backward(ctx, g):  # pragma: no cover - only the forward's saves are measured
        x, w, rs = ctx.saved_tensors
        return g, None


class FusedRotary(torch.autograd.Function):
    """Fused rotary embedding: the backward rotates the gradient back with the cached
    angles, so nothing of the input is kept."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    @staticmethod
    def backward(ctx, g):  # pragma: no cover
        return g, None, None


class FusedSwiGLU(torch.autograd.Function):
    """Fused SiLU(gate) * up: keeps its [gate, up] input only (Megatron-Core's
    bias_swiglu_impl, TransformerEngine's swiglu)."""

    @staticmethod
    def forward(ctx, gu):
        ctx.save_for_backward(gu)
        g, u = gu.chunk(2, dim=-1)
        return F.silu(g) * u

    @staticmethod
    def backward(ctx, g):  # pragma: no cover
        return torch.cat((g, g), dim=-1)


class WeightedSwiGLU(torch.autograd.Function):
    """Megatron-Core's grouped experts' activation_func_with_probs, fused: SiLU(gate) * up
    times each token copy's routing weight; keeps its [gate, up] input and the weights."""

    @staticmethod
    def forward(ctx, gu, w):
        ctx.save_for_backward(gu, w)
        g, u = gu.chunk(2, dim=-1)
        return F.silu(g) * u * w

    @staticmethod
    def backward(ctx, g):  # pragma: no cover
        return torch.cat((g, g), dim=-1), None


class EagerRMSNorm(nn.Module):
    """torchtitan's RMSNorm without torch.compile: fp32 math, then the weight."""

    def __init__(self, h):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h, dtype=DT))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).type_as(x) * self.weight


class Norm(nn.Module):
    def __init__(self, h, fused):
        super().__init__()
        self.fused = fused
        self.eager = None if fused else EagerRMSNorm(h)
        self.weight = nn.Parameter(torch.ones(h, dtype=DT))

    def forward(self, x):
        return FusedRMSNorm.apply(x, self.weight) if self.fused else self.eager(x)


# --------------------------------------------------------------------------------------
# blocks


class GPTBlock(nn.Module):
    """Megatron-LM 2021's ParallelTransformerLayer on one tensor rank: ``heads`` and
    ``ffn`` are that rank's shares."""

    def __init__(self, h, heads, ffn, recompute="none", p=0.1, head_dim=0):
        super().__init__()
        self.heads, self.d, self.p, self.recompute = heads, head_dim or h // heads, p, recompute
        self.ln1, self.ln2 = nn.LayerNorm(h, dtype=DT), nn.LayerNorm(h, dtype=DT)
        self.qkv = nn.Linear(h, 3 * heads * self.d, dtype=DT)
        self.proj = nn.Linear(heads * self.d, h, dtype=DT)
        self.fc1, self.fc2 = nn.Linear(h, ffn, dtype=DT), nn.Linear(ffn, h, dtype=DT)

    def core(self, qkv):
        s, b, _ = qkv.shape
        q, k, v = qkv.view(s, b * self.heads, 3 * self.d).split(self.d, dim=-1)
        mask = torch.full((s, s), -1e4, dtype=DT).triu(1)
        scores = torch.baddbmm(
            mask.expand(b * self.heads, s, s), q.transpose(0, 1), k.permute(1, 2, 0), alpha=1 / math.sqrt(self.d)
        )
        probs = dropout(torch.softmax(scores, dim=-1), self.p)
        return torch.bmm(probs, v.transpose(0, 1)).transpose(0, 1).reshape(s, b, self.heads * self.d)

    def layer(self, x):
        qkv = self.qkv(self.ln1(x))
        ctx = checkpoint(self.core, qkv, use_reentrant=False) if self.recompute == "selective" else self.core(qkv)
        x = x + dropout(self.proj(ctx), self.p)
        return x + dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p)

    def forward(self, x):  # x: [s, b, h]
        return checkpoint(self.layer, x, use_reentrant=False) if self.recompute == "full" else self.layer(x)


def rotary_tables(s, d):
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    ang = torch.outer(torch.arange(s).float(), inv)
    return ang


class LlamaAttention(nn.Module):
    def __init__(self, h, heads, kv_heads, head_dim, fused, selective=False, max_seq=4096):
        super().__init__()
        self.heads, self.kv, self.d, self.fused, self.selective = heads, kv_heads, head_dim, fused, selective
        self.register_buffer("angles", rotary_tables(max_seq, head_dim))  # torchtitan's freqs_cis
        self.register_buffer("cos", self.angles.cos().to(DT)[:, None])
        self.register_buffer("sin", self.angles.sin().to(DT)[:, None])
        self.register_buffer("polar", torch.polar(torch.ones_like(self.angles), self.angles)[:, None])
        self.wqkv = nn.Linear(h, (heads + 2 * kv_heads) * head_dim, bias=False, dtype=DT)
        self.wo = nn.Linear(heads * head_dim, h, bias=False, dtype=DT)

    def rotate(self, x):
        s = x.shape[1]
        if self.fused:
            return FusedRotary.apply(x, self.cos[:s], self.sin[:s])
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))  # torchtitan apply_rotary_emb
        return torch.view_as_real(xc * self.polar[:s]).flatten(-2).type_as(x)

    def core(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.fused)

    def forward(self, xn):  # xn: [b, s, h]
        b, s, _ = xn.shape
        q, k, v = self.wqkv(xn).split([self.heads * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = self.rotate(q.view(b, s, self.heads, self.d))
        k = self.rotate(k.view(b, s, self.kv, self.d))
        v = v.view(b, s, self.kv, self.d)
        rep = self.heads // self.kv
        if (
            not self.fused
        ):  # torchtitan's repeat_kv copies k and v out to every query head (a GQA-aware kernel reads them in place)
            k = k[:, :, :, None].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
            v = v[:, :, :, None].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        o = checkpoint(self.core, q, k, v, use_reentrant=False) if self.selective else self.core(q, k, v)
        return self.wo(o.transpose(1, 2).reshape(b, s, self.heads * self.d))


class SwiGLU(nn.Module):
    def __init__(self, h, ffn, fused):
        super().__init__()
        self.fused = fused
        self.w13 = nn.Linear(h, 2 * ffn, bias=False, dtype=DT)
        self.w2 = nn.Linear(ffn, h, bias=False, dtype=DT)

    def forward(self, x):
        gu = self.w13(x)
        if self.fused:
            return self.w2(FusedSwiGLU.apply(gu))
        g, u = gu.chunk(2, dim=-1)
        return self.w2(F.silu(g) * u)


class MoE(nn.Module):
    """Top-k routing over SwiGLU experts: fp32 softmax, top-k, weights renormalised,
    tokens gathered into expert order (index_select), experts run, outputs scaled by
    their weights and summed back to their tokens (scatter_add), as Megatron-Core's
    unfused permute and unpermute do."""

    def __init__(self, h, experts, ffn, top_k, fused, weighted_act=False):
        super().__init__()
        self.k, self.weighted_act = top_k, weighted_act
        self.router = nn.Linear(h, experts, bias=False, dtype=DT)
        self.experts = nn.ModuleList(SwiGLU(h, ffn, fused) for _ in range(experts))

    def forward(self, x):  # x: [b, s, h]
        flat = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(flat).float(), dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        w = (w / w.sum(-1, keepdim=True)).to(DT)
        order = idx.flatten().argsort(stable=True)
        token = order // self.k
        counts = torch.bincount(idx.flatten(), minlength=len(self.experts)).tolist()
        routed = flat.index_select(0, token)
        if self.weighted_act:  # the weights go into each expert's activation; the combine only adds
            copies = zip(self.experts, routed.split(counts), w.flatten()[order, None].split(counts))
            y = torch.cat([e.w2(WeightedSwiGLU.apply(e.w13(c), cw)) for e, c, cw in copies if c.shape[0]])
        else:
            outs = [e(chunk) for e, chunk in zip(self.experts, routed.split(counts)) if chunk.shape[0]]
            y = torch.cat(outs) * w.flatten()[order, None]
        return torch.zeros_like(flat).scatter_add(0, token[:, None].expand_as(y), y).view_as(x)


class LlamaBlock(nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, fused=True, recompute="none", moe=None, head_dim=0, weighted_act=False):
        super().__init__()
        self.recompute = recompute
        self.n1, self.n2 = Norm(h, fused), Norm(h, fused)
        self.attn = LlamaAttention(h, heads, kv_heads, head_dim or h // heads, fused, recompute == "selective")
        self.mlp = MoE(h, *moe, fused, weighted_act) if moe else SwiGLU(h, ffn, fused)

    def layer(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))

    def forward(self, x):
        return checkpoint(self.layer, x, use_reentrant=False) if self.recompute == "full" else self.layer(x)


class Head(nn.Module):
    """Final RMSNorm, output projection and cross-entropy; ``fp32_loss`` upcasts the
    logits first (torchtitan's ``cross_entropy(pred.float())``), else the loss runs in
    bf16 (a fused loss keeps one bf16 copy of the softmax). ``fused_norm`` false: the
    eager RMSNorm torchtitan's final norm runs as (it compiles the blocks only)."""

    def __init__(self, h, vocab, fp32_loss=True, fused_norm=True):
        super().__init__()
        self.norm = Norm(h, fused_norm)
        self.out = nn.Linear(h, vocab, bias=False, dtype=DT)
        self.fp32 = fp32_loss

    def forward(self, x):
        logits = self.out(self.norm(x)).flatten(0, 1)
        target = torch.zeros(logits.shape[0], dtype=torch.long)
        return F.cross_entropy(logits.float() if self.fp32 else logits, target)


# --------------------------------------------------------------------------------------
# torchtitan's Llama block and its activation checkpointing (pytorch/torchtitan 9dec370,
# the commit its docs/performance.md memory figures were measured at)


def titan_policy(extra_ops=()):
    """A policy as torchtitan's selective op AC builds it (parallelize_llama.py at 9dec370):
    keep the outputs of the ops in its save list (matrix multiplies, flash and efficient
    SDPA, the functional reduce-scatter, abs and max for float8 scales) except every second
    matrix multiply of the forward, counted from one; recompute everything else. CPU runs
    SDPA as ``_scaled_dot_product_flash_attention_for_cpu``, which keeps what the CUDA
    flash kernel keeps (output, fp32 logsumexp): ``extra_ops`` adds it to the list."""
    from torch.utils.checkpoint import CheckpointPolicy

    aten = torch.ops.aten
    save = {
        aten.mm.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        aten.abs.default,
        aten.max.default,
        *extra_ops,
    }
    count = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == aten.mm.default:
            count[mode] += 1
        keep = func in save and not (func == aten.mm.default and count[mode] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


class SACMeter:
    """Selective checkpointing that also records the storages it caches: what an op-level
    policy keeps lives in the checkpoint's cache, not in autograd's saved tensors, so
    ``saved_bytes`` does not see it. Each forward builds a fresh policy, as torchtitan's
    context_fn does (its mm count starts again at every block)."""

    def __init__(self):
        self.cached: dict[int, int] = {}

    def context(self):
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

        inner = titan_policy((torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,))

        def policy(ctx, func, *args, **kwargs):
            decision = inner(ctx, func, *args, **kwargs)
            if decision == CheckpointPolicy.MUST_SAVE and not ctx.is_recompute:
                outs = ctx.op_output if isinstance(ctx.op_output, (tuple, list)) else (ctx.op_output,)
                for t in outs:
                    if isinstance(t, torch.Tensor):
                        self.cached[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return decision

        return create_selective_checkpoint_contexts(policy)


def _unmarked(label):
    return contextlib.nullcontext()


class TitanBlock(nn.Module):
    """torchtitan's eager TransformerBlock (llama/model.py): RMSNorm in fp32, separate wq,
    wk and wv, complex rotary, repeat_kv, SDPA, wo; w2(silu(w1 x) * w3 x). ``ac`` is
    torchtitan's mode for this block: "none", "full" or "op" (selective op). ``mark`` is
    a context manager factory each named part of the block runs under (torch_bytes.py
    labels the kernels by it); by default it does nothing."""

    def __init__(self, h, heads, kv_heads, ffn, ac="none", meter: SACMeter | None = None):
        super().__init__()
        self.ac, self.meter, self.mark = ac, meter, _unmarked
        self.heads, self.kv, self.d = heads, kv_heads, h // heads
        self.n1, self.n2 = EagerRMSNorm(h), EagerRMSNorm(h)
        self.wq = nn.Linear(h, heads * self.d, bias=False, dtype=DT)
        self.wk = nn.Linear(h, kv_heads * self.d, bias=False, dtype=DT)
        self.wv = nn.Linear(h, kv_heads * self.d, bias=False, dtype=DT)
        self.wo = nn.Linear(heads * self.d, h, bias=False, dtype=DT)
        self.w1 = nn.Linear(h, ffn, bias=False, dtype=DT)
        self.w3 = nn.Linear(h, ffn, bias=False, dtype=DT)
        self.w2 = nn.Linear(ffn, h, bias=False, dtype=DT)
        ang = rotary_tables(4096, self.d)
        self.register_buffer("polar", torch.polar(torch.ones_like(ang), ang)[:, None])

    def rotate(self, x):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * self.polar[: x.shape[1]]).flatten(-2).type_as(x)

    def attention(self, xn):
        b, s, _ = xn.shape
        q, k = self.wq(xn).view(b, s, self.heads, self.d), self.wk(xn).view(b, s, self.kv, self.d)
        with self.mark("rotary"):
            q, k = self.rotate(q), self.rotate(k)
        v = self.wv(xn).view(b, s, self.kv, self.d)
        rep = self.heads // self.kv
        if rep > 1:  # repeat_kv returns k and v untouched when there is nothing to repeat
            with self.mark("repeat_kv"):
                k = k[:, :, :, None].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
                v = v[:, :, :, None].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        with self.mark("attention output"):  # torchtitan's .transpose(1, 2).contiguous()
            o = o.transpose(1, 2).contiguous().view(b, s, -1)
        return self.wo(o)

    def layer(self, x):
        with self.mark("norm"):
            y = self.n1(x)
        a = self.attention(y)
        with self.mark("residual"):
            x = x + a
        with self.mark("norm"):
            y = self.n2(x)
        g, u = self.w1(y), self.w3(y)
        with self.mark("swiglu"):
            y = F.silu(g) * u
        y = self.w2(y)
        with self.mark("residual"):
            return x + y

    def forward(self, x):
        if self.ac == "full":
            return checkpoint(self.layer, x, use_reentrant=False)
        if self.ac == "op":
            return checkpoint(self.layer, x, use_reentrant=False, context_fn=self.meter.context)
        return self.layer(x)


def measure_titan(blocks: list[TitanBlock], meter: SACMeter, x: torch.Tensor) -> int:
    """Bytes a stack of torchtitan blocks keeps for its backward: autograd's saved tensors
    (a checkpoint saves its inputs through them) and the selective checkpoint's cache,
    distinct storages once, parameters and buffers out."""
    x = x.detach().requires_grad_(True)
    owned = [p for b in blocks for p in (*b.parameters(), *b.buffers())]
    skip = {t.untyped_storage().data_ptr() for t in owned}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    def run():
        y = x
        for b in blocks:
            y = b(y)
        return y

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    kept = seen | {p: n for p, n in meter.cached.items() if p not in skip}
    del out
    return sum(kept.values())
