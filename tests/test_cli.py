"""The command line: outputs, and one-line errors with exit status 2 for bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import REFERENCE
from pipesim.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ops_json_matches_reference(capsys):
    code, out, _ = run(capsys, "ops", "--schedule", "dualpipe", "--pp", "4", "--microbatches", "8", "--json")
    assert code == 0
    assert json.loads(out) == {"format": 1, "ranks": json.loads((REFERENCE / "dualpipe_pp4_m8.json").read_text())["ranks"]}


def test_simulate_json_uses_design_names(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "--json")
    assert code == 0
    d = json.loads(out)
    for key in (
        "makespan",
        "busy",
        "utilization",
        "bubble_ratio",
        "span_bubble_ratio",
        "steady_state_utilization",
        "peak_activations",
        "parameter_copies",
    ):
        assert key in d
    assert d["makespan"] == 27 and d["theory"]["makespan"] == 27


def test_simulate_draws_a_timeline(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", "dualpipe", "--pp", "4", "-m", "8", "--width", "0")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("rank")]
    assert len(rows) == 4
    assert "F3&bw5" in rows[0]  # an overlapped pair is one cell
    assert "·" in rows[1]  # idle time is visible


def test_compare_table_and_unrunnable_rows(capsys):
    code, out, _ = run(capsys, "compare", "--pp", "8", "-m", "12", "--json")
    assert code == 0
    rows = {r["schedule"]: r for r in json.loads(out)["schedules"]}
    assert rows["1f1b"]["makespan"] == (12 + 7) * 3
    assert "needs --microbatches >= 2 * --pp = 16" in rows["dualpipe"]["error"]


def test_schedules_lists_every_family(capsys):
    code, out, _ = run(capsys, "schedules", "--json")
    names = {s["name"] for s in json.loads(out)["schedules"]}
    assert {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "dualpipe", "dualpipev"} <= names
    assert {"zb-h2", "zb-v", "v-half", "v-min", "chimera", "zb-auto"} <= names


PAPER_1P = ["--pp", "8", "--microbatches", "24", "--f", "18.522", "--b", "18.086", "--w", "9.337", "--comm", "0.601"]


def test_zb_auto_json_from_the_issue(capsys):
    """The issue's command: the paper's 1.5B costs, a limit of p = 8 activations (ZB-1p,
    bubble 0.1585 in the paper's Table 5)."""
    code, out, _ = run(
        capsys, "simulate", "--schedule", "zb-auto", *PAPER_1P, "--memory-limit", "8", "--w-memory", "0.366", "--json"
    )
    assert code == 0
    d = json.loads(out)
    assert d["span_bubble_ratio"] == pytest.approx(0.1585, abs=0.002)
    assert d["proven_optimal"] is None  # the heuristic proves nothing
    assert len(d["ranks"]) == 8 and all(len(r) == 3 * 24 for r in d["ranks"])
    assert d["search"]["memory_limit"] == 8 and d["search"]["peak_memory"] <= 8


def test_zb_auto_exact_says_it_proved(capsys):
    args = ["--pp", "2", "-m", "3", "--f", "1.5", "--b", "1.2", "--w", "0.7", "--comm", "0.1", "--memory-limit", "2"]
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-auto", *args, "--exact", "--time-limit", "20", "--json")
    assert code == 0 and json.loads(out)["proven_optimal"] is True
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-auto", *args, "--exact", "--time-limit", "20", "--no-timeline")
    assert code == 0 and "proven optimal" in out


def test_handcrafted_schedules_prove_nothing(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", "zb-v", "--pp", "4", "-m", "8", "--json")
    d = json.loads(out)
    assert code == 0 and d["proven_optimal"] is None and d["search"] is None and d["makespan"] == 51


def test_compare_memory_limit_drops_and_says_so(capsys):
    code, out, _ = run(capsys, "compare", "--pp", "4", "-m", "8", "--memory-limit", "4", "--json")
    assert code == 0
    d = json.loads(out)
    kept = {r["schedule"]: r for r in d["schedules"]}
    dropped = {r["schedule"]: r["peak_activation_memory"] for r in d["dropped"]}
    assert dropped["gpipe"] == 8 and dropped["zb-h2"] == 8 and "zb-v" in kept
    assert all(max(r["peak_activation_memory"]) <= 4 for r in kept.values() if "error" not in r)
    # the Pareto front: V-Min holds the least memory, ZB-V the least bubble among these
    assert kept["v-min"]["pareto"] and kept["zb-v"]["pareto"] and not kept["1f1b"]["pareto"]
    code, out, _ = run(capsys, "compare", "--pp", "4", "-m", "8", "--memory-limit", "4")
    assert "dropped, peak activation memory above --memory-limit 4 stages: gpipe (8)" in out
    assert "memory/bubble trade-off" in out


def test_simulate_a_reference_file(capsys):
    code, out, _ = run(capsys, "simulate", "--schedule", str(REFERENCE / "zb-h1_pp4_m8.json"), "--json")
    assert code == 0 and json.loads(out)["makespan"] == 27


def test_infeasible_file_reports_the_wait_cycle(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"schedule": "1f1b", "pp": 2, "microbatches": 2, "ranks": ["F0.0 BW0.0 F0.1 BW0.1", "F0.1 F0.0 BW0.0 BW0.1"]})
    )
    code, out, err = run(capsys, "simulate", "--schedule", str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert "deadlock" in err and "rank 0 waits at BW0.0 for B0.0 on rank 1" in err and "rank 1 waits at F0.1" in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["simulate", "--schedule", "dualpipe", "--pp", "5"], "dualpipe needs an even --pp, got 5"),
        (["simulate", "--schedule", "dualpipe", "--pp", "4", "-m", "6"], "dualpipe needs --microbatches >= 2 * --pp = 8, got 6"),
        (["simulate", "--schedule", "dualpipx"], "did you mean dualpipe"),
        (["simulate", "--schedule", "1f1b", "--pp", "0"], "--pp: expected a whole number from 1 to 16,000,000, got '0'"),
        (["simulate", "--schedule", "1f1b", "--pp", "two"], "--pp: expected a whole number from 1 to 16,000,000, got 'two'"),
        (["simulate", "--schedule", "1f1b", "--f", "-1"], "costs must be from 0 to 1e+15"),
        (["simulate", "--schedule", "1f1b", "--comm", "fast"], "--comm: expected a number from 0 to 1e+15"),
        (["simulate", "--schedule", "1f1b", "--chunks", "2"], "1f1b does not take --chunks"),
        (["simulate", "--schedule", "interleaved-1f1b", "--pp", "4", "-m", "9"], "multiple of its 2 rounds"),
        (["simulate", "--schedule", "1f1b", "--f", "1,2"], "--f lists 2 values, but 1f1b has 8 stages"),
        (["simulate", "--schedule", "1f1b", "--pp", "2", "--f", "1,2,3"], "--f lists 3 values, but 1f1b has 2 stages"),
        (["simulate", "--pp", "4"], "--schedule"),
        (["simulate", "--schedule", "1f1b", "--pq", "4"], "unrecognized arguments: --pq"),
        (["simulate", "--schedule", "missing.json"], "cannot read schedule file 'missing.json'"),
        (["frobnicate"], "invalid choice"),
        (["simulate", "--schedule", "zb-auto", "--w-memory", "-1"], "--w-memory: expected a number from 0 to 1e+15, got '-1'"),
        (
            ["simulate", "--schedule", "zb-auto", "--w-memory", "1.5", "--memory-limit", "1.2"],
            "zb-auto needs --memory-limit >= 1.5 activations (what the W keeps, w_memory 1.5) per rank, got 1.2",
        ),
        (["simulate", "--schedule", "zb-auto", "--memory-limit", "0"], "expected a number > 0 and <= 1e+15, got '0'"),
        (["simulate", "--schedule", "zb-auto", "--memory-limit", "0.5"], "zb-auto needs --memory-limit >= 1 activation per rank"),
        (["simulate", "--schedule", "1f1b", "--memory-limit", "4"], "1f1b does not take --memory-limit; it takes no options"),
        (["simulate", "--schedule", "zb-h2", "--exact"], "zb-h2 does not take --exact"),
        (["simulate", "--schedule", "zb-auto", "--time-limit", "5"], "--time-limit bounds the exact search; add --exact"),
        (["simulate", "--schedule", "chimera", "--pp", "3", "-m", "6"], "chimera needs an even --pp, got 3"),
        (["compare", "--memory-limit", "-1"], "--memory-limit: expected a number > 0"),
        (
            ["compare", "--pp", "8", "-m", "12", "--schedules", "dualpipe,dualpipev"],
            "no schedule of dualpipe, dualpipev can take pp=8, M=12: dualpipe needs --microbatches >= 2 * --pp = 16, got 12; "
            "dualpipev needs",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert needle in err
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_malformed_file(capsys, tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    code, _, err = run(capsys, "simulate", "--schedule", str(p))
    assert code == 2 and "not valid JSON" in err
    p.write_text(json.dumps({"pp": 1, "microbatches": 1, "ranks": [["F0.0", "BX0.0"]]}))
    code, _, err = run(capsys, "validate", "--schedule", str(p))
    assert code == 2 and "rank 0: cannot read op 'BX0.0'" in err


def test_failed_command_writes_nothing(capsys, tmp_path):
    out = tmp_path / "s.json"
    code, _, _ = run(capsys, "ops", "--schedule", "dualpipe", "--pp", "3", "-o", str(out))
    assert code == 2 and not out.exists()
    code, _, _ = run(capsys, "ops", "--schedule", "dualpipe", "--pp", "4", "-m", "8", "-o", str(out))
    assert code == 0 and json.loads(out.read_text())["pp"] == 4
    assert list(tmp_path.iterdir()) == [out]  # no temporary files left behind


def test_plan_json_into_a_markdown_name_is_refused(capsys, tmp_path):
    # --json -o plan.md wrote JSON into plan.md; a .md name says Markdown (docs/plan.md)
    out = tmp_path / "plan.md"
    code, _, err = run(
        capsys, "plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--pp", "2", "--json", "-o", str(out)
    )
    assert code == 2 and err.count("\n") == 1 and "give a .json name or drop --json" in err
    assert not out.exists()


def test_console_script_entry_point():
    r = subprocess.run(
        [sys.executable, "-m", "pipesim.cli", "simulate", "--schedule", "dualpipe", "--pp", "5"], capture_output=True, text=True
    )
    assert r.returncode == 2 and r.stderr == "pipesim: error: dualpipe needs an even --pp, got 5\n"


def test_costs_per_stage_prices_chunks_by_their_share_of_the_model(capsys):
    """A V chunk is half a 1F1B stage, an interleaved chunk 1/v: with --costs-per stage
    their times scale by that share; 1F1B and DualPipe (full-stage chunks) are unchanged."""

    def makespans(*extra):
        code, out, _ = run(
            capsys, "compare", "--pp", "4", "-m", "8", "--schedules", "1f1b,dualpipe,dualpipev,interleaved-1f1b", "--json", *extra
        )
        assert code == 0
        return {r["schedule"]: r["makespan"] for r in json.loads(out)["schedules"]}

    chunk, stage = makespans(), makespans("--costs-per", "stage")
    assert stage["1f1b"] == chunk["1f1b"] and stage["dualpipe"] == chunk["dualpipe"]
    assert stage["dualpipev"] == chunk["dualpipev"] / 2
    assert stage["interleaved-1f1b"] == chunk["interleaved-1f1b"] / 2
    # P2P latency does not shrink with the chunk
    with_comm = makespans("--costs-per", "stage", "--comm", "0.5")
    assert with_comm["dualpipev"] > stage["dualpipev"]


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["comapre"], "invalid choice: 'comapre' (did you mean compare?)"),  # two letters swapped
        (["simulat", "-s", "1f1b"], "(did you mean simulate?)"),  # one dropped
        (["compare", "--pp", "4", "--schedulse", "1f1b"], "unrecognized arguments: --schedulse 1f1b (did you mean --schedules?)"),
        (["simulate", "-s", "1f1b", "--costs-per", "stag"], "(did you mean stage?)"),
    ],
)
def test_one_edit_away_gets_did_you_mean(capsys, argv, hint):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and hint in err


