"""The distributed optimizer's parameter all-gather timed chunk by chunk on the simulated
order (planner/param_gather.py), launched where Megatron-Core's code launches it
(NVIDIA/Megatron-LM d98e8a64: pipeline_parallel/schedules.py, distributed/
distributed_data_parallel.py, distributed/param_and_grad_buffer.py)."""

from __future__ import annotations

import random

import pytest

from pipesim import build
from pipesim.costs import Costs
from pipesim.planner.param_gather import combined, gather_heads, head_exposure, launches
from pipesim.planner.step import exposed, gather_floor
from pipesim.simulate import simulate


def _megatron_table(M: int, chunks: int, group: int) -> list[int]:
    """The model chunk of each virtual micro-batch, as ``get_schedule_table`` lays it out
    (schedules.py: groups of ``microbatch_group_size_per_vp_stage`` micro-batches, every
    chunk of a group in turn; the last group takes what is left)."""
    out = []
    for lo in range(0, M, group):
        hi = M if lo + group >= M else lo + group
        out += [c for c in range(chunks) for _ in range(lo, hi)]
    return out


def _firsts(table: list[int]) -> list[int]:
    """Each chunk's first virtual micro-batch in the table."""
    return [table.index(c) for c in range(max(table) + 1)]


def test_pipesims_interleaved_forwards_follow_megatrons_table():
    """The launch rule indexes the rank's forwards by Megatron's virtual micro-batch id;
    pipesim's interleaved 1F1B runs them in the table's order (group = pp, Megatron's
    default), so the ids are the same."""
    tl = simulate(build("interleaved-1f1b", 2, 4, chunks=2), Costs(f=1.0, bw=2.0))
    for evs in tl.events:
        fwd = [e.item for e in evs if str(e.item).startswith("F")]
        assert [str(x)[1] for x in fwd] == ["0", "0", "1", "1", "0", "0", "1", "1"]
    assert _megatron_table(4, 2, 2) == [0, 0, 1, 1, 0, 0, 1, 1]


def test_launches_by_hand():
    """forward_step_helper_preprocess at virtual micro-batch k on pipeline rank r launches
    chunk j >= 2 where k + r is chunk j - 1's first micro-batch; chunks 0 and 1 go before
    the loop; a chunk never reached so waits for its own pre-hook.

    pp4, 3 chunks, M8: chunk 1 first at id 4, so chunk 2 at id 4 - r (4, 3, 2, 1).
    pp2, 4 chunks, M4: chunk 1 first at 2, chunk 2 at 4: chunk 2 at 2 - r, chunk 3 at 4 - r.
    pp4, 3 chunks, M2 (one group of 2): chunk 1 first at 2; rank 3 would need id -1, so
    chunk 2 is dispatched by its own first forward, id 4. One chunk (1F1B, no aligned
    gather): at its first forward."""
    t = _firsts(_megatron_table(8, 3, 4))
    assert t == [0, 4, 8]
    assert [launches(t, r) for r in range(4)] == [[None, None, 4], [None, None, 3], [None, None, 2], [None, None, 1]]
    t = _firsts(_megatron_table(4, 4, 2))
    assert [launches(t, r) for r in range(2)] == [[None, None, 2, 4], [None, None, 1, 3]]
    t = _firsts(_megatron_table(2, 3, 4))
    assert t == [0, 2, 4]
    assert launches(t, 2) == [None, None, 0] and launches(t, 3) == [None, None, 4]
    assert launches([0], 2) == [0]


