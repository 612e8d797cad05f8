"""benchmarks/attention_gpu.py, gemm_gpu.py, layer_gpu.py and ub_chunks_gpu.py time kernels on a
CUDA GPU; on a machine without one (CI, this project's 2-core box) each must say so in one
line and exit 0, not fail."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize("script", ["attention_gpu", "gemm_gpu", "layer_gpu", "ub_chunks_gpu"])
def test_without_a_gpu_it_says_so_in_one_line(capsys, monkeypatch, script):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the benchmark would time it")
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(script, BENCH / f"{script}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[script] = mod
    spec.loader.exec_module(mod)
    assert mod.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "no CUDA GPU here" in out
