from __future__ import annotations

import pytest

from pipesim import Event, Placement, Schedule, Timeline, summarize
from pipesim.ir import parse_item
from pipesim.metrics import peak_live, steady_state_window


def ev(rank, text, start, end):
    return Event(rank, parse_item(text), start, end)


def hand():
    """Two ranks, one micro-batch each way, with idle gaps, built by hand."""
    r0 = (ev(0, "F0.0", 0, 1), ev(0, "F0.1", 1, 2), ev(0, "BW0.0", 4, 6), ev(0, "BW0.1", 7, 9))
    r1 = (ev(1, "F0.0", 1, 2), ev(1, "BW0.0", 2, 4), ev(1, "F0.1", 4, 5), ev(1, "BW0.1", 5, 7))
    s = Schedule("hand", 2, 2, Placement.flat(2, 2), tuple(tuple(e.item for e in r) for r in (r0, r1)))
    return s, Timeline(2, (r0, r1))


def test_definitions_on_a_hand_timeline():
    s, tl = hand()
    rep = summarize(s, tl)
    assert rep.makespan == 9
    assert rep.busy == [6, 6]
    assert rep.utilization == [6 / 9, 6 / 9]
    assert rep.bubble_ratio == pytest.approx(1 - 12 / 18)
    assert rep.span == [9, 6]
    assert rep.span_bubble_ratio == pytest.approx((9 - 6) / 9)
    # window: every rank has begun a backward (max(4, 2) = 4) .. first last-forward end (min(2, 5) = 2): empty
    assert rep.steady_state_utilization is None
    assert rep.peak_activations == [2, 1]
    assert rep.parameter_copies == 1


def test_steady_state_window():
    r0 = (
        ev(0, "F0.0", 0, 1),
        ev(0, "BW0.0", 1, 3),
        ev(0, "F0.1", 3, 4),
        ev(0, "F0.2", 6, 7),
        ev(0, "BW0.1", 7, 9),
        ev(0, "BW0.2", 9, 11),
    )
    tl = Timeline(1, (r0,))
    assert steady_state_window(tl) == (1, 7)
    s = Schedule("hand", 1, 3, Placement.flat(1, 3), (tuple(e.item for e in r0),))
    # busy inside [1, 7]: BW0.0 2 + F0.1 1 + F0.2 1 = 4 of 6
    assert summarize(s, tl).steady_state_utilization == pytest.approx(4 / 6)


def test_peak_counts_a_free_before_a_birth_at_the_same_instant():
    evs = [ev(0, "F0.0", 0, 1), ev(0, "B0.0", 1, 2), ev(0, "W0.0", 2, 3), ev(0, "F0.1", 3, 4)]
    assert peak_live(evs) == 1
    evs = [ev(0, "F0.0", 0, 1), ev(0, "B0.0", 1, 2), ev(0, "F0.1", 2, 3), ev(0, "W0.0", 3, 4)]
    assert peak_live(evs) == 2


def test_pair_births_its_forward_and_frees_its_backward():
    evs = [ev(0, "F0.0", 0, 1), ev(0, "F1.1&BW0.0", 1, 3), ev(0, "BW1.1", 3, 5)]
    assert peak_live(evs) == 2
