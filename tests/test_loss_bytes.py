"""torchtitan's cross-entropy as PyTorch runs it, held against pipesim's loss fields: the
bytes a logit its kernels move (``Training.logit_bytes``), what it keeps for the backward
(``activations.head_saved``) and what its backward holds beside that
(``activations.loss_transient``), at ``training.torchtitan_loss``'s values.

tests/torch_loss.py runs torchtitan 9dec370's loss line forward and backward on bf16
logits, on one GPU and under DTensor's loss_parallel on a fake tensor-parallel mesh; the
expected numbers are what torch counts there, never pipesim's.
"""

from __future__ import annotations

import contextlib
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from pipesim.planner.activations import head_saved, loss_transient  # noqa: E402
from pipesim.planner.compute import hbm_rate  # noqa: E402
from pipesim.planner.layer_costs import head_costs  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, load_cluster  # noqa: E402
from pipesim.planner.training import (  # noqa: E402
    TORCHTITAN_LOGIT_BYTES,
    TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES,
    Training,
    torchtitan_loss,
)
from torch_blocks import fake_mesh  # noqa: E402
from torch_loss import count_loss, per_logit  # noqa: E402

TOKENS, VOCABS = 16, (256, 512)
RUNS = Path(__file__).parent.parent / "benchmarks" / "data" / "published_runs.toml"


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda tp: f"tp{tp}")
def counted(request):
    """(tp, torch's counts per logit of the shard) on one GPU or tp fake ranks."""
    tp = request.param
    with fake_mesh(tp) if tp > 1 else contextlib.nullcontext() as mesh:
        return tp, per_logit(VOCABS, TOKENS, mesh)


def _priced(what, tp: int) -> float:
    """pipesim's bytes per logit of the shard, the larger vocabulary less the smaller."""
    t, lay = Training(seq=TOKENS, **torchtitan_loss(tp)), Layout(1, 1, tp=tp, micro_batch=1)
    a, b = (what(Model("m", 1, 64, 4, v, Attention(), (), 128), t, lay) for v in VOCABS)
    return (b - a) / (TOKENS * (VOCABS[1] - VOCABS[0]) / tp)


def test_the_kernels_move_torchtitans_logit_bytes(counted):
    tp, measured = counted
    moved = measured["forward"] + measured["backward"]
    assert moved == torchtitan_loss(tp)["logit_bytes"], measured
    assert moved == (TORCHTITAN_LOSS_PARALLEL_LOGIT_BYTES if tp > 1 else TORCHTITAN_LOGIT_BYTES)


def test_the_head_prices_the_forward_and_backward_apart(counted):
    """The output head's loss (layer_costs.head_costs) moves torch's forward count in its
    forward and the backward's in its backward, not half of the sum each."""
    tp, measured = counted
    c, lay = load_cluster("h100"), Layout(1, 1, tp=tp, micro_batch=1)
    m = Model("m", 1, 64, 4, VOCABS[1], Attention(), (), 128)
    with_loss, without = (Training(seq=TOKENS, **{**torchtitan_loss(tp), **x}) for x in ({}, {"logit_bytes": 0}))
    a, b = head_costs(m, c, with_loss, lay), head_costs(m, c, without, lay)
    per_logit_bytes = hbm_rate(c, with_loss) / (TOKENS * VOCABS[1] / tp)
    assert (a.mlp_f - b.mlp_f) * per_logit_bytes == pytest.approx(measured["forward"])
    assert (a.mlp_b - b.mlp_b) * per_logit_bytes == pytest.approx(measured["backward"])


def test_the_eager_backward_runs_its_own_kernels():
    """nll_loss's backward fills a dense fp32 gradient and the cast back to bf16 is a
    kernel of its own: the eager backward moves more than the forward."""
    measured = per_logit(VOCABS, TOKENS)
    assert measured["backward"] > measured["forward"]
    ops = {op for phase, _, op, kind, _, _ in count_loss(VOCABS[0], TOKENS).rows if phase == "backward" and kind == "memory"}
    assert {"aten.nll_loss_backward.default", "aten._log_softmax_backward_data.default", "aten._to_copy.default"} <= ops


def test_the_loss_keeps_one_fp32_log_softmax(counted):
    """Both forms keep one fp32 log-softmax of this rank's logits and nothing else a
    logit: head_saved's "loss softmax" at torchtitan's logit_bytes."""
    tp, measured = counted
    assert measured["saved"] == 4
    assert _priced(lambda m, t, lay: head_saved(m, t, lay.tp)["loss softmax"] * lay.micro_batch * t.seq, tp) == 4


def test_the_backward_holds_its_copies(counted):
    """nll_loss's and log_softmax's backward hold two fp32 logit-sized tensors at once;
    loss_parallel's fused backward three (its zeros, their sum with exp, the product):
    activations.loss_transient at torchtitan_loss's loss_backward_copies."""
    tp, measured = counted
    assert measured["peak"] == 4 * (3 if tp > 1 else 2)
    assert _priced(loss_transient, tp) == measured["peak"]


def test_every_torchtitan_row_pins_the_counted_loss():
    """benchmarks/data/published_runs.toml writes the count out on each torchtitan row."""
    rows = [r for r in tomllib.loads(RUNS.read_text())["run"] if r["name"].startswith("torchtitan")]
    assert len(rows) > 20
    for r in rows:
        tp = r["layout"].get("tp", 1)
        assert r["training"].get("logit_bytes") == torchtitan_loss(tp)["logit_bytes"], r["name"]
        share = r["training"].get("loss_forward_share", Training.loss_forward_share)
        assert share == torchtitan_loss(tp)["loss_forward_share"], r["name"]
