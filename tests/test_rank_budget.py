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

import re

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.candidates import Candidate, Pins
from pipesim.planner.device_memory import Usable, rank_usables, roomiest
from pipesim.planner.evaluate import evaluate
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.rank_fit import Budgets, refused
from pipesim.planner.report import markdown, result_row
from pipesim.planner.results import Plan, Result
from pipesim.planner.search import closest_miss, search
from pipesim.planner.specs import Training, load_cluster, load_model
from pipesim.planner.stages import stage_parts
from pipesim.planner.verdicts import rejection
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


def test_the_closest_miss_is_the_least_over_its_own_rank_not_the_least_need():
    """Pinned to pp4 x dp8 at 27 micro-batches, interleaved 1F1B fits nowhere. Rank 3 holds
    the last stage: every micro-batch's logits and a receive buffer per micro-batch for
    each of its stages' inputs and output gradients, 3 with two stages a rank (stages 3
    and 7 of 8), 7 with four (3, 7, 11 and 15 of 16). By hand, 20.6 GB and 13.6 GB. With
    four stages its parameters, gradients and optimizer states alone are over (about 15
    GB, the least need of any refusal); with two, static memory and one micro-batch's
    activations (about 22 GB) are, by less: that one is the closest to fitting."""
    m, c, t = _setup(27)
    two, four = ((CARD - CONTEXT - 2 * NCCL - 27 * (LOGITS + sets * BOUNDARY)) * KEPT / 1e9 for sets in (3, 7))
    assert (round(two, 1), round(four, 1)) == (20.6, 13.6)
    with pytest.raises(PipesimError) as e:
        search(m, c, t, schedules=["interleaved-1f1b"], pins=Pins(pp=4, dp=8, tp=1, micro_batch=1))
    msg = str(e.value)
    assert "does not fit or cannot run: interleaved-1f1b (v=2) at pp4 x dp8" in msg
    need, usable, gap = map(
        float, re.search(r"need ([\d.]+) GB on rank 3 > ([\d.]+) GB usable there \(([\d.]+) GB over\)", msg).groups()
    )
    assert msg.count("GB usable") == 1  # both figures said once, not again in parentheses
    assert usable == round(two, 1) and need > usable and gap == pytest.approx(need - usable, abs=0.11)
    assert "(v=4)" not in msg  # four stages a rank needed less but were further over


def _refusal(rank: int, need: float, usable: float) -> Result:
    """A 1F1B refusal at 12 micro-batches, by hand: ``need`` GB on ``rank``, which has ``usable`` GB."""
    cand = Candidate(LAYOUT, "1f1b", None, "none", 12)
    room = Usable(85.5e9, (("held", 85.5e9 - usable * 1e9),))
    return Result(cand, False, f"peak memory on rank {rank}", memory_gb=need, rank=rank, usable=room)


def test_the_closest_miss_weighs_bytes_over_not_a_share_of_the_budget():
    """Three refusals, by hand: 12 GB on a rank with 8 usable (4 over, the least need), 15
    on one with 14 (1 over, 7% of its budget) and 82 on one with 80 (2 over, 2.5%, the
    least share): the closest is the 1 GB over, named with its rank and both figures."""
    m, c, t = _setup(12)
    plan = Plan(m, c, t, rejected=[_refusal(3, 12, 8), _refusal(2, 15, 14), _refusal(0, 82, 80)])
    assert closest_miss(plan).endswith("peak memory on rank 2 (15.0 GB against rank 2's 14.0 GB usable: 1.0 GB over)")


def test_a_refusal_for_want_of_room_for_one_activation_says_what_it_needs():
    """zb-auto's builder caps every rank's activations at the least room any rank has; at
    27 micro-batches that is the last rank's (by hand, its stage's input buffer and
    logits a micro-batch: 24.2 GB usable), short of one micro-batch's activations. Its
    refusal holds that need, over the rank's memory, so the closest miss can weigh it
    (it held only the static bytes, which fit, and read as the nearest to fitting)."""
    m, c, t = _setup(27)
    r = evaluate(m, c, t, Candidate(LAYOUT, "zb-auto", None, "none", 27))
    assert not r.fits and r.rank == 3 and "leaves no room for one micro-batch's activations" in r.reason
    assert r.usable.bytes == pytest.approx(_last_rank_at_most(27), rel=1e-12)
    assert r.static_gb * 1e9 < _last_rank_at_most(27) < r.memory_gb * 1e9 and not r.peak_known


def test_a_family_that_fits_nowhere_is_named_by_its_refusal_least_over_its_rank():
    """The report's verdict on a family with no fit quotes the same refusal as the closest
    miss: of the three by hand (12 GB on a rank with 8 usable, 15 on one with 14, 82 on
    one with 80), the 1 GB over on rank 2, not the least need (rank 3's, 4 GB over)."""
    m, c, t = _setup(12)
    plan = Plan(m, c, t, rejected=[_refusal(3, 12, 8), _refusal(2, 15, 14), _refusal(0, 82, 80)])
    assert rejection(plan, "1f1b") == "needs at least 15 GB per GPU on rank 2 against 14 GB usable there"


def test_a_family_verdict_shows_enough_digits_to_read_over():
    """79.24 GB against 79.18 reads 79.2 against 79.2 at one digit: two show it over."""
    m, c, t = _setup(12)
    plan = Plan(m, c, t, rejected=[_refusal(7, 79.24, 79.18)])
    assert rejection(plan, "1f1b") == "needs at least 79.24 GB per GPU on rank 7 against 79.18 GB usable there"


def test_a_refusal_reason_shows_enough_digits_to_read_over():
    """A rank needing 80.4 GB of its 80.1 usable read "80 GB > 80 GB" at no digit: one
    shows it over; 95 against 80 needs none."""
    m, c, t = _setup(12)
    cand = Candidate(LAYOUT, "1f1b", None, "none", 12)
    budgets = Budgets([80.1e9, 80e9], lambda r: Usable(85.5e9, ()))
    assert refused(cand, "peak memory", 80.4e9, 0, budgets).reason == "peak memory 80.4 GB on rank 0 > 80.1 GB usable there"
    assert refused(cand, "peak memory", 95e9, 1, budgets).reason == "peak memory 95 GB on rank 1 > 80 GB usable there"
