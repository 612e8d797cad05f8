"""The set-up fits the job: make run installs what the demo needs and nothing else; make test
pins every package that can change a test's result (the linter included), so a new release
elsewhere cannot turn the suite red."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def recipe(target: str) -> str:
    """The recipe lines of one Makefile rule."""
    text = (ROOT / "Makefile").read_text()
    rule = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert rule, f"no rule for {target}"
    return rule.group(1)


def name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower()


def test_make_run_installs_only_the_demo():
    installs = [i for i in re.findall(r"\$\(PIP\) (.*)", recipe("$(RUN_READY)")) if i != "--upgrade pip"]
    assert installs == ["-e '.[plot]'"]
    demo = {name(r) for r in PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["plot"]}
    assert demo == {"numpy", "rich", "matplotlib"}


def test_make_test_pins_everything_that_can_change_a_result():
    pins = dict(
        line.split("==") for line in (ROOT / ".ci" / "pins.txt").read_text().splitlines() if line and not line.startswith("#")
    )
    assert "-c .ci/pins.txt" in recipe("$(TEST_READY)") and "torch_here.py" in recipe("$(TEST_READY)")
    extras = PYPROJECT["optional-dependencies"]
    wanted = {name(r) for r in PYPROJECT["dependencies"] + [r for e in ("plot", "exact", "torch", "test") for r in extras[e]]}
    assert wanted <= set(pins), f"unpinned: {sorted(wanted - set(pins))}"
    assert pins["torch"] == "2.13.0" and re.fullmatch(r"\d+\.\d+\.\d+", pins["ruff"])
