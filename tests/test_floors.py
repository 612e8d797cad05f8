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


def test_no_kernel_or_layer_below_its_floor():
    """Priced by the planner: a tiny multiply costs its launch, and a small model's layer
    pass at least its kernels' launches and the host's time to issue them."""
    from pipesim.planner.compute import gemm
    from pipesim.planner.layer_costs import layer_costs
    from pipesim.planner.layout import Layout
    from pipesim.planner.specs import load_cluster

    c = load_cluster("a100")
    t = load_training(seq=128, fused_elementwise=False, host_us_per_kernel=10.0)
    assert gemm(c, t, 1, 8, 8) == pytest.approx(kernel_floor(t))
    m = replace(
        load_model("llama3-8b"),
        hidden=256,
        heads=4,
        dense_ffn=512,
        attention=replace(load_model("llama3-8b").attention, kv_heads=2),
    )
    lc = layer_costs(m, 0, c, t, Layout(pp=1, dp=1), "none")
    kf, kb, kw = layer_kernels(m, 0, t)
    assert lc.attn_f + lc.mlp_f >= host_floor(t, kf) * (1 - 1e-9)
    assert lc.attn_b + lc.mlp_b >= host_floor(t, kb) * (1 - 1e-9)
    assert lc.attn_w + lc.mlp_w >= host_floor(t, kw) * (1 - 1e-9)
    graphs = replace(t, cuda_graphs=True)
    fast = layer_costs(m, 0, c, graphs, Layout(pp=1, dp=1), "none")
    assert fast.attn_f + fast.mlp_f < lc.attn_f + lc.mlp_f  # one graph launch instead of kf host issues
    assert fast.attn_f + fast.mlp_f >= kf * kernel_floor(t) * (1 - 1e-9)
