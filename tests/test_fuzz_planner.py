"""The fuzz suite over the planner's recent inputs (tests/fuzzing_planner.py), bounded for
CI: NVL72 GPU counts, cluster rates and domain keys, training keys, pins against the
runnable rules, HuggingFace config.json files and cost files' layer-by-layer memory.
Each case exits 0 with valid output or 2 with one ``pipesim: error:`` line, and writes
nothing it was not asked to."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import RandomPick, case
from fuzzing_planner import RECENT_CLASSES, planner_case
from test_fuzz import DrawPick, judge


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_recent_planner_inputs(data):
    pick = DrawPick(data)
    pick.tame = pick.chance(0.35)
    judge(planner_case(pick))


def test_the_recent_classes_are_drawn():
    """A generator that never reaches a class tests nothing: each of them in many of 400
    seeded cases of the whole fuzz (fuzzing.case hands planner_case a share)."""
    drawn: Counter = Counter()
    for seed in range(400):
        drawn.update(case(RandomPick(random.Random(seed))).tags)
    assert all(drawn[k] >= 10 for k in RECENT_CLASSES), drawn
