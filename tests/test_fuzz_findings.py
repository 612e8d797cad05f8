"""What writing and running the fuzz over the planner's recent inputs
(tests/fuzzing_planner.py) turned up, each as the command line a user types, run as a
process: a refusal is exit 2, one ``pipesim: error:`` line naming the key, no
traceback, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
H100 = (SRC / "pipesim" / "planner" / "presets" / "clusters" / "h100.toml").read_text()


def refused(tmp_path: Path, *argv: str) -> str:
    """Run ``pipesim argv`` in ``tmp_path``; the one error line, after checking the rest."""
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir())
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "pipesim", *argv], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-500:])
    assert "Traceback" not in r.stderr and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pipesim: error: "), r.stderr
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir()) == before
    return lines[0]


def test_nccl_buffers_past_the_device_name_the_key(tmp_path):
    """nccl_mib_per_group typed in bytes (688 MiB = 721,420,288 B) is more than the whole
    80 GB card (81,559 MiB): memory printed "usable -1512843.2 GB of the card's 85.5 GB"
    and exited 0, and plan refused the layout ("> -1512843 GB usable") without naming
    the key."""
    (tmp_path / "c.toml").write_text(H100 + "nccl_mib_per_group = 721420288\n")
    line = refused(tmp_path, "memory", "--model", "llama3-8b", "--cluster", "c.toml", "--gpus", "8", "--pp", "2")
    assert "nccl_mib_per_group = 7.2142e+08 is not less than memory_mib = 81559" in line and "in MiB" in line
    line = refused(tmp_path, "plan", "--model", "llama3-8b", "--cluster", "c.toml", "--gpus", "8", "--pp", "2")
    assert "nccl_mib_per_group" in line


COSTS = "p2p = 0.05\n[layer]\nattn_f = 1.0\nmlp_f = 1.0\ndispatch_f = 0.5\ncombine_f = 0.5\n"
MEMORY = "[memory]\nhidden = 4096\nheads = 32\nseq = 4096\ndp = 2\nzero = 1\n"


def simulate(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-m", "pipesim", "simulate", *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def test_layers_flag_and_a_cost_files_memory_agree(tmp_path):
    """``--layers 8`` over a cost file of 2 layers with ``[memory]``: the times are 8
    layers' (a makespan 4x the file's), but the memory printed was the file's 2 layers'
    (peak 39.0 and 42.2 GB), where a file of 8 layers reads 146.1 and 168.8. The flag
    beside [memory] is now refused in one line; sizing the memory for 8 layers would do too."""
    (tmp_path / "two.toml").write_text("layers = 2\n" + COSTS + MEMORY)
    (tmp_path / "eight.toml").write_text("layers = 8\n" + COSTS + MEMORY)
    run = ("-s", "dualpipev", "--pp", "2", "-m", "8")
    eight = simulate(tmp_path, *run, "--components", "eight.toml")
    assert eight.returncode == 0
    flag = simulate(tmp_path, *run, "--components", "two.toml", "--layers", "8")
    if flag.returncode == 2:  # refused: one line, nothing else
        assert len(flag.stderr.splitlines()) == 1 and flag.stderr.startswith("pipesim: error: ")
        return
    mem = [line for line in flag.stdout.splitlines() if line.startswith("memory per rank")]
    assert mem == [line for line in eight.stdout.splitlines() if line.startswith("memory per rank")]
