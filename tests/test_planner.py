"""The planner: hand-worked estimates for small models, the search, the reports."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from pipesim.cli import main
from pipesim.planner import candidates as candidates_mod
from pipesim.planner import evaluate as evaluate_mod
from pipesim.planner import programs as programs_mod
from pipesim.planner import search as search_mod
from pipesim.planner.collectives import moe_comm
from pipesim.planner.compute import layer_flops, model_flops_per_token
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.params import active_params, attention_params, total_params
from pipesim.planner.specs import (
    Attention,
    Cluster,
    Model,
    MoE,
    Training,
    load_cluster,
    load_model,
    load_training,
    model_training,
)
from pipesim.planner.split import partition
from pipesim.planner.stages import stage_parts

# A tiny GQA model worked on paper: hidden 64, 4 heads of 16, 2 KV heads, SwiGLU FFN 128.
TINY = Model(
    "tiny",
    layers=2,
    hidden=64,
    heads=4,
    vocab=100,
    attention=Attention("gqa", kv_heads=2, head_dim=16),
    moe_layers=(),
    dense_ffn=128,
)
CLUSTER = Cluster(
    "test", "X", gpus=16, gpus_per_node=8, bf16_tflops=100, fp8_tflops=200, hbm_gb=80, nvlink_gbps=100, network_gbps=10
)


def test_tiny_model_parameters_by_hand():
    # q 64x64 + k 64x32 + v 64x32 + o 64x64 = 12288
    assert attention_params(TINY) == 4096 + 2048 + 2048 + 4096
    # per layer: attention 12288 + SwiGLU 3*64*128 = 24576 + two norms 128
    per_layer = 12288 + 24576 + 128
    assert total_params(TINY) == 2 * per_layer + 2 * 100 * 64 + 64  # untied embeddings, final norm
    assert active_params(TINY) == 2 * (12288 + 24576) + 2 * 100 * 64


def test_tiny_model_flops_by_hand():
    f = layer_flops(TINY, 0, seq=32)
    assert f["attn_proj"] == 2 * 12288
    assert f["attn_core"] == 4 * 32 * (16 + 16)  # heads * seq/2 * (qk + v) * 2
    assert f["mlp"] == 2 * 24576
    forward = 2 * (24576 + 4096 + 49152) + 2 * 64 * 100  # two layers and the output head
    assert model_flops_per_token(TINY, 32) == 3 * forward


def test_tiny_model_memory_by_hand():
    t = Training(seq=32, global_batch=8, zero=1)
    mm = memory_model(TINY, t, Layout(pp=2, dp=4), stages=2, recompute="selective")
    stage0 = 12288 + 24576 + 128 + 100 * 64  # one layer and the input embedding
    assert mm.stage_bytes(0) == pytest.approx((2 * stage0, 4 * stage0, 12 * stage0 / 4))  # ZeRO-1 over dp=4
    # bytes per token (activations.py; selective, flash, fused): each norm's input and
    # output (2 x 128) and fp32 rstd (4); the QKV buffer (2 x (4+2+2) x 16), rotated q and k
    # (2 x (4+2) x 16), attention output (2 x 64); gate and up (2 x 256), SwiGLU output
    # (2 x 128); for 32 tokens
    assert mm.activation_bytes(0) == pytest.approx(32 * (2 * 260 + 256 + 192 + 128 + 512 + 256))


def test_deepseek_v3_parameter_counts_match_the_paper():
    m = load_model("deepseek-v3")
    assert total_params(m) == pytest.approx(671e9, rel=0.005)  # 671B total (arXiv 2412.19437)
    assert active_params(m) == pytest.approx(37e9, rel=0.03)  # 37B activated per token
    assert total_params(load_model("llama3-70b")) == pytest.approx(70.6e9, rel=0.01)
    assert total_params(load_model("llama3-405b")) == pytest.approx(405.9e9, rel=0.01)
    assert total_params(load_model("mixtral-8x22b")) == pytest.approx(140.6e9, rel=0.01)


def test_moe_all_to_all_by_hand():
    """8 experts, top-2, hidden 64, over 16 GPUs on 2 nodes of 8, no node limit: a token
    reaches 2 * (1 - 1/2^2) = 1.5 nodes on average, half of them remote, so 0.75 copies go
    over the network; 2 * 7/8 copies over NVLink. 64 tokens, bf16."""
    m = Model(
        "moe", 2, 64, 4, 100, Attention("gqa", 2, 16), moe_layers=(0, 1), dense_ffn=0, moe=MoE(experts=16, expert_ffn=32, top_k=2)
    )
    t = Training(seq=64, global_batch=16)
    dispatch, combine, _, _ = moe_comm(m, CLUSTER, t, Layout(pp=1, dp=16, ep=16))
    per_token = 64 * 2
    network = 64 * 0.75 * per_token / 10e9
    nvlink = 64 * 2 * 7 / 8 * per_token / 100e9
    assert dispatch == pytest.approx(max(network, nvlink))
    assert combine == pytest.approx(dispatch)
    # with fp8, dispatch sends one byte per element
    t8 = Training(seq=64, global_batch=16, precision="fp8")
    assert moe_comm(m, CLUSTER, t8, Layout(pp=1, dp=16, ep=16))[0] == pytest.approx(dispatch / 2)
    # Transformer Engine's per-tensor FP8 leaves Megatron's all-to-all dispatcher in bf16
    te = Training(seq=64, global_batch=16, precision="fp8", fp8_scaling="tensor")
    assert moe_comm(m, CLUSTER, te, Layout(pp=1, dp=16, ep=16))[0] == pytest.approx(dispatch)


def test_partition_gives_the_end_stages_the_fewer_layers():
    sizes = [len(r) for r in partition(61, 16)]
    assert sum(sizes) == 61 and max(sizes) - min(sizes) == 1
    assert sizes[0] == sizes[-1] == 3 and sizes[1] == 4


def test_extrapolated_candidates_equal_full_simulation(monkeypatch):
    """Large M is simulated at two smaller M and extrapolated; it must be exact."""
    m = load_model("llama3-8b")
    c = load_cluster("h100", gpus=32)
    t = load_training(global_batch=256, seq=2048)
    cands = [
        x for x in candidates_mod.candidates(m, c, t) if x.layout.pp in (2, 4) and x.layout.tp == 2 and x.recompute == "selective"
    ]
    assert len({x.schedule for x in cands}) >= 5
    checked = 0
    for cand in cands:
        p = evaluate_mod.prepare(m, c, t, cand)
        if (
            isinstance(p, evaluate_mod.Result)
            or evaluate_mod.sample_points(cand.schedule, cand.layout.pp, cand.microbatches) is None
        ):
            continue
        fast = evaluate_mod.finish(m, c, t, p)
        monkeypatch.setattr(evaluate_mod, "sample_points", lambda name, pp, M, options=None: None)
        full = evaluate_mod.finish(m, c, t, p)
        monkeypatch.undo()
        for field in ("step_time", "bubble", "compute_utilization", "exposed_comm", "memory_gb"):
            assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-9, abs=1e-9), (cand, field)
        checked += 1
    assert checked >= 5  # every periodic family that fits (the searched ones are simulated whole)


def test_extrapolation_waits_for_the_steady_pace():
    """Llama 3 70B's interleaved 1F1B (v2) on pp2 x tp8 at M=128: its ranks' work differs
    (the embedding on one, the head on the other), and it reaches its steady pace per
    period only from M=16 on, after the sample points 8 and 12; the line through them put
    the step 2.3% fast with a negative bubble (sampled then at 8 and 12; now from 4 on,
    walking on until a third point continues the line). The extrapolation must equal the full
    simulation."""
    m, c, t = load_model("llama3-70b"), load_cluster("h100", gpus=64), load_training()
    cand = candidates_mod.Candidate(Layout(pp=2, dp=4, tp=8, micro_batch=2), "interleaved-1f1b", 2, "selective", 128)
    assert evaluate_mod.sample_points(cand.schedule, 2, 128, {"chunks": 2}) == (4, 8)
    fast = evaluate_mod.evaluate(m, c, t, cand)
    full = evaluate_mod.evaluate(m, c, t, cand, evaluate_mod.Shared(m, c, t, exhaustive=True))
    assert full.bubble > 0
    for field in ("step_time", "bubble", "compute_utilization", "exposed_comm", "memory_gb"):
        assert getattr(fast, field) == pytest.approx(getattr(full, field), rel=1e-9, abs=1e-9), field


def test_extrapolation_that_never_settles_costs_no_more_than_simulating_m():
    """A pace that settles only to rounding never puts the third point on the line: the
    window slid to M (DeepSeek-V3's dualpipev on 72 GB200s ran 213 simulations of 48 to
    7680 micro-batches, 7.8 s and 550 MB for one plan). Once the shorter runs cost more
    micro-batches than M, M itself is simulated, and its answer is M's own."""
    from pipesim.planner.measured import Measured, extrapolated

    asked = []

    def run(x):  # a makespan that bends a little at every M: no three points on a line
        asked.append(x)
        return Measured(float(x) + 1.0 / x, (float(x),), (float(x),), (0.0,), (1.0,), (0.0,), (0.0,))

    got = extrapolated(run, 1000, (30, 48))
    assert got.makespan == 1000 + 1 / 1000 and asked[-1] == 1000
    # 30, 48, then a period on while the runs so far stay within M's 1000 micro-batches
    assert asked == [30, 48, 66, 84, 102, 120, 138, 156, 174, 1000]
    assert sum(asked[:-1]) <= 1000


