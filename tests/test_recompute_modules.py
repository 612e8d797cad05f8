"""Megatron-Core's recompute modules (``recompute_modules``: "layernorm", "moe_act"), as
Megatron-Bridge's GPT-OSS H100 recipe sets them, derived by hand from Megatron-Core at
0d8e0714c (transformer/transformer_layer.py, moe/experts.py, models/gpt/gpt_layer_specs.py).

On Transformer Engine's layer spec the input norm is fused into the QKV projection
(``input_layernorm`` an ``IdentityOp``), so "layernorm" checkpoints an MoE layer's pre-MLP
RMSNorm alone: its output (h bf16 elements a token) and its fp32 reciprocal RMS (4 bytes)
are no longer kept, and the backward runs its forward again (read h, write h). "moe_act"
checkpoints the experts' weighted quick-GEGLU: its output, fc2's input (f bf16 elements a
routed copy, top_k copies a token), is no longer kept, and the backward runs it again
(read the 2f of fc1's output, write f a copy). One kernel each, beside the layer's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.activations import layer_saved
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.recompute_modules import rerun_kernels
from pipesim.planner.specs import load_cluster, load_model, load_training
from test_hardening import one_line, run
from test_recipe_attention import plan_of

HF = "tests/data/hf"
BOTH = ["layernorm", "moe_act"]


@pytest.fixture
def oss():
    return load_model(f"{HF}/gpt-oss-120b.json")


def test_saved_bytes_drop_by_the_norm_output_and_the_activation_output(oss):
    h, f, k = 2880, 2880, 4  # gpt-oss-120b: hidden, expert width, top 4
    t = load_training(recompute="none")
    plain = sum(layer_saved(oss, 0, t, 1, "none").values())
    lean = sum(layer_saved(oss, 0, replace(t, recompute_modules=tuple(BOTH)), 1, "none").values())
    assert plain - lean == 2 * h + 4 + k * f * 2  # 28,804 bytes a token
    only_norm = sum(layer_saved(oss, 0, replace(t, recompute_modules=("layernorm",)), 1, "none").values())
    assert plain - only_norm == 2 * h + 4


def test_a_full_recompute_or_a_dense_layer_is_left_alone(oss):
    t = load_training(recompute_modules=BOTH)
    assert layer_saved(oss, 0, t, 1, "full") == layer_saved(oss, 0, replace(t, recompute_modules=()), 1, "full")
    dense = replace(oss, moe=None, moe_layers=(), dense_ffn=2880)
    assert layer_saved(dense, 0, t, 1, "none") == layer_saved(dense, 0, replace(t, recompute_modules=()), 1, "none")


def test_the_backward_runs_both_forwards_again(oss):
    """4,096 tokens, ep8: the norm's 2h a token and the activation's 3f a routed copy, bf16,
    at the HBM rate memory-bound kernels reach (hbm_tbps x hbm_efficiency); one kernel each."""
    c = load_cluster("h100").resized(8)
    t = load_training(seq=4096, recompute="none", moe_dispatcher="alltoall")
    lay = Layout(pp=1, dp=8, ep=8)
    plain = layer_costs(oss, 0, c, t, lay, "none")
    redo = layer_costs(oss, 0, c, replace(t, recompute_modules=tuple(BOTH)), lay, "none")
    tokens, h, f, k = 4096, 2880, 2880, 4
    expected = tokens * 2 * (2 * h + 3 * f * k) / (c.hbm_tbps * 1e12 * t.hbm_efficiency)
    assert redo.mlp_b - plain.mlp_b == pytest.approx(expected, rel=1e-9)
    assert (redo.attn_f, redo.mlp_f, redo.attn_b) == (plain.attn_f, plain.mlp_f, plain.attn_b)
    assert rerun_kernels(oss, 0, replace(t, recompute_modules=tuple(BOTH)), "none") == 2
    assert rerun_kernels(oss, 0, replace(t, recompute_modules=tuple(BOTH)), "full") == 0


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (["core_attn"], "entry 'core_attn' is not one pipesim prices"),
        ("layernorm", "must be a list of Megatron-Core module names"),
        (["moe_act", "moe_act"], "names a module twice"),
    ],
)
def test_bad_values_are_one_line(value, says):
    with pytest.raises(PipesimError, match=says) as err:
        load_training(recompute_modules=value)
    assert "\n" not in str(err.value)


def test_a_bad_training_file_is_one_line_and_exit_2(capsys, tmp_path):
    path = tmp_path / "train.toml"
    path.write_text('recompute_modules = ["layernorm", "mlp"]\n')
    code, out, err = run(capsys, "plan", "--model", f"{HF}/gpt-oss-120b.json", "--cluster", "h100", "--training", path)
    one_line(code, err, "recompute_modules entry 'mlp' is not one pipesim prices")
    assert out == ""


def test_only_on_transformer_engines_layer():
    with pytest.raises(PipesimError, match='set fused_kernels = "te"'):
        load_training(recompute_modules=["moe_act"], fused_kernels="megatron-jit", fused_elementwise=True)


def test_megatron_flags_name_the_modules(oss):
    """Megatron-LM's --recompute-modules replaces its default ["core_attn"] and needs
    --recompute-granularity selective (transformer_config.py at 0d8e0714c); pipesim's
    "selective" is core_attn, so it stays in the list beside the modules."""
    flags = recipe(plan_of(oss, Layout(pp=8, dp=8, ep=8), recompute_modules=BOTH))["megatron"]["flags"]
    assert "--recompute-granularity selective" in flags
    assert "--recompute-modules layernorm moe_act" in flags
