"""Fitting the compute rates to a measured step (``plan --measured-step``): the fit is of
the run the layout's prediction simulated, so a measurement equal to the prediction changes
nothing, the rescaled prediction is the measurement, and a slower step means slower rates."""

from __future__ import annotations

import pytest

from pipesim.cli import main
from pipesim.planner import calibrate
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training

# llama3-8b on 16 H100s, pp2 x dp8 interleaved-1f1b v4: with the stage split chosen again
# at each factor its step was not monotone in the factor (a fit of the predicted step
# gave x0.997, and 90.2 s and 90.4 s fitted to the same factor)
LAYOUT = {"pp": 2, "dp": 8, "schedule": "interleaved-1f1b", "chunks": 4}


def specs():
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=16)
    return m, c, load_training(base=model_training("llama3-8b"))


def test_measured_equal_to_predicted_fits_no_change():
    m, c, t = specs()
    predicted, _ = calibrate.scaled_step(m, c, t, LAYOUT)
    fit = calibrate.from_step(m, c, t, LAYOUT, predicted.step_time)
    assert fit.compute == pytest.approx(1.0, abs=1e-6)
    assert fit.changes(c, t) == []


@pytest.mark.parametrize("ratio", [0.97, 0.995, 1.004, 1.1, 1.3])
def test_rescaled_prediction_is_the_measured_step(ratio):
    m, c, t = specs()
    predicted, step = calibrate.scaled_step(m, c, t, LAYOUT)
    measured = ratio * predicted.step_time
    fit = calibrate.from_step(m, c, t, LAYOUT, measured)
    assert step(fit.compute) == pytest.approx(measured, rel=1e-6)
    assert (fit.compute < 1) == (ratio > 1)


def test_slower_measurements_fit_lower_rates():
    m, c, t = specs()
    predicted, _ = calibrate.scaled_step(m, c, t, LAYOUT)
    # steps 0.2% apart around the prediction, where re-chosen splits jumped by 0.7%
    measured = [predicted.step_time * (0.99 + 0.002 * i) for i in range(11)]
    rates = [calibrate.from_step(m, c, t, LAYOUT, s).compute for s in measured]
    assert all(a > b for a, b in zip(rates, rates[1:])), rates


def test_plan_says_x1_for_the_predicted_step(capsys):
    m, c, t = specs()
    predicted, _ = calibrate.scaled_step(m, c, t, LAYOUT)
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--top", "1"]
    code = main([*argv, "--measured-step", repr(predicted.step_time), "--measured-on", "pp2,dp8,interleaved-1f1b,v4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "compute rates x1.000, links x1.000: nothing (the estimate already matched)" in out


def test_per_tensor_fp8_share_is_fitted_too():
    """Under fp8_scaling = "tensor" the multiplies run at fp8_tensor_gemm_efficiency; a fit
    that left it alone changed nothing for such runs (its range read 146.06-146.06 s)."""
    m, c, t = specs()
    t = load_training(base=model_training("llama3-8b"), precision="fp8", fp8_scaling="tensor")
    predicted, step = calibrate.scaled_step(m, c, t, LAYOUT)
    fit = calibrate.from_step(m, c, t, LAYOUT, 1.2 * predicted.step_time)
    assert step(fit.compute) == pytest.approx(1.2 * predicted.step_time, rel=1e-6)
    assert any(line.startswith("fp8_tensor_gemm_efficiency") for line in fit.changes(c, t))
