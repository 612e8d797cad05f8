"""What a new user met walking the command line: refusals that sent them to a flag the
next run refused too, and flags one command spelled differently from the others."""

from __future__ import annotations

from pipesim.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, out, err) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


def test_a_pin_that_does_not_divide_a_given_gpu_count_says_which_counts_do(capsys):
    # plan said "(or give --gpus)" to a user who had given --gpus 6
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--pp", 4]
    code, out, err = _run(capsys, *argv, "--gpus", 6)
    _one_line(code, out, err)
    assert "give --gpus a multiple of 4" in err and "(or give --gpus)" not in err