def test_combined_1f1b_gets_megatrons_smallest_group(monkeypatch):
    """DeepSeek-V3's M=60 at pp8: interleaved-1f1b-overlap's default group (pp) refuses it,
    so the candidate is built with g=10, the smallest Megatron takes, and simulated whole;
    so does plain interleaved 1F1B, whose PyTorch rounds (of 60 // 7) do not divide 60."""
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    t = load_training(**model_training("deepseek-v3"))
    lay = Layout(pp=8, dp=256, tp=1, ep=256)
    shared = evaluate_mod.Shared(m, c, t)
    for name, M, group in (("interleaved-1f1b-overlap", 60, 10), ("interleaved-1f1b", 60, 10), ("interleaved-1f1b", 63, None)):
        p = evaluate_mod.prepare(m, c, t, candidates_mod.Candidate(lay, name, 4, "selective", M), shared)
        assert not isinstance(p, evaluate_mod.Result), p.reason
        assert p.options.get("group_size") == group  # at M=63 PyTorch's rounds of 9 run
    # a grouped order repeats every g micro-batches, not 2pp: never sampled at two
    # shorter M (at M=200, pp=8 an ungrouped periodic family is)
    assert evaluate_mod.sample_points("interleaved-1f1b-overlap", 8, 200, {"chunks": 4}) is not None
    assert evaluate_mod.sample_points("interleaved-1f1b-overlap", 8, 200, {"chunks": 4, "group_size": 10}) is None
    real = evaluate_mod.sample_points

    def never_extrapolated(name, pp, M, options=None):
        points = real(name, pp, M, options)
        if points is not None:
            pytest.fail("extrapolated")
        return points

    monkeypatch.setattr(evaluate_mod, "sample_points", never_extrapolated)
    cand = candidates_mod.Candidate(lay, "interleaved-1f1b-overlap", 4, "selective", 60)
    r = evaluate_mod.finish(m, c, t, evaluate_mod.prepare(m, c, t, cand, shared), shared)
    assert r.fits and r.group_size == 10


