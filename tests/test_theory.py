"""Closed forms against the simulator, over many (pp, M) and random costs."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pipesim import Costs, build, simulate, summarize, theory

cost = st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0])


def sim(name, pp, M, costs, **opts):
    s = build(name, pp, M, **opts)
    return summarize(s, simulate(s, costs))


@given(st.integers(1, 10), st.integers(1, 40), cost, cost, cost, st.sampled_from([0, 0.1, 0.5]))
def test_gpipe(pp, M, f, b, w, c):
    costs = Costs(f=f, b=b, w=w, comm=c)
    rep = sim("gpipe", pp, M, costs)
    assert rep.makespan == pytest.approx(theory.makespan("gpipe", pp, M, costs))
    # the paper's bubble fraction (pp-1)/(M+pp-1), with no communication
    if c == 0:
        assert rep.bubble_ratio == pytest.approx((pp - 1) / (M + pp - 1))
    assert rep.peak_activations == theory.peak_activations("gpipe", pp, M)


@given(st.integers(1, 10), st.integers(1, 40), cost, cost, cost)
def test_1f1b(pp, M, f, b, w):
    costs = Costs(f=f, b=b, w=w)
    rep = sim("1f1b", pp, M, costs)
    assert rep.makespan == pytest.approx(theory.makespan("1f1b", pp, M, costs))
    assert rep.makespan - rep.busy[0] == pytest.approx((pp - 1) * (f + b + w))  # (pp-1)(F+B)
    assert rep.peak_activations == theory.peak_activations("1f1b", pp, M)


@given(st.integers(1, 8), st.integers(1, 6), st.integers(2, 4), cost, cost, cost)
def test_interleaved(pp, k, v, f, b, w):
    M = k * pp
    costs = Costs(f=f, b=b, w=w)
    rep = sim("interleaved-1f1b", pp, M, costs, chunks=v)
    assert rep.makespan == pytest.approx(theory.makespan("interleaved-1f1b", pp, M, costs, chunks=v))
    # Megatron: bubble time is 1F1B's divided by the number of chunks
    full_stage = v * (f + b + w)
    assert rep.makespan - M * full_stage == pytest.approx((pp - 1) * full_stage / v)
    assert rep.peak_activations == theory.peak_activations("interleaved-1f1b", pp, M, chunks=v)


@given(st.integers(1, 8), st.integers(1, 30), st.integers(1, 4))
def test_interleaved_peak_at_any_m_pytorch_takes(pp, M, v):
    """Where pp does not divide M, PyTorch's rounds of M // max(1, M // pp) set the warm-up."""
    assume(M % max(1, M // pp) == 0)
    rep = sim("interleaved-1f1b", pp, M, Costs(), chunks=v)
    assert rep.peak_activations == theory.peak_activations("interleaved-1f1b", pp, M, chunks=v)


@given(st.integers(1, 8), st.integers(1, 24), st.integers(1, 3), cost, cost, cost)
def test_looped_bfs(pp, M, v, f, b, w):
    costs = Costs(f=f, b=b, w=w)
    rep = sim("looped-bfs", pp, M, costs, chunks=v)
    if M >= pp:
        assert rep.makespan == pytest.approx(theory.makespan("looped-bfs", pp, M, costs, chunks=v))
        # the bubble of GPipe on v*M chunk passes: (pp-1)/(vM+pp-1)
        assert rep.bubble_ratio == pytest.approx((pp - 1) / (v * M + pp - 1))
    assert rep.peak_activations == theory.peak_activations("looped-bfs", pp, M, chunks=v)


@given(st.integers(1, 10), st.integers(1, 40), cost, cost, cost)
def test_zb_h1(pp, M, f, b, w):
    assume(M >= pp and w <= min(f, b))
    costs = Costs(f=f, b=b, w=w)
    rep = sim("zb-h1", pp, M, costs)
    # Zero Bubble paper: ZB-H1's bubble is (p-1)(T_F + T_B - T_W)
    assert rep.makespan - rep.busy[0] == pytest.approx((pp - 1) * (f + b - w))
    assert rep.makespan == pytest.approx(theory.makespan("zb-h1", pp, M, costs))
    assert rep.peak_activations == [pp] * pp


@given(st.integers(1, 10), st.integers(1, 40))
def test_zb_h1_peak_any_m(pp, M):
    assert sim("zb-h1", pp, M, Costs()).peak_activations == theory.peak_activations("zb-h1", pp, M)


@given(st.integers(1, 5), st.integers(0, 8), cost, st.sampled_from([0.25, 0.5, 1.0]), st.floats(0.0, 1.0))
def test_dualpipe_family(half, extra, f, wf, overlap):
    """In the regime F = B, W <= F, F&B >= F + B (where Table 2's form is exact)."""
    w = wf * f
    pair = 2 * f + overlap * w  # between F+B and F+B+W
    costs = Costs(f=f, b=f, w=w, pair=pair)
    for name, pp, M in (("dualpipe", 2 * half, 4 * half + 2 * extra), ("dualpipev", half + 1, 2 * half + 2 + extra)):
        rep = sim(name, pp, M, costs)
        assert rep.makespan == pytest.approx(theory.makespan(name, pp, M, costs))
        assert rep.peak_activations == theory.peak_activations(name, pp, M)


@given(st.integers(1, 8), st.integers(1, 24), cost)
def test_zb_h2(pp, M, f):
    """ZB-H2 (Zero Bubble paper, section 3): zero bubble in every rank's span once
    M >= 2pp-1 when F = B = W, with at most 2pp activations."""
    costs = Costs(f=f, b=f, w=f)
    rep = sim("zb-h2", pp, M, costs)
    assert rep.peak_activations == theory.peak_activations("zb-h2", pp, M)
    if M >= 2 * pp - 1:
        assert rep.makespan == pytest.approx(theory.makespan("zb-h2", pp, M, costs))
        assert max(rep.span) == pytest.approx(3 * M * f)
        assert rep.span_bubble_ratio == pytest.approx(0, abs=1e-12)


@given(st.integers(1, 4), st.integers(1, 3), cost, st.floats(0.0, 1.0))
def test_chimera(half, k, f, split):
    """Chimera (Li and Hoefler): bubble ratio (D-2)/(2N+D-2) for D stages and N
    micro-batches when the backward takes as long as the forward; peak activations from
    D/2+1 at the ends to D in the middle for one unit of D micro-batches, D beyond."""
    pp, M = 2 * half, 2 * half * k
    costs = Costs(f=f, b=split * f, w=(1 - split) * f)  # BW = B + W = F
    rep = sim("chimera", pp, M, costs)
    assert rep.makespan == pytest.approx(theory.makespan("chimera", pp, M, costs))
    assert rep.bubble_ratio == pytest.approx((pp - 2) / (2 * M + pp - 2))
    assert rep.peak_activations == theory.peak_activations("chimera", pp, M)
    assert rep.parameter_copies == 2


def test_forms_decline_outside_their_regime():
    assert theory.makespan("1f1b", 4, 8, Costs(comm=0.1)) is None
    assert theory.makespan("zb-h1", 4, 8, Costs(w=2)) is None
    assert theory.makespan("zb-h1", 8, 4, Costs()) is None
    assert theory.makespan("dualpipe", 4, 8, Costs(b=2)) is None
    assert theory.makespan("gpipe", 4, 8, Costs(f=[1, 2, 1, 1])) is None  # not uniform
    assert theory.makespan("zb-h2", 4, 6, Costs()) is None  # M < 2pp-1
    assert theory.makespan("zb-h2", 4, 8, Costs(w=0.5)) is None
    assert theory.makespan("zb-v", 4, 3, Costs()) is None  # M < pp
    assert theory.makespan("chimera", 4, 8, Costs()) is None  # BW = 2F
    assert theory.makespan("v-half", 4, 8, Costs()) is None  # no exact form
    assert theory.makespan("zb-auto", 4, 8, Costs()) is None


def test_every_registered_schedule_has_a_form():
    from pipesim import REGISTRY

    assert set(REGISTRY) <= set(theory.FORMS)
