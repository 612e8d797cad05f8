"""pipesim profile on what a trace lacks: a per-stage cost no op measured is said to be
filled in (and from what), and an event pipesim reads without a numeric time is refused.

The traces are written here with plain numbers, so every expected value is arithmetic on
numbers in the test.
"""

from __future__ import annotations

import json

import pytest

from pipesim import build
from pipesim.cli import main
from pipesim.ir import Op, ops_of
from pipesim.profile.labels import pipesim_label
from pipesim.profile.measure import Filled, profile

US = 1e-6
GAP = 10  # us between one item's end and the next one's start on a rank: the measured overhead
DUR = {("F", 0): 100, ("F", 1): 110, ("F", 2): 120, ("B", 0): 150, ("BW", 1): 200, ("B", 2): 170, ("W", 0): 40, ("W", 2): 70}


def ann(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 100, "ts": ts, "dur": dur}


def no_w_at_stage_1(folder):
    """zb-h1 at pp=3, M=3, CPU ranges back to back, with rank 1 running a fused backward
    (BW) in place of each B and its W: a whole step, in which stage 1 measures F and BW
    but no B or W, and stages 0 and 2 no BW."""
    s = build("zb-h1", 3, 3)
    for r, items in enumerate(s.ranks):
        t, ev = 0, []
        for item in items:
            if r == 1 and item.kind == "W":
                continue
            if r == 1 and item.kind == "B":
                item = Op("BW", item.chunk, item.mb)
            stages = tuple(s.placement.stage_of(r, op.chunk, op.mb) for op in ops_of(item))
            d = sum(DUR[(op.kind, st)] for op, st in zip(ops_of(item), stages))
            ev.append(ann(pipesim_label(item, r, stages, s.name), t, d))
            t += d + GAP
        (folder / f"rank{r}.json").write_text(json.dumps({"traceEvents": ev}))
    return folder


def test_a_stage_without_a_kind_says_its_cost_was_filled_and_from_what(tmp_path, capsys):
    d = no_w_at_stage_1(tmp_path)
    prof = profile(d)
    # measured: each stage's W plus the time between items; stage 1's is the mean of 0 and 2
    w0, w2 = (40 + GAP) * US, (70 + GAP) * US
    assert prof.stage_costs.w == pytest.approx((w0, (w0 + w2) / 2, w2))
    assert prof.stage_costs.f == pytest.approx(((100 + GAP) * US, (110 + GAP) * US, (120 + GAP) * US))
    bw1 = (200 + GAP) * US  # stages 0 and 2 ran no BW: the one stage that did
    assert prof.stage_costs.bw == pytest.approx((bw1, bw1, bw1))
    # exactly these values, nothing else: B and W at stage 1, BW at stages 0 and 2
    assert prof.filled == (Filled("B", 1, (0, 2)), Filled("W", 1, (0, 2)), Filled("BW", 0, (1,)), Filled("BW", 2, (1,)))

    assert main(["profile", str(d)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    cells = [c.strip() for c in rows["W"].split("│")[2:5]]
    assert cells == ["0.050", "0.065*", "0.080"]  # ms: (50 + 80) / 2 = 65 us, marked
    assert [c.strip() for c in rows["BW"].split("│")[2:5]] == ["0.210*", "0.210", "0.210*"]
    assert "*" not in rows["F"]
    assert "W at stage 1 from stages 0, 2" in out and "* not measured" in out

    assert main(["profile", str(d), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"kind": "w", "stage": 1, "from_stages": [0, 2]} in doc["filled"] and len(doc["filled"]) == 4
    assert doc["stage_costs"]["w"][1] == pytest.approx(65 * US)

    # --flags prints only flags on stdout (they go into a command line); the note goes to stderr
    assert main(["profile", str(d), "--flags"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("--f ") and "filled" not in out
    assert err.count("\n") == 1 and "W at stage 1 from stages 0, 2" in err


def test_a_measured_trace_fills_nothing(tmp_path):
    """The same run with every W: nothing is marked."""
    s = build("zb-h1", 2, 2)
    for r, items in enumerate(s.ranks):
        ev = [ann(pipesim_label(it, r, (r,), s.name), 200 * i, 100) for i, it in enumerate(items)]
        (tmp_path / f"rank{r}.json").write_text(json.dumps({"traceEvents": ev}))
    prof = profile(tmp_path)
    assert prof.filled == () and not any("filled" in n for n in prof.notes)


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