def test_deepseek_v3_on_its_cluster(capsys):
    """DeepSeek's set-up (4096-token sequences, 15360 a step) on 2048 H800s: a pp=16-class
    DualPipe-family plan with experts spread over several nodes, as DeepSeek chose; the
    report sets its GPU-hours beside the published 180K."""
    code = main(["plan", "--model", "deepseek-v3", "--cluster", "h800-2048", "--json"])
    d = json.loads(capsys.readouterr().out)
    rec = d["recommendation"]
    assert code == 0
    assert rec["schedule"] in ("dualpipe", "dualpipev")
    assert 8 <= rec["pp"] <= 32
    assert rec["ep"] > 8  # expert parallelism across nodes
    assert d["published"]["gpu_hours_per_trillion_tokens"] == 180000
    assert 0.5 < d["published"]["ratio"] < 1.5
    assert d["versus_1f1b"]["gpu_hours_recovered_whole_run"] > 0
    # combined 1F1B fits (with Megatron's group size for M=60 at pp8) and is ranked
    # "past the top 10 (#14 of the 75 simulated), +27.1% per step at ...": ranked past the rows kept exactly
    assert re.match(r"(#|past the top 10 \(#)\d+ of ", d["families"]["interleaved-1f1b-overlap"])
    assert any("Combined 1F1B" in line and "group" in line for line in d["advice"])
    # a family that fits nowhere: its lower bound beside the least its computed peaks need
    gpipe = re.fullmatch(
        r"does not fit or cannot run: needs at least ([\d.]+) GB per GPU on rank \d+ against ([\d.]+) GB usable there; "
        r"its orders whose peak was computed need (\d+) GB or more",
        d["families"]["gpipe"],
    )
    low, usable, known = map(float, gpipe.groups())
    assert low > usable and known > low + 10  # GPipe holds all M activations: far from a near miss


def test_dense_70b_on_64_gpus_is_not_a_dualpipe_job(tmp_path, capsys):
    out = tmp_path / "plan.md"
    code = main(["plan", "--model", "llama3-70b", "--cluster", "h100", "--gpus", "64", "-o", str(out),
                 "--schedules", "1f1b,zb-h1,interleaved-1f1b,dualpipe,dualpipev"])  # fmt: skip
    text = out.read_text()
    assert code == 0
    rec = text.split("## Recommendation", 1)[1].split("\n\n", 2)[1]
    assert "dualpipe" not in rec
    assert "DualPipe is overkill here" in text and "no expert all-to-all" in text


