"""The bytes PyTorch's own kernels read and write in a torchtitan eager Llama block,
counted op by op under a ``TorchDispatchMode`` (bf16, CPU, small shapes).

Each aten op the block's forward and backward dispatch is one kernel on the GPU, and it
moves its tensor inputs (each storage once, broadcast dimensions once) and its outputs.
Ops are sorted into three kinds: ``matmul`` (matrix multiplies and scaled-dot-product
attention, priced elsewhere in pipesim), ``view`` (their outputs alias an input: nothing
moves) and ``memory`` (the element-wise and reduction kernels ``elementwise_bytes``
prices). Each op is labelled with the part of the block that ran it (``TitanBlock``'s
``mark``); a backward op carries the label of the forward op whose autograd node runs it
(matched by the node's sequence number), and the engine's own sums of two gradients of
one tensor, which run between nodes, are labelled "gradient sums".

``per_token`` counts a batch of one and of two sequences and takes the difference per
token: what stays (the norm weights, the weight gradients' final sums, the rotary table
of one sequence) does not grow with tokens and drops out.

An op on DTensors is counted on this rank's shards (the kernel each GPU runs), a
functional collective's result as the tensor it wraps, and ops on fake tensors (DTensor's
shape propagation) not at all: no kernel runs them. Where a CUDA kernel touches a tensor
only at the entries an index names, or only for its shape, ``INDEXED`` prices what it
reads and writes instead.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from torch_blocks import DT, TitanBlock

MATMULS = ("mm", "addmm", "bmm", "baddbmm", "scaled_dot_product")


def span(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor view covers (a broadcast dimension once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= size
    return n * t.element_size() if t.numel() else 0


def moved(tensors) -> int:
    """Bytes a kernel moves through these tensors: each storage once, at the widest view."""
    widest: dict[int, int] = {}
    for t in tensors:
        key = t.untyped_storage().data_ptr()
        widest[key] = max(widest.get(key, 0), span(t))
    return sum(widest.values())


def local(t: torch.Tensor) -> torch.Tensor:
    """The tensor a kernel on this rank reads or writes for ``t``."""
    if isinstance(t, DTensor):
        return t._local_tensor
    if isinstance(t, AsyncCollectiveTensor):  # a functional collective's output, waited for
        return t.elem
    return t


def _entries(t: torch.Tensor, at: torch.Tensor) -> int:
    """Bytes of ``t`` a kernel touches at the ``at.numel()`` positions an index names."""
    return at.numel() * t.element_size()


def _index_put(args, out) -> tuple[int, int]:
    self, indices, values = args[0], [i for i in args[1] if i is not None], args[2]
    n = max(i.numel() for i in indices)
    accumulate = len(args) > 3 and args[3]
    return moved([*indices, values]) + (n * self.element_size() if accumulate else 0), n * self.element_size()


def _shape_only(args, out) -> tuple[int, int]:
    return 0, moved(out)


#: (bytes read, bytes written) of the kernels that touch a tensor only at indexed entries
#: or read it for its shape alone, as their CUDA source does (pytorch
#: aten/src/ATen/native/cuda): nll_loss's forward reads ``self`` at each target only and
#: its backward never reads it, filling grad_input with zeros and writing each target's
#: entry (Loss.cu); gather reads ``self`` at the index's entries; index_put_ (no
#: accumulate) writes ``self`` there (Indexing.cu); zeros_like and its kin write a new
#: tensor of their argument's shape (a fill kernel), empty_like only allocates one
INDEXED = {
    **{f"aten.{fill}_like.default": _shape_only for fill in ("zeros", "ones", "full")},
    "aten.empty_like.default": lambda args, out: (0, 0),
    "aten.nll_loss_forward.default": lambda a, out: (moved(a[1:2]) + _entries(a[0], a[1]), moved(out)),
    "aten.nll_loss_backward.default": lambda a, out: (
        moved([a[0], a[2], a[6]]),
        moved(out) + _entries(out[0], a[2]),
    ),
    "aten.gather.default": lambda a, out: (moved(a[2:3]) + _entries(a[0], a[2]), moved(out)),
    "aten.index_put_.default": _index_put,
}


def kind(func, ins, outs) -> str:
    name = func.__name__ if hasattr(func, "__name__") else str(func)
    base = str(func).split(".")[1] if "." in str(func) else name
    if base.lstrip("_").startswith(MATMULS) or "scaled_dot_product" in base:
        return "matmul"
    mutates = func._schema.is_mutable
    in_storages = {t.untyped_storage().data_ptr() for t in ins}
    if not mutates and outs and all(t.untyped_storage().data_ptr() in in_storages for t in outs):
        return "view"  # view, _unsafe_view, detach, transpose, expand...
    return "memory"


class ByteCount(TorchDispatchMode):
    """Logs (phase, label, op, kind, bytes read, bytes written) for every aten op."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[str, str, str, str, int, int]] = []
        self.phase = "forward"
        self.labels: list[str] = []
        self.ranges: list[tuple[int, int, str]] = []  # autograd sequence numbers of each label
        self.applying = False  # inside a node's backward function (not the engine's sums after it)

    def watch(self, root) -> None:
        """Hooks on every node of the graph behind ``root``: the engine sums a tensor's
        gradients after the node that made one of them has returned, with that node
        still current, so only these hooks tell its own kernels from the sums."""
        seen, todo = set(), [root]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            node.register_prehook(self._enter)
            node.register_hook(self._leave)
            todo.extend(n for n, _ in node.next_functions)

    def _enter(self, grad_outputs):
        self.applying = True

    def _leave(self, grad_inputs, grad_outputs):
        self.applying = False

    @contextlib.contextmanager
    def mark(self, label: str):
        start = torch._C._autograd._get_sequence_nr()
        self.labels.append(label)
        try:
            yield
        finally:
            self.labels.pop()
            self.ranges.append((start, torch._C._autograd._get_sequence_nr(), label))

    def label(self) -> str:
        if self.phase == "forward":
            return self.labels[-1] if self.labels else "other"
        node = torch._C._current_autograd_node()
        if node is None or not self.applying:
            return "gradient sums"  # the engine adding two gradients of one tensor
        seq = node._sequence_nr()
        return next((lab for lo, hi, lab in self.ranges if lo <= seq < hi), "other")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [local(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [local(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if any(isinstance(t, FakeTensor) for t in ins + outs):
            return out  # shape propagation: no kernel
        op = str(func)
        if op in INDEXED:
            read, written = INDEXED[op](tree_map(lambda a: local(a) if isinstance(a, torch.Tensor) else a, list(args)), outs)
        else:
            read, written = moved(ins), moved(outs)
        self.rows.append((self.phase, self.label(), op, kind(func, ins, outs), read, written))
        return out


def count_block(h: int, heads: int, kv_heads: int, ffn: int, batch: int, seq: int) -> ByteCount:
    """One forward and backward of torchtitan's eager block on [batch, seq, h], logged."""
    torch.manual_seed(0)
    return run_logged(TitanBlock(h, heads, kv_heads, ffn), batch, seq, h)


def run_logged(block, batch: int, seq: int, h: int) -> ByteCount:
    """One forward and backward of ``block`` (whose ``mark`` labels its parts) on a random
    [batch, seq, h] input and output gradient, every aten op logged."""
    x = torch.randn(batch, seq, h, dtype=DT, requires_grad=True)
    grad = torch.randn(batch, seq, h, dtype=DT)
    log = ByteCount()
    block.mark = log.mark
    with log:
        y = block(x)
        log.watch(y.grad_fn)
        log.phase = "backward"
        y.backward(grad)
    return log


def totals(log: ByteCount, what: str = "memory") -> dict[tuple[str, str], int]:
    """Bytes read plus written by (phase, label), for ops of one kind."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for phase, label, _op, k, read, written in log.rows:
        if k == what:
            out[phase, label] += read + written
    return dict(out)


def per_token(h: int, heads: int, kv_heads: int, ffn: int, seq: int = 8) -> dict[tuple[str, str], float]:
    """Memory-bound bytes per token by (phase, label): a batch of two sequences less a
    batch of one, over one sequence's tokens."""
    one, two = (totals(count_block(h, heads, kv_heads, ffn, b, seq)) for b in (1, 2))
    return {key: (two.get(key, 0) - one.get(key, 0)) / seq for key in one.keys() | two.keys()}
