"""Rates in a cluster file typed in the wrong unit are refused in one line naming the
key's unit, exit 2, nothing written; rates real GPUs have still load.

The bounds come from published figures: Rubin's HBM4 at 22 TB/s, the fastest announced
(NVIDIA, 2026; H100 SXM 3.35); Vera Rubin's 1.6 Tb/s of scale-out a GPU (two 800 Gb/s
ConnectX-9, NVIDIA GTC DC 2025) = 200 GB/s; NVLink 6 at 3.6 TB/s a GPU both ways, 1,800
GB/s one way. A gigabit figure reads as 8 times the gigabytes it is.
"""

from __future__ import annotations

import re

import pytest

from pipesim.cli import main
from pipesim.planner.specs import load_cluster, preset_names
from test_spec_messages import CLUSTER


def cluster(tmp_path, **rates) -> str:
    """test_spec_messages' H100-like cluster file with ``rates`` in place of its own."""
    text = CLUSTER + "hbm_tbps = 3.35\n"
    for key, value in rates.items():
        text = re.sub(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
    f = tmp_path / "c.toml"
    f.write_text(text)
    return str(f)


@pytest.mark.parametrize(
    "rates, line",
    [
        # an H100's 3.35 TB/s typed as its data sheet's 3,350 GB/s
        ({"hbm_tbps": "3350"}, "hbm_tbps = 3350 looks like GB/s; this key is TB/s (H100 SXM: 3.35): give 3.35"),
        ({"hbm_tbps": "8000"}, "hbm_tbps = 8000 looks like GB/s; this key is TB/s (H100 SXM: 3.35): give 8"),
        # a 400 Gb/s NDR NIC typed as gigabits: 50 GB/s
        ({"network_gbps": "400"}, "network_gbps = 400 looks like gigabits; this key is GB/s (gigabytes, not gigabits, a "
                                  "second) of NIC line rate a GPU, one direction (a 400 Gb/s NIC: 50; 400 Gb/s would be 50), at most 200"),
        ({"network_gbps": "800"}, "800 Gb/s would be 100), at most 200"),
        # a p5 node's 3,200 Gb/s of EFA: no GPU's, in either unit
        ({"network_gbps": "3200"}, "network_gbps = 3200 is more than any GPU has; this key is GB/s (gigabytes, not gigabits"),
        # NVLink 4's 450 GB/s as 3,600 Gb/s
        ({"nvlink_gbps": "3600"}, "nvlink_gbps = 3600 looks like gigabits; this key is GB/s (gigabytes a second) NCCL "
                                  "reaches a GPU, one direction, inside an NVLink domain (H100: 360; 3600 Gb/s would be 450)"),
        ({"network_gbps": "0"}, "network_gbps must be above 0, in GB/s (gigabytes, not gigabits, a second)"),
        ({"hbm_tbps": "-3.35"}, "hbm_tbps must be above 0, in TB/s (terabytes a second) of HBM bandwidth a GPU"),
    ],
)  # fmt: skip
def test_a_rate_in_the_wrong_unit_is_one_line(capsys, tmp_path, rates, line):
    report = tmp_path / "plan.md"
    code = main(["plan", "--model", "llama3-8b", "--cluster", cluster(tmp_path, **rates), "--output", str(report)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert line in err, err
    assert not report.exists()


def test_the_fastest_published_rates_load(tmp_path):
    """Rubin's 22 TB/s HBM4, Vera Rubin's 200 GB/s of network a GPU, NVLink 6's 1,800 GB/s
    one way: at or under the bounds."""
    c = load_cluster(cluster(tmp_path, hbm_tbps="22", network_gbps="200", nvlink_gbps="1800"))
    assert (c.hbm_tbps, c.network_gbps, c.nvlink_gbps) == (22, 200, 1800)


def test_every_preset_loads():
    assert len(preset_names("cluster")) >= 7
    for name in preset_names("cluster"):
        load_cluster(name)


@pytest.mark.parametrize(
    "rates, line",
    [
        # docs/training-and-cluster.md: gpus 1 to 10,000,000, gpus_per_node 1 to 1024; a
        # wrong-typed count was told "from 0", which the next check refused
        ({"gpus": '"16"'}, "gpus must be a whole number from 1 to 10,000,000, got '16'"),
        ({"gpus": "0"}, "gpus must be a whole number from 1 to 10,000,000, got 0"),
        ({"gpus_per_node": "1.5"}, "gpus_per_node must be a whole number from 1 to 1,024, got 1.5"),
    ],
)
def test_a_gpu_count_out_of_range_names_the_range_it_takes(capsys, tmp_path, rates, line):
    assert main(["plan", "--model", "llama3-8b", "--cluster", cluster(tmp_path, **rates)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and line in err, err
