"""The torchtitan H100 rows' power limit, bracketed rather than priced: their source says the
500 W part's peak lies between the H100 SXM's and the H100 NVL's (torchtitan
benchmarks/llama3_h100_202412_torchtitan.md, footnote 2), so the benchmark simulates them
at both ends. Only the compute peak moves between the two; HBM-bound work and links stay."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import load_script
from pipesim.planner.compute import gemm
from pipesim.planner.specs import load_cluster, load_training

BENCH = Path(__file__).parent.parent / "benchmarks" / "published_runs.py"


def _rows():
    return tomllib.loads((BENCH.parent / "data" / "published_runs.toml").read_text())["run"]


def test_every_500w_row_carries_the_nvl_bound_and_nothing_else_moves():
    rows = [r for r in _rows() if "500 W" in r.get("unknown_hardware", "")]
    assert len(rows) == 18 and all(r["name"].startswith("torchtitan") for r in rows)
    for r in rows:
        # H100 NVL datasheet: 1,671 BF16 and 3,341 FP8 TFLOP/s with sparsity, half dense
        assert r["bound_fields"] == {"bf16_tflops": 835, "fp8_tflops": 1670}, r["name"]
        assert "NVL" in r["bound"], r["name"]
    # a bound only brackets rows kept out of the headline for unknown hardware
    assert all("unknown_hardware" in r for r in _rows() if "bound_fields" in r)


def test_the_bound_slows_multiplies_by_the_peak_ratio_and_hbm_bound_ones_not_at_all():
    sxm = load_cluster("h100")
    nvl = replace(sxm, bf16_tflops=835, fp8_tflops=1670)
    t = load_training(base={})
    big = (8192, 8192, 8192)  # compute-bound: FLOPs at the peak share
    thin = (8, 8192, 8192)  # a few tokens: bytes at HBM bandwidth
    assert gemm(nvl, t, *big) / gemm(sxm, t, *big) == pytest.approx(989 / 835)
    assert gemm(nvl, t, *thin) == pytest.approx(gemm(sxm, t, *thin))


def test_the_benchmark_prints_the_group_at_both_ends():
    bench = load_script(BENCH)  # the script's functions, without running it
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        bench.main(["--no-search", "--only", "torchtitan Llama 3 8B, 8 H100, FSDP"])
    text = out.getvalue()
    left = re.search(r"(\d+) rows \(marked \*\) left out.*500 W.*bias \(mean signed error\) ([-+][\d.]+)%", text)
    same = re.search(r"The same (\d+) rows at the other end.*NVL.*bias \(mean signed error\) ([-+][\d.]+)%", text)
    assert left and same, text
    assert left.group(1) == same.group(1) != "0"
    # at the lower peak every step is longer, so the group's mean error rises
    assert float(same.group(2)) > float(left.group(2))
