"""Flags as typed: no abbreviations of long flags, on any command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipesim.parser import make_parser


def test_an_abbreviated_flag_is_refused_in_one_line():
    # argparse's default took --microbatch for --microbatches: a script written so would
    # change meaning the day another flag starting --microbatch is added
    done = subprocess.run(
        [sys.executable, "-m", "pipesim", "simulate", "-s", "1f1b", "--pp", "2", "--microbatch", "4", "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "unrecognized arguments: --microbatch 4" in done.stderr
    assert "did you mean --microbatches?" in done.stderr and "'pipesim simulate --help'" in done.stderr


def test_no_parser_takes_abbreviations():
    top = make_parser()
    commands = top._subparsers._group_actions[0].choices
    assert top.allow_abbrev is False and len(commands) > 10
    assert [name for name, p in commands.items() if p.allow_abbrev] == []


def test_one_file_named_for_two_outputs_is_refused(tmp_path, capsys):
    # sweep -o x.csv --csv x.csv wrote the file twice and said so twice; draw -o a.png -o a.png too
    from pipesim.cli import main

    for argv in (
        ["sweep", "--pp", "4", "-m", "8:16", "-o", str(tmp_path / "s.csv"), "--csv", str(tmp_path / "." / "s.csv")],
        ["draw", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(tmp_path / "a.svg"), "-o", str(tmp_path / "a.svg")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "give each output its own file" in err
    assert list(tmp_path.iterdir()) == []


def test_the_chunks_help_names_every_schedule_that_takes_it(capsys):
    # it named interleaved-1f1b alone; looped-bfs (and the others) take --chunks as well
    from pipesim.cli import main

    for name in ("interleaved-1f1b", "interleaved-1f1b-overlap", "looped-bfs", "interleaved-zb"):
        assert main(["simulate", "-s", name, "--pp", "2", "-m", "4", "--chunks", "3", "--no-timeline"]) == 0
    capsys.readouterr()
    help_text = make_parser()._subparsers._group_actions[0].choices["simulate"].format_help()
    chunks = " ".join(help_text.split("--chunks CHUNKS")[-1].split("--delay-wgrad")[0].split())
    assert "interleaved-1f1b, interleaved-1f1b-overlap, looped-bfs, interleaved-zb" in chunks


def test_each_command_is_listed_with_the_module_that_registers_it():
    # make_parser(argv) imports only the module COMMANDS lists for the command typed: a
    # command registered elsewhere than listed would be an unknown command on its own line
    import importlib

    from pipesim.parser import COMMANDS

    for module, names in COMMANDS.items():
        registered = []

        def command(name, run, help, registered=registered):
            registered.append(name)
            return make_parser()  # a throwaway sub-parser to take the flags

        importlib.import_module(module).add_commands(command)
        assert tuple(registered) == names, module
    top = make_parser()._subparsers._group_actions[0].choices
    assert list(top) == [n for names in COMMANDS.values() for n in names]


def test_a_command_line_imports_its_own_command_only():
    # pipesim --version built every command's parser, the planner's and the profile
    # reader's modules with them; simulate did too
    code = (
        "import json, sys\nfrom pipesim.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pipesim.commands.', 'pipesim.planner', "
        "'pipesim.profile', 'pipesim.render.commands', 'pipesim.runtime')))))"
    )

    def imported(*argv):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert imported("--version") == []
    assert imported("simulate", "-s", "1f1b", "--no-timeline") == ["pipesim.commands.simulate"]
    got = imported("memory", "--help")
    assert "pipesim.planner.commands" in got and "pipesim.commands.simulate" not in got
    assert "pipesim.planner.memory_command" not in got  # the evaluator: imported when memory runs
    assert "pipesim.commands.simulate" in imported("--help")  # the top help lists every command


@pytest.mark.parametrize(
    "typed, said", [(["--timeline", "tl.json"], "unrecognized arguments: tl.json"), (["--timeline=tl.json"], "'tl.json'")]
)
def test_a_file_after_run_timeline_is_told_where_the_file_flag_is(tmp_path, capsys, monkeypatch, typed, said):
    # run's --timeline is a switch, profile's takes FILE.json: `run --timeline tl.json` was
    # told only that tl.json is unrecognized (and --timeline=tl.json that it was ignored)
    from pipesim.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "-s", "1f1b", "--pp", "2", "-m", "2", "--synthetic", *typed]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and list(tmp_path.iterdir()) == []
    assert said in err
    assert "run's --timeline takes no file; pipesim profile DIR --timeline FILE.json writes one" in err
