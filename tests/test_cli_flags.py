"""Flags as typed: no abbreviations of long flags, on any command."""

from __future__ import annotations

import subprocess
import sys

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
