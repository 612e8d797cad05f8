"""pipesim profile on what a trace lacks: a per-stage cost no op measured is said to be
filled in (and from what), and an event pipesim reads without a numeric time is refused.

The traces are written here with plain numbers, so every expected value is arithmetic on
numbers in the test.
"""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main
from pipesim.profile.measure import profile

US = 1e-6


def ann(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 100, "ts": ts, "dur": dur}


@pytest.mark.parametrize(
    "bad, says",
    [
        ({"ts": "soon"}, 'event 1 of traceEvents ("attn(F)", cat user_annotation) has ts "soon"'),
        ({"ts": None}, "has ts null"),
        ({"ts": True}, "has ts true"),
        ({"ts": [1]}, "has ts [1]"),
        ({"dur": "3"}, 'has dur "3"'),
        ({"ts": ...}, "has no ts"),
    ],
)
def test_an_annotation_without_a_numeric_time_is_refused_and_nothing_written(tmp_path, capsys, bad, says):
    """Kineto writes every complete event's ts and dur as numbers: such an annotation was
    dropped unsaid (left out of every count), and is now a malformed file."""
    event = {**ann("attn(F)", 20, 5), **bad}
    event = {k: v for k, v in event.items() if v is not ...}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [ann("attn(F)", 0, 10), event]}))
    assert main(["profile", str(path), "-o", str(tmp_path / "c.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pipesim: error: ") and says in err
    assert "expected a number of microseconds" in err
    assert not (tmp_path / "c.toml").exists()


def test_an_event_of_a_kind_pipesim_does_not_read_needs_no_time(tmp_path):
    """Only the events pipesim reads must have their times: another category's is not looked at."""
    other = {"ph": "X", "cat": "python_function", "name": "f", "pid": 1, "tid": 100, "ts": None, "dur": 1}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [other, ann("attn(F)", 0, 10)]}))
    assert profile(path).rows[0].per_layer == pytest.approx(10 * US)
