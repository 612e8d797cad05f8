"""The fuzz suite over the planner's recent inputs (tests/fuzzing_planner.py), bounded for
CI: NVL72 GPU counts, cluster rates and domain keys, training keys, pins against the
runnable rules, HuggingFace config.json files and cost files' layer-by-layer memory.
Each case exits 0 with valid output or 2 with one ``pipesim: error:`` line, and writes
nothing it was not asked to."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import Case, RandomPick, case
from fuzzing_planner import RECENT_CLASSES, cluster_file, cost_file, hf_config, planner_case, training_file
from test_fuzz import DrawPick, judge


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_recent_planner_inputs(data):
    pick = DrawPick(data)
    pick.tame = pick.chance(0.35)
    judge(planner_case(pick))


def _format_case(pick, fmt: str) -> Case:
    """One file of ``fmt`` read by the command that reads it, the rest of the line valid."""
    if fmt == "cost":
        return Case(
            ["simulate", "-s", "dualpipev", "--pp", "2", "-m", "8", "--components", "c.toml", "--json"],
            {"c.toml": cost_file(pick)},
        )
    if fmt == "hf":
        return Case(["memory", "--model", "m/config.json", "--pp", "2", "--json"], {"m/config.json": hf_config(pick)})
    if fmt == "training":
        return Case(
            ["memory", "--model", "llama3-8b", "--pp", "2", "--training", "t.toml", "--json"], {"t.toml": training_file(pick)}
        )
    return Case(["memory", "--model", "llama3-8b", "--cluster", "c.toml", "--pp", "2", "--json"], {"c.toml": cluster_file(pick)})


@pytest.mark.parametrize("fmt", ["cost", "hf", "training", "cluster"])
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_recent_file_format(fmt, data):
    pick = DrawPick(data)
    pick.tame = pick.chance(0.35)
    judge(_format_case(pick, fmt))


def test_the_recent_classes_are_drawn():
    """A generator that never reaches a class tests nothing: each of them in many of 400
    seeded cases of the whole fuzz (fuzzing.case hands planner_case a share)."""
    drawn: Counter = Counter()
    for seed in range(400):
        drawn.update(case(RandomPick(random.Random(seed))).tags)
    assert all(drawn[k] >= 10 for k in RECENT_CLASSES), drawn
