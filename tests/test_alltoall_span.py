"""NCCL all-to-alls across nodes (benchmarks/data/nccl_alltoall.toml, the third table of
benchmarks/collectives.py): the measured rows as transcribed, the NIC rate nccl-tests'
busbw implies worked by hand, and pipesim's price for an all-to-all, whose share of the
NIC's line rate does not fall with the nodes the group spans (NCCL's own p2p plan keeps
every peer of a group up to its p2p channels x 8 ranks in one round: planner/nccl.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from conftest import load_script, printed
from pipesim.planner import nccl
from pipesim.planner.specs import load_cluster

BENCH = Path(__file__).parents[1] / "benchmarks"


def rows() -> dict[str, dict]:
    return {r["id"]: r for r in tomllib.loads((BENCH / "data" / "nccl_alltoall.toml").read_text())["row"]}


def test_the_data_file_says_what_each_row_is_for():
    """One row set the all-to-all share (DeepEP issue #3's 46 GB/s); every excluded row
    says why, every row names its source, and each gives a busbw or a time."""
    data = rows()
    assert {r["role"] for r in data.values()} <= {"in_sample", "out_of_sample", "excluded"}
    assert [k for k, r in data.items() if r["role"] == "in_sample"] == ["deepep3-large"]
    assert data["deepep3-large"]["busbw"] == 46.0 and data["deepep3-large"]["nvlink"] is False
    for r in data.values():
        assert r["source"] and ("busbw" in r or "time_us" in r)
        assert ("why" in r) == (r["role"] == "excluded"), r["id"]


def test_nccl_tests_busbw_falls_with_the_nodes_at_a_constant_nic_rate():
    """busbw = R (ranks - 1) / (ranks - gpus a node) for a NIC rate R (NVIDIA/nccl-tests
    issue #130): 32 ranks on 4 nodes, 53.9 GB/s busbw is 53.9 x 24/31 = 41.73 GB/s at the
    NIC; 64 on 8 nodes, 51.1 is 51.1 x 56/63 = 45.42; with NVLink off every peer is
    remote, so busbw is the NIC rate."""
    bench = load_script(BENCH / "collectives.py")
    data = rows()
    assert bench.nic_rate(data["p5-4n-peak"], 53.9) == pytest.approx(53.9 * 24 / 31)
    assert bench.nic_rate(data["p5-8n-peak"], 51.1) == pytest.approx(51.1 * 56 / 63)
    assert bench.nic_rate(data["deepep3-large"], 46.0) == pytest.approx(46.0)


def test_pipesims_all_to_all_share_is_the_same_on_2_4_and_8_nodes():
    """On the h100 preset (400 Gb/s a GPU) an all-to-all of 8 GiB a rank sends (n - 8)/n
    of it over its NIC at 0.92 x 50 = 46 GB/s whatever the nodes, after 6.6 + 7 x 0.6 +
    (n - 8) x 2.7 us of latency: its busbw is near 46 x 15/8, 46 x 31/24 and 46 x 63/56
    on 2, 4 and 8 nodes of 8."""
    c = load_cluster("h100")
    size = 8 * 2**30
    for nodes in (2, 4, 8):
        n = 8 * nodes
        seconds = (6.6 + 7 * 0.6 + (n - 8) * 2.7) * 1e-6 + size * (n - 8) / n / 46e9
        assert nccl.alltoall_seconds(c, n, 8, size * (n - 1) / n) == pytest.approx(seconds)
        busbw = size * (n - 1) / n / seconds
        assert busbw * (n - 8) / (n - 1) / 1e9 == pytest.approx(46, rel=1e-3), nodes


def test_the_span_table_prints_every_row_and_scores_only_the_out_of_sample_ones():
    bench = load_script(BENCH / "collectives.py")
    _, text = printed(lambda argv: bench.main(), [])
    table = [line for line in text.splitlines() if line.startswith("| ") and ("nccl#" in line or "DeepEP#3" in line or "RESULTS-p5" in line)]  # fmt: skip
    assert len(table) == len(rows())
    p5 = next(line for line in table if line.startswith("| 32 H100 | 4 |") and "| 64 MiB |" in line)
    assert "| 45.1 GB/s |" in p5 and "| 34.9 GB/s |" in p5 and "out of sample" in p5
    h20 = next(line for line in table if "128 H20" in line)
    assert "excluded (NVIDIA's reply" in h20
    n = sum(r["role"] == "out_of_sample" for r in rows().values())
    assert f"The {n} all-to-alls across nodes not used to set a default: pipesim mean |error|" in text
    assert "large: 2 nodes 46.0 GB/s (H100, IB), 4 nodes 41.7 GB/s (H100, EFA), 8 nodes 45.4 GB/s (H100, EFA)" in text
