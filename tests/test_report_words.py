"""The plan report's words for a run's length and for its recomputation mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pipesim.cli import main
from pipesim.planner.naming import wall_clock


def test_wall_clock_speaks_days_hours_or_minutes():
    # by hand: 2.34M GPU-hours on 2048 GPUs is 1142.6 hours, 47.6 days (docs/plan.md's 48);
    # gpt-oss-120b's 26K GPU-hours on 1024 GPUs is 25.4 hours, which printed as "1 days"
    assert wall_clock(2.34e6 / 2048) == "48 days"
    assert wall_clock(26e3 / 1024) == "25 hours"
    assert wall_clock(0.75) == "1 hour"
    assert wall_clock(0.2) == "12 minutes"
    assert wall_clock(0.02) == "1 minute"
    # a run of a few tokens takes no minute: "under a minute", not "1 minute" beside "0 GPU-hours"
    assert wall_clock(0.001) == "under a minute"


def test_a_short_run_is_not_zero_days(capsys):
    # 1e9 tokens of Llama 3 8B on 16 H100s: under a day, so never "0 days" or "1 days"
    code = main(
        ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--pp", "1", "--tp", "1", "--tokens", "1e9"]
    )
    out = capsys.readouterr().out
    assert code == 0
    run = re.search(r"GPU-hours \(([^)]*) on 16 GPUs\) for 1B tokens", out)
    assert run and not re.match(r"[01] days", run.group(1)), out


def test_no_recomputation_is_said_in_words(capsys):
    # --recompute none: "none recomputation" read as a typo in the memory header and the plan
    code = main(["memory", "--model", "llama3-8b", "--pp", "2", "--recompute", "none", "-s", "1f1b"])
    out = capsys.readouterr().out
    assert code == 0 and ", no recomputation, M=8;" in out.splitlines()[0] and "none recomputation" not in out
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--pp", "2", "--recompute", "none"])
    out = capsys.readouterr().out
    assert code == 0 and "per pipeline per step, no recomputation." in out and "none recomputation" not in out


def test_a_search_of_some_schedules_says_which(capsys):
    # --compare 1f1b,dualpipe searches those two alone: Llama 3 70B on 64 H100s was then
    # "recommended" 1f1b with no word that zb-v, faster, had not been looked at
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--pp", "2"]
    assert main([*argv, "--compare", "1f1b,dualpipe"]) == 0
    intro = capsys.readouterr().out.splitlines()[2]
    assert "candidate layouts and schedules of 1f1b, dualpipe alone" in intro
    assert main(argv) == 0
    assert " alone " not in capsys.readouterr().out.splitlines()[2]


def test_one_gpu_is_one_gpu(capsys):
    # --gpus 1 on an 8-GPU-node preset: one GPU (not "1 GPUs", not "1 x 8 GPUs"), with no
    # slower peer to wait for, no data-parallel ranks for FSDP to shard over and no
    # gradient reduction for Megatron's dtype to change
    model = str(Path(__file__).parent / "data" / "hf" / "llama-3.2-1b.json")
    code = main(["plan", "--model", model, "--cluster", "h100", "--gpus", "1", "--global-batch", "64", "--seq", "1024"])
    out = capsys.readouterr().out
    assert code == 0
    assert re.search(r"GPU-hours \([^)]* on 1 GPU\) for", out), out
    assert "| nodes | 1 of one node's 8 GPUs |" in out
    assert "slowest of its 1 GPUs" not in out
    assert "with FSDP (ZeRO-3), where the plan assumed" not in out
    assert "grad_reduce_bytes" not in out.split("## Assumptions")[0]


def test_the_json_counts_what_the_markdown_counts(capsys):
    """The Markdown says how many candidates fit and were simulated and how many more fit
    but provably could not win; the JSON gave only the first, as "fitting"."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--seq", "4096", "--global-batch", "64"]
    assert main(argv) == 0
    said = re.search(
        r"Searched (\d+) candidate.*; (\d+) fit and were simulated to the end, (\d+) more fit", capsys.readouterr().out
    )
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [d["candidates"], d["fitting"], d["fitting_not_simulated"]] == [int(x) for x in said.groups()]


def test_one_micro_batch_is_one_micro_batch(capsys):
    # 2048 sequences on 1,048,576 H100s leave each pipeline one micro-batch a step; the
    # recommendation and the recipe said "1 micro-batches"
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "1048576", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommendation"]["microbatches"] == 1
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "1048576"]) == 0
    md = capsys.readouterr().out
    assert "1 micro-batches" not in md
    assert "**, 1 micro-batch of 1 x 8192 tokens per pipeline per step" in md


