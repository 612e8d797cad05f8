"""The data-parallel gradient reduction timed chunk by chunk on the simulated order
(planner/grad_reduction.py): Megatron-Core's --overlap-grad-reduce syncs a model chunk's
gradients in its last micro-batch's backward, so an interleaved rank's earlier chunks
reduce beside the backwards still to come."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pipesim import build
from pipesim.costs import Costs
from pipesim.planner import candidates as candidates_mod
from pipesim.planner import evaluate as evaluate_mod
from pipesim.planner.grad_reduction import reduction_tails, tail_exposure
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.step import exposed, timed
from pipesim.simulate import simulate


def test_an_interleaved_ranks_chunks_reduce_one_after_another_by_hand():
    """Interleaved 1F1B on pp2 with 2 chunks and 2 micro-batches, F = 1 and the fused
    backward BW = 2. Rank 0 runs F0.0 F0.1 F1.0 F1.1 (0-4), BW1.0 at 6-8 (it waits for
    rank 1's), BW1.1 at 9-11, BW0.0 at 11-13, BW0.1 at 13-15; chunk 1's gradients are
    final in BW1.1 (from 9), chunk 0's in BW0.1 (from 13). Each chunk reduces for 5 s;
    compute beside a reduction keeps 0.8 of its speed.

    By hand: chunk 1's reduction runs 9-14. BW1.1 needs 2 / 0.8 = 2.5 s beside it: 9-11.5.
    BW0.0 starts then (after 11, its simulated start) and runs 11.5-14, still beside it.
    BW0.1 starts at 14 (not 13) with chunk 0's reduction, 14-19, and takes 2.5 s: 14-16.5.
    The reduction outlasts it: 19 - 15 = 4 s show. Rank 1 runs the same three backwards
    at 7-9, 9-11, 11-13, back to back: 7-12 the first reduction, the backwards end at
    9.5, 12 and (starting at 12) 14.5, the second reduction 12-17: 17 - 13 = 4 s. All 10 s
    against one micro-batch's backward of both chunks (4 s), as before, showed 6."""
    tl = simulate(build("interleaved-1f1b", 2, 2, chunks=2), Costs(f=1.0, bw=2.0))
    got = [[(str(e.item), e.start, e.end) for e in evs] for evs in tl.events]
    assert got[0][4:] == [("BW1.0", 6, 8), ("BW1.1", 9, 11), ("BW0.0", 11, 13), ("BW0.1", 13, 15)]
    assert got[1][5:] == [("BW1.1", 7, 9), ("BW0.0", 9, 11), ("BW0.1", 11, 13)]
    assert reduction_tails(tl, ((5.0, 5.0), (5.0, 5.0)), 0.8) == pytest.approx((4.0, 4.0))
    assert exposed(10.0, 4.0, 0.8) == pytest.approx(6.0)
    # short reductions hide whole but slow what they run beside: 1 s each, 0.2 s lost
    # beside BW1.1 and again beside BW0.1 (rank 0: 9-10 and 13.2-14.2 the reductions,
    # BW0.0 11.2-13.2, BW0.1 13.2-15.4)
    assert reduction_tails(tl, ((1.0, 1.0), (1.0, 1.0)), 0.8) == pytest.approx((0.4, 0.4))


def test_a_wait_for_another_rank_absorbs_the_slowdown():
    """Two items, 0-2 and 3-5 (the second waits until 3 for another rank); a 2 s
    reduction ready with the first, compute at half speed beside it: the first does 1 of
    its 2 s by 2 and ends at 3, when the second was to start anyway: nothing shows. One
    micro-batch's window (2 s) would have shown (1 - 0.5) x 2 = 1 s."""
    assert tail_exposure([0.0, 3.0], [2.0, 5.0], [0], (2.0,), 0.5) == 0.0
    assert exposed(2.0, 2.0, 0.5) == 1.0
    # without the wait the second item starts late: 3 - 2 = 1 s shows
    assert tail_exposure([0.0, 2.0], [2.0, 4.0], [0], (2.0,), 0.5) == pytest.approx(1.0)
    # a chunk with no backward reduces after the last item, whole: 2 s
    assert tail_exposure([0.0, 3.0], [2.0, 5.0], [None], (2.0,), 0.5) == pytest.approx(2.0)
    # no reduction (one replica): exactly nothing
    assert tail_exposure([0.0, 3.0], [2.0, 5.0], [0, 1], (0.0, 0.0), 0.84) == 0.0


def test_only_an_overlapped_ddp_is_timed():
    """FSDP (ZeRO-3) keeps its per-stage REDUCE_GRAD, a reduction after the backward
    (dp_overlap 0) shows whole: neither is timed on the order."""
    assert timed(load_training())
    assert not timed(load_training(zero=3))
    assert not timed(load_training(dp_overlap=0.0))


@pytest.mark.parametrize("seed, network_gbps", [(0, None), (1, 2.0)])
def test_the_bound_stays_below_the_simulated_step(seed, network_gbps):
    """The search prunes on ``Prepared.bound`` (its floor counts the timed reduction at
    ``reduction_floor``: the least chunk, or the one an order without deferred W's ends
    on, against the longest item its last backward can be): on random candidates of
    every family, interleaved, V-shaped and paired ones among them, it never exceeds the
    step the simulation gives; nor on a slow network, where the reductions outlast the
    backwards they run beside."""
    m = load_model("llama3-8b")
    c = load_cluster("h100", gpus=32)
    c = c if network_gbps is None else dataclasses.replace(c, network_gbps=network_gbps)
    t = load_training(global_batch=128, seq=2048)
    cands = [x for x in candidates_mod.candidates(m, c, t) if x.layout.pp > 1 and x.layout.dp > 1]
    picked = random.Random(seed).sample(cands, 40)
    rng = random.Random(seed + 1)
    for names in (("dualpipe", "dualpipev", "interleaved-1f1b-overlap"), ("interleaved-1f1b", "looped-bfs")):
        picked += rng.sample([x for x in cands if x.schedule in names], 8)
    checked = timed_late = 0
    for cand in picked:
        p = evaluate_mod.prepare(m, c, t, cand)
        if isinstance(p, evaluate_mod.Result):
            continue
        floor, bound = p.floor, p.bound
        r = evaluate_mod.finish(m, c, t, p)
        if r.step_time == float("inf"):
            continue
        assert floor <= bound <= r.step_time * (1 + 1e-12), cand
        assert p.step.reduce is not None and r.dp_sync >= p.sync * (1 - 1e-12), cand
        timed_late += r.dp_sync > p.sync
        checked += 1
    assert checked >= 20 and timed_late >= 10


def test_extrapolation_waits_for_the_reductions_to_settle():
    """LoopedBFS runs every backward of chunk 1 before any of chunk 0's, so chunk 1's
    reduction lies further from the end the more micro-batches there are and what it
    shows shrinks with M until it hides: along the line through three shorter runs it
    went negative at M=64 (pp2, tp8, dp2 on a 2 Gb/s network), the step 8% short of the
    full simulation and below its own bound. The extrapolation must equal the full
    simulation."""
    m = load_model("llama3-8b")
    c = dataclasses.replace(load_cluster("h100", gpus=32), network_gbps=2.0)
    t = load_training(global_batch=128, seq=2048)
    cand = candidates_mod.Candidate(Layout(pp=2, dp=2, tp=8), "looped-bfs", 2, "selective", 64)
    assert evaluate_mod.sample_points(cand.schedule, 2, 64, {"chunks": 2}) is not None
    fast = evaluate_mod.evaluate(m, c, t, cand)
    full = evaluate_mod.evaluate(m, c, t, cand, evaluate_mod.Shared(m, c, t, exhaustive=True))
    assert fast.step_time == pytest.approx(full.step_time, rel=1e-9)
    assert fast.dp_sync == pytest.approx(full.dp_sync, rel=1e-9)
