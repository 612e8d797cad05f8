"""The small-kernel regime: no kernel below its launch floor, no layer below the host's
time to issue it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.floors import floored, host_floor, kernel_floor, layer_kernels
from pipesim.planner.specs import load_model, load_training


def test_floors_bind_only_small_work():
    t = load_training()
    assert floored(1.0, 20, t) == 1.0  # a second of work: the floors are microseconds
    assert floored(0.0, 20, t) == pytest.approx(20 * 3.4e-6)  # each kernel's launch
    slow_host = replace(t, host_us_per_kernel=10.0)
    assert floored(0.0, 20, slow_host) == pytest.approx(20 * 10e-6)  # the host issues slower than the GPU runs
    graphs = replace(slow_host, cuda_graphs=True)
    assert host_floor(graphs, 20) == pytest.approx(10e-6)  # one graph launch
    assert floored(0.0, 20, graphs) == pytest.approx(20 * kernel_floor(graphs))


def test_eager_layers_launch_more_kernels():
    m = load_model("llama3-8b")
    fused = layer_kernels(m, 0, load_training())
    eager = layer_kernels(m, 0, load_training(fused_elementwise=False))
    assert eager[0] > fused[0] and eager[2] == fused[2] == 4  # the same four weighted multiplies
    moe = load_model("deepseek-v3")
    assert layer_kernels(moe, moe.layers - 1, load_training())[0] > layer_kernels(moe, 0, load_training())[0]


def test_floor_fields_are_checked():
    from pipesim.errors import PipesimError

    with pytest.raises(PipesimError, match="kernel_floor_us"):
        load_training(kernel_floor_us=-1)
