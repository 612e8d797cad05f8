"""``pipesim memory`` as a user meets it: a layout that is the cluster, and words about a
second parameter copy only where the schedule keeps one."""

from __future__ import annotations

import json

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


def test_chunks_sets_the_virtual_stages_of_the_schedule_beside_1f1b(capsys):
    # Megatron-Bridge runs Qwen3-235B and DeepSeek-V3 with VPP4: memory must size that, not v=2
    base = ["--model", "llama3-70b", "--gpus", 64, "--pp", 4, "--tp", 4, "-s", "interleaved-1f1b", "--json"]
    rows = {}
    for v in (None, 2, 4):
        code, out, _ = _run(capsys, *base, *(["--chunks", v] if v else []))
        row = json.loads(out)["schedules"][-1]
        assert code == 0 and row["schedule"] == f"interleaved-1f1b (v={v or 2})" and row["chunks"] == (v or 2)
        rows[v or 2] = row["activations_gb"]
    # smaller chunks in flight: Korthikanti et al.'s interleaved peak is (1 + (pp-1)/(pp v)) stages of activations
    assert rows[4] < rows[2]
    for schedule in ("dualpipe", "1f1b"):  # no chunks to set: one line, exit status 2
        code, out, err = _run(capsys, "--model", "llama3-8b", "--pp", 2, "-s", schedule, "--chunks", 4)
        assert code == 2 and out == "" and f"{schedule} does not take --chunks" in err and err.count("\n") == 1
