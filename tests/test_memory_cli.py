"""``pipesim memory`` as a user meets it: a layout that is the cluster, and words about a
second parameter copy only where the schedule keeps one."""

from __future__ import annotations

from pipesim.cli import main


def _run(capsys, *argv):
    code = main(["memory", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_dp_that_is_not_the_clusters_gpus_is_refused_in_one_line(capsys):
    # pp16 x dp256 is 4096 GPUs on a 2048-GPU cluster: an answer for it would be for a cluster that is not there
    for dp, gpus in ((256, 4096), (64, 1024)):
        code, out, err = _run(capsys, "--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", 16, "--dp", dp)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"= {gpus} GPUs, but h800-2048 has 2048: give --gpus {gpus} or --dp 128" in err
    code, out, _ = _run(capsys, "--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", 16, "--dp", 128)
    assert code == 0 and "pp16 x dp128" in out


def test_no_second_copy_is_explained_for_a_schedule_that_keeps_one(capsys):
    for schedule in ("1f1b", "interleaved-1f1b"):
        code, out, _ = _run(capsys, "--model", "mixtral-8x22b", "--gpus", 64, "--pp", 4, "-s", schedule)
        assert code == 0 and "1 copy of" in out
        assert "second copy" not in out
    code, out, _ = _run(capsys, "--model", "mixtral-8x22b", "--gpus", 64, "--pp", 4, "-s", "dualpipe")
    assert code == 0 and "2 copies of" in out and "the second copy doubles" in out
