"""What the fuzz over the planner's recent inputs (tests/fuzzing_planner.py) turned up,
each as the command line a user types, run as a process: exit 2, one ``pipesim:
error:`` line naming the key, no traceback, nothing written."""

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
