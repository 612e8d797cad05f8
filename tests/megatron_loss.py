"""Megatron-LM 2021's vocabulary-parallel cross-entropy, as the SC21 launch script ran it
(NVIDIA/Megatron-LM de7dc40f88, August 2021: no --fp16-lm-cross-entropy, so
megatron/model/gpt_model.py hands ``output.float()`` to mpu/cross_entropy.py's
``_VocabParallelCrossEntropy``), written out here for one tensor rank's shard and counted
with tests/torch_bytes.py's ``ByteCount`` (fp16 logits, CPU), as tests/torch_loss.py counts
torchtitan's.

What the function does, read at that commit (lines of mpu/cross_entropy.py):

- forward, in place on the fp32 logits: the row max (31), all-reduced over the tensor
  group (32-34), subtracted (36); the target's logit picked where this rank holds it
  (47-61) and all-reduced; ``exp`` written over the logits (68-69), its row sum (70),
  all-reduced; the loss ``log(sum) - picked`` per token (76); the logits divided by the
  sum (79), kept as the softmax for the backward (80);
- backward, in place on that softmax: one subtracted at each target (97-100), the whole
  multiplied by the loss's gradient (103), then the cast's backward to fp16.

The all-reduces move a number a token; with one rank they are the identity and are left
out. Each count runs two vocabularies at the same tokens; the difference over the added
logits is what a logit costs.
"""

from __future__ import annotations

import torch

from torch_bytes import ByteCount, moved, totals


class VocabShardLoss(torch.autograd.Function):
    """The cross-entropy of one tensor rank's logits shard [tokens, 1, vocab shard] whose
    vocabulary starts at ``start``, computed in place as Megatron-LM 2021 does."""

    @staticmethod
    def forward(ctx, logits, target, start):
        width = logits.size(-1)
        top = torch.max(logits, dim=-1)[0]
        logits.sub_(top.unsqueeze(-1))
        elsewhere = (target < start) | (target >= start + width)
        local = target.clone() - start
        local[elsewhere] = 0
        rows = logits.view(-1, width)
        picked = rows[torch.arange(rows.size(0)), local.view(-1)].clone().view_as(target)
        picked[elsewhere] = 0.0
        torch.exp(logits, out=logits)
        total = logits.sum(dim=-1)
        loss = torch.log(total) - picked
        logits.div_(total.unsqueeze(-1))
        ctx.save_for_backward(logits, elsewhere, local.view(-1))
        return loss

    @staticmethod
    def backward(ctx, grad):
        softmax, elsewhere, local = ctx.saved_tensors
        rows = softmax.view(-1, softmax.size(-1))
        rows[torch.arange(rows.size(0)), local] -= 1.0 - elsewhere.view(-1).float()
        softmax.mul_(grad.unsqueeze(-1))
        return softmax, None, None


class IndexedCount(ByteCount):
    """``ByteCount`` with advanced indexing priced as its CUDA kernel runs it: ``index``
    reads the indices and the entries they name, not the whole tensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) != "aten.index.Tensor":
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **(kwargs or {}))
        indices = [i for i in args[1] if i is not None]
        read = moved(indices) + out.numel() * args[0].element_size()
        self.rows.append((self.phase, "loss", str(func), "memory", read, moved([out])))
        return out


def count_loss(vocab: int, tokens: int) -> ByteCount:
    """One forward and backward of the loss on fp16 logits, with Megatron's mean over the
    tokens after it (pretrain_gpt.py's loss_func), logged op by op."""
    torch.manual_seed(0)
    logits = torch.randn(tokens, 1, vocab, dtype=torch.float16, requires_grad=True)
    target = torch.randint(vocab, (tokens, 1))
    log = IndexedCount()
    with log:
        loss = VocabShardLoss.apply(logits.float(), target, 0).float().mean()
        log.phase = "backward"
        loss.backward()
    return log


def per_logit(vocabs: tuple[int, int], tokens: int) -> dict[str, float]:
    """Memory-bound bytes a logit moves, "forward" and "backward"."""
    small, large = (totals(count_loss(v, tokens)) for v in vocabs)
    out = {"forward": 0.0, "backward": 0.0}
    for key, b in large.items():
        out[key[0]] += (b - small.get(key, 0)) / (tokens * (vocabs[1] - vocabs[0]))
    return out
