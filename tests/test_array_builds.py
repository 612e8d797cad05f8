"""Orders the planner builds on every run are laid out as arrays, not Op objects: the
same ops in the same order as the object form they replace."""

from __future__ import annotations

import pytest

from pipesim.autoschedule.problem import Problem
from pipesim.autoschedule.waves import warmups, wave_schedule
from pipesim.costs import Costs
from pipesim.ir import Placement
from pipesim.schedules.zero_bubble import zb_h2


@pytest.mark.parametrize(("pp", "M"), [(1, 1), (2, 3), (4, 7), (4, 12), (9, 40), (16, 31)])
def test_zb_h2_built_directly_is_the_wave_schedules_order(pp, M):
    prob = Problem.of(Placement.flat(pp, M), Costs(), memory_limit=2 * pp)
    want = wave_schedule(prob, warmups(prob, 2.0), 0.0).schedule("zb-h2")
    got = zb_h2(pp, M)
    assert [tuple(r) for r in got.ranks] == [tuple(r) for r in want.ranks]
    assert (got.name, got.pp, got.microbatches, got.placement) == (want.name, want.pp, want.microbatches, want.placement)
