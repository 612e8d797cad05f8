"""A flag that takes one value, given twice, is refused naming both values: argparse keeps
the last one silently (`simulate --pp 2 --pp 4` ran pp 4, `report -o a.html -o b.html`
wrote b.html only). Flags meant to repeat (append: draw -o, sweep -o, pair -o) still do."""

from __future__ import annotations

import argparse

import pytest

from pipesim.cli import main
from pipesim.parser import make_parser

# candidate values, tried in order until the flag's own type takes one (its value is not
# what is checked here: only that a second one is refused)
CANDIDATES = "2 4 1 3 0.5 0.25 a.toml b.toml 1f1b gpipe 8,8 h100 llama3-8b even balanced".split()


def _single_value_flags():
    """(command, flag, two values its type takes) for every flag of every command that
    takes a value and is not meant to repeat, read from the parsers themselves."""
    commands = make_parser()._subparsers._group_actions[0].choices
    for name, command in commands.items():
        for action in command._actions:
            if not action.option_strings or action.nargs == 0:
                continue  # positionals, and switches (--json): nothing to keep the last of
            if isinstance(action, (argparse._AppendAction, argparse._HelpAction, argparse._VersionAction)):
                continue
            pool = [str(c) for c in action.choices] if action.choices else CANDIDATES
            ok = []
            for text in pool:
                try:
                    (action.type or str)(text)
                except Exception:  # argparse.ArgumentTypeError, ValueError, PipesimError: not this one
                    continue
                ok.append(text)
            yield name, max(action.option_strings, key=len), ok


FLAGS = list(_single_value_flags())


def test_the_walk_covers_every_command():
    commands = set(make_parser()._subparsers._group_actions[0].choices)
    assert {name for name, _, _ in FLAGS} == commands - {"schedules"}  # which lists the families, and takes no value
    assert len(FLAGS) > 200  # every command's value flags, not a handful


@pytest.mark.parametrize("name,flag,values", FLAGS, ids=[f"{n}{f}" for n, f, _ in FLAGS])
def test_every_single_value_flag_given_twice_is_refused_naming_both_values(capsys, name, flag, values):
    assert values, f"no candidate value fits {name} {flag}"
    first, second = values[0], values[-1] if len(values) > 1 else values[0]
    code = main([name, flag, first, flag, second])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (name, flag, err)
    assert f"{flag} is given twice" in err, err


@pytest.mark.parametrize(
    "argv,said",
    [
        (["simulate", "--pp", "2", "--pp", "4"], "--pp is given twice (2, then 4)"),
        (["report", "-o", "a.html", "-o", "b.html"], "-o is given twice (a.html, then b.html)"),
        (["profile", "-o", "x.toml", "-o", "y.toml"], "-o is given twice (x.toml, then y.toml)"),
        (["simulate", "--pp=2", "--pp", "2"], "--pp is given twice (2, then 2)"),
    ],
)
def test_the_examples_of_the_report_are_refused(capsys, tmp_path, monkeypatch, argv, said):
    monkeypatch.chdir(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and said in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_flags_meant_to_repeat_still_do(capsys, tmp_path):
    a, b = tmp_path / "a.svg", tmp_path / "b.svg"
    assert main(["draw", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(a), "-o", str(b)]) == 0, capsys.readouterr().err
    assert a.exists() and b.exists()
