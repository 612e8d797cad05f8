"""GPU counts that are not whole NVL72 racks: where the job's GPUs sit, which groups stay
inside a rack, and the counts refused.

The placement checked is the one NVIDIA's MLPerf Training v5.1 submission ran
(mlcommons/training_results_v5.1 at 441d65f4): Llama 3.1 405B on 512 GB200 GPUs as
``sbatch -N 128 --segment 16`` on "Tyche (8x NVIDIA GB200 NVL72)", 128 trays of 4 GPUs in
8 racks, 16 trays a rack (NVIDIA/systems/tyche_ngpu512_ngc25.09_nemo.json,
llama31_405b/.../config_GB200_128x4x144xtp4pp8cp2_cg.sh), ranks filling a tray, then the
next of the segment. So rank r of 512 sits in rack r // 64.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.planner.collectives import moe_comm, ring_bandwidth
from pipesim.planner.layout import ATTENTION_ORDER, EXPERT_ORDER, Layout
from pipesim.planner.parallelism import domain_text
from pipesim.planner.specs import load_cluster
from test_planner_layout import GPU, TINY_MOE, T

RACK = 64  # GPUs of the job in each rack: 16 trays of 4


def groups(lay: Layout, name: str) -> list[list[int]]:
    """Every group of dimension ``name``, built from rank coordinates as Megatron-Core's
    RankGenerator orders them (first dimension fastest), not from Layout.stride."""
    order = EXPERT_ORDER if name in ("etp", "ep", "edp") else ATTENTION_ORDER
    sizes = [lay.size(d) for d in order]
    out: dict[tuple, list[int]] = {}
    for coords in itertools.product(*(range(s) for s in sizes)):
        rank, scale = 0, 1
        for c, s in zip(coords, sizes, strict=True):
            rank, scale = rank + c * scale, scale * s
        key = tuple(c for d, c in zip(order, coords, strict=True) if d != name)
        out.setdefault(key, []).append(rank)
    return list(out.values())


def racks(group: list[int]) -> dict[int, int]:
    """Members of ``group`` in each rack."""
    out: dict[int, int] = {}
    for r in group:
        out[r // RACK] = out.get(r // RACK, 0) + 1
    return out


def test_512_gpus_sit_64_a_rack_on_8_racks():
    c = load_cluster("gb200-nvl72", gpus=512)
    assert c.domain == RACK
    assert "512 GPUs as 8 NVLink domains of 64 of 72 (16 of each domain's 18 nodes" in domain_text(c)
    assert load_cluster("gb300-nvl72", gpus=512).domain == RACK
    # whole racks stay whole: 576 = 8 x 72, the presets' 1152 = 16 x 72
    assert load_cluster("gb200-nvl72", gpus=576).domain == load_cluster("gb200-nvl72").domain == 72
    # within one rack the job is one domain, whatever its size
    assert load_cluster("gb200-nvl72", gpus=52).domain == 52
    assert "52 GPUs in one NVLink domain of 72" in domain_text(load_cluster("gb200-nvl72", gpus=52))


@pytest.mark.parametrize(
    "lay, name, inside, per_rack",
    [
        (Layout(pp=8, dp=8, tp=8), "tp", True, 8),  # 8 consecutive ranks, 8 | 64
        (Layout(pp=8, dp=16, tp=4), "dp", True, 16),  # 16 ranks 4 apart: ranks 0-60 of one rack
        (Layout(pp=8, dp=64, ep=64), "ep", True, 64),  # 64 consecutive: one whole rack's share
        (Layout(pp=4, dp=32, tp=4, ep=32), "ep", True, 32),  # the expert mesh ignores tp: 32 consecutive ranks
        (Layout(pp=4, dp=32, tp=4, ep=32, etp=4), "ep", False, 16),  # 32 ranks 4 apart span 128: 2 racks of 16
        (Layout(pp=1, dp=64, tp=8), "dp", False, 8),  # 64 ranks 8 apart over all 8 racks, 8 each
        (Layout(pp=8, dp=16, tp=4), "pp", False, 1),  # stages 64 ranks apart: one a rack
        (Layout(pp=2, dp=64, tp=4), "pp", False, 1),  # stages 256 apart
        (Layout(pp=8, dp=8, tp=4, cp=2), "cp", True, 2),  # MLPerf's TP4 CP2: the tp x cp 8 in a rack
    ],
)
def test_groups_on_512_gb200_by_hand(lay, name, inside, per_rack):
    """Which groups stay in a rack on 512 GPUs, by hand (the comment on each row), held to
    the groups built from rank coordinates with rank r in rack r // 64 (the MLPerf
    placement), and to the planner's span."""
    assert lay.gpus == 512
    found = [racks(g) for g in groups(lay, name)]
    assert all(len(f) == 1 for f in found) is inside
    assert min(min(f.values()) for f in found) == per_rack
    where = lay.span(name, load_cluster("gb200-nvl72", gpus=512).domain)
    assert (where.inside, where.per_domain, where.domains) == (inside, per_rack, max(len(f) for f in found))


