"""The component cost model: two-stream pairs against hand-computed schedules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim import REGISTRY, Costs, PipesimError, build, simulate, summarize
from pipesim.components import PRESETS, ComponentCosts, LayerCosts, Task, run_streams
from pipesim.ir import Op, Pair

PAIR = Pair(Op("F", 0, 1), Op("BW", 1, 0))


def parts(costs, item=PAIR):
    return {
        g.label.split(" ")[0] + ("" if g.stream == "compute" else "~"): (g.start, g.end) for g in costs.segments(item, (0, 0))
    }


def test_pair_hides_communication_by_hand():
    """One layer, attention and MLP 1 each way, every all-to-all 0.5, no SM contention.
    Worked on paper in Figure 4's order: compute AF MB MW MF AB AW, comm CB DF DB CF."""
    c = ComponentCosts.uniform(LayerCosts(attn_f=1, mlp_f=1, dispatch_f=0.5, combine_f=0.5), 1, comm_sms=0)
    assert c.pair_time(PAIR, 0, 0) == pytest.approx(6.0)  # all 2 of communication hidden
    assert c.op_time(PAIR.forward, 0) + c.op_time(PAIR.backward, 0) == pytest.approx(3 + 5)
    p = parts(c)
    assert p["ATTN(F)"] == (0, 1) and p["COMBINE(B)~"] == (0, 0.5)
    assert p["DISPATCH(F)~"] == (1, 1.5) and p["MLP(B)"] == (1, 2) and p["MLP(W)"] == (2, 3)
    assert p["DISPATCH(B)~"] == (2, 2.5) and p["MLP(F)"] == (3, 4)
    assert p["COMBINE(F)~"] == (4, 4.5) and p["ATTN(B)"] == (4, 5) and p["ATTN(W)"] == (5, 6)


def test_sm_share_slows_compute_beside_communication():
    """The same pair with 20 of 132 SMs held by communication: each of the four 0.5-long
    all-to-alls runs beside compute, which loses 20/132 of its speed meanwhile, so the
    pair takes 6 + 4 * 0.5 * 20/132 (worked step by step on paper: 6.30303...)."""
    c = ComponentCosts.uniform(LayerCosts(attn_f=1, mlp_f=1, dispatch_f=0.5, combine_f=0.5), 1, comm_sms=20, total_sms=132)
    assert c.pair_time(PAIR, 0, 0) == pytest.approx(6 + 4 * 0.5 * 20 / 132)
    assert parts(c)["ATTN(F)"][1] == pytest.approx(0.5 + (1 - 0.5 * 112 / 132))


def test_held_sms_slow_compute_until_the_pairs_last_all_to_all_ends():
    """held_in_pairs (DeepSeek-V3's all-to-all kernels spin on their stream, holding their
    SMs, from the pair's start until the last one has its data): half the SMs held, so
    compute runs at 0.5 until COMBINE(F) ends. Worked on paper in Figure 4's order:
    AF 0-2 (CB 0-0.5, then held while DF waits), MB 2-4 (DF 2-2.5), MW 4-6 (DB 4-4.5),
    MF 6-8, AB from 8 (CF 8-8.5: 0.25 done, then full speed) to 9.25, AW 9.25-10.25. Without
    holding, the same pair takes 6 + 4 * 0.5 * 0.5 = 7."""
    layer = LayerCosts(attn_f=1, mlp_f=1, dispatch_f=0.5, combine_f=0.5)
    held = ComponentCosts.uniform(layer, 1, comm_sms=66, total_sms=132, held_in_pairs=True)
    assert held.pair_time(PAIR, 0, 0) == pytest.approx(10.25)
    p = parts(held)
    assert p["ATTN(F)"] == pytest.approx((0, 2)) and p["MLP(F)"] == pytest.approx((6, 8))
    assert p["ATTN(B)"] == pytest.approx((8, 9.25)) and p["COMBINE(F)~"] == pytest.approx((8, 8.5))
    assert ComponentCosts.uniform(layer, 1, comm_sms=66, total_sms=132).pair_time(PAIR, 0, 0) == pytest.approx(7.0)
    # lone ops run their parts in turn: nothing beside their compute, held or not
    assert held.op_time(PAIR.forward, 0) == pytest.approx(3.0)


def test_communication_longer_than_the_compute_that_hides_it():
    """All-to-alls of 3 against compute parts of 1: the communication stream is the
    bottleneck and the pair lasts as long as its 12 of communication."""
    c = ComponentCosts.uniform(LayerCosts(attn_f=1, mlp_f=1, dispatch_f=3, combine_f=3), 1, comm_sms=0)
    p = parts(c)
    assert (
        p["COMBINE(B)~"] == (0, 3) and p["DISPATCH(F)~"] == (3, 6) and p["DISPATCH(B)~"] == (6, 9) and p["COMBINE(F)~"] == (9, 12)
    )
    assert p["MLP(F)"] == (6, 7) and p["ATTN(B)"] == (9, 10) and p["ATTN(W)"] == (10, 11)
    assert c.pair_time(PAIR, 0, 0) == 12
    assert c.op_time(PAIR.forward, 0) + c.op_time(PAIR.backward, 0) == 8 + 10