def test_compare_gives_gpu_hours_per_million_tokens(capsys):
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--compare", "1f1b,dualpipe", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    cmp = d["compare"]
    assert cmp["baseline"] == "1f1b" and cmp["candidate"] == "dualpipe"
    per_m = (cmp["1f1b"]["gpu_hours_per_trillion_tokens"] - cmp["dualpipe"]["gpu_hours_per_trillion_tokens"]) / 1e6
    assert cmp["gpu_hours_recovered_per_million_tokens"] == pytest.approx(per_m)


def test_memory_overhead_of_two_copies_is_smaller_for_moe(capsys):
    main(["memory", "--model", "llama3-70b", "--pp", "8", "--schedule", "dualpipe", "--json"])
    dense = json.loads(capsys.readouterr().out)
    main(["memory", "--model", "deepseek-v3", "--pp", "16", "--cluster", "h800-2048", "--json"])
    moe = json.loads(capsys.readouterr().out)
    assert moe["layout"]["ep"] == 64
    for d in (dense, moe):
        one, two = d["schedules"]
        assert two["copies"] == 2 and one["copies"] == 1
        # the second copy costs per parameter what the first does (the worst ranks' stages
        # need not hold the same layers: the split balances what each rank holds)
        # (and when the worst ranks differ, their mixes of dense parameters, ZeRO-sharded over
        # dp, and experts, sharded over fewer replicas, differ: DeepSeek-V3's last stage, whose
        # head keeps its logits, is 1f1b's worst rank but not DualPipe's)
        per_param = [x["static_gb"] / (x["copies"] * x["params_per_copy"]) for x in (one, two)]
        assert per_param[0] == pytest.approx(per_param[1], rel=0.05)
    assert moe["extra_copy_share_of_hbm"] < dense["extra_copy_share_of_hbm"] / 3
    assert moe["stage_parameters_per_gpu"] < moe["stage_parameters"] / 20  # experts sharded 64 ways