def test_further_than_one_edit_gets_the_list(capsys):
    code, _, err = run(capsys, "cmpre")
    assert code == 2 and "did you mean" not in err and "(choose from 'schedules'" in err


def test_python_m_pipesim_is_the_command():
    done = subprocess.run([sys.executable, "-m", "pipesim", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("pipesim ")


def test_nothing_fits_names_the_nearest_and_no_remedy_that_cannot_help(capsys):
    """Mixtral 8x7B's 46.7B parameters at 18 bytes each (bf16 weights, fp32 gradients, Adam's
    fp32 master and moments) are 840 GB, more than 8 H100s' 8 x 85.5 = 684 GB: no batch or
    sequence length fits it there. The refusal advised lowering them, and named no candidate."""
    config = str(REFERENCE.parent / "hf" / "mixtral-8x7b-v0.1.json")
    code, out, err = run(capsys, "plan", "--model", config, "--cluster", "h100", "--gpus", "8")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "the least over its memory" in err and "GB over)" in err
    # both figures once (they were said twice: "> 82 GB usable on any (... against at most 82.0 GB usable ...)"),
    # the need at least the 840 GB over 8 ranks
    need, usable, over = map(
        float, re.search(r"need at least ([\d.]+) GB on some rank > ([\d.]+) GB usable on any \(([\d.]+) GB over\)", err).groups()
    )
    assert err.count("GB usable") == 1 and need >= 840 / 8 and over == pytest.approx(need - usable, abs=0.11)
    assert "lower the global batch" not in err and "would not help" in err


def test_a_card_taken_whole_by_what_every_rank_holds_back_is_said_so(capsys):
    """At 100M tokens a sequence, Llama 3 8B's logits alone take 1e8 x 128,256 bf16 values:
    over any tp x cp <= 64 GPUs at least 1e8 x 128,256 x 2 / 64 = 400 GB a GPU, more than an
    H100's 85.5 GB. The refusal quoted a negative usable memory ("> -151 GB usable on any")."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--seq", "100000000"]
    code, out, err = run(capsys, *argv, "--global-batch", "1")
    error = err.splitlines()[-1]  # after the search's progress lines, which a search past a second prints
    assert code == 2 and out == "" and error.startswith("pipesim: error: nothing fits")
    assert "what every rank holds back passes the card" in error and "backward transient" in error
    assert " -" not in error.replace(" --", "")  # no negative figure


def test_nothing_runs_is_not_called_a_memory_problem(capsys):
    # 'Et|(tt|)*15tL' is 17 stages (Et, fifteen tt, tL): 17 is prime and does not divide 16 GPUs,
    # so no layout runs it; the refusal said "nothing fits" and advised more memory
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--stage-split", "Et|(tt|)*15tL"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "names 17 stages" in err and "no such pp divides the 16 GPUs" in err
    assert "nothing fits" not in err and "larger-memory" not in err


def test_fp8_on_a_gpu_without_it(capsys, tmp_path):
    """The A100 has no FP8 tensor cores (NVIDIA's A100 data sheet: TF32, BF16/FP16, INT8;
    the preset's fp8_tflops = 0). FP8 there priced the multiplies at BF16 but the casts,
    FP8-saved activations and one-byte dispatch as FP8, a run nothing makes. Asked for, it is
    refused; carried in by DeepSeek-V3's [training], the run is priced as BF16 and says so."""
    out = tmp_path / "plan.md"
    code, _, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", "a100", "--precision", "fp8", "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and "A100 has no FP8" in err and "give bf16" in err
    assert not out.exists()
    code, text, err = run(capsys, "memory", "--model", "deepseek-v3", "--cluster", "a100", "--pp", "16", "-s", "1f1b", "--json")
    assert code == 0 and "priced as bf16" in err
    code, bf16, _ = run(
        capsys,
        "memory",
        "--model",
        "deepseek-v3",
        "--cluster",
        "a100",
        "--pp",
        "16",
        "-s",
        "1f1b",
        "--precision",
        "bf16",
        "--json",
    )
    assert json.loads(text) == json.loads(bf16)


def test_compare_says_when_its_model_layout_cannot_fit(capsys):
    # compare --model prices pp x dp at tp1: Llama 3 70B at pp2 is 35B parameters a GPU,
    # 35B x (2-byte weights + 4-byte gradients) = 212 GB before activations, over an H100's 85.5
    code, out, _ = run(capsys, "compare", "--model", "llama3-70b", "--cluster", "h100", "--pp", "2", "--schedules", "1f1b")
    assert code == 0 and "this layout does not fit" in out
    code, out, _ = run(capsys, "compare", "--model", "llama3-8b", "--cluster", "h100", "--pp", "4", "--schedules", "1f1b")
    assert code == 0 and "does not fit" not in out


def test_compare_prices_fp8_as_plan_does_on_a_gpu_without_it(capsys):
    # as plan and memory (test_fp8_on_a_gpu_without_it): DeepSeek-V3's fp8 on an A100 is priced as bf16
    argv = ["compare", "--pp", "16", "-m", "32", "--schedules", "1f1b", "--model", "deepseek-v3", "--cluster", "a100", "--json"]
    code, out, err = run(capsys, *argv)
    assert code == 0 and "priced as bf16" in err and json.loads(out)["schedules"]
