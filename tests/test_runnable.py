"""What no trainer runs is no candidate: multi-chunk orders at pp1 and Megatron's combined
1F1B where its TransformerConfig refuses it; pinned alone, each is one line and exit 2.

The expected sets are written out by hand from the cited code:
- Megatron-Core d98e8a6, megatron/core/parallel_state.py, initialize_model_parallel:
  virtual pipeline stages raise unless pipeline-model-parallel size > 1; torchtitan
  b5bcd76 pipelines only where pp > 1 (ParallelDims.pp_enabled). So at pp1 only the
  registry's flat families are candidates.
- megatron/core/transformer/transformer_config.py d98e8a6, TransformerConfig.__post_init__,
  under overlap_moe_expert_parallel_comm: assert virtual_pipeline_model_parallel_size is
  not None where pipeline_model_parallel_size > 1 (megatron/training/arguments.py sets it
  to None at one virtual stage a rank), expert_model_parallel_size > 1, and
  recompute_granularity != 'full'."""

from __future__ import annotations

from pipesim.cli import main
from pipesim.planner.candidates import Pins, candidates
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training

# the registry's families with one chunk a rank (flat placement; schedules/__init__.py),
# every one the planner builds on its own (zb-auto included)
FLAT = {"gpipe", "1f1b", "zb-h1", "zb-h2", "zb-auto", "1f1b-overlap"}
# ... and those holding two or more (interleaved, V, dual placements)
CHUNKED = {
    "interleaved-1f1b",
    "zb-v",
    "v-half",
    "v-min",
    "dualpipe",
    "dualpipev",
    "chimera",
    "interleaved-1f1b-overlap",
    "looped-bfs",
    "interleaved-zb",
    "zbv-torch",
}


def deepseek():
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    return m, c, load_training(base=model_training("deepseek-v3"))


def test_at_pp1_only_one_chunk_orders_are_candidates():
    """The walkthrough's layout (DeepSeek-V3 on h800-2048, pp1 x dp512 x tp4, ep256) was
    recommended interleaved-1f1b-overlap (v=4); at pp1 only flat families remain, at pp2
    the chunked ones come back and one-chunk combined 1F1B goes (Megatron wants virtual
    stages for it wherever pp > 1)."""
    m, c, t = deepseek()
    at = {pp: {x.schedule for x in candidates(m, c, t, pins=Pins(pp=pp, tp=4, ep=256))} for pp in (1, 2)}
    assert at[1] == FLAT
    assert at[2] == (FLAT - {"1f1b-overlap"}) | CHUNKED
    chunks = {x.chunks for x in candidates(m, c, t, pins=Pins(pp=1, tp=4, ep=256)) if x.schedule == "1f1b-overlap"}
    assert chunks == {None}


def test_combined_1f1b_is_no_candidate_at_ep1_nor_with_full_recomputation():
    """Qwen3-30B-A3B (128 experts) at --etp 8 --tp 1 --pp 1 on 64 GPUs: dp64, the experts
    fold over 64 / 8 = 8 ranks, so ep takes 1, 2, 4 and 8 (powers of two dividing 8 and
    the 128 experts). Megatron refuses combined 1F1B at ep1 (ep1 x etp8 is no expert
    parallelism: the assert reads expert_model_parallel_size alone) and with full
    recomputation; plain 1F1B keeps all four and every recomputation."""
    m, c = load_model("tests/data/hf/qwen3-30b-a3b.json"), load_cluster("h100").resized(64)
    t = load_training(global_batch=1024)
    found = list(candidates(m, c, t, ["1f1b", "1f1b-overlap"], Pins(pp=1, tp=1, etp=8)))
    combined = {(x.layout.ep, x.recompute) for x in found if x.schedule == "1f1b-overlap"}
    plain = {(x.layout.ep, x.recompute) for x in found if x.schedule == "1f1b"}
    assert {ep for ep, _ in plain} == {1, 2, 4, 8} and {rc for _, rc in plain} >= {"selective", "full"}
    assert {ep for ep, _ in combined} == {2, 4, 8}
    assert {rc for _, rc in combined} <= {"none", "selective"} and "selective" in {rc for _, rc in combined}


