"""``pipesim plan --help`` and ``pipesim memory --help`` offer every shipped preset: a user
reads the list there, and a preset left out (the GB200/GB300 NVL72 racks) is one they never try."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipesim.cli import main

PRESETS = Path(__file__).parent.parent / "src" / "pipesim" / "planner" / "presets"


@pytest.mark.parametrize("command", ["plan", "memory"])
def test_help_names_every_preset(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    for kind, flag in (("clusters", "--cluster CLUSTER"), ("models", "--model MODEL")):
        listed = re.search(re.escape(flag) + r" a \w+ preset \(([^)]*)\)", text).group(1).split(", ")
        assert sorted(listed) == sorted(p.stem for p in (PRESETS / kind).glob("*.toml"))
    assert "gb200-nvl72" in text and "gb300-nvl72" in text


def test_schedules_help_says_what_the_default_search_covers(capsys):
    # zb-auto is searched by default (it was recommended on 1M GPUs), so the help must not exclude it
    from pipesim.planner.candidates import NO_PINS, schedule_variants

    assert "zb-auto" in {name for name, _ in schedule_variants(None, NO_PINS)}
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "but zb-auto" not in text and "default: every schedule" in text
