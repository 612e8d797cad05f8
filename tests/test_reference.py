"""pipesim against the op orders and numbers recorded from the public implementations."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE, reference_cases
from pipesim import REGISTRY, Costs, build, simulate, summarize, validate
from pipesim.files import load_schedule

DUAL = reference_cases("dualpipe") + reference_cases("dualpipev")
ZB_FAMILY = [d for name in ("1f1b", "zb-h1", "interleaved-1f1b") for d in reference_cases(name)]
ZOO = [d for name in ("zb-h2", "zb-v", "v-half", "v-min") for d in reference_cases(name)]


def ids(cases):
    return [c["_path"].stem for c in cases]


def test_reference_data_is_present():
    assert len(reference_cases("dualpipe")) >= 9 and len(reference_cases("dualpipev")) >= 16


@pytest.mark.parametrize("case", DUAL, ids=ids(DUAL))
def test_dualpipe_orders_match_deepseek_exactly(case):
    s = build(case["schedule"], case["pp"], case["microbatches"])
    assert s.to_notation() == case["ranks"]


def assert_reference_numbers(s, case):
    """Simulated with the costs the reference used, ``s`` gives the makespan, spans, busy
    times and peak activations the reference order gives."""
    c = case["costs_per_chunk"]
    rep = summarize(s, simulate(s, Costs(f=c["F"], b=c["B"], w=c["W"], bw=c["BW"], comm=c["comm"])))
    exp = case["expected"]
    assert rep.makespan == exp["makespan"]
    assert rep.span == exp["per_rank_span"]
    assert rep.busy == exp["per_rank_busy"]
    assert rep.peak_activations == exp["peak_live_activations_per_rank"]


@pytest.mark.parametrize("case", ZB_FAMILY, ids=ids(ZB_FAMILY))
def test_generated_orders_reach_reference_numbers(case):
    assert_reference_numbers(build(case["schedule"], case["pp"], case["microbatches"]), case)


def registered_reference_files():
    """Reference files of schedules the registry knows (their placement comes from it)."""
    return [p for p in sorted(REFERENCE.glob("*_pp*_m*.json")) if json.loads(p.read_text())["schedule"] in REGISTRY]


@pytest.mark.parametrize("path", registered_reference_files(), ids=lambda p: p.stem)
def test_reference_files_load_validate_and_simulate(path):
    """The recorded orders themselves (not our generators) are valid, and where the file
    states the numbers its order gives, the simulator reproduces them."""
    d = json.loads(path.read_text())
    s = validate(load_schedule(path))
    assert s.to_notation() == d["ranks"]
    if "expected" in d:
        assert_reference_numbers(s, d)


def test_issue_numbers_for_1f1b_and_zb_h1():
    """With F=B=W=1, BW=2, no communication: 1F1B pp=4 M=8 takes 33, ZB-H1 27 with 4
    live activations on every rank (issue 2)."""
    one = build("1f1b", 4, 8)
    assert summarize(one, simulate(one)).makespan == 33
    zb = build("zb-h1", 4, 8)
    rep = summarize(zb, simulate(zb))
    assert rep.makespan == 27 and rep.peak_activations == [4, 4, 4, 4]


@pytest.mark.parametrize("name", ["dualpipe", "dualpipev"])
@pytest.mark.parametrize("pp,M", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 20), (10, 24)])
def test_dualpipe_bubble_is_deepseek_table2(name, pp, M):
    """DeepSeek-V3 Table 2 (and the DualPipe README for the V variant): bubble per rank
    (PP/2-1)(F&B + B - 3W), B the full backward, activations PP+1 stages, 2x parameters
    for DualPipe. PP counts stages, so DualPipeV on pp ranks has PP = 2pp. Checked here
    with F = B = 1 and W = 0.5 in two regimes: no overlap (F&B = F+B+W) and a pair
    shortened to F+B."""
    for fb in (2.5, 2.0):
        s = build(name, pp, M)
        rep = summarize(s, simulate(s, Costs(f=1, b=1, w=0.5, pair=fb)))
        PP = pp if name == "dualpipe" else 2 * pp
        table2 = (PP / 2 - 1) * (fb + 1.5 - 3 * 0.5)
        # the bubble of the least busy rank (the one with the most overlapped pairs)
        assert max(rep.makespan - b for b in rep.busy) == pytest.approx(table2)
    assert rep.peak_activations == [PP + 1] * pp  # in chunks: PP/pp chunks make a stage
    assert max(rep.peak_activation_memory) == pytest.approx((PP + 1) * pp / PP)
    assert rep.parameter_copies == (2 if name == "dualpipe" else 1)


@pytest.mark.parametrize("case", ZOO, ids=ids(ZOO))
def test_zoo_meets_or_beats_the_reference_generators(case):
    """With the reference's costs (F = B = W = 1, no latency), our generators' makespan
    and peak live activations are at most what sail-sg's generators reach (ZB-V 51 with
    8, V-Half 53 with 6, V-Min 59 with 4 at pp=4, M=8). ZB-H2's per-rank span is at
    most the reference's too (24: zero bubble)."""
    s = validate(build(case["schedule"], case["pp"], case["microbatches"]))
    c = case["costs_per_chunk"]
    rep = summarize(s, simulate(s, Costs(f=c["F"], b=c["B"], w=c["W"], bw=c["BW"], comm=c["comm"])))
    exp = case["expected"]
    assert rep.makespan <= exp["makespan"]
    assert max(rep.peak_activations) <= max(exp["peak_live_activations_per_rank"])
    if case["schedule"] == "zb-h2":
        assert max(rep.span) <= max(exp["per_rank_span"])
