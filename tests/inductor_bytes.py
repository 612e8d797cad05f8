"""The bytes Inductor's own scheduler assigns to each kernel of a torch.compile'd
torchtitan Llama block (bf16, CPU, small shapes), forward graph and backward graph apart.

torchtitan 9dec370 compiles each TransformerBlock on its own (parallelize_llama.py
``apply_compile``: ``torch.compile(block, fullgraph=True)``), so the block here is
tests/torch_blocks.py's ``TitanBlock`` compiled the same way. AOTAutograd hands Inductor
a forward and a backward graph; for each, Inductor's scheduler lists its kernels
(``SchedulerNode``s, fused or not) and its extern calls, and
``get_read_write_buffer_accesses`` gives the bytes each reads and writes, every buffer
once (what ``torch._inductor.metrics.num_bytes_accessed`` adds up under the
``inductor_metrics`` log). ``GraphLowering.count_bytes`` is wrapped to read them while
the graph is still being lowered.

Kernels are sorted as in tests/torch_bytes.py: ``matmul`` (extern multiplies and
scaled-dot-product attention, and the CPU attention kernel's own layout copies, priced
elsewhere in pipesim), ``view`` (extern calls that only reinterpret a buffer:
``view_as_complex``, ``view_as_real``, ``slice``, ``_conj``: they move nothing) and
``memory``: Inductor's generated kernels and the extern fallbacks that compute (the
rotary's complex multiply: Inductor generates no code for complex tensors on any device,
lowering.py ``unsupported_input_tensor``). Each kernel is labelled by the lines of
``TitanBlock`` its operations were traced from (their FX nodes' stack traces); a kernel
fused across parts takes the first of ``LABELS`` among them.

``per_token`` takes a batch of two sequences less a batch of one, per token, as
tests/torch_bytes.py does: the weights, the norms' weight gradients and the rotary
table drop out.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import defaultdict

import torch

from compiled_saved import OpCheckpointed
from torch_blocks import DT, TitanBlock

#: a label for the lines of TitanBlock (and EagerRMSNorm) a kernel's operations came
#: from, first match wins; "attention" marks kernels that serve the attention call alone
LABELS = (
    ("view_as_", "rotary"),
    ("expand(b, s, self.kv", "repeat_kv"),
    ("F.silu", "swiglu"),
    ("torch.rsqrt", "norm"),
    ("x.float()", "norm"),
    ("x + ", "residual"),
    ("scaled_dot_product_attention", "attention"),
)
VIEWS = ("view_as_complex", "view_as_real", "slice", "_conj")
MATMULS = ("mm", "addmm", "bmm", "scaled_dot_product")
LINE = re.compile(r'torch_blocks\.py", line \d+, in \w+\n\s+(.*)')


def _origins(node):
    for sub in node.get_nodes():
        for o in getattr(sub.node, "origins", ()) if sub.node is not None else ():
            if o.op == "call_function":
                yield o


def label(node) -> str:
    """The part of the block a kernel computes (``LABELS``), from its FX nodes' source lines."""
    lines = set()
    for o in _origins(node):
        found = LINE.findall(o.meta.get("stack_trace") or "")
        if found:
            lines.add(found[-1])
    for needle, name in LABELS:
        if any(needle in line for line in lines):
            return name
    return "other"


def kind(node) -> str:
    from torch._inductor.scheduler import ExternKernelSchedulerNode

    if not isinstance(node, ExternKernelSchedulerNode):
        return "memory"
    kernel = str(getattr(node.node, "python_kernel_name", "") or getattr(node.node, "op_overload", ""))
    if any(part.lstrip("_").startswith(MATMULS) for part in kernel.split(".")):
        return "matmul"
    if "rng_state" in kernel and any("scaled_dot_product" in str((o.target, *o.args[:2])) for o in _origins(node)):
        # under a full checkpoint the partitioner wraps attention (an op that may draw
        # random numbers) in run_and_save_rng_state forward, run_with_rng_state when recomputed
        return "matmul"
    if any(v in kernel for v in VIEWS) or not node.get_read_write_buffer_accesses(False, True):
        return "view"
    return "memory"


