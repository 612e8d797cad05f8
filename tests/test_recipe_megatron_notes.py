"""Notes the Megatron recipe gives only where they apply.

The CUDA_DEVICE_MAX_CONNECTIONS note is for GPUs before Blackwell:
Megatron-LM d98e8a6, megatron/training/arguments.py, validate_args: the assertion that
CUDA_DEVICE_MAX_CONNECTIONS == "1" with tensor or context parallelism sits under
``get_device_arch_version() < 10`` (compute capability major; 8 Ampere, 9 Hopper, 10
Blackwell: "CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since the Blackwell
architecture"). A100 is compute capability 8.0, H100 9.0, B200 and GB200 10.0 (NVIDIA's
CUDA GPU compute capability table)."""

from __future__ import annotations

import pytest

from pipesim.planner.candidates import Candidate
from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.results import Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training

NOTE = "CUDA_DEVICE_MAX_CONNECTIONS=1: export it"


@pytest.mark.parametrize("cluster, said", [("a100", True), ("h100", True), ("b200", False), ("gb200-nvl72", False)])
def test_the_one_connection_note_only_before_blackwell(cluster, said):
    plan = Plan(load_model("llama3-70b"), load_cluster(cluster, 64), load_training(seq=8192, global_batch=512))
    plan.results.append(Result(Candidate(Layout(pp=1, dp=8, tp=8), "1f1b", None, "selective", 64), True, step_time=1.0))
    meg = recipe(plan)["megatron"]
    assert meg["runs"]
    assert any(NOTE in n for n in meg["notes"]) == said