def refusal(argv, capsys) -> str:
    code = main(["plan", *argv])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, err)
    return err


def test_a_pinned_interleaved_schedule_at_pp1_is_one_line(capsys):
    err = refusal(
        ["--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", "1", "--tp", "4", "--dp", "512", "--ep", "256",
         "--schedules", "interleaved-1f1b-overlap"],
        capsys,
    )  # fmt: skip
    assert "interleaved-1f1b-overlap" in err and "virtual pipeline stages at pp1" in err and "1f1b-overlap" in err
    err = refusal(["--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", "1", "--tp", "4", "--chunks", "2"], capsys)
    assert "more than one chunk per rank needs pp 2 or more" in err


def test_pinned_combined_1f1b_where_megatron_refuses_it_is_one_line(capsys):
    qwen = ["--model", "tests/data/hf/qwen3-30b-a3b.json", "--cluster", "h100", "--gpus", "64", "--schedules", "1f1b-overlap"]
    err = refusal([*qwen, "--etp", "8", "--tp", "1", "--ep", "1"], capsys)
    assert "without expert parallelism" in err and "--expert-model-parallel-size above 1" in err
    err = refusal([*qwen, "--ep", "8", "--recompute", "full"], capsys)
    assert "with full recomputation" in err
    err = refusal([*qwen, "--ep", "8", "--pp", "2"], capsys)
    assert "only with virtual stages when pp > 1" in err and "use interleaved-1f1b-overlap" in err


def test_the_advice_says_why_combined_1f1b_was_not_searched(capsys):
    # --recompute full leaves combined 1F1B out of every layout: not "--schedules"
    qwen = ["--model", "tests/data/hf/qwen3-30b-a3b.json", "--cluster", "h100", "--gpus", "16", "--recompute", "full"]
    assert main(["plan", *qwen]) == 0
    out = capsys.readouterr().out
    assert "Combined 1F1B" in out and "it was not searched (Megatron-LM refuses" in out and "with full recomputation" in out


def test_a_comparison_with_combined_1f1b_on_a_dense_model_says_why_it_has_no_plan(capsys):
    # a dense model has no expert parallelism: Megatron refuses combined 1F1B at every layout
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--compare", "1f1b,1f1b-overlap"]) == 0
    out = capsys.readouterr().out
    assert "1f1b-overlap has no plan that fits: not searched: Megatron-LM refuses" in out
    assert "without expert parallelism" in out


def test_combined_refusals_name_every_rule_broken():
    # TransformerConfig's three asserts (module doc), each broken alone and all at once; the
    # advice asks this directly instead of probing combined_problem with a made-up ep
    from pipesim.planner.runnable import combined_problem, combined_refusals

    assert combined_refusals(8, "selective", pp=4, chunks=2) == ()
    assert combined_refusals(1, "selective", pp=1) == ("ep",)
    assert combined_refusals(8, "full", pp=1) == ("recompute",)
    assert combined_refusals(8, "none", pp=2, chunks=1) == ("chunks",)
    assert combined_refusals(1, "full", pp=2, chunks=1) == ("ep", "recompute", "chunks")
    # the refusal states the first, as before: a dense model's reason is its ep1
    assert "without expert parallelism" in combined_problem(1, "full", pp=2, chunks=1)


def test_the_advice_names_no_rule_that_only_some_layouts_break(capsys):
    # Qwen3-30B-A3B searched with its experts spread (ep > 1 at some layouts, ep1 at others)
    # and selective recomputation: no rule refuses combined 1F1B everywhere, so only
    # --schedules left it out
    qwen = ["--model", "tests/data/hf/qwen3-30b-a3b.json", "--cluster", "h100", "--gpus", "16", "--schedules", "1f1b,zb-h1"]
    assert main(["plan", *qwen]) == 0
    out = capsys.readouterr().out
    assert "Combined 1F1B" in out and "it was not searched (--schedules)" in out