@contextlib.contextmanager
def recording():
    """Yields a list that gets, for each graph Inductor compiles, a list of (kind, label,
    bytes read, bytes written) for its kernels."""
    import torch._inductor.compile_fx as compile_fx
    from torch._inductor.graph import GraphLowering

    graphs: list[list[tuple[str, str, int, int]]] = []
    original = GraphLowering.count_bytes

    def count_bytes(self):
        rows = []
        for node in self.scheduler.nodes:
            read = sum(node.get_read_write_buffer_accesses(True, False).values())
            written = sum(node.get_read_write_buffer_accesses(False, True).values())
            k = kind(node)
            lab = label(node)
            rows.append(("matmul" if k == "memory" and lab == "attention" else k, lab, read, written))
        graphs.append(rows)
        return original(self)

    log = compile_fx.inductor_metrics_log  # count_bytes runs only with it on
    level, propagate = log.level, log.propagate
    null = logging.NullHandler()
    log.setLevel(logging.INFO)
    log.propagate = False
    log.addHandler(null)
    GraphLowering.count_bytes = count_bytes
    try:
        with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
            yield graphs
    finally:
        GraphLowering.count_bytes = original
        log.setLevel(level)
        log.propagate = propagate
        log.removeHandler(null)


def count_block(h: int, heads: int, kv_heads: int, ffn: int, batch: int, seq: int, ac: str = "none"):
    """Kernels of the compiled block's forward graph and backward graph on [batch, seq, h];
    ``ac`` "op" checkpoints it as torchtitan's selective op AC does, "full" as its full AC
    does (the backward graph then holds the recomputation)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = OpCheckpointed(h, heads, kv_heads, ffn) if ac == "op" else TitanBlock(h, heads, kv_heads, ffn, ac=ac)
    block = torch.compile(block, fullgraph=True)
    x = torch.randn(batch, seq, h, dtype=DT, requires_grad=True)
    with recording() as graphs:
        y = block(x)
        y.backward(torch.randn_like(y))
    torch._dynamo.reset()
    assert len(graphs) == 2, f"expected a forward and a backward graph, Inductor compiled {len(graphs)}"
    return {"forward": graphs[0], "backward": graphs[1]}


def totals(graphs, what: str = "memory") -> dict[tuple[str, str], int]:
    """Bytes read plus written by (phase, label), for kernels of one kind."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for phase, rows in graphs.items():
        for k, lab, read, written in rows:
            if k == what:
                out[phase, lab] += read + written
    return dict(out)


def per_token(h: int, heads: int, kv_heads: int, ffn: int, seq: int = 8, ac: str = "none") -> dict[tuple[str, str], float]:
    """Memory-bound bytes per token by (phase, label): a batch of two sequences less a
    batch of one, over one sequence's tokens."""
    one, two = (totals(count_block(h, heads, kv_heads, ffn, b, seq, ac)) for b in (1, 2))
    return {key: (two.get(key, 0) - one.get(key, 0)) / seq for key in one.keys() | two.keys()}


#: under checkpointing the recomputed rotary and repeat_kv kernels carry each other's
#: source lines (and the CPU attention's small copy of its softmax statistics, 4 bytes a
#: head and token, carries theirs), so they are held together
JOINED = {"repeat_kv": "rotary"}


def recomputed_per_token(plain: dict, checkpointed: dict) -> dict[str, float]:
    """Bytes a token a checkpointed block's backward moves beyond the plain block's, by
    label (``JOINED``): its recomputation as Inductor fused it (``per_token`` of each)."""
    out: dict[str, float] = defaultdict(float)
    for counted, sign in ((checkpointed, 1), (plain, -1)):
        for (phase, lab), b in counted.items():
            if phase == "backward":
                out[JOINED.get(lab, lab)] += sign * b
    return {lab: b for lab, b in out.items() if b}
