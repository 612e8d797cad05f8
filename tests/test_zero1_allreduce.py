"""DeepSpeed's ZeRO stage 1 of 2021 (v0.4.0 to v0.5.x) all-reduces every gradient before
each rank steps its partition (zero/stage2.py's buffered_reduce_fallback, with
contiguous_gradients forced off for stage 1): ``zero1_allreduce`` prices that all-reduce in
place of the reduce-scatter, and the parameters are still all-gathered back.

By hand, on a bandwidth-only cluster (no latencies, NVLink 100 GB/s as NCCL reaches it):
a ring over dp = 2 GPUs of one node moves (dp - 1) / dp = 1/2 of the buffer once for a
reduce-scatter or an all-gather and twice for an all-reduce, and a stage's n parameters
are n x 2 bytes of fp16 gradients and n x 2 bytes of fp16 parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest

import test_nccl
import test_planner
from pipesim.errors import PipesimError
from pipesim.ir import Placement
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Cluster, Training, load_training
from pipesim.planner.stages import component_costs
from pipesim.planner.step import step_sync

TINY = replace(test_planner.TINY, layers=4)
GPU = Cluster("t", "X", gpus=4, gpus_per_node=8, bf16_tflops=1e-3, fp8_tflops=0, hbm_gb=80, nvlink_gbps=100, network_gbps=10, gpu_speed_sd=0.0, **test_nccl.BANDWIDTH_ONLY)  # fmt: skip


def dp_comm(t: Training) -> tuple[float, float]:
    """(the exposed data-parallel communication, the stage's parameters) of pp2 x dp2."""
    lay = Layout(pp=2, dp=2)
    mm = memory_model(TINY, t, lay, 2, "none")
    comm = step_sync(GPU, t, lay, Placement.standard("flat", 2, 1), mm, component_costs(TINY, GPU, t, lay, 2, "none"), 3).comm
    return comm, max(map(sum, map(mm.params_at, (0, 1))))


def test_zero1_allreduce_prices_an_all_reduce_and_the_gather_back():
    base = Training(seq=32, global_batch=6, dp_overlap=0.0, zero=1, grad_reduce_bytes=2)
    scatter, n = dp_comm(base)
    reduced, _ = dp_comm(replace(base, zero1_allreduce=True))
    half = 1 / 2 * n * 2 / 100e9  # one pass of a two-GPU ring over n fp16 elements
    assert scatter == pytest.approx(half + half)  # reduce-scatter, then all-gather
    assert reduced == pytest.approx(2 * half + half)  # all-reduce, then all-gather


def test_zero1_allreduce_needs_zero_1():
    with pytest.raises(
        PipesimError, match="zero1_allreduce is DeepSpeed's ZeRO stage 1 reduction; it needs zero = 1, got zero = 2"
    ):
        load_training(zero=2, zero1_allreduce=True)