def test_a_tied_family_is_not_said_to_lose_on_time(capsys):
    """At pp1 every family runs a rank's F and B back to back: zb-h1 takes 1f1b's step
    to the last bits, and its verdict read "-0.0% per step ...: a little more time per
    step at its best layout" (llama3-8b on 1024 B200s)."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--pp", "1", "--seq", "4096"]
    assert main([*argv, "--global-batch", "64", "--micro-batch-size", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    best = d["recommendation"]
    twin = next(r for r in d["runners_up"] if r["schedule"] == "zb-h1")
    assert best["schedule"] == "1f1b" and abs(twin["step_seconds"] / best["step_seconds"] - 1) < 1e-9
    verdict = d["families"]["zb-h1"]
    assert "the same step time at pp1 x dp16, M=4: a tie" in verdict
    assert "per step" not in verdict and "a little more time" not in verdict


def test_run_lengths_far_from_a_trillion_tokens_read_as_written():
    # --tokens takes 1 to 1e18: the report printed "1e-12T tokens", "0 GPU-hours (1 minute
    # on 8 GPUs)", "1e+06T tokens" and "20994.65M GPU-hours (109347121 days ...)"
    from pipesim.planner.naming import fmt_hours, fmt_tokens

    assert [fmt_tokens(x) for x in (1, 1000, 2e7, 5e11, 14.8e12, 1e18)] == [
        "1 token", "1,000 tokens", "20M tokens", "500B tokens", "14.8T tokens", "1,000,000T tokens",
    ]  # fmt: skip
    assert [fmt_hours(x) for x in (0, 2.1e-8, 0.4, 789, 2.34e6, 2.099e10)] == ["0", "2.1e-08", "0.4", "789", "2.34M", "20.99B"]
    assert wall_clock(2.6e9 / 8) == "13,541,667 days"


def test_a_megatron_layout_in_a_table_cell_keeps_the_row_whole(capsys):
    # stage_split's bars split the assumptions row "| stage_split | Et*3|(t*4|)*6t*5L |"
    # (and the verdict rows naming it) into columns of their own in any Markdown viewer
    split = "Et*3|(t*4|)*6t*5L"
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--seq", "4096", "--global-batch", "64"]
    assert main([*argv, "--stage-split", split]) == 0
    md = capsys.readouterr().out
    rows = [line for line in md.splitlines() if line.startswith("| ") and split.split("|")[0] in line]
    assert any(r.startswith("| stage_split |") for r in rows)
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row.strip())[1:-1]  # a cell's own bars are escaped
        assert len(cells) == (12 if cells[0].strip().isdigit() else 2), row


def test_every_nth_layer_reads_as_an_ordinal(capsys, tmp_path):
    # recompute = every-2: both recipes' notes said "every 2th layer"
    from pipesim.planner.naming import every_nth_layer

    assert [every_nth_layer(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101)] == [
        "every layer", "every 2nd layer", "every 3rd layer", "every 4th layer", "every 11th layer",
        "every 12th layer", "every 13th layer", "every 21st layer", "every 22nd layer", "every 101st layer",
    ]  # fmt: skip
    f = tmp_path / "t.toml"
    f.write_text('recompute = "every-2"\n')
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--pp", "2", "--seq", "4096"]
    assert main([*argv, "--global-batch", "64", "--schedules", "1f1b", "--training", str(f)]) == 0
    md = capsys.readouterr().out
    assert "2th" not in md and md.count("checkpoints every 2nd layer") == 2


def test_recompute_modes_of_a_training_file_read_in_words():
    # "every-2 recomputation" and "op recomputation" headed the recommendation and memory
    from pipesim.planner.naming import recompute_text

    assert recompute_text("every-2") == "full recomputation of every 2nd layer"
    assert recompute_text("every-1") == "full recomputation of every layer"
    assert recompute_text("op") == "per-op recomputation"
    assert recompute_text("selective") == "selective recomputation" and recompute_text("none") == "no recomputation"


def test_a_familys_refusal_speaks_of_the_searched_values_not_flags(capsys):
    # chimera's check says "needs an even --pp, got 9" for the command line; in a plan's
    # verdict the 9 is the search's (or a pin's) pipeline depth, and no --microbatches was given
    argv = ["plan", "--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "72", "--pp", "9", "--seq", "4096"]
    assert main([*argv, "--global-batch", "64", "--schedules", "1f1b,chimera", "--json"]) == 0
    verdict = json.loads(capsys.readouterr().out)["families"]["chimera"]
    assert "chimera needs an even pp, got 9" in verdict and "--" not in verdict


def test_memory_is_said_to_push_a_family_deeper_only_where_it_did():
    """The verdict said "memory pushes it to ppN" whenever a family's best ran deeper than
    the recommendation. zb-v fits Mixtral 8x22B on 1024 B200s at pp2, 4 and 8 and is
    fastest at pp16; on Llama 3 70B on 1024 H100s it cannot run at pp1 (two chunks a rank),
    a rule, not memory, and runs from pp2."""
    from pipesim.planner.search import search
    from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
    from pipesim.planner.verdicts import family_verdicts

    for model, cluster, rival in (("mixtral-8x22b", "b200", "interleaved-zb"), ("llama3-70b", "h100", "1f1b")):
        m, c = load_model(model), load_cluster(cluster)
        plan = search(m, c, load_training(base=model_training(model)), [rival, "zb-v"])
        mine = plan.best_of("zb-v")
        assert plan.best.candidate.schedule == rival and mine.candidate.layout.pp > plan.best.candidate.layout.pp
        shallower = [
            r for r in plan.results if r.candidate.schedule == "zb-v" and r.candidate.layout.pp < mine.candidate.layout.pp
        ]
        refused = [
            r for r in plan.rejected if r.candidate.schedule == "zb-v" and r.candidate.layout.pp < mine.candidate.layout.pp
        ]
        assert shallower or all(r.reason.startswith("cannot run") for r in refused)
        assert "memory pushes" not in family_verdicts(plan)["zb-v"]


def test_full_recomputation_is_said_to_be_the_only_fit_only_where_it_is():
    """zb-auto fits Llama 3 405B on 1024 H100s with selective recomputation too; its best
    recomputes in full, and the verdict said "it only fits with full recomputation"."""
    from pipesim.planner.search import search
    from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
    from pipesim.planner.verdicts import family_verdicts

    m, c = load_model("llama3-405b"), load_cluster("h100")
    plan = search(m, c, load_training(base=model_training("llama3-405b")), ["interleaved-zb", "zb-auto"])
    modes = {r.candidate.recompute for r in plan.results if r.candidate.schedule == "zb-auto"}
    assert plan.best_of("zb-auto").candidate.recompute == "full" and "selective" in modes
    verdict = family_verdicts(plan)["zb-auto"]
    assert "only fits" not in verdict and "its best recomputes in full" in verdict


def test_a_layout_without_expert_parallelism_names_no_all_to_all_span(capsys):
    # "(N nodes)" is where the expert all-to-all's ep group sits; "ep1 x etp16 (1 node)"
    # read as the 16-way expert tensor group sitting in one 8-GPU node, which it does not
    argv = ["plan", "--model", "mixtral-8x22b", "--cluster", "h100", "--gpus", "64", "--etp", "16"]
    assert main([*argv, "--ep", "1", "--seq", "4096", "--global-batch", "64"]) == 0
    md = capsys.readouterr().out
    assert ", ep1 x etp16**" in md and "ep1 x etp16 (" not in md


def test_a_rank_past_top_is_not_said_as_exact():
    """The search ranks exactly only its top rows: past them it skips what provably cannot
    enter them, so fewer results stand ahead of a family's best than would in a full
    search. Llama 3 8B on 16 H100s, kept to one row, called v-min's best "#33 of 48" where
    every candidate simulated puts it at #164 of 516."""
    from pipesim.planner.report import _published_choice
    from pipesim.planner.search import search
    from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
    from pipesim.planner.verdicts import family_verdicts

    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=16)
    t = load_training(base=model_training("llama3-8b"))
    full, kept = search(m, c, t, keep=100_000), search(m, c, t, keep=1)
    assert full.skipped == 0 and kept.skipped > 0  # every candidate simulated, or some skipped

    def ranks(plan):
        return {k: (int(x[1]), int(x[2])) for k, v in family_verdicts(plan).items() if (x := re.match(r"#(\d+) of (\d+)", v))}

    exact = ranks(full)  # nothing skipped: each rank counts every fitting result ahead
    assert exact["v-min"][1] == len(full.results)
    said = family_verdicts(kept)
    for name, (rank, _) in exact.items():
        got = re.fullmatch(r"past the top 1 \(#(\d+) of the (\d+) simulated\), .*", said[name])
        assert got, said[name]
        assert int(got[1]) <= rank and int(got[2]) == len(kept.results)  # the simulated ones ahead, no more
    assert ranks(kept) == {}  # no exact-looking "#N of M" left

    # the authors' own choice: at the top, past it, and not simulated at all
    first = kept.best.candidate
    here = {"schedule": first.schedule, "pp": first.layout.pp, "ep": first.layout.ep}
    assert f"ranks #1 of {len(kept.results)} here, +0.0% per step" in _published_choice(kept, here)
    assert _published_choice(full, {"schedule": "v-min", "pp": 2, "ep": 1}).startswith(
        f"The authors' own choice (v-min, pp2, ep1) ranks #{exact['v-min'][0]} of {len(full.results)} here"
    )
    assert re.search(
        r"ranks past the top 1 \(#\d+ of the \d+ simulated\) here, ",
        _published_choice(kept, {"schedule": "v-min", "pp": 2, "ep": 1}),
    )
    simulated = {(r.candidate.schedule, r.candidate.layout.pp, r.candidate.layout.ep) for r in kept.results}
    fits = next(
        (r.candidate.schedule, r.candidate.layout.pp, r.candidate.layout.ep)
        for r in full.results
        if (r.candidate.schedule, r.candidate.layout.pp, r.candidate.layout.ep) not in simulated
    )
    text = _published_choice(kept, dict(zip(("schedule", "pp", "ep"), fits)))
    assert "did not fit or was not searched here" not in text  # it fits: the full search ranks it
    assert "top 1" in text
