"""When no rank idles (``pipesim.steady``), against a brute-force look at every half slot,
and the answers ``simulate`` and ``compare`` give from it and per million tokens."""

from __future__ import annotations

import json

import pytest

from pipesim import Costs, Event, Op, Timeline, build, simulate
from pipesim.cli import main
from pipesim.steady import all_busy


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def busy_slots(tl: Timeline) -> list[float]:
    """The half slots (unit costs: every start and end is whole) where every rank runs an
    item, found by looking at each one."""
    end = round(tl.end)
    return [t + 0.5 for t in range(end) if all(any(e.start < t + 0.5 < e.end for e in evs) for evs in tl.events)]


@pytest.mark.parametrize(
    "name,pp,M", [("1f1b", 4, 8), ("zb-h1", 4, 8), ("dualpipe", 4, 8), ("dualpipev", 4, 8), ("dualpipe", 6, 12)]
)
def test_all_busy_is_every_slot_where_no_rank_idles(name, pp, M):
    tl = simulate(build(name, pp, M), Costs(f=1, b=1, w=1))
    got = all_busy(tl)
    slots = busy_slots(tl)
    assert [t for a, b in got.intervals for t in range(round(a), round(b))] == [t - 0.5 for t in slots]
    assert got.first == slots[0] - 0.5 and got.last == slots[-1] + 0.5
    for a, b in got.gaps:
        assert b > a


def test_1f1b_by_hand():
    # pp=4, F=1, BW=2: rank 3 starts its first forward at 3 and runs it alone until 4,
    # while the others run their warm-up forwards; then rank 0 waits for its first
    # gradient until 10 (3 backwards of 2 after rank 3's BW0 at 4); from 10 it alternates
    # BW and F without a gap until BW4 ends at 24, when it waits in the cool-down.
    got = all_busy(simulate(build("1f1b", 4, 8), Costs(f=1, b=1, w=1)))
    assert got.intervals == ((3.0, 4.0), (10.0, 24.0))
    assert got.longest == (10.0, 24.0)


def test_touching_items_on_different_ranks_make_one_stretch():
    a, b = Op("F", 0, 0), Op("F", 0, 1)
    tl = Timeline(2, ((Event(0, a, 0, 2), Event(0, b, 2, 4)), (Event(1, a, 1, 3), Event(1, b, 3, 5))))
    assert all_busy(tl).intervals == ((1.0, 4.0),)
    assert all_busy(Timeline(2, ((Event(0, a, 0, 1),), (Event(1, a, 1, 2),)))).first is None


def test_measured_items_out_of_order_and_nested_against_every_half_slot():
    # a measured timeline may list a rank's items out of time order, nest one inside
    # another or give one no length: the sweep must sort and merge them per rank
    import random

    rng = random.Random(7)
    for _ in range(200):
        pp = rng.randint(1, 4)
        events = []
        for r in range(pp):
            evs = []
            for m in range(rng.randint(0, 6)):
                a = rng.randint(0, 12)
                evs.append(Event(r, Op("F", 0, m), a, a + rng.randint(0, 4)))
            rng.shuffle(evs)
            events.append(tuple(evs))
        tl = Timeline(pp, events, source="measured")
        got = all_busy(tl)
        slots = busy_slots(tl)
        assert [t for a, b in got.intervals for t in range(round(a), round(b))] == [t - 0.5 for t in slots]
        for a, b in got.gaps:
            assert b > a


def test_simulate_says_when_no_rank_idles(capsys):
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", 4, "-m", 8, "--no-timeline")
    assert code == 0
    assert "no rank idles: from t=3 (first) to t=24 (last), except 1 stretch totalling 6; longest unbroken t=10 to 24" in out
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", 4, "-m", 8, "--json")
    d = json.loads(out)["all_busy"]
    assert d == {
        "first_all_busy": 3.0,
        "last_all_busy": 24.0,
        "longest_all_busy": [10.0, 24.0],
        "all_busy_time": 15.0,
        "gaps": [[4.0, 10.0]],
    }


BASE = "compare --pp 8 -m 16 --schedules 1f1b,dualpipe".split()
PER_TOKEN = [*BASE, *"--seq 4096 --micro-batch-size 2 --time-unit ms".split()]


def test_compare_per_million_tokens(capsys):
    code, out, err = run(capsys, *PER_TOKEN, "--json")
    assert code == 0, err
    d = json.loads(out)
    # 1F1B at pp=8, M=16, unit costs: (M + pp - 1)(F + BW) = 69 units of 1 ms, on 8 GPUs,
    # for 16 x 2 x 4096 = 131072 tokens; DualPipe: 54 (DeepSeek-V3 Table 2's bubble)
    one, dual = d["schedules"]
    assert d["per_token"]["tokens_per_step"] == 131072
    assert one["GPU-h_per_1M_tokens"] == pytest.approx(8 * 0.069 / 3600 / 131072 * 1e6)
    assert dual["GPU-h_per_1M_tokens"] == pytest.approx(8 * 0.054 / 3600 / 131072 * 1e6)
    assert one["vs_1f1b"] == 0 and dual["vs_1f1b"] == pytest.approx(8 * (0.054 - 0.069) / 3600 / 131072 * 1e6)
    code, out, _ = run(capsys, *PER_TOKEN)
    assert "against 1f1b: dualpipe -0.0002543 GPU-h (-21.7%)" in out


def test_compare_per_million_tokens_from_presets(capsys):
    code, out, err = run(capsys, *BASE, *"--model llama3-70b --cluster h100 --json".split())
    assert code == 0, err
    d = json.loads(out)
    assert d["per_token"]["seq"] == 8192 and d["per_token"]["seconds_per_unit"] == 1.0
    for row in d["schedules"]:  # seconds per step, on 8 GPUs, for 16 sequences of 8192 tokens
        assert row["GPU-h_per_1M_tokens"] == pytest.approx(8 * row["makespan"] / 3600 / (16 * 8192) * 1e6)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (
            ["--seq", "4096"],
            "per-token figures need --seq, --micro-batch-size and --time-unit; add --micro-batch-size, --time-unit",
        ),
        (["--cluster", "h100"], "--cluster goes with --model"),
        (["--model", "llama3-70b"], "--model needs --cluster"),
        (["--model", "llama3-70b", "--cluster", "h100", "--f", "2"], "--model brings its own costs"),
        (["--model", "llama3-70b", "--cluster", "h100", "--time-unit", "ms"], "drop --time-unit"),
        (["--model", "gpt9", "--cluster", "h100"], "unknown model 'gpt9'"),
        (["--time-unit", "h"], "invalid choice: 'h'"),
    ],
)
def test_bad_per_token_flags_are_one_line(capsys, argv, needle):
    code, out, err = run(capsys, "compare", "--pp", 8, "-m", 16, "--schedules", "1f1b", *argv)
    assert code == 2 and needle in err and err.count("\n") == 1 and out == ""