def test_lone_ops_expose_communication():
    c = ComponentCosts.uniform(PRESETS["ep-1to1"], 3)
    assert c.op_time(Op("F", 0, 0), 0) == 3 * (1 + 1 + 1 + 1)
    assert c.op_time(Op("B", 0, 0), 0) == 3 * (2 + 1 + 2 + 1)
    assert c.op_time(Op("W", 0, 0), 0) == 3 * (1 + 1)
    assert c.op_time(Op("BW", 0, 0), 0) == 3 * (2 + 1 + 1 + 2 + 1 + 1)


def test_lone_overlap_splits_a_micro_batch_in_two_by_hand():
    """Two halves of 0.5 per part alternate: compute Aa Ab Ma Mb, comm Da Db Ca Cb;
    on paper the forward ends at 2.5 instead of 4."""
    c = ComponentCosts.uniform(LayerCosts(attn_f=1, mlp_f=1, dispatch_f=1, combine_f=1), 1, comm_sms=0, lone_overlap=True)
    assert c.op_time(Op("F", 0, 0), 0) == pytest.approx(2.5)


def test_stream_order_that_contradicts_dependencies_is_reported():
    tasks = [Task("A", "", 0, "compute", 1, (1,)), Task("B", "", 0, "compute", 1, ())]
    with pytest.raises(PipesimError, match="never start"):
        run_streams(tasks, {"compute": [0, 1], "comm": []}, 0.0)


layer = st.builds(
    LayerCosts,
    attn_f=st.floats(0.1, 3),
    mlp_f=st.floats(0.1, 3),
    attn_b=st.floats(0.1, 3),
    attn_w=st.floats(0.1, 3),
    mlp_b=st.floats(0.1, 3),
    mlp_w=st.floats(0.1, 3),
)


@given(layer, st.integers(1, 4), st.sampled_from(["BW", "B"]))
def test_without_communication_a_pair_is_its_two_ops(c, layers, bkind):
    costs = ComponentCosts.uniform(c, layers)
    pair = Pair(Op("F", 0, 1), Op(bkind, 1, 0))
    assert costs.pair_time(pair, 0, 0) == pytest.approx(costs.op_time(pair.forward, 0) + costs.op_time(pair.backward, 0))


@pytest.mark.parametrize("name", sorted(set(REGISTRY) - {"zb-auto"}))
def test_without_communication_every_schedule_is_unchanged(name):
    """With no all-to-all, the component model gives exactly the per-chunk model's timeline."""
    c = LayerCosts(attn_f=0.5, mlp_f=1.25, attn_b=0.75, mlp_b=1.0, attn_w=0.25, mlp_w=0.5)
    L = 2
    simple = Costs(f=L * (c.attn_f + c.mlp_f), b=L * (c.attn_b + c.mlp_b), w=L * (c.attn_w + c.mlp_w), comm=0.1)
    s = build(name, 4, 8)
    a = simulate(s, simple)
    b = simulate(s, ComponentCosts.uniform(c, L, p2p=0.1))
    for ra, rb in zip(a.events, b.events):
        assert [str(e.item) for e in ra] == [str(e.item) for e in rb]
        assert [e.start for e in ra] == pytest.approx([e.start for e in rb])
        assert [e.end for e in ra] == pytest.approx([e.end for e in rb])


def test_segments_tile_each_event():
    s = build("dualpipe", 4, 8)
    tl = simulate(s, ComponentCosts.uniform(PRESETS["ep-1to1"], 2))
    for e in tl.all_events():
        assert e.segments
        assert min(g.start for g in e.segments) == pytest.approx(e.start)
        assert max(g.end for g in e.segments) == pytest.approx(e.end)
        for stream in ("compute", "comm"):
            spans = sorted((g.start, g.end) for g in e.segments if g.stream == stream)
            assert all(x[1] <= y[0] + 1e-9 for x, y in zip(spans, spans[1:]))  # one thing at a time per stream


def test_ep_1to1_utilization():
    """Communication equal to computation: schedules of lone ops keep the GPU computing
    half the steady state; DualPipe's pairs hide the all-to-alls (issue 4's check, see the
    README table for the numbers)."""
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 4)
    rep = {n: summarize(build(n, 8, 16), simulate(build(n, 8, 16), costs)) for n in ("1f1b", "zb-h1", "dualpipe", "dualpipev")}
    assert rep["1f1b"].steady_state_compute_utilization == pytest.approx(0.5)
    assert 0.45 < rep["zb-h1"].steady_state_compute_utilization <= 0.5
    for n in ("dualpipe", "dualpipev"):
        assert rep[n].steady_state_compute_utilization > rep["zb-h1"].steady_state_compute_utilization + 0.25
        assert min(rep[n].compute_utilization) > max(rep["zb-h1"].compute_utilization) + 0.1
    # with more micro-batches per rank the pairs dominate and DualPipe passes 85%
    s = build("dualpipe", 8, 32)
    assert summarize(s, simulate(s, costs)).steady_state_compute_utilization > 0.85
