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


@pytest.mark.parametrize("command", ["plan", "memory"])
def test_every_option_says_what_it_is(command, capsys):
    # an option listed with no text (memory's --json was) leaves the user guessing
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    options = text.split("options:", 1)[1]
    bare = re.findall(r"^  (--[\w-]+)(?: [A-Z_.,]+| \{[^}]*\})?\n(?!\s{8,}\S)", options, re.M)
    assert not bare, bare


def test_the_training_defaults_the_help_names_are_pipesims(capsys):
    # what a flag left out gives, read off the Training dataclass rather than the help text
    from pipesim.planner.training import Training

    with pytest.raises(SystemExit):  # plan's: memory takes no --tokens or --tp-overlap, which set only times
        main(["plan", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out.split("\ntraining (", 1)[1])
    t = Training()
    for flag, value in (("--seq", t.seq), ("--global-batch", t.global_batch), ("--precision", t.precision),
                        ("--zero", t.zero), ("--recompute", t.recompute), ("--tokens", f"{t.tokens:.0e}".replace("+", ""))):  # fmt: skip
        said = re.search(re.escape(flag) + r" \S+ (.*?)(?= --|$)", text).group(1)
        assert f"pipesim's default {value}" in said, (flag, said)
    overlap = re.search(r"--tp-overlap \S+ (.*)", text).group(1)
    assert f"{t.tp_overlap} (--tp-comm-overlap, AsyncTP; pipesim's default)" in overlap
    assert "micro_pipeline (" in overlap  # every choice of --tp-overlap is explained


def test_every_option_of_every_command_has_help_text():
    # ops/validate --schedule and several --json showed a bare flag in their --help
    import argparse

    from pipesim.parser import make_parser

    commands = next(a for a in make_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bare = [
        (name, a.option_strings[0])
        for name, sub in commands.choices.items()
        for a in sub._actions
        if a.option_strings and not a.help
    ]
    assert not bare, bare


def test_the_top_level_help_names_the_planning_and_running_commands(capsys):
    # it said "schedules: generate, check, simulate, compare": a new user never learnt
    # from it that pipesim plans runs, counts memory per GPU and runs schedules for real
    with pytest.raises(SystemExit):
        main(["--help"])
    description = capsys.readouterr().out.split("options:")[0]
    for command in ("plan", "memory", "run"):
        assert re.search(rf"\b{command}\b", description), command


def test_layout_help_says_it_is_at_most_top(capsys):
    # --layout past --top is refused (the search orders only the --top fastest): the help said
    # only 'plan #N of the ranking'
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    said = re.search(r"--layout N (.*?) --output", text).group(1)
    assert "at most --top" in said
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--top", "2", "--layout", "3"]) == 2
    assert "--layout 3 is past the 2 plans --top ranks" in capsys.readouterr().err
