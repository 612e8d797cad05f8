"""docs/dualpipe.md is what docs/make_docs.py builds from pipesim's output today: the
text is rebuilt and compared byte for byte (it holds the hash of each picture's data),
and the checked-in pictures show the timelines the library simulates now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import svgread as sv
from pipesim import build, simulate
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Op, Pair
from pipesim.render.chart import Panel

DOCS = Path(__file__).resolve().parents[1] / "docs"


def make_docs():
    spec = importlib.util.spec_from_file_location("make_docs", DOCS / "make_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_walkthrough_is_what_the_commands_print():
    page = make_docs().page()
    assert page == (DOCS / "dualpipe.md").read_text(), "docs/dualpipe.md is out of date: run make docs"


def texts(name: str) -> str:
    root = sv.parse((DOCS / "dualpipe" / name).read_bytes())
    return "\n".join(t.text or "" for t in root.iter(sv.NS + "text"))


def test_the_pictures_show_todays_timelines():
    shown = texts("pp4_m8.svg")
    for name in ("1f1b", "dualpipe", "dualpipev"):
        s = build(name, 4, 8)
        assert Panel(s, simulate(s)).title in shown
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 1)
    pair = Pair(Op("F", 0, 1), Op("BW", 1, 0))
    assert f"F&BW pair: {costs.pair_time(pair, 0, 0):.6g} on two streams" in texts("pair.svg")
    root = sv.parse((DOCS / "dualpipe" / "sweep_pp8.svg").read_bytes())
    assert [sv.group(root, f"end:{n}").find(f".//{sv.NS}text").text for n in ("1f1b", "zb-h1", "dualpipe", "dualpipev")] == [
        "M=128"
    ] * 4
