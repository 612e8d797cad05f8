"""The report's advice speaks only of what the search looked at and of the memory the fit
was judged against."""

from __future__ import annotations

import json
import re

from pipesim.cli import main
from pipesim.planner.advice import advice
from pipesim.planner.candidates import Pins
from pipesim.planner.parallelism import batch_note
from pipesim.planner.search import search
from pipesim.planner.specs import Training, load_cluster, load_model, load_training


def _advice(model: str, gpus: int, schedules: list[str], **training) -> list[str]:
    m, c = load_model(model), load_cluster("h100", gpus)
    return advice(search(m, c, load_training(base=None, **training), schedules))


def test_dualpipe_left_out_by_schedules_gets_no_verdict():
    # --schedules 1f1b: DualPipe was never tried, so "runs at no layout searched" would be false
    dense = _advice("llama3-8b", 16, ["1f1b"], seq=4096, global_batch=64)
    assert any(line.startswith("DualPipe and DualPipeV were not searched (--schedules)") for line in dense)
    assert not any("overkill" in line or "runs at any layout" in line for line in dense)
    moe = _advice("mixtral-8x22b", 64, ["1f1b"], seq=4096, global_batch=64)
    assert any(line.startswith("DualPipe and DualPipeV were not searched") and "all-to-all" in line for line in moe)
    assert any("Combined 1F1B" in line and "it was not searched (--schedules)" in line for line in moe)
    assert not any("(not searched)" in line for line in dense + moe)


def test_tight_memory_is_stated_against_the_usable_memory():
    # DeepSeek-V3 on 2048 H800s fills 75 of the 79.9 GB left usable; the card holds 85.5
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    lines = advice(search(m, c, load_training(base=None, seq=4096, global_batch=15360, precision="fp8"), ["dualpipe"]))
    tight = [x for x in lines if x.startswith("Memory is tight")]
    assert tight
    used, usable, card = map(
        float, re.search(r"([\d.]+) GB of (?:the|its) ([\d.]+) GB usable.* \(the card's ([\d.]+) GB\)", tight[0]).groups()
    )
    assert used <= usable < card == 85.5


def _pp4_kept_outputs(microbatches: int) -> list[str]:
    """torchtitan's Llama 3 8B on 32 H100s, pinned to pp4 x dp8 1F1B with no recomputation:
    torch.distributed.pipelining keeps every micro-batch's logits on the last stage."""
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=32)
    t = Training(zero=3, seq=8192, global_batch=8 * microbatches, loss_frees_logits=True, pp_keeps_outputs=True, recompute="none")
    return advice(search(m, c, t, ["1f1b"], pins=Pins(pp=4, dp=8, tp=1, micro_batch=1)))


def test_tight_memory_names_the_rank_with_the_least_room_not_the_fullest():
    """By hand (tests/test_rank_budget.py's sources): an H100 reports 81,559 MiB; the CUDA
    context takes 723 MiB, NCCL 688 MiB for each of two communicators (data, pipeline) and
    the allocator strands 2.4% of the rest. Llama 3 8B's 128,256-token vocabulary and 4,096
    hidden size give a micro-batch of 8,192 tokens 2 x 128,256 x 8,192 bytes of bf16
    logits and a 2 x 4,096 x 8,192-byte stage boundary. The last rank keeps every
    micro-batch's logits and a receive buffer for its input (no loss copies by default):
    at 26 micro-batches (81,559 - 723 - 2 x 688) MiB - 26 x 2.168e9 B, less 2.4%, 26.3 GB.
    Rank 0 keeps no logits: over 79 GB for its 1F1B peak of pp micro-batches' activations
    (56 GB, tests/test_rank_budget.py), far from tight; the last rank holds one
    micro-batch, its peak whatever the micro-batch count, so at 16 micro-batches, with
    10 x 2.168e9 B more to fill, no rank is tight."""
    mib, logits, boundary = 2**20, 2 * 128256 * 8192, 2 * 4096 * 8192
    last = ((81559 - 723 - 2 * 688) * mib - 26 * (logits + boundary)) * (1 - 0.024) / 1e9
    tight = [x for x in _pp4_kept_outputs(26) if x.startswith("Memory is tight")]
    assert len(tight) == 1 and tight[0].startswith("Memory is tight on pipeline rank 3, the one with the least room")
    peak, usable = map(float, re.search(r"([\d.]+) GB of its ([\d.]+) GB usable \(the card's 85.5 GB\)", tight[0]).groups())
    assert usable == round(last, 1) == 26.3
    assert usable - 0.05 * 85.5 < peak <= usable
    assert not any(x.startswith("Memory is tight") for x in _pp4_kept_outputs(16))


def test_a_batch_too_small_for_the_gpus_says_what_would_feed_them():
    """2048 sequences of 8192 tokens on 131072 GPUs: 2048 x 8192 / 131072 = 128 tokens a
    GPU. At tp t and pipeline depth pp there are 131072 / (t pp) pipelines, each wanting
    2pp micro-batches of one sequence: 2 x 131072 / t sequences whatever pp, 32,768 at tp8
    and 65,536 at tp4 (by hand, not from the planner)."""
    c = load_cluster("h100", 131072)
    for tp, need in ((8, "32,768"), (4, "65,536")):
        note = batch_note(c, load_training(seq=8192, global_batch=2048), 126, tp)
        assert "are 128 tokens per GPU per step" in note and f"(at tp{tp})" in note
        assert f"A global batch of {need} sequences or more" in note
    assert batch_note(c, load_training(seq=8192, global_batch=32768), 126, 8) is None  # fed at pp16: 16 x 2 x 1024
    assert batch_note(c, load_training(seq=16384, global_batch=2048), 126, 8) is None  # long: CP's case, not the batch