def test_memory_takes_the_folded_and_context_parallel_layouts_plan_takes(capsys):
    """Qwen3-235B's Megatron layout (TP2 PP8 EP32 on 256 GPUs: attention dp16, experts
    folded over tp x dp = 32 GPUs, edp 1) is answered, not refused for ep not dividing dp;
    a cp2 rank keeps half the tokens of a sequence, so each layer's activations per
    micro-batch halve; what cannot hold together is refused in one line, exit 2."""
    main(["memory", "--model", "deepseek-v3", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "32", "-s", "1f1b", "--json"])
    folded = json.loads(capsys.readouterr().out)
    assert folded["layout"]["dp"] == 16 and folded["layout"]["ep"] == 32 and folded["layout"]["edp"] == 1
    base = ["memory", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "-s", "1f1b", "--seq", "16384", "--json"]
    main(base)
    one = json.loads(capsys.readouterr().out)
    main([*base, "--cp", "2"])
    two = json.loads(capsys.readouterr().out)
    assert two["layout"]["cp"] == 2 and two["layout"]["dp"] == one["layout"]["dp"] // 2
    for a, b in zip(one["activations_per_layer"], two["activations_per_layer"]):
        assert b["bytes"] == pytest.approx(a["bytes"] / 2)
    for argv, needle in (
        (["--model", "deepseek-v3", "--gpus", "256", "--tp", "2", "--pp", "8", "--ep", "64"], "must divide tp x cp x dp = 32"),
        (["--model", "llama3-70b", "--gpus", "64", "--pp", "4", "--cp", "4", "--seq", "4100"], "divisible by 2 x cp = 8"),
        (["--model", "llama3-70b", "--pp", "4", "--etp", "2"], "has no experts"),
    ):
        assert main(["memory", *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        # a missing field says what it holds, with a published model's value (Llama 3 8B's
        # 128,256-token vocabulary, its preset; DeepSeek-V3's 2048-wide experts, arXiv 2412.19437 4.2)
        (
            'name = "x"\nlayers = 2\nhidden = 64\nheads = 4\n',
            "m.toml: missing field 'vocab': give the vocabulary's tokens, e.g. vocab = 128256 (Llama 3 8B)\n",
        ),
        ('name = "x"\nlayers = -2\nhidden = 64\nheads = 4\nvocab = 10\n', "layers must be a whole number from 1 to 500"),
        ('name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\nfoo = 1\n', "unknown key 'foo'"),
        (
            'name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\n[moe]\nexperts = 8\n',
            "m.toml [moe]: missing field 'expert_ffn': give an expert's inner width, e.g. expert_ffn = 2048 (DeepSeek-V3)\n",
        ),
        # a key that is a table given as a value: where the header goes
        (
            'name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\nattention = 3\n',
            "m.toml [attention] must be a table, got 3: write [attention] on a line of its own, its keys below it\n",
        ),
        # dense_layers short of the layers, with no experts for the rest: what to give either way
        (
            'name = "x"\nlayers = 4\nhidden = 64\nheads = 4\nvocab = 10\n[mlp]\ndense_ffn = 64\ndense_layers = 1\n',
            "m.toml: dense_layers 1 leaves 3 of the 4 layers MoE, which need a [moe] table: give one (experts, expert_ffn and top_k), or drop dense_layers for a dense model\n",
        ),
        ('name = "x"\nlayers = 2.5\nhidden = 64\nheads = 4\nvocab = 10\n', "layers must be a whole number"),
        # a [moe] table no layer runs was planned for (ep, all-to-alls), as no config.json is
        (
            'name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\n[mlp]\ndense_layers = 2\ndense_ffn = 64\n'
            "[moe]\nexperts = 8\nexpert_ffn = 64\ntop_k = 2\n",
            "dense_layers 2 leaves none of the 2 layers an MoE layer",
        ),
        (
            'name = "x"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\n[moe]\nexperts = 8\nexpert_ffn = 0\ntop_k = 2\n',
            "expert_ffn must be >= 1",
        ),
    ],
)
def test_bad_model_specs(tmp_path, capsys, text, needle):
    f = tmp_path / "m.toml"
    f.write_text(text)
    code = main(["plan", "--model", str(f), "--cluster", "h100"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["plan", "--model", "gpt5", "--cluster", "h100"], "unknown model 'gpt5'"),
        (["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "12"], "multiple of the 8 GPUs per node"),
        (["plan", "--model", "llama3-8b", "--cluster", "h100", "--compare", "1f1b"], "--compare takes two schedules"),
        (["plan", "--model", "llama3-8b", "--cluster", "h100", "-o", "x.txt"], "must end in .md or .json"),
        (["memory", "--model", "llama3-70b", "--pp", "8", "--ep", "8"], "has no experts"),
    ],
)
def test_bad_plan_input(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1


def test_bad_cluster_spec(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(
        'name = "c"\ngpu = "X"\ngpus = 8\ngpus_per_node = 8\nbf16_tflops = -1\nfp8_tflops = 0\nmemory_mib = 81559\nnvlink_gbps = 1\nnetwork_gbps = 1\n'
    )
    code = main(["plan", "--model", "llama3-8b", "--cluster", str(f)])
    assert code == 2 and "bf16_tflops must be a number from 0.01 to 1e+07, got -1" in capsys.readouterr().err


def test_model_training_presets_load():
    t = load_training(base=model_training("deepseek-v3"))
    assert (t.seq, t.global_batch, t.precision) == (4096, 15360, "fp8")


# --------------------------------------------------------------------------------------
# the fast search against the exhaustive one, pins, progress

SMALL_MOE = Model(
    "small-moe",
    layers=8,
    hidden=1024,
    heads=8,
    vocab=1000,
    attention=Attention("gqa", kv_heads=8, head_dim=128),
    moe_layers=tuple(range(1, 8)),
    dense_ffn=4096,
    moe=MoE(experts=16, expert_ffn=512, top_k=2),
)


@pytest.mark.parametrize(
    "model,gpus,training",
    [
        ("llama3-8b", 8, dict(seq=1024, global_batch=32, recompute="selective")),
        (SMALL_MOE, 16, dict(seq=1024, global_batch=64, recompute="none", micro_batch_sizes=(1,))),
    ],
)
def test_fast_search_ranks_as_the_exhaustive_search_does(model, gpus, training):
    """Bounds, early stop, shared programs and extrapolation change how much is simulated,
    never the answer: the top rows and each family's best are those of simulating every
    candidate in full."""
    m = load_model(model) if isinstance(model, str) else model
    c = load_cluster("h100", gpus=gpus)
    t = Training(**training)
    keep = 5
    fast = search_mod.search(m, c, t, keep=keep)
    full = search_mod.search(m, c, t, keep=keep, exhaustive=True)
    assert full.skipped == 0 and fast.skipped > 0
    assert len(full.results) >= keep
    by_candidate = {r.candidate: r.step_time for r in full.results}
    assert [r.step_time for r in fast.results[:keep]] == pytest.approx([r.step_time for r in full.results[:keep]], rel=1e-9)
    for r in fast.results:
        assert r.step_time == pytest.approx(by_candidate[r.candidate], rel=1e-9)
    for name in full.searched:
        a, b = fast.best_of(name), full.best_of(name)
        assert (a is None) == (b is None), name
        if a:
            assert a.step_time == pytest.approx(b.step_time, rel=1e-9), name


def test_registry_families_join_the_search(monkeypatch):
    """A family added to the registry is searched without naming it in the planner, and
    one taking ``chunks`` is tried at its default and twice that."""
    from pipesim.schedules import REGISTRY, Family
    from pipesim.schedules.classic import interleaved_1f1b, one_f_one_b

    def looped(pp: int, microbatches: int, chunks: int = 3):
        return interleaved_1f1b(pp, microbatches, chunks)

    monkeypatch.setitem(REGISTRY, "test-1f1b", Family("test-1f1b", one_f_one_b, "flat", "", ""))
    monkeypatch.setitem(REGISTRY, "test-looped", Family("test-looped", looped, "interleaved", "", ""))
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=16)
    t = Training(seq=1024, global_batch=32, recompute="selective")
    cands = list(candidates_mod.candidates(m, c, t))
    assert {x.chunks for x in cands if x.schedule == "test-looped"} == {3, 6}
    plan = search_mod.search(m, c, t)
    assert plan.best_of("test-1f1b").step_time == pytest.approx(plan.best_of("1f1b").step_time)


def test_pins_are_honoured():
    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=32)
    t = Training(seq=1024, global_batch=64, recompute="selective")
    pins = candidates_mod.Pins(pp=4, tp=2, micro_batch=2, chunks=2)
    plan = search_mod.search(m, c, t, pins=pins)
    assert plan.results
    for r in plan.results:
        lay = r.candidate.layout
        assert (lay.pp, lay.tp, lay.dp, lay.micro_batch, r.candidate.microbatches) == (4, 2, 4, 2, 8)
        assert candidates_mod.placement_chunks(r.candidate.schedule, r.candidate.chunks) == 2
    assert {"1f1b", "zb-h1", "gpipe"}.isdisjoint(plan.searched)  # flat: one chunk per rank
    only_m = search_mod.search(m, c, t, pins=candidates_mod.Pins(microbatches=16), schedules=["1f1b"])
    assert {r.candidate.microbatches for r in only_m.results} == {16}


def test_pinned_plan_json_keeps_the_headline_numbers(capsys):
    """step_seconds, tokens_per_second, gpu_hours_per_trillion_tokens and mfu agree with
    each other and with the training FLOPs of PaLM's appendix B (6N + 12 L H Q T per
    token, halved attention term for causal masks: 6N + 6 L s h)."""
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "32", "--seq", "1024", "--global-batch", "64",
                 "--recompute", "selective", "--pp", "2", "--tp", "4", "--microbatches", "16", "--json"])  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert code == 0
    rec = d["recommendation"]
    assert (rec["pp"], rec["tp"], rec["dp"], rec["microbatches"]) == (2, 4, 4, 16)
    tokens = 64 * 1024
    assert rec["tokens_per_second"] == pytest.approx(tokens / rec["step_seconds"], rel=1e-9)
    assert rec["gpu_hours_per_trillion_tokens"] == pytest.approx(32 * rec["step_seconds"] / 3600 * 1e12 / tokens, rel=1e-9)
    m = load_model("llama3-8b")
    n = active_params(m) - m.vocab * m.hidden  # the input embedding is a lookup, no FLOPs
    flops = 6 * n + 6 * m.layers * 1024 * m.hidden
    assert rec["mfu"] == pytest.approx(
        flops * rec["tokens_per_second"] / (32 * load_cluster("h100").bf16_tflops * 1e12), rel=1e-6
    )
    assert "--pp 2" in d["assumptions"]["pinned"]


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--tp", "3"], "--tp 3 must divide the cluster's 64 GPUs"),
        (
            ["--pp", "128", "--gpus", "128"],
            "--pp 128 exceeds llama3-70b's 80 layers (one stage needs a layer): give --pp 80 or less\n",
        ),
        (["--tp", "8", "--pp", "8", "--dp", "8"], "tp x cp x pp x dp must be 64"),
        # 72 GPUs / tp8 leave 9 a tensor group: pp divides 9
        (
            ["--gpus", "72", "--tp", "8", "--pp", "6"],
            "--tp 8 x --pp 6 = 48 does not divide the cluster's 72 GPUs: with --tp 8, give --pp one of 1, 3 or 9\n",
        ),
        (["--ep", "2"], "has no experts"),
        # 2048 = 2^11 has twelve divisors: the two nearest 7 are named
        (
            ["--microbatches", "7"],
            "--microbatches 7 must divide the global batch of 2048 sequences: give --microbatches a divisor of 2048, such as 4 or 8\n",
        ),
        # 2048 / 4 = 512 sequences a micro-batch count must divide: 2^9, ten divisors, all named
        (
            ["--micro-batch-size", "4", "--microbatches", "1024"],
            "--micro-batch-size 4 x --microbatches 1024 must divide the global batch of 2048 sequences: with --micro-batch-size 4, give --microbatches one of 1, 2, 4, 8, 16, 32, 64, 128, 256 or 512\n",
        ),
        (["--chunks", "3", "--schedules", "1f1b"], "no schedule searched holds 3 chunks"),
        (["--pp", "1", "--tp", "1"], "the pinned layout (--tp 1 --pp 1) does not fit"),
    ],
)
def test_impossible_pins(capsys, flags, needle):
    gpus = [] if "--gpus" in flags else ["--gpus", "64"]  # a flag given twice is refused as such
    code = main(["plan", "--model", "llama3-70b", "--cluster", "h100", *gpus, *flags])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_progress_lines_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    from pipesim.planner import plan_command

    monkeypatch.setattr(plan_command, "PROGRESS_EVERY", 0.0)
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--seq", "1024",
                 "--global-batch", "32", "--json"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0 and "\r" not in err
    lines = err.splitlines()
    assert len(lines) >= 3 and all(x.startswith("pipesim plan: search") for x in lines)
    assert lines[-1].startswith("pipesim plan: searched ") and "best " in lines[-1]


