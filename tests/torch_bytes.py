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
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

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
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.rows.append((self.phase, self.label(), str(func), kind(func, ins, outs), moved(ins), moved(outs)))
        return out


def count_block(h: int, heads: int, kv_heads: int, ffn: int, batch: int, seq: int) -> ByteCount:
    """One forward and backward of torchtitan's eager block on [batch, seq, h], logged."""
    torch.manual_seed(0)
    block = TitanBlock(h, heads, kv_heads, ffn)
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