def test_no_pipeline_advice_names_the_sharding_the_layout_needs():
    """At pp1 the advice said the model fits "with data parallelism alone" even where the
    layout shards it over tensor ranks: Llama 3 8B's 8.03B parameters at 2 bytes, with 4-byte
    gradients, are 48 GB before activations, and pinned to tp2 the report must not claim
    dp alone; pinned to tp1 (the 16 GPUs all data-parallel) it may."""
    m, c = load_model("llama3-8b"), load_cluster("h100", 16)
    t = load_training(base=None, seq=4096, global_batch=64)

    def pp1_line(tp: int) -> str:
        lines = advice(search(m, c, t, ["1f1b"], pins=Pins(pp=1, tp=tp, dp=16 // tp, micro_batch=1)))
        return next(x for x in lines if x.startswith("Pipeline parallelism is not needed"))

    assert pp1_line(1).endswith("with data parallelism alone.")
    sharded = pp1_line(2)
    assert "alone" not in sharded and "tp2" in sharded


def _cli_advice(capsys, *flags: str) -> list[str]:
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--seq", "4096", "--global-batch", "64"]
    assert main([*argv, *flags, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["advice"]


def test_dualpipe_left_out_names_the_flag_that_left_it_out(capsys):
    """--compare and a --chunks pin narrow the search too (plan_command's schedules,
    candidates.schedule_variants: DualPipe and DualPipeV hold 2 chunks a rank); the
    advice blamed --schedules, which the user never gave."""
    compared = _cli_advice(capsys, "--compare", "1f1b,zb-v")
    assert (
        "DualPipe and DualPipeV were not searched (--compare): a dense model has no expert all-to-all for them to hide."
        in compared
    )
    pinned = _cli_advice(capsys, "--pp", "2", "--chunks", "4")
    assert any(line.startswith("DualPipe and DualPipeV were not searched (--chunks 4: they hold 2 a rank)") for line in pinned)
    named = _cli_advice(capsys, "--schedules", "1f1b")
    assert any(line.startswith("DualPipe and DualPipeV were not searched (--schedules)") for line in named)
    # --pp 1: both hold 2 chunks a rank, which runnable.py leaves out at pp1 (named or not)
    for flags in (["--pp", "1"], ["--pp", "1", "--schedules", "1f1b,dualpipe"]):
        shallow = _cli_advice(capsys, *flags)
        assert any(
            line.startswith("DualPipe and DualPipeV were not searched (--pp 1: more than one chunk per rank needs pp 2")
            for line in shallow
        ), shallow


def test_dualpipes_lead_is_not_credited_to_an_overlap_that_exposes_more(capsys):
    """DeepSeek-V3 on 2048 H800s: DualPipe leads combined 1F1B by 1% while exposing more
    communication and idling more; the advice said its overlap 'brings' the rival's
    0.83 s to 1.09 s. The line must agree with the two rows it compares."""
    argv = ["plan", "--model", "deepseek-v3", "--cluster", "h800-2048", "--schedules", "dualpipe,interleaved-1f1b-overlap"]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    best = d["recommendation"]
    rival = next(r for r in d["runners_up"] if r["schedule"] == "interleaved-1f1b-overlap")
    assert best["schedule"] == "dualpipe" and best["exposed_comm_seconds"] > rival["exposed_comm_seconds"]
    line = next(x for x in d["advice"] if x.startswith("DualPipe"))
    assert "brings that to" not in line
    assert f"exposes {rival['exposed_comm_seconds']:.2f} s of it per step against {best['exposed_comm_seconds']:.2f} s" in line
    if rival["bubble_ratio"] < best["bubble_ratio"]:
        assert f"so the lead is in the layout ({best['layout']}" in line and line.endswith("not the schedule.")


def test_combined_warm_up_of_one_rank_is_one_figure(capsys):
    """At pp1 every rank is the one rank: Megatron's warm-up of 2(pp-r-1) + 1 = 1 forward
    leaves M - 1 = 3 of its 4 forwards to pair; the advice printed "3-3"."""
    argv = ["plan", "--model", "mixtral-8x22b", "--cluster", "h100", "--gpus", "64", "--seq", "4096", "--global-batch", "64"]
    assert main([*argv, "--schedules", "zb-h1,1f1b-overlap", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    line = next(x for x in d["advice"] if x.startswith("Combined 1F1B"))
    assert "Its best, 1f1b-overlap," in line and "pp1 x" in line and "M=4" in line
    assert "leaves 3 of each rank's 4 forwards to pair with a backward" in line


def test_combined_1f1bs_win_is_not_credited_to_hiding_what_its_rival_hides_better(capsys):
    """Mixtral 8x22B on 64 H100s, combined 1F1B against DualPipeV: combined wins with 0.13 s
    of communication exposed against DualPipeV's 0.03 s, on its bubble; the line said it
    "hides the all-to-all ... and wins here", the numbers that followed saying otherwise."""
    argv = ["plan", "--model", "mixtral-8x22b", "--cluster", "h100", "--gpus", "64", "--seq", "4096", "--global-batch", "64"]
    assert main([*argv, "--schedules", "1f1b-overlap,dualpipev", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    best = d["recommendation"]
    rival = next(r for r in d["runners_up"] if r["schedule"] == "dualpipev")
    line = next(x for x in d["advice"] if x.startswith("Combined 1F1B"))
    assert best["schedule"] == "1f1b-overlap" and "wins here" in line
    assert rival["exposed_comm_seconds"] <= best["exposed_comm_seconds"]
    assert line.endswith("so its lead is not the all-to-all it hides.")
