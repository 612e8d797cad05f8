"""The documentation is what pipesim does today.

docs/dualpipe.md is what docs/make_docs.py builds from pipesim's output: the text is rebuilt
and compared byte for byte (it holds the hash of each picture's data), and the checked-in
pictures show the timelines the library simulates now. Every other page (README.md and every
docs/*.md, whoever added it) is checked by docs/pages.py: each command it shows runs and exits
as the page says, and the output and figures it quotes are what the command prints now."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import svgread as sv
from conftest import load_script
from pipesim import build, simulate
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Op, Pair
from pipesim.render.chart import Panel

DOCS = Path(__file__).resolve().parents[1] / "docs"


def load(name: str):
    return load_script(DOCS / f"{name}.py")


def make_docs():
    return load("make_docs")


pages = load("pages")


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


@pytest.mark.parametrize("page", pages.pages(), ids=lambda p: p.name)
def test_every_command_on_the_page_runs_and_prints_what_it_quotes(page):
    found = pages.check(page)
    if importlib.util.find_spec("torch") is None and any("pipesim[torch]" in p or "No module named 'torch'" in p for p in found):
        pytest.skip(f"{page.name} runs schedules on torch.distributed: pip install 'pipesim[torch]'")
    assert found == []


def test_the_pages_are_linked_and_their_links_resolve():
    """README links every docs page (but the package description); every relative link
    of every page names a file that exists."""
    readme = pages.ROOT / "README.md"
    linked = set(re.findall(r"\]\(docs/([^)#]+)\)", readme.read_text()))
    for page in pages.pages():
        for target in re.findall(r"\]\(([^)#\s]+)", page.read_text()):
            if not target.startswith(("http://", "https://")):
                assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"
    # pages other helpers add are linked by the lead; these are this README's own
    for own in ("schedules.md", "simulate-and-draw.md", "plan.md", "profile-and-calibrate.md", "run-and-export.md"):
        assert own in linked


def test_the_package_description_stands_alone():
    """docs/package.md is the description a package index shows: no relative link or
    picture (they break there), and no URL of a home the project does not have."""
    text = (DOCS / "package.md").read_text()
    assert not re.search(r"\]\((?!https?://)", text)
    assert "github.com/pipesim" not in text and "github.com/pipesim" not in (pages.ROOT / "pyproject.toml").read_text()


def test_the_checker_catches_a_stale_page(tmp_path):
    """A page whose shown output, quoted figure or exit status no longer holds is reported."""
    page = tmp_path / "stale.md"
    page.write_text(
        "```\n$ pipesim simulate --schedule 1f1b --pp 4 -m 8 --no-timeline\nmakespan 34 ...\n```\n\n"
        "It takes 33 units, or 35.\n<!-- quoted: 35 -->\n\n"
        "```\npipesim simulate --schedule dualpipe --pp 5\n```\n\n"
        "*Not run by the docs test: make run-type.*\n\n```\npipesim simulate --pp 3\n```\n"
    )
    found = pages.check(page)
    assert len(found) == 3, found
    assert "no longer prints 'makespan 34 ...'" in found[0] and "'35'" in found[1] and "exited 2, not 0" in found[2]