def test_ep64_stays_in_a_rack_of_64_but_not_of_72():
    """An ep64 group of 64 consecutive ranks fills a 64-GPU share, so its all-to-all runs
    on NVLink alone: 64 tokens x top 2 x (1 - 1/64) copies of 64 x 2 bytes at 100 GB/s.
    On 576 GPUs (whole racks of 72) the group of ranks 64-127 has 8 in one rack and 56 in
    the next, and its copies to the other rack cross the 10 GB/s network."""
    lay = Layout(pp=8, dp=64, ep=64)
    on_64 = replace(GPU, gpus=512, nvlink_domain=72)
    on_72 = replace(GPU, gpus=576, nvlink_domain=72)
    assert on_64.domain == 64 and on_72.domain == 72
    assert moe_comm(TINY_MOE, on_64, T, lay)[1] == pytest.approx(64 * 2 * (1 - 1 / 64) * 64 * 2 / 100e9)
    assert moe_comm(TINY_MOE, on_72, T, replace(lay, dp=72))[1] > moe_comm(TINY_MOE, on_64, T, lay)[1]


def test_a_data_parallel_ring_over_racks_drives_each_racks_nics():
    """dp64 over tp8 on 512 GPUs: 8 members in each of 8 racks, so the ring crossing each
    rack runs on 8 GPUs' NICs at once: 8 x 50 GB/s x 0.96 (network_share) = 384 GB/s,
    under the 720 GB/s of NVLink."""
    c = load_cluster("gb200-nvl72", gpus=512)
    assert ring_bandwidth(c, Layout(pp=1, dp=64, tp=8), "dp") == pytest.approx(8 * 50e9 * 0.96)