def test_advice_on_combined_1f1b_and_dualpipes_constraints():
    """Mixtral-like: 1024 sequences over dp 512 leave M=2 per pipeline. DualPipe's M >= 2pp
    fails (a constraint, not memory), and combined 1F1B at pp2, v=4 has Megatron's warm-up
    min(2(pp-r-1) + (v-1)pp + 1, vM) = 8 and 7 of its 8 forwards: 0-1 pairs."""
    from pipesim.planner.advice import advice
    from pipesim.planner.search import Candidate, Plan, Result

    m, c = load_model("mixtral-8x22b"), load_cluster("h100")
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    lay = Layout(pp=2, dp=512, tp=1, ep=8)
    plan.results = [
        Result(Candidate(lay, "interleaved-zb", 4, "full", 2), True, step_time=2.0, bubble=0.1, makespan=1.9),
        Result(Candidate(lay, "interleaved-1f1b-overlap", 4, "full", 2), True, step_time=2.1, bubble=0.1, makespan=2.0),
    ]
    why = "cannot run: dualpipe needs --microbatches >= 2 * --pp = 4, got 2"
    plan.rejected = [Result(Candidate(lay, "dualpipe", None, "full", 2), False, why)]
    text = " ".join(advice(plan))
    assert "neither DualPipe nor DualPipeV runs" in text and "dualpipe needs M >= 2 * pp" in text
    assert "second copy" not in text
    assert "leaves 0-1 of each rank's 8 forwards to pair with a backward" in text


