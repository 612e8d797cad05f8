"""The plan report's assumptions table reads as the training file is written: numbers a
person can read, and what ``recompute = auto`` chose (planner/assumptions.py)."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main

PLAN = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--tokens", "1e12", "--json"]


def test_tokens_and_switches_read_as_written(capsys):
    assert main(PLAN) == 0
    rows = json.loads(capsys.readouterr().out)["assumptions"]
    assert rows["tokens"] == "1,000,000,000,000"  # was 1000000000000.0
    assert rows["seq"] == "8,192" and rows["flash_attention"] == "true" and rows["micro_batch_sizes"] == "1, 2"
    assert rows["dp_overlap"] == "0.84"


def test_recompute_auto_names_the_plans_choice(capsys):
    assert main([*PLAN, "--recompute", "auto"]) == 0
    d = json.loads(capsys.readouterr().out)
    chosen = d["recommendation"]["recompute"]
    assert chosen in ("none", "selective", "full")
    assert d["assumptions"]["recompute"] == f"auto: the plan chose {chosen}"


def test_tensor_parallelism_says_when_its_gathers_move_fp8(capsys, tmp_path):
    """Under per-tensor FP8 (torchao's Float8 linears, Transformer Engine's current
    scaling) the layers' tensor-parallel all-gathers are priced in FP8
    (collectives.float8_gathers); the report's row says so, and only then."""
    plan = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--gpus", "64", "--tp", "8", "--global-batch", "64", "--json"]
    for casts, scaling, said in (
        ("torchao", "tensor", True),
        ("transformer_engine", "tensor", True),
        ("transformer_engine", "block", False),
    ):
        f = tmp_path / f"{casts}-{scaling}.toml"
        f.write_text(f'precision = "fp8"\nfp8_scaling = "{scaling}"\nfp8_casts = "{casts}"\nsequence_parallel = true\n')
        assert main([*plan, "--training", str(f)]) == 0
        row = json.loads(capsys.readouterr().out)["assumptions"]["tensor parallelism"]
        assert ("all-gathers move FP8, one byte an element" in row) == said


def test_tensor_parallelism_names_te_amax_reductions_and_userbuffers(capsys, tmp_path):
    """The amax all-reduces of Transformer Engine's current scaling and the userbuffers'
    copies (planner/te_tensor_parallel.py) are in the row where, and only where, priced."""
    plan = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--gpus", "64", "--tp", "8", "--global-batch", "64", "--json"]
    for extra, amax, ub in (
        ("", True, False),
        ('ub_fprop_rs = "ring_exchange"\nub_fprop_sm_margin = 1\n', True, True),
        ('fp8_scaling = "block"\n', False, False),
    ):
        f = tmp_path / "t.toml"
        scaling = "" if "fp8_scaling" in extra else 'fp8_scaling = "tensor"\n'
        f.write_text(f'precision = "fp8"\n{scaling}{extra}')
        assert main([*plan, "--training", str(f)]) == 0
        row = json.loads(capsys.readouterr().out)["assumptions"]["tensor parallelism"]
        assert ("all-reduces its amax over the tensor group" in row) == amax
        assert ("userbuffers (ub_fprop_rs = ring_exchange)" in row) == ub
        assert ("leave 1 of the SMs to it" in row) == ub


TP8 = ["plan", "--model", "llama3-70b", "--cluster", "h100", "--gpus", "64", "--tp", "8", "--global-batch", "64", "--json"]


def _tp_row(capsys, tmp_path, training: str) -> str:
    """The tensor-parallelism row of a tp8 plan under the training file's text."""
    f = tmp_path / "t.toml"
    f.write_text(training)
    assert main([*TP8, "--training", str(f)]) == 0
    return json.loads(capsys.readouterr().out)["assumptions"]["tensor parallelism"]


@pytest.mark.parametrize("casts, said", [("torchao", True), ("transformer_engine", False)])
def test_tensor_parallelism_names_torchaos_amax_reductions(capsys, tmp_path, casts, said):
    """torchao's Float8 tensor parallelism's amax all-reduces (planner/torchao_tensor_parallel.py)
    are in the row under torchao's casts only, with the weights' where FSDP does not
    gather them in float8."""
    row = _tp_row(capsys, tmp_path, f'precision = "fp8"\nfp8_scaling = "tensor"\nfp8_casts = "{casts}"\n')
    assert ("torchao's Float8 tensor parallelism: DTensor reduces the shard's max" in row) == said
    assert ("output gradient or weight all-reduces its amax" in row) == said


@pytest.mark.parametrize("kernels, said", [("inductor", True), ("te", False)])
def test_tensor_parallelism_names_the_compiled_recomputes_dropped_collective(capsys, tmp_path, kernels, said):
    """layer_costs.rerun_combine: said under fused_kernels = inductor only."""
    row = _tp_row(capsys, tmp_path, f'fused_kernels = "{kernels}"\n')
    assert ("the compiled backward graph drops" in row) == said


def test_micro_batch_pin_is_what_the_row_says_was_searched(capsys):
    """--micro-batch-size replaces the training's micro_batch_sizes in the search
    (plan_command: ``sizes = [pins.micro_batch]``): the row said "1, 2" while only 4 ran."""
    assert main([*PLAN, "--micro-batch-size", "4", "--recompute", "full"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["recommendation"]["micro_batch_size"] == 4
    assert d["assumptions"]["micro_batch_sizes"] == "4 alone (--micro-batch-size, in place of the training's 1, 2)"


@pytest.mark.parametrize(("precision", "said"), [("bf16", False), ("fp8", True)])
def test_matrix_multiplies_name_fp8_weight_gradients_only_under_fp8(capsys, precision, said):
    """compute.gemm_times slows block-scaled weight gradients and adds their operand
    casts only where ``precision == "fp8"``; a bf16 plan's row claimed them."""
    assert main([*PLAN, "--precision", precision]) == 0
    row = json.loads(capsys.readouterr().out)["assumptions"]["matrix multiplies"]
    assert ("FP8 weight gradients" in row) == said


def test_not_modelled_does_not_deny_the_stragglers_row(capsys):
    """The stragglers row prices the slowest of N GPUs (stragglers.slowest_share); the
    "not modelled" row listed "stragglers" outright, contradicting it."""
    assert main(PLAN) == 0
    rows = json.loads(capsys.readouterr().out)["assumptions"]
    assert "the slowest of its 8 GPUs" in rows["stragglers"]
    assert "stragglers and jitter," not in rows["not modelled"]
    assert "steady spread of GPU speeds" in rows["not modelled"]
