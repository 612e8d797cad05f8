"""An output that cannot be written is refused before the work, not after it: a plan's
search runs for minutes, and its answer was lost to a folder that refused the file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner import plan_command


def unwritable_folders(tmp_path: Path) -> list[Path]:
    """Folders this user cannot create a file in: a read-only one of our own (not for root,
    whom permissions do not stop) and /sys (sysfs refuses new files, root's too)."""
    out = []
    if os.geteuid() != 0:
        ro = tmp_path / "read-only"
        ro.mkdir()
        ro.chmod(0o555)
        out.append(ro)
    if Path("/sys").is_dir():
        out.append(Path("/sys"))
    return out


def test_an_unwritable_folder_is_named_before_the_search(tmp_path, capsys, monkeypatch):
    folders = unwritable_folders(tmp_path)
    if not folders:
        pytest.skip("no folder here refuses files")

    def no_search(*a, **k):
        raise AssertionError("searched before checking the output")

    monkeypatch.setattr(plan_command, "search", no_search)
    for folder in folders:
        out = folder / "plan.md"
        code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert f"cannot write {str(out)!r}" in err and "give -o a file in a folder you can write" in err
        assert not out.exists() and not list(folder.glob(".plan.md.*"))