def test_advice_when_combined_1f1b_wins():
    from pipesim.planner.advice import advice
    from pipesim.planner.search import Candidate, Plan, Result

    m, c = load_model("mixtral-8x22b"), load_cluster("h100")
    plan = Plan(m, c, load_training(seq=4096, global_batch=1024))
    lay = Layout(pp=4, dp=256, tp=1, ep=8)
    plan.results = [
        Result(Candidate(lay, "interleaved-1f1b-overlap", 2, "full", 8), True, step_time=2.0, bubble=0.1, exposed_comm=0.1),
        Result(Candidate(lay, "zb-h1", None, "full", 8), True, step_time=2.5, bubble=0.2, exposed_comm=0.6),
    ]
    text = " ".join(advice(plan))
    assert "Combined 1F1B (Megatron-LM's --overlap-moe-expert-parallel-comm)" in text and "wins here" in text
    assert "zb-h1 on pp4 x dp256, ep8 (1 node), exposes 0.60 s of communication per step against 0.10 s" in text


def test_candidates_ruled_out_before_building(monkeypatch):
    """A candidate its family's constraints, its stage count or its static memory rule out
    is rejected from its placement alone, worded as the registry's check words it; a
    schedule is built only for a candidate that passes those checks."""
    built = []
    real = programs_mod.build
    monkeypatch.setattr(programs_mod, "build", lambda name, pp, M, **o: built.append((name, pp, M)) or real(name, pp, M, **o))
    m, t = load_model("llama3-8b"), Training(seq=1024, global_batch=32, recompute="selective")
    big = load_cluster("h100", gpus=16)
    small = dataclasses.replace(big, hbm_gb=1)

    def run(c, pp, name, chunks=None):
        lay = Layout(pp=pp, dp=16 // pp, micro_batch=1)
        return evaluate_mod.prepare(m, c, t, candidates_mod.Candidate(lay, name, chunks, "selective", 32 // lay.dp))

    odd = run(big, 1, "chimera")
    assert odd.reason == "cannot run: chimera needs an even --pp, got 1"
    assert odd.reason == "cannot run: " + evaluate_mod.REGISTRY["chimera"].check(1, 2)
    assert run(big, 8, "interleaved-1f1b", 8).reason == "needs 64 stages, the model has 32 layers"
    assert run(small, 2, "1f1b").reason.startswith("parameters, gradients and optimizer states need")
    assert built == []
    fits = run(big, 2, "1f1b")
    assert isinstance(fits, evaluate_mod.Prepared) and built == [("1f1b", 2, 4)]


def test_where_the_evened_split_does_not_fit_the_plan_runs_and_reports_the_other():
    """Combined 1F1B for DeepSeek-V3 at pp8 with 4 chunks: the split that evens out the
    ranks (rank 7 also runs the head and MTP stage) needs more memory than the GPU has, so
    the planner simulates the split without those moves, and the recipe shows that one.
    The card is given 82 GB, between the two splits' peaks (about 80 and 76 GB; the
    H800's 85.5 GB holds both since DeepSeek-V3's recomputed norms keep no output)."""
    from dataclasses import replace

    from pipesim.planner.plan_stages import placement_of, stage_split

    m, c = load_model("deepseek-v3"), replace(load_cluster("h800-2048"), hbm_gb=82.0)
    t = load_training(**model_training("deepseek-v3"))
    plan = search_mod.search(m, c, t, schedules=["interleaved-1f1b-overlap"], pins=candidates_mod.Pins(pp=8, tp=1))
    r = plan.best
    pl = placement_of(r)
    lay, rc = r.candidate.layout, r.candidate.recompute

    def sizes(even_out):
        return tuple(map(len, stage_parts(m, c, t, lay, pl.stages, rc, pl.held(), even_out)))

    assert sizes(True) != sizes(False) and r.stage_layers == sizes(False)
    assert tuple(len(p.layers) for p in stage_split(plan, r)) == r.stage_layers
    evened = evaluate_mod.prepare(m, c, t, r.candidate, evaluate_mod.Shared(m, c, t), splits=(True,))
    assert isinstance(evened, evaluate_mod.Result) and "GB usable" in evened.reason


def test_a_training_file_with_no_tokens_is_one_line(tmp_path, capsys):
    """tokens = 0 in a file (--tokens 0 is refused on the command line) divided the run's
    GPU-hours by zero in the report: found by benchmarks/fuzz.py."""
    f = tmp_path / "t.toml"
    f.write_text("seq = 1024\nglobal_batch = 64\ntokens = 0\n")
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--training", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and "tokens must be > 0" in err and err.count("\n") == 1


def test_equal_steps_go_to_the_simplest_schedule(capsys):
    # gpt-oss-20b fits one GPU a replica: at pp1 every schedule runs F then B on each
    # micro-batch, and their steps differ only in the last bits of the sums; the plan must
    # recommend 1F1B, which every framework runs, not whichever sum came out lowest
    assert main(["plan", "--model", "tests/data/hf/gpt-oss-20b.json", "--cluster", "h100", "--gpus", "16", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    best, rest = plan["recommendation"], plan["runners_up"]
    assert best["pp"] == 1 and best["schedule"] == "1f1b"
    tied = [r["schedule"] for r in rest if r["pp"] == 1 and abs(r["step_seconds"] / best["step_seconds"] - 1) < 1e-12]
    assert "zb-auto" in tied  # it ties, and ranks behind
    assert plan["recipe"]["megatron"]["runs"]  # Megatron-LM runs 1F1B


def test_one_micro_batch_at_pp1_is_planned_as_1f1b(capsys):
    # llama3-8b on 1024 B200: one micro-batch a replica, where GPipe and 1F1B are the same
    # order; the tie goes to the schedule Megatron-LM runs too
    assert main(["plan", "--model", "llama3-8b", "--cluster", "b200", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    best = plan["recommendation"]
    assert (best["pp"], best["microbatches"], best["schedule"]) == (1, 1, "1f1b")
    assert plan["recipe"]["megatron"]["runs"]
