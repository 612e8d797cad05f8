"""The work limit and the bounds on sizes that scale work (``inputs.MAX_OPS`` and the
caps beside it): a size past them is one line and exit 2, before any work; the fast
paths behind them give what the obvious slow code gives."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import hidden_behind, main
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Op, Pair


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv,says",
    [
        (["pair", "--layers", 100_000], ["--layers", "10,000"]),
        (["pair", "--width", 16_000_000], ["--width", "4,000"]),
    ],
)
def test_sizes_past_their_cap_are_one_line(capsys, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert all(s in err for s in says), err


def test_hidden_behind_is_every_overlapping_compute_part():
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 3)
    segs = costs.segments(Pair(Op("F", 0, 1), Op("BW", 1, 0)), (0, 0))
    assert any(g.stream == "comm" for g in segs)
    got = hidden_behind(segs)
    for g in segs:
        if g.stream == "comm":
            want = [h.label.split(" ")[0] for h in segs if h.stream == "compute" and h.start < g.end and h.end > g.start]
            assert got[id(g)] == want


def test_pair_table_stops_at_its_row_cap(capsys):
    _, out, _ = run(capsys, "pair", "--layers", 100, "--json")
    parts = len(json.loads(out)["segments"])
    assert parts > 400
    code, out, _ = run(capsys, "pair", "--layers", 100)
    assert code == 0 and f"the first 400 of {parts} parts; --json lists them all" in out
    assert out.count("ATTN(F)") + out.count("MLP(F)") < parts
