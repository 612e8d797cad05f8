from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim import REGISTRY, Costs, Placement, Schedule, build, simulate
from pipesim.ir import parse_rank


def ends(tl):
    return [[(str(e.item), e.start, e.end) for e in evs] for evs in tl.events]


def test_1f1b_with_comm_by_hand():
    """pp=2, M=2, F=1, BW=2, 0.5 latency per transfer, worked out on paper."""
    s = build("1f1b", 2, 2)
    tl = simulate(s, Costs(f=1, b=2, w=0, comm=0.5))
    assert ends(tl) == [
        [("F0.0", 0, 1), ("F0.1", 1, 2), ("BW0.0", 5.0, 7.0), ("BW0.1", 8.0, 10.0)],
        [("F0.0", 1.5, 2.5), ("BW0.0", 2.5, 4.5), ("F0.1", 4.5, 5.5), ("BW0.1", 5.5, 7.5)],
    ]
    assert sorted((t.src, t.dst, str(t.op), t.start, t.end) for t in tl.transfers) == [
        (0, 1, "F0.0", 1, 1.5),
        (0, 1, "F0.1", 2, 2.5),
        (1, 0, "BW0.0", 4.5, 5.0),
        (1, 0, "BW0.1", 7.5, 8.0),
    ]


def test_per_stage_costs_by_hand():
    """A slow second stage (F=3) in GPipe pp=2 M=2."""
    tl = simulate(build("gpipe", 2, 2), Costs(f=[1, 3], b=1, w=1))
    assert ends(tl) == [
        [("F0.0", 0, 1), ("F0.1", 1, 2), ("BW0.0", 9, 11), ("BW0.1", 11, 13)],
        [("F0.0", 1, 4), ("F0.1", 4, 7), ("BW0.0", 7, 9), ("BW0.1", 9, 11)],
    ]


def test_pair_cost_by_hand():
    """DualPipeV on one rank, pair time 2.5 instead of F+BW = 3."""
    tl = simulate(build("dualpipev", 1, 2), Costs(f=1, b=1, w=1, pair=2.5))
    assert [(str(e.item), e.start, e.end) for e in tl.events[0]] == [
        ("F0.0", 0, 1), ("F1.0", 1, 2), ("F0.1", 2, 3), ("BW1.0", 3, 5),
        ("F1.1&BW0.0", 5, 7.5), ("BW1.1", 7.5, 9.5), ("B0.1", 9.5, 10.5), ("W0.1", 10.5, 11.5),
    ]  # fmt: skip


def test_route_entered_at_the_last_rank_flows_backwards():
    """A custom placement whose single route starts at rank 1."""
    pl = Placement("custom", 2, 1, (((1, 0), (0, 0)),), (0,))
    s = Schedule("rev", 2, 1, pl, (parse_rank("F0.0 BW0.0"), parse_rank("F0.0 BW0.0")))
    tl = simulate(s, Costs(f=1, b=1, w=1, comm=0.25))
    assert ends(tl) == [[("F0.0", 1.25, 2.25), ("BW0.0", 2.25, 4.25)], [("F0.0", 0, 1), ("BW0.0", 4.5, 6.5)]]


def test_bw_override():
    tl = simulate(build("1f1b", 1, 1), Costs(f=1, b=1, w=1, bw=1.5))
    assert tl.end == 2.5


def shapes():
    """(name, pp, M, options) satisfying each family's constraints."""

    @st.composite
    def draw(d):
        name = d(st.sampled_from(sorted(REGISTRY)))
        pp = d(st.integers(1, 8))
        opts = {}
        if name == "dualpipe":
            pp = 2 * d(st.integers(1, 4))
            M = 2 * d(st.integers(pp, pp + 6))
        elif name == "dualpipev":
            M = d(st.integers(2 * pp, 2 * pp + 9))
        elif name == "chimera":
            pp = 2 * d(st.integers(1, 4))
            M = pp * d(st.integers(1, 3))
        elif name in ("interleaved-1f1b", "interleaved-zb"):
            opts["chunks"] = d(st.integers(1, 4))
            # PyTorch's rounds: every multiple of pp, and some M that are not
            M = d(st.integers(1, 4 * pp).filter(lambda m: m % max(1, m // pp) == 0))
        else:
            M = d(st.integers(1, 24))
        return name, pp, M, opts

    return draw()


positive = st.floats(0.1, 5.0)


@given(shapes(), positive, positive, positive, st.floats(0, 1))
def test_simulated_timelines_are_consistent(shape, f, b, w, comm):
    """Whatever the costs: no rank runs two items at once, every item starts after all
    it needs (plus latency across ranks), and every op occurs exactly once."""
    name, pp, M, opts = shape
    s = build(name, pp, M, **opts)
    tl = simulate(s, Costs(f=f, b=b, w=w, comm=comm))
    for evs in tl.events:
        for a, c in zip(evs, evs[1:]):
            assert c.start >= a.end - 1e-9
    for t in tl.transfers:
        assert t.end == pytest.approx(t.start + comm)
    n = sum(len(evs) for evs in tl.events)
    assert n == sum(len(r) for r in s.ranks)


@given(shapes(), positive, positive, positive)
def test_scaling_all_costs_scales_the_makespan(shape, f, b, w):
    name, pp, M, opts = shape
    s = build(name, pp, M, **opts)
    a = simulate(s, Costs(f=f, b=b, w=w)).end
    assert simulate(s, Costs(f=3 * f, b=3 * b, w=3 * w)).end == pytest.approx(3 * a)
