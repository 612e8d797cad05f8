"""Schedule files as the commands read them: an unnamed file was "custom" in every line
and output, a name that was no string was printed as its repr ("None"), and the ranks
`ops --json` prints were refused without saying which command writes a schedule file."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, out, err) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (code, out, err)


@pytest.fixture
def mine(tmp_path, capsys):
    """A 1F1B schedule file at pp=2, M=2, made as a user makes one."""
    path = tmp_path / "s.json"
    assert main(["ops", "--schedule", "1f1b", "--pp", "2", "-m", "2", "-o", str(path)]) == 0
    capsys.readouterr()
    return path


def test_an_unnamed_file_is_named_by_its_path(capsys, tmp_path, mine):
    doc = json.loads(mine.read_text())
    del doc["schedule"]
    unnamed = tmp_path / "unnamed.json"
    unnamed.write_text(json.dumps(doc))
    code, out, err = _run(capsys, "validate", "-s", unnamed)
    assert code == 0, err
    assert out.startswith(f"{unnamed}: pp=2, M=2")
    code, out, err = _run(capsys, "simulate", "-s", unnamed, "--json")
    assert code == 0, err
    assert json.loads(out)["schedule"] == str(unnamed)


def test_a_name_that_is_not_a_string_is_refused(capsys, tmp_path, mine):
    doc = json.loads(mine.read_text())
    for value, shown in ((None, "null"), (5, "5")):
        doc["schedule"] = value
        mine.write_text(json.dumps(doc))
        code, out, err = _run(capsys, "simulate", "-s", mine)
        _one_line(code, out, err)
        assert f"schedule must be the schedule's name, a string, got {shown}" in err


def test_the_ranks_ops_json_prints_are_sent_to_ops_o(capsys, tmp_path):
    code, out, err = _run(capsys, "ops", "--schedule", "1f1b", "--pp", 2, "-m", 2, "--json")
    assert code == 0, err
    printed = tmp_path / "s.json"
    printed.write_text(out)
    code, out, err = _run(capsys, "simulate", "--schedule", printed)
    _one_line(code, out, err)
    assert "pipesim ops -s NAME -o FILE.json writes one; ops --json prints the ranks only" in err
