"""benchmarks/gpu_checks.py, the one command a session lent a GPU runs: here, without a GPU,
it must finish saying there is nothing to measure and write nothing; it must refuse a used
--out before anything; and each way a benchmark can end (a table, a skip, a failure, past
its budget) must come back as its own summary line, with what it printed kept."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCH / "gpu_checks.py"
NAMES = ("ub_chunks_gpu", "layer_gpu", "attention_gpu", "gemm_gpu")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def load():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("gpu_checks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_it_runs_every_gpu_benchmark_there_is():
    """A benchmark added beside the others would be left out of the one command."""
    assert sorted(load().BENCHMARKS) == sorted(p.stem for p in BENCH.glob("*_gpu.py"))


def test_without_a_gpu_it_skips_each_benchmark_and_writes_nothing(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the checks would run")
    r = run("--out", "tables", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{n}: skipped: no CUDA GPU here" for n in NAMES] + [
        "nothing to measure here (no CUDA GPU here); nothing written"
    ]
    assert list(tmp_path.iterdir()) == []  # neither --out nor the default folder


def test_a_folder_holding_anything_is_refused_in_one_line(tmp_path):
    out = tmp_path / "earlier"
    out.mkdir()
    (out / "gemm_gpu.txt").write_text("an earlier session's table\n")
    r = run("--out", str(out), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"--out {out} is not empty" in r.stderr
    assert [p.name for p in out.iterdir()] == ["gemm_gpu.txt"]
    assert (out / "gemm_gpu.txt").read_text() == "an earlier session's table\n"


@pytest.mark.parametrize("args", [["--budget", "0"], ["--budget", "soon"], ["--only", "gemm"]])
def test_a_bad_flag_is_one_line_and_exit_status_2(tmp_path, args):
    r = run(*args, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and args[0] in r.stderr
    assert list(tmp_path.iterdir()) == []


FAKES = {
    "table": "print('| shape | measured | pipesim |')\nprint('| a | 1 | 2 |')",
    "nogpu": "print('no CUDA GPU here: this benchmark times kernels on one; nothing to measure.')",
    "broken": "import sys\nprint('| shape |')\nsys.exit('RuntimeError: CUDA error: out of memory')",
    "hangs": "import time\nprint('| first row |', flush=True)\ntime.sleep(120)",
}


def test_each_end_of_a_benchmark_is_its_own_summary_line(tmp_path, monkeypatch):
    """Stand-in benchmarks (each takes the --preset the checks pass it): a table is kept
    whole; the one-line no-GPU answer is a skip; a non-zero exit names its status and
    last line; one past its budget is stopped, and the row it printed first is kept."""
    mod = load()
    for name, body in FAKES.items():
        (tmp_path / f"{name}.py").write_text(body + "\n")
    monkeypatch.setattr(mod, "HERE", tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    table = mod.run_one("table", "h100", 60, out)
    assert table.startswith("table: ran in ") and table.endswith(f" s on h100 -> {out / 'table.txt'}")
    assert (out / "table.txt").read_text() == "| shape | measured | pipesim |\n| a | 1 | 2 |\n"
    assert mod.run_one("nogpu", "h200", 60, out) == (
        "nogpu: skipped: no CUDA GPU here: this benchmark times kernels on one; nothing to measure."
    )
    broken = mod.run_one("broken", "h200", 60, out)
    assert broken.startswith("broken: failed (exit status 1) after ")
    assert broken.endswith(f": RuntimeError: CUDA error: out of memory ({out / 'broken.txt'})")
    hangs = mod.run_one("hangs", "h200", 1, out)
    assert hangs == f"hangs: timed out after 1 s (what it printed is in {out / 'hangs.txt'})"
    assert (out / "hangs.txt").read_text() == "| first row |\n"