def test_interleaved_by_hand():
    """Interleaved 1F1B, pp2, 3 chunks, M2, F = 1, BW = 2; gathers of 1, 1 and 3 s a chunk;
    compute beside a gather at half speed. Rank 0 runs F0.0 F0.1 F1.0 F1.1 F2.0 from 0, one
    a second; rank 1 the same from 1.

    Rank 0: chunks 0 and 1 gather at 0-1 and 1-2. F0.0 (chunk 0 bucketed on rank 0) runs
    beside both: 0-2 (late 1). F0.1 at 2-3. F1.0 (simulated 2) at 3; it launches chunk 2
    (id 2 - 0 = chunk 1's first), 3-6, and runs beside it to 5. F1.1 at 5: half speed to
    6, 6.5 (late 2.5). F2.0 at 6.5, its gather done: 2.5 s.
    Rank 1: F0.0 (simulated 1-2) finds chunk 0 gathered at 1, runs beside chunk 1's to
    2.5. F0.1 at 2.5 launches chunk 2 (id 2 - 1 = 1): 2.5-5.5; it ends at 4.5, F1.0 runs
    4.5-6.0 (half of it beside), F1.1 6-7, F2.0 (simulated 5) at 7: 2 s.
    Every rank launches at the step's start: the worst, 2.5 s."""
    tl = simulate(build("interleaved-1f1b", 2, 2, chunks=3), Costs(f=1.0, bw=2.0))
    got = [[(str(e.item), e.start) for e in evs][:5] for evs in tl.events]
    assert got[0] == [("F0.0", 0), ("F0.1", 1), ("F1.0", 2), ("F1.1", 3), ("F2.0", 4)]
    assert got[1] == [("F0.0", 1), ("F0.1", 2), ("F1.0", 3), ("F1.1", 4), ("F2.0", 5)]
    heads = gather_heads(tl, ((1.0, 1.0, 3.0), (1.0, 1.0, 3.0)), 0.5)
    assert heads == pytest.approx((2.5, 2.0))
    assert combined(heads, 3) == pytest.approx(2.5)


def test_one_chunk_waits_for_the_whole_gather_after_its_input():
    """1F1B, pp3, M3, F = 1, BW = 2, 3 s gathers, compute at 0.8 beside them. Without
    aligned gathers the pre-hook of a rank's first forward dispatches its gather once the
    input has come: rank 0 (bucketed) runs its first forward beside it, 1 s of work
    ending with the gather at 3 (exposed(3, 1): 2 s); ranks 1 and 2 (one bucket) wait 3 s
    each. Each wait delays the next rank's input: 2 + 3 + 3 = 8 s, where one micro-batch's
    forward against the rank's gather gave 2."""
    tl = simulate(build("1f1b", 3, 3), Costs(f=1.0, bw=2.0))
    heads = gather_heads(tl, ((3.0,), (3.0,), (3.0,)), 0.8)
    assert heads == pytest.approx((2.0, 3.0, 3.0))
    assert combined(heads, 1) == pytest.approx(8.0)
    assert exposed(3.0, 1.0, 0.8) == pytest.approx(2.0)


def test_a_gather_done_before_its_chunk_shows_only_the_slowdown():
    """Items 0-1 and 5-6 (the second waits for another rank), the second chunk's gather of 3 s
    launched with the step: it ends at 3, long before that chunk's forward at 5, so none
    of it is waited for; the first item, beside it at half speed, ends at 2, and that 1 s
    is carried on (a delay is not given back in idle gaps): 1 s shows."""
    assert head_exposure([0.0, 5.0], [1.0, 6.0], [None, 1], [None, None], (0.0, 3.0), 0.5) == pytest.approx(1.0)
    # no gather (one replica): exactly nothing
    assert head_exposure([0.0, 5.0], [1.0, 6.0], [0, 1], [None, None], (0.0, 0.0), 0.84) == 0.0


