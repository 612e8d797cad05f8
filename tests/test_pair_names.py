"""``pipesim pair``'s terminal picture names each part whole or by a short name it spells
out, never cut mid-word ("DISPATC")."""

from __future__ import annotations

import json
import re

import pytest

from pipesim.cli import main


def _run(capsys, *argv):
    assert main(["pair", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--preset", "ep-1to1", "--layers", "2"], ["--width", "60"], ["--width", "20"]])
def test_every_name_in_the_picture_is_whole_or_spelt_out(capsys, argv):
    # the parts of DeepSeek-V3's Figure 4 chunk: attention, dispatch, MLP, combine, each
    # F, B or W; the JSON lists them by their whole names
    costs = [a for a in argv if a not in ("--width", "60", "20")]  # --json has no width (it is refused beside one)
    parts = {s["part"].split(" ")[0] for s in json.loads(_run(capsys, *costs, "--json"))["segments"]}
    assert {p.split("(")[0] for p in parts} == {"ATTN", "DISPATCH", "MLP", "COMBINE"}
    lines = _run(capsys, *argv).splitlines()
    rows = [x.split("│")[1] for x in lines if x.strip().startswith(("compute │", "comm │"))]
    legend = next((x for x in lines if "names cut to fit:" in x), "")
    spelt = {}
    for group in legend.split("names cut to fit:")[-1].split(","):
        if "=" in group:
            shorts, whole = group.split("=")
            spelt |= {s.strip(): whole.strip() for s in shorts.split(" or ")}
    for token in re.findall(r"[A-Z]+(?:\([FBW]\))?", "".join(rows)):
        name, kind = token.split("(")[0], token[len(token.split("(")[0]) :]
        if token in parts:
            continue
        assert name in spelt, (token, legend)  # a short name the legend spells out ...
        assert spelt[name].startswith(name) and (not kind or spelt[name] + kind in parts)  # ... for a part that runs


def test_a_wide_picture_keeps_whole_names_and_no_legend(capsys):
    out = _run(capsys, "--preset", "ep-1to1")
    assert "DISPATCH(F)" in out and "COMBINE(F)" in out and "names cut to fit" not in out


def test_a_pair_of_no_time_says_n_a_saved_rather_than_dividing_by_zero(capsys):
    # the same zero costs simulate and compare take (test_hardening's strict JSON case):
    # pair divided its pair time by the zero it takes alone, a ZeroDivisionError traceback
    code = main(["pair", "--attn", "0", "--mlp", "0", "--dispatch", "0", "--combine", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "the same ops alone take 0 (n/a saved)" in out
