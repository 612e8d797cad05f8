"""torchtitan's cross-entropy as PyTorch runs it: the bytes a logit its kernels move
(``Training.logit_bytes``) and what it keeps for the backward (``activations.head_saved``).

torchtitan at 9dec370 (the commit of its H100 tables) computes the loss in train.py's
``loss_fn`` as ``F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))`` on the
bf16 logits, eagerly (its ``torch.compile(loss_fn)`` is commented out; only the blocks are
compiled); with tensor parallelism the output projection hands the loss a ``Shard(-1)``
DTensor (parallelize_llama.py: ``use_local_output=not loss_parallel``) and the step runs
under ``loss_parallel``, whose handlers replace log_softmax and nll_loss
(torch/distributed/tensor/parallel/loss.py). That line runs here, forward and backward,
under tests/torch_bytes.py's ``ByteCount`` (each op's tensors once; the indexed kernels as
their CUDA source touches them), on two vocabularies at the same tokens: the difference
over the added logits is what a logit costs, what a token or a step costs dropping out.
"""

from __future__ import annotations

import contextlib
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

import torch.nn.functional as F  # noqa: E402
from torch.distributed.tensor import DTensor, Shard  # noqa: E402
from torch.distributed.tensor.parallel import loss as parallel_loss  # noqa: E402

from pipesim.planner.activations import head_saved, loss_transient  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model  # noqa: E402
from pipesim.planner.training import (  # noqa: E402
    TORCHTITAN_LOGIT_BYTES,
    TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES,
    Training,
    torchtitan_loss,
)
from torch_blocks import DT, saved_bytes  # noqa: E402
from torch_bytes import ByteCount, totals  # noqa: E402

TOKENS, VOCABS = 16, (256, 512)
RUNS = Path(__file__).parent.parent / "benchmarks" / "data" / "published_runs.toml"


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


def logits(vocab: int, mesh=None):
    """bf16 logits [1, TOKENS, vocab] (this rank's Shard(-1) under ``mesh``) and labels."""
    torch.manual_seed(0)
    tp = mesh.size() if mesh is not None else 1
    pred = torch.randn(1, TOKENS, vocab // tp, dtype=DT)
    if mesh is not None:
        pred = DTensor.from_local(pred, mesh, [Shard(-1)])
    return pred.detach().requires_grad_(), torch.randint(vocab, (1, TOKENS))


def count_loss(vocab: int, mesh=None) -> ByteCount:
    """One forward and backward of torchtitan's loss, logged op by op."""
    pred, labels = logits(vocab, mesh)
    log = ShardCount()
    parallel = mesh is not None
    with contextlib.ExitStack() as stack:
        if parallel:
            stack.enter_context(parallel_loss.loss_parallel())
            stack.enter_context(handlers_counted(log))
        with log:
            loss = titan_loss(pred, labels)
            log.phase = "backward"
            loss.backward()
    return log


def per_logit(mesh=None) -> dict[str, float]:
    """Memory-bound bytes per logit of this rank's shard, by phase."""
    tp = mesh.size() if mesh is not None else 1
    small, large = (totals(count_loss(v, mesh)) for v in VOCABS)
    added = TOKENS * (VOCABS[1] - VOCABS[0]) / tp
    out = {"forward": 0.0, "backward": 0.0}
    for (phase, _), b in large.items():
        out[phase] += (b - small.get((phase, _), 0)) / added
    return out


def test_eager_loss_moves_torchtitans_logit_bytes():
    measured = per_logit()
    assert measured["forward"] + measured["backward"] == TORCHTITAN_LOGIT_BYTES, measured
    # the backward is more than the forward: nll_loss's backward fills a dense fp32
    # gradient and the cast back to bf16 is a kernel of its own
    assert measured["backward"] > measured["forward"]
    ops = {op for phase, _, op, kind, _, _ in count_loss(VOCABS[0]).rows if phase == "backward" and kind == "memory"}
    assert {"aten.nll_loss_backward.default", "aten._log_softmax_backward_data.default", "aten._to_copy.default"} <= ops


@pytest.mark.parametrize("tp", [2, 4])
def test_loss_parallel_moves_its_logit_bytes_on_the_shard(fake_group, tp):
    measured = per_logit(fake_group(tp))
    assert measured["forward"] + measured["backward"] == TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES, measured
    assert torchtitan_loss(tp)["logit_bytes"] == TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES


def _saved_per_token(mesh=None) -> float:
    """Bytes the loss keeps for its backward per token, the logits' own vocabulary less
    the smaller one's (the labels and the scalars drop out)."""

    def saved(vocab):
        pred, labels = logits(vocab, mesh)
        with parallel_loss.loss_parallel() if mesh is not None else contextlib.nullcontext():
            return saved_bytes(lambda: titan_loss(pred, labels))

    return (saved(VOCABS[1]) - saved(VOCABS[0])) / TOKENS


@pytest.mark.parametrize("tp", [1, 2])
def test_loss_keeps_the_fp32_log_softmax(fake_group, tp):
    """Both forms keep one fp32 log-softmax of this rank's logits, nothing else a logit:
    head_saved's "loss softmax" at torchtitan's logit_bytes."""
    measured = _saved_per_token(fake_group(tp) if tp > 1 else None)
    t = Training(seq=TOKENS, **torchtitan_loss(tp))
    priced = [head_saved(Model("m", 1, 64, 4, v, Attention(), 1, 128), t, tp)["loss softmax"] for v in VOCABS]
    assert priced[1] - priced[0] == measured == 4 * (VOCABS[1] - VOCABS[0]) / tp


def _backward_peak(vocab: int, mesh=None) -> int:
    """Bytes the CPU allocator holds at the backward's peak beyond what was allocated when
    it began (the saved log-softmax among that), from the profiler's allocation events."""
    from torch.profiler import ProfilerActivity, profile

    pred, labels = logits(vocab, mesh)
    with parallel_loss.loss_parallel() if mesh is not None else contextlib.nullcontext():
        loss = titan_loss(pred, labels)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            loss.backward()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("tp", [1, 2])
def test_loss_backward_holds_its_copies(fake_group, tp):
    """nll_loss's and log_softmax's backward hold two fp32 logit-sized tensors at once;
    loss_parallel's fused backward three (its zeros, their sum with exp, the product):
    activations.loss_transient at torchtitan_loss's loss_backward_copies."""
    mesh = fake_group(tp) if tp > 1 else None
    measured = _backward_peak(VOCABS[1], mesh) - _backward_peak(VOCABS[0], mesh)
    t, lay = Training(seq=TOKENS, **torchtitan_loss(tp)), Layout(1, 1, tp=tp, micro_batch=1)
    priced = [loss_transient(Model("m", 1, 64, 4, v, Attention(), 1, 128), t, lay) for v in VOCABS]
    assert priced[1] - priced[0] == measured


def test_every_torchtitan_row_pins_the_counted_loss():
    """benchmarks/data/published_runs.toml writes the count out on each torchtitan row."""
    rows = [r for r in tomllib.loads(RUNS.read_text())["run"] if r["name"].startswith("torchtitan")]
    assert len(rows) > 20
    for r in rows:
        tp = r["layout"].get("tp", 1)
        assert r["training"].get("logit_bytes") == torchtitan_loss(tp)["logit_bytes"], r["name"]
