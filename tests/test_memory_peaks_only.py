"""The planner asks ``memory`` for peaks only (``curves=False``): the same numbers as the
full report, without the per-change curves it never reads."""

from __future__ import annotations

import pytest

from pipesim import build, simulate
from pipesim.costs import Costs
from pipesim.memory import MemoryModel, memory


@pytest.mark.parametrize(("name", "pp", "M"), [("1f1b", 4, 8), ("zb-h1", 4, 6), ("dualpipev", 4, 8), ("chimera", 4, 8)])
def test_peaks_without_curves_are_the_full_reports(name, pp, M):
    s = build(name, pp, M)
    tl = simulate(s, Costs(f=1.0, b=1.3, w=0.7))
    mm = MemoryModel(params=(3e6, 2e6, 2e6, 4e6) * (s.placement.stages // 4), activation=1e5, w_share=0.4, dp=2)
    full, peaks = memory(s, tl, mm), memory(s, tl, mm, curves=False)
    assert peaks.peak == full.peak and peaks.activation_peak == full.activation_peak
    assert peaks.static == full.static and peaks.params == full.params
    assert peaks.timeline == [] and len(full.timeline) == pp
    assert max(full.activation_peak) >= 1e5  # a forward's activation is live at the peak
