"""What a run hands back, read as data: the measured-against-simulated comparison and
the report ``pipesim run`` prints of it. Built from timelines here, no rank started."""

from __future__ import annotations

import argparse
import json

import pytest

from pipesim import Costs, PipesimError, build, simulate, summarize
from pipesim.runtime.results import Comparison, RunResult, compare
from pipesim.runtime.run_report import report


def _synthetic_run(costs: Costs) -> RunResult:
    """A run whose measured timeline is the simulation of its own durations."""
    s = build("1f1b", 1, 2)
    return RunResult(s, simulate(s, costs), [None], 0.0, {}, latency=0.0, costs=costs)


def test_a_step_simulated_as_no_time_has_no_makespan_error():
    """Every op 0 s on one rank: the simulated makespan is 0, and (measured - simulated) /
    simulated was a ZeroDivisionError from the library's compare."""
    run = _synthetic_run(Costs(f=0.0, b=0.0, w=0.0))
    c = compare(run)
    assert c.simulated.makespan == 0
    assert c.makespan_error is None
    # a measured step beside it is no relative error either: there is nothing to be relative to
    measured = summarize(run.schedule, simulate(run.schedule, Costs(f=0.01, b=0.01, w=0.01)))
    assert Comparison(measured, c.simulated, 0.0).makespan_error is None


def test_the_report_of_such_a_run_says_n_a_and_null(capsys):
    run = _synthetic_run(Costs(f=0.0, b=0.0, w=0.0))
    args = argparse.Namespace(json=True, comm=None, timeline=False, width=None)
    assert report(args, [run], []) == 0
    assert json.loads(capsys.readouterr().out)["schedules"][0]["makespan_error"] is None
    args.json = False
    assert report(args, [run], []) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "difference" in x)
    assert line.split()[1] == "n/a", line


def test_the_makespan_error_of_a_timed_run_is_its_relative_difference():
    """1F1B on one rank, two micro-batches: F then BW (B + W) twice, 2 x 30 ms = 60 ms simulated;
    against a measured 75 ms (the same ops at 12.5 ms) the error is +25%."""
    s = build("1f1b", 1, 2)
    simulated = summarize(s, simulate(s, Costs(f=0.01, b=0.01, w=0.01)))
    measured = summarize(s, simulate(s, Costs(f=0.0125, b=0.0125, w=0.0125)))
    assert abs(Comparison(measured, simulated, 0.0).makespan_error - 0.25) < 1e-12


def test_the_json_costs_are_what_the_ranks_slept_and_the_latency_is_the_simulations(capsys):
    """costs.comm was 0.0 (the slept durations carry none) beside simulated.comm, the
    latency the simulation did add: two latencies for one run."""
    run = _synthetic_run(Costs(f=0.01, b=0.02, w=0.03))
    run.latency = 5e-5
    report(argparse.Namespace(json=True, comm=None, timeline=False, width=None), [run], [])
    row = json.loads(capsys.readouterr().out)["schedules"][0]
    assert row["costs"] == {"f": 0.01, "b": 0.02, "w": 0.03}
    assert row["simulated"]["comm"] == 5e-5


def test_two_library_jobs_tracing_into_one_folder_are_refused_before_the_launch(tmp_path, monkeypatch):
    """execute_many ran both, and the second job's rank files replaced the first's after
    the run; pipesim run gives each schedule DIR/NAME, the library takes the folders given."""
    pytest.importorskip("torch")  # the launcher imports it
    from pipesim.runtime.api import execute_many, job

    def no_launch(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr("pipesim.runtime.api.launch", no_launch)
    monkeypatch.setattr("pipesim.runtime.api.check_capacity", lambda *a: None)
    costs = Costs(f=0.001, b=0.001, w=0.001)
    jobs = [
        job(build("1f1b", 2, 2), synthetic=costs, profile=tmp_path),
        job(build("zb-h1", 2, 2), synthetic=costs, profile=f"{tmp_path}/"),
    ]
    with pytest.raises(PipesimError, match="the jobs of 1f1b and zb-h1 would write their traces to one folder"):
        execute_many(jobs)
    assert list(tmp_path.iterdir()) == []


def _ms(rank: int, rows) -> tuple:
    from pipesim.ir import parse_item
    from pipesim.timeline import Event

    return tuple(Event(rank, parse_item(item), a / 1e3, b / 1e3) for item, a, b in rows)


def test_a_synthetic_run_is_re_timed_with_the_times_it_took(capsys):
    """1F1B, pp=2, M=2, every op given 10 ms (BW 20 ms) and a start-up latency of 1 ms:
    simulated 92 ms by hand (rank 0: F0 0-10, F1 10-20; rank 1: F0 11-21, BW0 21-41;
    rank 0: BW0 42-62; rank 1: F1 41-51, BW1 51-71; rank 0: BW1 72-92).

    The run, written by hand: each op 10% long (F 11 ms, BW 22 ms), 0.5 ms between a rank's
    ops, and 1.5 ms from a remote input's end to its consumer's start. So the ops took
    +10%, the runtime 0.5 ms between ops and a transfer 1.0 ms past that; the order
    simulated again with F 11.5, BW 22.5 (each with its 0.5 ms) and 1 ms a transfer ends at
    104 ms (rank 0: F0 0-11.5, F1 -23; rank 1: F0 12.5-24, BW0 -46.5; rank 0: BW0
    47.5-70; rank 1: F1 46.5-58, BW1 -80.5; rank 0: BW1 81.5-104): half a ms off the
    measured 103.5, the last op's gap, which the run did not take. The report said only
    +12.5% against the 92 ms, not that the order ran as simulated and the ops ran long."""
    from pipesim.timeline import Timeline

    s = build("1f1b", 2, 2)
    r0 = _ms(0, [("F0.0", 0, 11), ("F0.1", 11.5, 22.5), ("BW0.0", 47.5, 69.5), ("BW0.1", 81.5, 103.5)])
    r1 = _ms(1, [("F0.0", 12.5, 23.5), ("BW0.0", 24, 46), ("F0.1", 46.5, 57.5), ("BW0.1", 58, 80)])
    costs = Costs(f=0.01, b=0.01, w=0.01)
    run = RunResult(s, Timeline(2, (r0, r1), (), source="measured"), [None, None], 0.0, {}, latency=0.001, costs=costs)
    c = compare(run)
    assert c.simulated.makespan == pytest.approx(0.092)
    assert c.measured.makespan == pytest.approx(0.1035)
    a = c.accounted
    assert a.overrun == pytest.approx(0.10)
    assert a.overhead == pytest.approx(0.0005)
    assert a.wait == pytest.approx(0.001)
    assert a.makespan == pytest.approx(0.104)
    report(argparse.Namespace(json=True, comm=None, timeline=False, width=None), [run], [])
    row = json.loads(capsys.readouterr().out)["schedules"][0]
    assert row["accounted"] == pytest.approx({"overrun": 0.10, "overhead": 0.0005, "wait": 0.001, "makespan": 0.104})
    report(argparse.Namespace(json=False, comm=None, timeline=False, width=None), [run], [])
    text = capsys.readouterr().out
    assert "re-timed" in text and "104.0 ms" in text
    assert "ops +10.0% on their durations, 500 us between a rank's ops, 1000 us a transfer" in text