def test_the_placement_is_in_the_json_report(capsys):
    args = ["plan", "--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "512", "--json"]
    code = main([*args, "--tp", "8", "--pp", "1", "--schedules", "1f1b"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and "512 GPUs as 8 NVLink domains of 64 of 72" in out["assumptions"]["nodes"]
    # the same as fields: 128 trays of 4 (DGXNNODES=128), 8 racks of 72 holding 64 of the job's each
    want = {"gpus_per_node": 4, "nodes": 128, "nvlink_domain": 72, "gpus_per_domain": 64, "domains": 8}
    assert out["placement"] == want


def test_an_eight_gpu_node_is_its_own_domain_in_the_json_report(capsys):
    args = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--json"]
    code = main([*args, "--tp", "8", "--pp", "1", "--schedules", "1f1b"])
    out = json.loads(capsys.readouterr().out)
    want = {"gpus_per_node": 8, "nodes": 8, "nvlink_domain": 8, "gpus_per_domain": 8, "domains": 8}
    assert code == 0 and out["placement"] == want


@pytest.mark.parametrize(
    "gpus, line",
    [
        # 25 trays: shares of 5 (20 GPUs, two could share a rack) only; 24 and 26 trays: 2 x 12, 2 x 13
        ("100", "--gpus 100 on gb200-nvl72: its 25 nodes of 4 GPUs do not split into equal shares of 40 to 72 GPUs, one a "
                "72-GPU NVLink domain, as Slurm's --segment places a job across racks; give e.g. 96 (2 NVLink domains of 48) "
                "or 104 (2 NVLink domains of 52)"),
        # 19 trays, a prime above a rack's 18
        ("76", "give e.g. 72 or 80 (2 NVLink domains of 40)"),
        # 129 trays = 3 x 43 does not split; 128 = 8 x 16 and 130 = 10 x 13 do
        ("516", "give e.g. 512 (8 NVLink domains of 64) or 520 (10 NVLink domains of 52)"),
        # part of a tray
        ("514", "--gpus must be a multiple of the 4 GPUs per node (e.g. 512 or 520), got 514"),
    ],
)  # fmt: skip
def test_counts_that_cannot_be_placed_are_one_line(capsys, tmp_path, gpus, line):
    report = tmp_path / "plan.md"
    code = main(["plan", "--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", gpus, "--output", str(report)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and line in err, err
    assert not report.exists()


CLUSTER = """\
name = "x"
gpu = "X"
gpus_per_node = 4
bf16_tflops = 2500
fp8_tflops = 0
memory_mib = 189471
nvlink_gbps = 720
network_gbps = 50
"""


@pytest.mark.parametrize(
    "lines, needle",
    [
        ("gpus = 100\nnvlink_domain = 72\n", "gpus = 100 with nvlink_domain 72: its 25 nodes of 4 GPUs do not split"),
        # 70 lies between 17 and 18 nodes of 4
        (
            "gpus = 144\nnvlink_domain = 70\n",
            "nvlink_domain 70 must be a multiple of gpus_per_node 4 (a domain holds whole nodes): give 68 or 72\n",
        ),
        (
            "gpus = 1152\nnvlink_domain = 72\ndomain_share = 66\n",
            "domain_share 66 must be whole 4-GPU nodes (gpus_per_node), at most nvlink_domain 72",
        ),
        (
            "gpus = 1152\nnvlink_domain = 72\ndomain_share = 76\n",
            "domain_share 76 must be whole 4-GPU nodes (gpus_per_node), at most nvlink_domain 72",
        ),
        ("gpus = 1152\ndomain_share = 64\n", "domain_share is the job's GPUs in each NVLink domain; give nvlink_domain too"),
        # 1080 = 15 x 72 is not a whole number of 64s; 1024 = 16 x 64 and 1088 = 17 x 64 are
        (
            "gpus = 1080\nnvlink_domain = 72\ndomain_share = 64\n",
            "domain_share = 64 does not divide it (a job takes 64 GPUs of each domain); give e.g. 1024 (16 NVLink domains of 64) or 1088 (17 NVLink domains of 64)",
        ),
    ],
)
def test_cluster_files_whose_gpus_cannot_be_placed_are_one_line(capsys, tmp_path, lines, needle):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + lines)
    code = main(["memory", "--model", "llama3-8b", "--pp", "2", "--cluster", str(f)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err, err


def test_a_cluster_file_of_part_racks_loads(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + "gpus = 1024\nnvlink_domain = 72\n")
    assert load_cluster(str(f)).domain == 64  # 256 trays: 16 racks of 16


def test_a_pinned_share_places_1152_gpus_as_mlperf_did(tmp_path):
    """MLPerf Training v5.1's 1152-GPU Flux run: 288 trays, SEGMENT=16, on "Tyche-hsg (18x
    NVIDIA GB200 NVL72)" (flux1/.../hsg_ngpu1152: config_GB200_288x04x08xtp4.sh and
    NVIDIA/systems/hsg_ngpu1152_ngc25.09_nemo.json): 18 racks of 64. Unpinned, 1152 GPUs
    fill 16 racks; with domain_share = 64 they sit as that run's did, and an ep64 group of
    ranks 64-127 stays in one rack (8 + 56 across two racks otherwise)."""
    f = tmp_path / "c.toml"
    f.write_text(CLUSTER + "gpus = 1152\nnvlink_domain = 72\ndomain_share = 64\n")
    c = load_cluster(str(f))
    assert c.domain == 64 and "1152 GPUs as 18 NVLink domains of 64 of 72" in domain_text(c)
    lay = Layout(pp=9, dp=128, ep=64)
    assert lay.span("ep", c.domain).inside and not lay.span("ep", load_cluster("gb200-nvl72").domain).inside
    assert load_cluster(str(f), gpus=512).domain == 64  # --gpus keeps the pinned share
    assert load_cluster(str(f), gpus=72).domain == 72  # one rack's job is one domain