@pytest.mark.parametrize("seed", [0, 1])
def test_one_chunk_never_shows_less_than_one_forward_window_and_the_floor_holds(seed):
    """With one chunk a rank the timed gathers show at least what ``exposed`` against one
    micro-batch's forward did, rank by rank (rank 0 runs exactly that forward beside its
    bucketed gather first; every later rank waits for its whole gather, and exposed(g, f)
    <= g), and their sum at least the old worst rank. With more chunks no such bound holds
    either way (a large gather on a chunk with a short lead shows more; one with many
    forwards ahead less), but on every order ``gather_floor`` stays at or below what the
    timeline shows (the search's bound)."""
    rng = random.Random(seed)
    for _ in range(40):
        pp, v = rng.choice([2, 3, 4]), rng.choice([1, 2, 3, 4])
        M = pp * rng.choice([1, 2, 3])
        f = tuple(rng.uniform(0.5, 2.0) for _ in range(pp * v))
        bw = tuple(x * rng.uniform(1.5, 3.0) for x in f)
        prog = build("1f1b", pp, M) if v == 1 else build("interleaved-1f1b", pp, M, chunks=v)
        tl = simulate(prog, Costs(f=f, bw=bw, comm=rng.choice([0.0, 0.3])))
        rate = rng.choice([0.0, 0.5, 0.84, 1.0])
        scale = rng.choice([0.1, 1.0, 5.0, 20.0])
        gathers = tuple(tuple(rng.uniform(0.0, scale) for _ in range(v)) for _ in range(pp))
        heads = gather_heads(tl, gathers, rate)
        if v == 1:
            old = [exposed(g[0], f[r], rate) for r, g in enumerate(gathers)]
            assert all(h >= o * (1 - 1e-12) for h, o in zip(heads, old))
            assert combined(heads, 1) >= max(old) * (1 - 1e-12)
        firsts = tuple(f[r] for r in range(pp))  # chunk c of rank r holds stage c * pp + r
        fed = tuple(v == 1 and r > 0 for r in range(pp))  # 1F1B: rank r > 0 waits for rank r - 1's forward
        assert gather_floor(gathers, firsts, True, rate, fed) <= combined(heads, v) * (1 + 1e-12) + 1e-12


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_searchs_bound_stays_below_the_simulated_step_with_the_gathers(seed):
    """The search skips a candidate whose bound (``bounds.pipeline_bound`` on the order's
    item counts plus ``step_sync``'s floors, ``gather_floor`` among them) cannot beat the
    best so far, so the bound must stay at or below the step the simulation then gives:
    its makespan plus ``combined`` of ``gather_heads`` (the other parts zero here). With one
    chunk a rank whose stage is fed by another's forward counts its whole gather, as
    step_sync says (``fed``). On random per-stage costs, hops, gathers and compute rates
    over flat, interleaved, V and DualPipe orders, it does."""
    from pipesim.planner.bounds import pipeline_bound, rank_work
    from pipesim.planner.programs import shape

    rng = random.Random(seed)
    orders = [
        ("1f1b", {}),
        ("gpipe", {}),
        ("zb-h1", {}),
        ("zb-h2", {}),
        ("interleaved-1f1b", {"chunks": 2}),
        ("interleaved-1f1b", {"chunks": 3}),
        ("interleaved-zb", {"chunks": 2}),
        ("zb-v", {}),
        ("v-half", {}),
        ("dualpipe", {}),
    ]
    for _ in range(60):
        name, opts = rng.choice(orders)
        pp = rng.choice([2, 4]) if name == "dualpipe" else rng.choice([2, 3, 4])
        prog = build(name, pp, 2 * pp * rng.choice([1, 2]), **opts)
        pl = prog.placement
        f = tuple(rng.uniform(0.2, 2.0) for _ in range(pl.stages))
        costs = Costs(
            f=f,
            b=tuple(x * rng.uniform(0.8, 1.5) for x in f),
            w=tuple(x * rng.uniform(0.3, 1.2) for x in f),
            comm=rng.choice([0.0, 0.1, 0.4]),
        )
        tl = simulate(prog, costs)
        rate = rng.choice([0.0, 0.5, 0.84, 1.0])
        scale = rng.choice([0.1, 1.0, 5.0, 20.0])
        gathers = tuple(tuple(rng.uniform(0.0, scale) for _ in range(pl.chunks)) for _ in range(pp))
        held = pl.held()
        firsts = tuple(f[h[0]] for h in held)
        fed = tuple(pl.chunks == 1 and h[0] > 0 and f[h[0] - 1] > 0 for h in held)
        floor = gather_floor(gathers, firsts, held[0][0] == 0, rate, fed)
        bound = pipeline_bound(pl, costs, *rank_work(shape(prog).counts, costs)) + floor
        simulated = (tl.end - tl.start) + combined(gather_heads(tl, gathers, rate), pl.chunks)
        assert bound <= simulated * (1 + 1e-9) + 1e-12, (name, pp)
