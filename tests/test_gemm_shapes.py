"""Matrix multiplies priced by shape, and FP8 with one scale per tensor.

The shapes and times below are measurements, not pipesim's output: the per-shape H100 BF16
table of XLA's GPU cost model (tensorflow/tensorflow, third_party/xla/xla/service/gpu/model/
matmul_interpolator_data.h, ``sm_90``, bf16 x bf16 -> bf16), every entry of 40 us or more,
as (batch x m, n, k, measured TFLOP/s). A batched multiply's tiles are independent, so the
batch folds into m.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.compute import FP8_WGRAD_SHARE, gemm, gemm_fbw, gemms
from pipesim.planner.specs import cluster_from_table, load_cluster, load_training

XLA_H100 = [
    (4096, 4096, 4096, 783.3),
    (4096, 4096, 1024, 678.7),
    (8192, 512, 4096, 729.7),
    (8192, 1024, 4096, 750.6),
    (8192, 2048, 4096, 783.2),
    (8192, 4096, 2048, 763.0),
    (4096, 2048, 2048, 712.7),
    (8192, 2048, 2048, 725.7),
    (16384, 1024, 1024, 673.8),
    (16384, 4096, 256, 503.9),
    (16384, 4096, 512, 619.9),
]


def _errors(c, t):
    return [gemm(c, t, m, n, k, fp8=False) / (2 * m * n * k / (tf * 1e12)) - 1 for m, n, k, tf in XLA_H100]


def _rms(errors):
    return math.sqrt(sum(math.log1p(e) ** 2 for e in errors) / len(errors))


def test_a_fill_per_tile_fits_the_measured_h100_shapes_where_no_single_share_does():
    c, t = load_cluster("h100"), load_training()
    filled = _errors(replace(c, gemm_efficiency=0.82, gemm_tile_fill_us=0.8), t)
    assert max(abs(e) for e in filled) < 0.05
    assert _rms(filled) < 0.03
    # whatever one share of peak is chosen, the short reductions (k = 256, 512) and the
    # long ones cannot both be right
    best_single = min(_rms(_errors(replace(c, gemm_efficiency=s / 100), t)) for s in range(60, 96))
    assert best_single > 3 * _rms(filled)


def test_the_fill_costs_short_reductions_more_and_is_off_at_zero():
    c, t = load_cluster("h100"), load_training()
    assert c.gemm_tile_fill_us == 0  # the presets price every shape at one share
    on = replace(c, gemm_tile_fill_us=0.8)
    # 8192 x 8192 outputs, compute-bound from k = 512 up (at k = 256 HBM bounds it)
    slower = [gemm(on, t, 8192, 8192, k, fp8=False) / gemm(c, t, 8192, 8192, k, fp8=False) for k in (512, 1024, 8192)]
    assert slower[0] > slower[1] > slower[2] > 1
    # 0.8 us against a k loop of 512 steps of a 128 x 128 tile at 80% of 989 TFLOP/s on 132 SMs
    loop = 512 * 2 * 128 * 128 / (0.8 * 989e12 / 132)
    assert slower[0] == pytest.approx(1 + 0.8e-6 / loop, rel=1e-9)


def test_fp8_multiplies_keep_one_share():
    c, t = load_cluster("h100"), load_training(precision="fp8")
    on = replace(c, gemm_tile_fill_us=0.8)
    assert gemm(on, t, 8192, 8192, 512) == gemm(c, t, 8192, 8192, 512)


def test_per_tensor_fp8_runs_the_weight_gradient_at_the_forward_rate():
    """Block scaling (DeepSeek-V3) runs its weight gradients at FP8_WGRAD_SHARE of the
    forward's rate, plus its re-quantization of both operands; one scale per tensor
    (Transformer Engine's current scaling, torchao) at the forward's, the operands'
    transposed copies written by the casts (tests/test_te_current_casts.py)."""
    c = load_cluster("h100")
    block = load_training(precision="fp8")
    tensor = load_training(precision="fp8", fp8_scaling="tensor")
    shape = [(8192, 8192, 8192, 1)]
    casts = 8192 * (8192 + 8192) * 3 / (c.hbm_tbps * 1e12 * block.hbm_efficiency)
    f_b, _, w_b = gemms(c, block, shape)
    f_t, _, w_t = gemms(c, tensor, shape)
    raw_block = gemm_fbw(c, block, 8192, 8192, 8192)[2]
    raw_tensor = gemm_fbw(c, tensor, 8192, 8192, 8192)[2]
    assert w_b == pytest.approx(raw_block / FP8_WGRAD_SHARE + casts)
    assert w_t == pytest.approx(raw_tensor)
    # each at its own share of FP8 peak: DeepGEMM's 0.6 against per-tensor cuBLAS's 0.709
    assert f_b / f_t == pytest.approx(c.fp8_tensor_gemm_efficiency / c.fp8_gemm_efficiency, rel=1e-6)
    assert w_t < w_b


def test_fp8_scaling_and_its_share_are_checked():
    with pytest.raises(PipesimError, match=r'fp8_scaling must be "block" or "tensor", got \'tile\''):
        load_training(precision="fp8", fp8_scaling="tile")
    base = {
        "name": "x", "gpu": "X", "gpus": 8, "gpus_per_node": 8, "bf16_tflops": 989, "fp8_tflops": 1979,
        "memory_mib": 81559, "nvlink_gbps": 360, "network_gbps": 50,
    }  # fmt: skip
    assert cluster_from_table(dict(base, fp8_tensor_gemm_efficiency=0.7), "c.toml").fp8_tensor_gemm_efficiency == 0.7
    for bad in (0, 1.5):
        with pytest.raises(PipesimError, match="fp8_tensor_gemm_efficiency"):
            cluster_from_table(dict(base, fp8_tensor_gemm_efficiency=bad), "c.toml")
    with pytest.raises(PipesimError, match="gemm_tile_fill_us"):
        cluster_from_table(dict(base, gemm_tile_fill_us=-1), "c.toml")
