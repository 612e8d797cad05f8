"""`pipesim plan --seq/--tokens` take what a training file takes, no more and no less: a
sequence of 100M tokens and a run of 1e18 tokens are in range for both, one past either
is refused by both (specs.BOUNDS holds the one bound each)."""

from __future__ import annotations

import argparse

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.spec_args import add_specs
from pipesim.planner.specs import load_training


def flag(name: str, value: str):
    p = argparse.ArgumentParser()
    add_specs(p)
    return getattr(p.parse_args(["--model", "m", "--cluster", "c", f"--{name}", value]), name)


def from_file(tmp_path, key: str, value: str):
    f = tmp_path / "t.toml"
    f.write_text(f"{key} = {value}\n")
    return getattr(load_training(str(f)), key)


@pytest.mark.parametrize("key,top,past", [("seq", "100000000", "100000001"), ("tokens", "1e18", "1.01e18")])
def test_flag_and_file_share_a_bound(tmp_path, capsys, key, top, past):
    assert flag(key, top) == from_file(tmp_path, key, top) == float(top)
    with pytest.raises(PipesimError, match=key):
        from_file(tmp_path, key, past)
    with pytest.raises(SystemExit):
        flag(key, past)
    assert f"--{key}" in capsys.readouterr().err
