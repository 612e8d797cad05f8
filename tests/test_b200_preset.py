"""The B200 preset as measured: BF16 multiplies, NVLink collectives, and the weight
gradient accumulated into fp32.

The shares below are measurements, not pipesim's output: MooreThreads/SimuMax's per-shape
B200 table (configs/system/b200_bf16_ceperm.json, commit 4dcaae513ba7679d56c116a17cd4a691ec41e252,
efficiency against 2250 TFLOP/s) for the tp1 shapes of Llama 3 70B and 405B on 4096 tokens,
as (input features, output features, forward, input gradient, weight gradient accumulated
into fp32). Forward: 4096 x in by in x out; input gradient: 4096 x out by out x in; weight
gradient: out x 4096 by 4096 x in.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.collectives import tp_allreduce
from pipesim.planner.compute import FP32_ACCUMULATE_WGRAD_SHARE, gemm, gemm_fbw
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training

TOKENS = 4096
SIMUMAX_B200 = [
    (8192, 10240, 0.6452, 0.4980, 0.5979),
    (8192, 8192, 0.4625, 0.4964, 0.4789),
    (8192, 57344, 0.4867, 0.4829, 0.4536),
    (28672, 8192, 0.4847, 0.4742, 0.4594),
    (16384, 20480, 0.5325, 0.5135, 0.4547),
    (16384, 16384, 0.5097, 0.5149, 0.4523),
    (16384, 106496, 0.4961, 0.5116, 0.4562),
    (53248, 16384, 0.5109, 0.5007, 0.4536),
]


def _measured(flops: float, share: float) -> float:
    return flops / (2250e12 * share)


def test_a_b200_multiply_costs_half_of_peak_as_measured():
    """The Llama 3 70B MLP's down projection, 4096 x 28672 by 28672 x 8192: 2mnk FLOPs at
    the preset's half of 2250 TFLOP/s, over the 148 SMs' waves of 128 x 128 output tiles
    (32 x 64 = 2048 tiles: 14 waves of 148 slots hold 2072), within 5% of its measured time
    (forward 0.4847 of peak)."""
    c, t = load_cluster("b200"), load_training()
    assert c.bf16_tflops == 2250 and c.sms == 148
    flops = 2 * 4096 * 8192 * 28672
    by_hand = flops / (2250e12 * 0.5 * (2048 / 2072))
    assert gemm(c, t, 4096, 8192, 28672, fp8=False) == pytest.approx(by_hand, rel=1e-9)
    assert gemm(c, t, 4096, 8192, 28672, fp8=False) == pytest.approx(_measured(flops, 0.4847), rel=0.05)


def test_the_b200_preset_prices_llamas_multiplies_within_10_percent_of_the_measured_sum():
    """Over the eight measured shapes, forward, input and weight gradients summed: the step's
    multiplies cost what the table says, where the Hopper share the preset had (0.75) made
    them a third too fast."""
    c = load_cluster("b200")
    t = load_training(wgrad_fp32_accumulate=True)
    measured = predicted = hopper = 0.0
    for i, o, f, b, w in SIMUMAX_B200:
        flops = 2 * TOKENS * i * o
        measured += sum(_measured(flops, s) for s in (f, b, w))
        predicted += sum(gemm_fbw(c, t, TOKENS, o, i, fp8=False))
        hopper += sum(gemm_fbw(replace(c, gemm_efficiency=0.75), t, TOKENS, o, i, fp8=False))
    assert predicted == pytest.approx(measured, rel=0.03)
    assert hopper < 0.7 * measured


def test_fp32_accumulation_slows_the_weight_gradient_toward_its_measured_time():
    """Without the term the weight gradients of the measured shapes come out faster than
    measured; with it, closer. The forward and input gradient do not change."""
    c = load_cluster("b200")
    off, on = load_training(), load_training(wgrad_fp32_accumulate=True)
    assert off.wgrad_fp32_accumulate is False  # the default: a plain bf16 weight gradient
    err_off = err_on = 0.0
    for i, o, _, _, w in SIMUMAX_B200:
        real = _measured(2 * TOKENS * i * o, w)
        f0, b0, w0 = gemm_fbw(c, off, TOKENS, o, i, fp8=False)
        f1, b1, w1 = gemm_fbw(c, on, TOKENS, o, i, fp8=False)
        assert (f1, b1) == (f0, b0)
        assert w1 == pytest.approx(w0 / 0.94, rel=1e-12)
        err_off += abs(w0 / real - 1)
        err_on += abs(w1 / real - 1)
    assert err_on < err_off


def test_the_share_applies_to_bf16_only():
    """FP8 weight gradients keep their own rates (FP8_WGRAD_SHARE for block scaling)."""
    c = load_cluster("h100")
    off, on = load_training(precision="fp8"), load_training(precision="fp8", wgrad_fp32_accumulate=True)
    assert gemm_fbw(c, on, 8192, 8192, 8192) == gemm_fbw(c, off, 8192, 8192, 8192)
    # an explicitly BF16 multiply in an FP8 run (the router, the output head) does slow
    assert gemm_fbw(c, on, 8192, 8192, 8192, fp8=False)[2] == pytest.approx(
        gemm_fbw(c, off, 8192, 8192, 8192, fp8=False)[2] / FP32_ACCUMULATE_WGRAD_SHARE
    )


def test_the_switch_must_be_true_or_false():
    with pytest.raises(PipesimError, match="wgrad_fp32_accumulate"):
        load_training(wgrad_fp32_accumulate="yes")


def test_tensor_parallel_collectives_run_at_nccls_measured_bus_bandwidth():
    """SimuMax's NCCL fit on the same DGX B200 node: all-gather and reduce-scatter at
    0.6735 and 0.6731 of 900 GB/s. A tp8 all-gather and reduce-scatter of Llama 3 70B's
    4096 x 8192 bf16 hidden states move 7/8 of the 64 MiB each, after NCCL's latency
    under Simple, the protocol its tuner picks at this size: 8.4 us and 7 NVLink steps of
    3.4 us each (planner/nccl.py; LL128, 14 + 7 x 1.9 us at 0.92 of the rate, is 3.5 us
    slower)."""
    c, t, m = load_cluster("b200"), load_training(seq=4096), load_model("llama3-70b")
    assert c.nvlink_gbps == pytest.approx(0.6735 * 900, rel=0.001)
    assert t.sequence_parallel
    size = 4096 * 8192 * 2
    by_hand = 2 * 7 / 8 * size / (0.6735 * 900e9) + 2 * (8.4 + 7 * 3.4) * 1e-6
    assert tp_allreduce(m, c.resized(8), t, Layout(pp=1, dp=1, tp=8)) == pytest.approx(by_hand, rel=0.001)


# Grouped expert multiplies (TransformerEngine GroupedLinear, bf16, weight gradient
# accumulated into an fp32 main_grad), measured in the same SimuMax table (its
# group_matmul entries) as (experts, tokens an expert, output features, input features,
# forward, input gradient, weight gradient) shares of 2250 TFLOP/s: DeepSeek-V3's expert
# up-projection (7168 -> 2 x 2048) at 32 local experts (EP8) and at 256 (EP1).
SIMUMAX_B200_GROUPED = [
    (32, 1024, 4096, 7168, 0.4571, 0.4355, 0.2888),
    (256, 128, 4096, 7168, 0.2081, 0.2264, 0.0775),
]


@pytest.mark.parametrize("experts, tokens, out, inp, fwd, dgrad, wgrad", SIMUMAX_B200_GROUPED)
def test_grouped_expert_multiplies_cost_what_was_measured(experts, tokens, out, inp, fwd, dgrad, wgrad):
    """Each pass of the grouped multiply within 15% of its measured time, and the three
    together within 10%, at 1024 tokens an expert and at 128 (where the weights are read
    for few tokens: the measured forward is 0.21 of peak, the weight gradient 0.08). The
    roofline's longer-of-the-two and the single multiplies' flat share made the 128-token
    passes 35-62% fast and the 1024-token weight gradient 38% fast."""
    c, t = load_cluster("b200"), load_training(wgrad_fp32_accumulate=True)
    flops = 2 * experts * tokens * out * inp
    real = [_measured(flops, share) for share in (fwd, dgrad, wgrad)]
    priced = gemm_fbw(c, t, tokens, out, inp, fp8=False, count=experts)
    for p, r in zip(priced, real):
        assert p == pytest.approx(r, rel=0.15)
    assert sum(priced) == pytest.approx(sum(real), rel=0.10)


def test_a_single_multiply_keeps_the_roofline_and_the_flat_share():
    """The grouped form is for experts: one multiply of 4096 tokens (the dense table above)
    is still the longer of its loop and its bytes, its weight gradient at the share."""
    c, t = load_cluster("b200"), load_training(wgrad_fp32_accumulate=True)
    f, _, w = gemm_fbw(c, t, TOKENS, 4096, 7168, fp8=False)
    by_hand = 2 * TOKENS * 4096 * 7168 / (2250e12 * 0.5 * (1024 / 1036))  # 32 x 32 tiles in 7 waves of 148
    assert f == pytest.approx(by_hand, rel=1e-9)
    # the weight gradient's 7168 x 4096 output: 56 x 32 tiles in 13 waves of 148
    w_by_hand = 2 * TOKENS * 4096 * 7168 / (2250e12 * 0.5 * (1792 / 1924)) / FP32_ACCUMULATE_WGRAD_SHARE
    assert w == pytest.approx(w_by_hand, rel=1e-9)


def test_without_fp32_accumulation_a_grouped_weight_gradient_is_a_plain_multiply():
    c, t = load_cluster("b200"), load_training()
    assert gemm_fbw(c, t, 1024, 4096, 7168, fp8=False, count=32)[2] == gemm(c, t, 7168, 4096, 1024, fp8=False, count=32)
