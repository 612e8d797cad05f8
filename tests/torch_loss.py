"""torchtitan's cross-entropy run in torch (bf16 logits, CPU), counted three ways: the bytes
its kernels move a logit (tests/torch_bytes.py's ``ByteCount``), what it saves for the
backward (``saved_bytes``) and what the backward holds at its peak (the profiler's
allocation events).

torchtitan at 9dec370 (the commit of its H100 tables) computes the loss in train.py's
``loss_fn`` as ``F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` on the
bf16 logits, eagerly (its ``torch.compile(loss_fn)`` is commented out; only the blocks are
compiled); with tensor parallelism the output projection hands the loss a ``Shard(-1)``
DTensor (parallelize_llama.py: ``use_local_output=not loss_parallel``) and the step runs
under ``loss_parallel``, whose handlers replace log_softmax and nll_loss
(torch/distributed/tensor/parallel/loss.py). Each count runs two vocabularies at the same
tokens: the difference over the added logits is what a logit costs, what a token or a
step costs dropping out. ``mesh``: a (fake) device mesh of the tensor-parallel ranks, or
None for one GPU.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import loss as parallel_loss

from torch_blocks import DT, saved_bytes
from torch_bytes import ByteCount, totals


def titan_loss(pred, labels):
    """torchtitan 9dec370 train.py's loss_fn."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


class ShardCount(ByteCount):
    """``ByteCount`` under loss_parallel: the ops its handlers replace are counted by what
    the handlers run (``handlers_counted``), not as one op on the DTensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if DTensor in types and func in parallel_loss.customized_loss_ops:
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


@contextlib.contextmanager
def handlers_counted(log: ByteCount):
    """loss_parallel's handlers run with ``log`` counting: DTensor calls them below the
    dispatch mode, which would not see their ops on the local shards otherwise."""
    handlers = DTensor._op_dispatcher._custom_op_handlers
    own = {op: handlers[op] for op in parallel_loss.customized_loss_ops}

    def counted(handler):
        def run(*args, **kwargs):
            with log:
                return handler(*args, **kwargs)

        return run

    handlers.update({op: counted(h) for op, h in own.items()})
    try:
        yield
    finally:
        handlers.update(own)


def _parallel(mesh):
    return parallel_loss.loss_parallel() if mesh is not None else contextlib.nullcontext()


def _logits(vocab: int, tokens: int, mesh=None):
    """bf16 logits [1, tokens, vocab] (this rank's Shard(-1) under ``mesh``) and labels."""
    torch.manual_seed(0)
    tp = mesh.size() if mesh is not None else 1
    pred = torch.randn(1, tokens, vocab // tp, dtype=DT)
    if mesh is not None:
        pred = DTensor.from_local(pred, mesh, [Shard(-1)])
    return pred.detach().requires_grad_(), torch.randint(vocab, (1, tokens))


def count_loss(vocab: int, tokens: int, mesh=None) -> ByteCount:
    """One forward and backward of torchtitan's loss, logged op by op."""
    pred, labels = _logits(vocab, tokens, mesh)
    log = ShardCount()
    with _parallel(mesh), handlers_counted(log) if mesh is not None else contextlib.nullcontext(), log:
        loss = titan_loss(pred, labels)
        log.phase = "backward"
        loss.backward()
    return log


def _saved(vocab: int, tokens: int, mesh=None) -> int:
    pred, labels = _logits(vocab, tokens, mesh)
    with _parallel(mesh):
        return saved_bytes(lambda: titan_loss(pred, labels))


def _backward_peak(vocab: int, tokens: int, mesh=None) -> int:
    """Bytes the CPU allocator holds at the backward's peak beyond what was allocated when
    it began (the saved log-softmax among that), from the profiler's allocation events."""
    from torch.profiler import ProfilerActivity, profile

    pred, labels = _logits(vocab, tokens, mesh)
    with _parallel(mesh):
        loss = titan_loss(pred, labels)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            loss.backward()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def per_logit(vocabs: tuple[int, int], tokens: int, mesh=None) -> dict[str, float]:
    """Per logit of this rank's shard: the memory-bound bytes moved "forward" and
    "backward", the bytes "saved" for the backward, and the backward's "peak" beyond them."""
    tp = mesh.size() if mesh is not None else 1
    added = tokens * (vocabs[1] - vocabs[0]) / tp
    small, large = (totals(count_loss(v, tokens, mesh)) for v in vocabs)
    out = {"forward": 0.0, "backward": 0.0}
    for key, b in large.items():
        out[key[0]] += (b - small.get(key, 0)) / added
    for name, measure in (("saved", _saved), ("peak", _backward_peak)):
        out[name] = (measure(vocabs[1], tokens, mesh) - measure(vocabs[0], tokens, mesh)) / added
    return out
