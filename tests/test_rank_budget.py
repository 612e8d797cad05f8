"""The plan search holds each pipeline rank's peak to that rank's own usable memory.

torch.distributed.pipelining keeps every micro-batch's logits on the last stage until the
step ends (``pp_keeps_outputs``); the first stage's rank keeps none of them. The search
used to hold every rank to the last stage's budget, so a layout whose first rank fits its
own memory was refused near the edge of the card (issue 20).

The budgets below are derived by hand from the inputs, not from the code under test: an
H100 reports 81,559 MiB (nvidia-smi; presets/clusters/h100.toml), PyTorch's CUDA context
takes 723 MiB (discuss.pytorch.org/t/73021) and NCCL 688 MiB a communicator
(NVIDIA/nccl#964), the caching allocator strands 2.4% of the rest
(vllm-project/compressed-tensors#587). Llama 3 8B has a 128,256-token vocabulary and a
4,096 hidden size: a micro-batch of 8,192 tokens has 2 x 128,256 x 8,192 bytes of bf16
logits and a stage boundary of 2 x 4,096 x 8,192 bytes.
"""

from __future__ import annotations

import pytest

from pipesim.planner.candidates import Candidate, Pins
from pipesim.planner.device_memory import rank_usables, roomiest
from pipesim.planner.evaluate import evaluate
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.report import markdown, result_row
from pipesim.planner.search import search
from pipesim.planner.specs import Training, load_cluster, load_model
from pipesim.planner.stages import stage_parts
from pipesim.schedules import build

MIB = 2**20
CARD = 81559 * MIB
CONTEXT, NCCL = 723 * MIB, 688 * MIB
KEPT = 1 - 0.024  # what the allocator's fragmentation leaves of the rest
LOGITS = 2 * 128256 * 8192
BOUNDARY = 2 * 4096 * 8192
LAYOUT = Layout(pp=4, dp=8, micro_batch=1)


def _setup(microbatches: int):
    # torchtitan's pipeline: FSDP (kept gathered under pp), del pred, pipelining's kept outputs;
    # no recomputation, so a rank without the last stage has no backward transient
    t = Training(zero=3, seq=8192, global_batch=8 * microbatches, loss_frees_logits=True, pp_keeps_outputs=True, recompute="none")
    return load_model("llama3-8b"), load_cluster("h100", gpus=32), t


def _first_rank(microbatches: int) -> float:
    """1F1B's rank 0: the card less the context, two communicators (data, pipeline) and a
    receive buffer per micro-batch for its output's gradient; no logits, no loss."""
    return (CARD - CONTEXT - 2 * NCCL - microbatches * BOUNDARY) * KEPT


def _last_stage_at_most(microbatches: int) -> float:
    """The last stage's budget as the search held every rank to it: every micro-batch's
    logits and two receive sets (the loss's transient, not counted here, only lowers it)."""
    return (CARD - CONTEXT - 2 * NCCL - microbatches * (LOGITS + 2 * BOUNDARY)) * KEPT


def _last_rank_at_most(microbatches: int) -> float:
    """1F1B's last rank on its own: the logits and one receive set (its input) a
    micro-batch (the loss's transient, not counted here, only lowers it)."""
    return (CARD - CONTEXT - 2 * NCCL - microbatches * (LOGITS + BOUNDARY)) * KEPT


def test_a_first_rank_within_its_own_memory_fits():
    m, c, t = _setup(12)
    r = evaluate(m, c, t, Candidate(LAYOUT, "1f1b", None, "none", 12))
    assert r.fits, r.reason
    # 1F1B's first rank holds pp micro-batches' activations: the fullest, held to its own
    assert r.rank == 0 and r.usable.bytes == pytest.approx(_first_rank(12), rel=1e-12)
    # about 56 GB: over what every rank was held to (at most 55.1 GB), under rank 0's 80.5
    assert _last_stage_at_most(12) < r.memory_gb * 1e9 <= _first_rank(12)
    # the pinned plan finds it (it raised "does not fit" before) and says whose memory it quotes
    plan = search(m, c, t, schedules=["1f1b"], pins=Pins(pp=4, dp=8, tp=1, micro_batch=1))
    assert plan.best.candidate.microbatches == 12 and plan.best.rank == 0
    line = next(x for x in markdown(plan).splitlines() if x.startswith("- memory per GPU"))
    assert f"of {_first_rank(12) / 1e9:.1f} GB usable" in line and "on pipeline rank 0, the card's 85.5 GB" in line
    row = result_row(plan.best, plan)  # --json's rows say the same
    assert row["memory_rank"] == 0 and row["usable_gb"] == pytest.approx(_first_rank(12) / 1e9, rel=1e-12)


def test_the_least_room_is_reported_where_it_is_not_the_fullest_rank():
    # 16 micro-batches: the last rank keeps 16 x 2.1 GB of logits, its budget about 47 GB
    # against rank 0's 80: the report names it beside the fullest rank
    m, c, t = _setup(16)
    plan = search(m, c, t, schedules=["1f1b"], pins=Pins(pp=4, dp=8, tp=1, micro_batch=1))
    best = plan.best
    assert best.rank == 0 and best.room[0] == 3
    assert best.room[2] * 1e9 <= _last_rank_at_most(16) + 1 < _first_rank(16)
    line = next(x for x in markdown(plan).splitlines() if x.startswith("- memory per GPU"))
    assert f"the least room is rank 3's, {best.room[1]:.1f} of its own {best.room[2]:.1f} GB usable" in line


def test_a_last_rank_over_its_own_memory_is_still_refused_and_named():
    # 32 micro-batches: 32 x 2.1 = 67 GB of logits leave the last rank at most 13.6 GB,
    # less than its parameters, gradients and optimizer states; rank 0 has 79 GB
    m, c, t = _setup(32)
    r = evaluate(m, c, t, Candidate(LAYOUT, "1f1b", None, "none", 32))
    assert not r.fits and r.rank == 3
    assert r.usable.bytes <= _last_rank_at_most(32) + 1 and _last_rank_at_most(32) < 14e9
    assert (
        r.reason.startswith("parameters, gradients and optimizer states need") and "GB on rank 3 > 14 GB usable there" in r.reason
    )
    assert _first_rank(32) > 5 * r.static_gb * 1e9  # not refused for want of the roomiest rank's memory


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved-1f1b", "dualpipev", "zb-v"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_no_rank_has_more_than_the_bound_layouts_are_refused_against(schedule, recompute):
    """The search refuses a layout on its static floor against ``roomiest``: sound only
    if no rank of any placement can fill more (every switch that holds memory back on)."""
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=64)
    t = Training(
        zero=3,
        seq=8192,
        global_batch=64,
        loss_frees_logits=True,
        pp_keeps_outputs=True,
        pp_keeps_input_grads=True,
        fsdp_stream_pools=True,
        zero_grad_frees=True,
        fsdp_reshard="always",
    )
    lay = Layout(pp=4, dp=8, tp=2, micro_batch=1)
    s = build(schedule, 4, 8, **({"chunks": 2} if schedule == "interleaved-1f1b" else {}))
    pl = s.placement
    held = pl.held()
    mm = memory_model(m, t, lay, pl.stages, recompute, stage_parts(m, c, t, lay, pl.stages, recompute, held))
    most = roomiest(m, c, t, lay, recompute).bytes
    budgets = [u.bytes for u in rank_usables(m, c, t, lay, recompute, held, pl.stages, 8, mm)]
    assert max(budgets) <= most and min(budgets) < most
