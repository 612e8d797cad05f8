"""ZB-V, V-Half and V-Min: valid everywhere, within their memory, and at least as good as
the reference generators (recorded at pp=4, M=8) and the papers' claims elsewhere."""

from __future__ import annotations

import pytest

from pipesim import Costs, build, simulate, summarize, theory, validate

GRID = [(pp, M) for pp in range(1, 7) for M in sorted({1, 2, pp, pp + 1, 2 * pp, 3 * pp + 1})]
V = ["zb-v", "v-half", "v-min"]


def report(name, pp, M, costs=None):
    s = build(name, pp, M)
    return s, summarize(s, simulate(s, costs))


@pytest.mark.parametrize("name", V)
@pytest.mark.parametrize("pp,M", GRID)
def test_valid_and_within_the_papers_memory(name, pp, M):
    """Every schedule validates, and its peak stays within the paper's activation memory
    ("Pipeline Parallelism with Controllable Memory": V-ZB pp, V-Half (pp+2)//2, V-Min
    (pp+4)//3 micro-batches, i.e. twice that in chunks), and M micro-batches' worth."""
    s, rep = report(name, pp, M)
    validate(s)
    stages = {"zb-v": pp, "v-half": (pp + 2) // 2, "v-min": (pp + 4) // 3}[name]
    assert max(rep.peak_activations) <= min(2 * stages, 2 * M)
    assert all(a <= b for a, b in zip(rep.peak_activations, theory.peak_activations(name, pp, M)))
    assert rep.busy == [6.0 * M] * pp  # F, B and W of two chunks per micro-batch


@pytest.mark.parametrize("pp,M", [(pp, M) for pp, M in GRID if M >= pp])
def test_zb_v_closed_form(pp, M):
    """ZB-V at F = B = W: every rank's passes back to back after the pipeline fill, so the
    makespan is 6M F + (pp-1) F (the reference's 51 at pp=4, M=8)."""
    for f in (1.0, 2.5):
        _, rep = report("zb-v", pp, M, Costs(f=f, b=f, w=f))
        assert rep.makespan == pytest.approx(theory.makespan("zb-v", pp, M, Costs(f=f, b=f, w=f)))
        assert rep.makespan == pytest.approx((6 * M + pp - 1) * f)


@pytest.mark.parametrize("pp,M", [(pp, M) for pp, M in GRID if M >= 2 * pp])
def test_bubbles_within_the_papers_rates(pp, M):
    """The paper's bubble rates at F = B = W (1 - M(F+B+W)/longest span): about pp/(2M)
    for V-Half and 2pp/(3M) for V-Min; as idle time per rank that is 3pp and 4pp units."""
    for name, idle in (("v-half", 3 * pp), ("v-min", 4 * pp)):
        _, rep = report(name, pp, M)
        assert max(rep.span) - 6 * M <= idle


def test_controllable_memory_ordering():
    """Less memory costs time, never the other way round, at every size here."""
    for pp, M in GRID:
        reps = [report(n, pp, M)[1] for n in V]
        peaks = [max(r.peak_activations) for r in reps]
        assert peaks[0] >= peaks[1] >= peaks[2]


@pytest.mark.parametrize("pp", [6, 9])
def test_repeating_the_steady_state_gives_the_blocks_built_at_m(pp):
    """Large V-Half and V-Min build their blocks for a few micro-batches and repeat the
    steady state: that is the order of the same block built for all M, op for op."""
    from pipesim.autoschedule.blocks import block_orders, v_half_blocks, v_min_block
    from pipesim.autoschedule.evaluate import Index, asap
    from pipesim.autoschedule.problem import Problem
    from pipesim.ir import Placement
    from pipesim.schedules.v_shape import repeat_steady_state, short

    few = short(pp)
    index = Index(Problem.of(Placement.v(pp, few), Costs()))
    for block in (*v_half_blocks(pp), v_min_block(pp)):
        for paired in (False, True):
            for squeeze in (False, True):
                plan = asap(index, block_orders(pp, few, block, paired, squeeze))
                for M in (few + 1, few + 7):
                    t = repeat_steady_state(plan, M)
                    got = [
                        list(zip(*(a[t.offsets[r] : t.offsets[r + 1]].tolist() for a in (t.kind, t.chunk, t.mb))))
                        for r in range(pp)
                    ]
                    assert got == block_orders(pp, M, block, paired, squeeze), (block, paired, squeeze, M)


# every pp from 1 to 12 just past the short build, and a longer run every third pp
REPEAT_GRID = [(pp, M) for pp in range(1, 13) for M in {3 * pp // 2 + 9, 6 * pp // 2 + 18 if pp % 3 == 0 else 0} - {0}]


@pytest.mark.parametrize("pp,M", REPEAT_GRID)
def test_repeated_vs_are_the_orders_the_whole_search_picks(pp, M):
    """Where V-Half and V-Min repeat a short steady state (from M > 3pp/2 + 8), the order
    is op for op the one the whole search at M picks (blocks and their variants, list
    schedules, polish), so building it cheaply changes nothing. V-Min at pp = 2 and 5 is
    where the search finds another order: it stays searched there."""
    from pipesim.schedules import v_shape

    for name, searched in (("v-half", v_shape.v_half_searched), ("v-min", v_shape.v_min_searched)):
        if name == "v-min" and pp in (2, 5):
            assert not v_shape.repeats(name, pp, M)
            continue
        assert v_shape.repeats(name, pp, M), (name, pp, M)
        assert build(name, pp, M).ranks == searched.search(pp, M).ranks, (name, pp, M)


def test_large_sizes_are_valid_and_keep_the_steady_state():
    """A repeated V (pp=8, M=420: 20K ops) validates, keeps its memory, and runs at one op
    per slot through the middle: its span grows by 6 per micro-batch (M=421)."""
    from pipesim.schedules.v_shape import repeats

    assert repeats("v-half", 8, 420) and repeats("v-min", 8, 420)
    for name, stages in (("v-half", (8 + 2) // 2), ("v-min", (8 + 4) // 3)):  # the paper's memory
        s, rep = report(name, 8, 420)
        validate(s)
        assert max(rep.peak_activations) <= 2 * stages
        assert max(report(name, 8, 421)[1].span) - max(rep.span) == 6
