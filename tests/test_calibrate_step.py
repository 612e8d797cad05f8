"""Fitting the compute rates to a measured step (``plan --measured-step``): the fit is of
the run the layout's prediction simulated, so a measurement equal to the prediction changes
nothing, the rescaled prediction is the measurement, and a slower step means slower rates."""

from __future__ import annotations

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
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


@pytest.mark.parametrize(
    "layout, batch, said",
    [
        # 2048 / dp4 = 512 sequences a replica: mb3 does not divide it, the powers of two do
        (
            "pp2,dp4,tp8,mb3,1f1b",
            "2048",
            "2048 sequences a step do not split into dp4 x micro-batches of 3: "
            "each replica takes 512, which mb1, mb2, mb4, mb8, mb16 or mb32 divides",
        ),
        # 6 is no multiple of dp4, whatever the micro-batch (the searched sizes are 1 and 2)
        (
            "pp2,dp4,tp8,1f1b",
            "6",
            "6 sequences a step do not split into dp4 x micro-batches of 1 or 2: "
            "dp4 does not divide 6; give the measured run's --global-batch, a multiple of dp4",
        ),
    ],
)
def test_a_measured_on_micro_batch_that_does_not_split_the_batch_is_told_in_words(capsys, layout, batch, said):
    # it printed the layout as a Python dict and 'no micro-batch size divides the global
    # batch', though mb3 was given
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--global-batch", batch]
    assert main([*argv, "--measured-step", "10", "--measured-on", layout]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "{" not in err
    assert f"the layout {layout} cannot run: {said}" in err


def test_an_unknown_schedule_in_a_layout_is_refused_as_everywhere_else():
    # evaluate_layout had a line of its own ("expected one of ..."), without the closest
    # name the rest of pipesim gives, and refused PyTorch's class name 1F1B that build takes
    m, c, t = specs()
    with pytest.raises(PipesimError, match=r"^unknown schedule '1f1bb' \(did you mean 1f1b\?\); choose from gpipe, 1f1b, "):
        calibrate.evaluate_layout(m, c, t, {"pp": 2, "dp": 8, "schedule": "1f1bb"})
    r = calibrate.evaluate_layout(m, c, t, {"pp": 2, "dp": 8, "schedule": "1F1B"})  # PyTorch's Schedule1F1B
    assert r.candidate.schedule == "1f1b"


@pytest.mark.parametrize(
    "text, schedule",
    [
        # names as --schedule takes them: any case, and PyTorch's class names (Schedule1F1B,
        # ScheduleInterleaved1F1B in torch.distributed.pipelining) without "Schedule"
        ("pp2,dp8,1F1B", "1f1b"),
        ("pp2,dp8,DualPipeV", "dualpipev"),
        ("Interleaved1F1B,pp2,dp8,v4", "interleaved-1f1b"),
        ("pp2,dp8,zb-h1", "zb-h1"),
    ],
)
def test_measured_on_reads_a_schedule_name_as_the_rest_of_the_command_line(text, schedule):
    # --measured-on took registry names only: "cannot read '1F1B'", where --schedule 1F1B
    # and the layout dict's "schedule": "1F1B" were taken
    assert calibrate.parse_layout(text)["schedule"] == schedule


def test_measured_on_refuses_an_unknown_name_as_the_rest_of_the_command_line(capsys):
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--measured-step", "10"]
    assert main([*argv, "--measured-on", "pp2,dp8,dualpip"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "--measured-on: unknown schedule 'dualpip' (did you mean dualpipe?); choose from gpipe, 1f1b," in err
