"""The step's end as Megatron-LM runs it: the passes its DDP and distributed optimizer make
over the gradient buffer and the optimizer shard, against the fused Adam update alone.

Bytes per parameter, from Megatron-LM's code (fp32 gradients and master weights, Adam's two
fp32 moments, bf16 weights): the update reads the gradient (4) and reads and writes the
master and moments (2 x 12) and the bf16 weight is written (2): 30. Megatron adds, over
every local gradient, zeroing (4), the NaN check's norm (4) and, with data-parallel
replicas, the 1/dp scaling (4 + 4); over the shard, the clipping norm (4) and scale
(4 + 4) and the read of the fp32 master the bf16 copy takes (4).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.calibrate import evaluate_layout
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.step import optimizer_seconds

HBM = 8e12 * 0.8  # the B200 preset's 8 TB/s at the default hbm_efficiency


def test_adam_alone_moves_30_bytes_a_shard_parameter():
    c, t = load_cluster("b200"), load_training()
    assert t.optimizer_step == "adam"
    assert optimizer_seconds(c, t, 8e9, 1e9, scaled=True) == pytest.approx(30 * 1e9 / HBM)


@pytest.mark.parametrize("scaled, buffer_bytes", [(False, 8), (True, 16)])
def test_megatron_adds_its_buffer_and_shard_passes(scaled, buffer_bytes):
    c, t = load_cluster("b200"), load_training(optimizer_step="megatron")
    local, shard = 8e9, 1e9
    by_hand = (shard * (30 + 16) + local * buffer_bytes) / HBM
    assert optimizer_seconds(c, t, local, shard, scaled) == pytest.approx(by_hand)


def test_the_switch_moves_a_megatron_step_by_its_bytes():
    """Llama 3 70B cut to 12 layers on one DGX B200 at tp8 (every parameter local and in
    the shard, one replica): the step grows by the extra 24 bytes a parameter."""
    m = replace(load_model("llama3-70b"), layers=12)
    c = load_cluster("b200").resized(8)
    lay = {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "schedule": "1f1b"}
    base = {"seq": 4096, "global_batch": 4, "recompute": "none", "wgrad_fp32_accumulate": True}
    adam = evaluate_layout(m, c, load_training(base=base), lay)
    mega = evaluate_layout(m, c, load_training(base={**base, "optimizer_step": "megatron"}), lay)
    assert mega.step_time - adam.step_time == pytest.approx(adam.dp_sync * 24 / 30, rel=0.01)


def test_megatron_bridge_drops_the_nan_norm_and_the_scaling_pass():
    """Megatron-Bridge's performance configs: no NaN check, 1/dp in the collective. Over the
    buffer only the zeroing (4) is left; the shard pays its 30 + 16."""
    c = load_cluster("b200")
    t = load_training(optimizer_step="megatron", grad_nan_check=False, average_in_collective=True)
    assert optimizer_seconds(c, t, 8e9, 1e9, scaled=True) == pytest.approx((1e9 * 46 + 8e9 * 4) / HBM)


def test_a_bf16_buffer_is_cast_to_fp32_over_the_shard():
    """Megatron-Core without grad_reduce_in_fp32: a 2-byte buffer, zeroed (2), NaN-normed (2)
    and scaled (2 + 2); over the shard the cast (2 + 4), the clipping (12), Adam (4 + 24 + 2)
    and the master read (4): 52."""
    c = load_cluster("b200")
    t = load_training(optimizer_step="megatron", grad_bytes=2)
    assert optimizer_seconds(c, t, 8e9, 1e9, scaled=True) == pytest.approx((1e9 * 52 + 8e9 * 8) / HBM)


@pytest.mark.parametrize(
    "frees, scaled, buffer_bytes",
    [(False, True, 2 + 4), (False, False, 2), (True, True, 4), (True, False, 0)],
)
def test_megatron_fp16_counts_the_loss_scaling_passes(frees, scaled, buffer_bytes):
    """fp16 gradients (2 bytes) and weights: over the shard the cast to fp32 (2 + 4), the
    unscale (4 + 4), the clipping norm and scale (4 + 4 + 4), Adam (4 + 24) and the fp16
    copy from the master (4 + 2): 60 a parameter; over the local gradients the zeroing (2,
    none when zero_grad frees them) and the 1/dp scaling (2 + 2, only with replicas)."""
    c = load_cluster("b200")
    t = load_training(optimizer_step="megatron-fp16", grad_bytes=2, zero_grad_frees=frees)
    assert optimizer_seconds(c, t, 8e9, 1e9, scaled) == pytest.approx((1e9 * 60 + 8e9 * buffer_bytes) / HBM)


def test_an_unknown_optimizer_step_is_one_line():
    with pytest.raises(PipesimError, match="optimizer_step must be one of adam, megatron, megatron-fp16, got 'deepspeed'"):
        load_training(optimizer_step="deepspeed")
