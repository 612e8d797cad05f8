"""The fuzz suite (issue 13), bounded for CI: a few hundred hostile cases over every
command and file format. Each must exit 0 with valid output, or exit 2 with exactly one
``pipesim: error:`` line; never a traceback, a hang, or a clobbered or partial file.
benchmarks/fuzz.py runs the same cases by the ten thousand."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import Case, Pick, case, cost_file, run_case, schedule_file, spec_file, verdict


class DrawPick(Pick):
    def __init__(self, data):
        super().__init__()
        self.data = data

    def one(self, seq):
        return self.data.draw(st.sampled_from(list(seq)))

    def chance(self, p: float) -> bool:
        return self.data.draw(st.floats(0, 1)) < p


def judge(c: Case) -> None:
    with tempfile.TemporaryDirectory(prefix="pipesim-fuzz-") as d:
        r = run_case(c, Path(d), timeout=30)
    bad = verdict(c, r)
    assert bad is None, f"{bad[0]}: pipesim {' '.join(c.argv)}: {bad[1]}"


FAST = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(st.data())
def test_any_command(data):
    judge(case(DrawPick(data)))


def _format_case(pick: Pick, fmt: str) -> Case:
    if fmt == "schedule":
        return Case(["simulate", "-s", "in.json", "--json"], {"in.json": schedule_file(pick)})
    if fmt == "costs":
        return Case(
            ["simulate", "-s", "1f1b", "--pp", "2", "-m", "4", "--components", "c.toml", "--json"], {"c.toml": cost_file(pick)}
        )
    if fmt == "training":
        argv = ["memory", "--model", "llama3-8b", "--gpus", "8", "--pp", "2", "--training", "t.toml", "--json"]
        return Case(argv, {"t.toml": spec_file(pick, "training")})
    argv = ["memory", f"--{fmt}", "f.toml", "--pp", "2", "--json"] + (["--gpus", "8"] if fmt == "cluster" else [])
    return Case(argv, {"f.toml": spec_file(pick, fmt)})


@pytest.mark.parametrize("fmt", ["schedule", "costs", "model", "cluster", "training"])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_every_file_format(fmt, data):
    judge(_format_case(DrawPick(data), fmt))
