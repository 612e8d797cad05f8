"""The layout: its groups, where their members sit, and the constraints on its degrees."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import test_nccl
from pipesim.cli import main
from pipesim.planner.collectives import cp_exchange, moe_comm, p2p_seconds, ring_exposed
from pipesim.planner.compute import attention_core, mlp_shapes
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout, Span, span
from pipesim.planner.specs import Attention, Cluster, Model, MoE, Training, load_cluster


def members(lay: Layout, name: str, first: int) -> list[int]:
    """The group of dimension ``name`` that holds rank ``first`` (a group start)."""
    return [first + k * lay.stride(name) for k in range(lay.size(name))]


def test_megatron_rank_order_by_hand():
    """Megatron-Core's parallel_state docstring example, 16 GPUs, tp2 pp4 (dp2): tensor
    groups [0, 1], [2, 3], ...; data-parallel groups [0, 2], [1, 3], ...; pipeline groups
    [0, 4, 8, 12], [1, 5, 9, 13], ... (tp fastest, then dp, then pp)."""
    lay = Layout(pp=4, dp=2, tp=2)
    assert members(lay, "tp", 2) == [2, 3]
    assert members(lay, "dp", 1) == [1, 3]
    assert members(lay, "pp", 1) == [1, 5, 9, 13]
    with_cp = Layout(pp=2, dp=2, tp=2, cp=2)  # tp-cp-dp-pp: cp groups two apart, dp four
    assert members(with_cp, "cp", 0) == [0, 2] and members(with_cp, "dp", 0) == [0, 4]
    assert members(with_cp, "pp", 0) == [0, 8]


def test_moe_folding_meshes():
    """Qwen3-235B as Megatron-Bridge runs it on 256 GPUs: attention tp2 x dp16 x pp8;
    experts ep32 over the same 32 GPUs of a pipeline stage (etp1), so each expert has one
    copy (edp1); the expert group is 32 consecutive ranks."""
    lay = Layout(pp=8, dp=16, tp=2, ep=32)
    assert lay.gpus == 256 and lay.edp == 1
    assert members(lay, "ep", 32) == list(range(32, 64))
    folded = Layout(pp=8, dp=32, tp=2, ep=8, etp=2)  # tp2 x dp32 = 64 = etp2 x ep8 x edp4
    assert (folded.edp, folded.stride("ep"), folded.stride("edp")) == (4, 2, 16)
    assert str(lay) == "pp8 x dp16 x tp2, ep32"
    assert str(Layout(pp=8, dp=64, ep=64)) == "pp8 x dp64 x ep64"  # the form plans always printed
    assert str(Layout(pp=16, dp=16, tp=8, cp=16)) == "pp16 x dp16 x tp8 x cp16"


def test_spans_on_nvlink_domains():
    """Groups over consecutive ranks on 8-GPU nodes and on 72-GPU NVL72 racks: a tp8 group
    stays in a node; 16 GPUs one apart straddle two racks where 72 is not a multiple of 16
    (ranks 64-79: 8 in each); dp groups four apart on 8-GPU nodes have 2 members a node;
    members a domain apart each sit alone."""
    assert span(8, 1, 8) == span(8, 1, 72) == Span(True, 8, 1)
    assert span(1, 4, 8) == Span(True, 1, 1)  # a group of one is nowhere apart
    assert span(8, 1, 8).inside
    assert span(16, 1, 72).inside is False and span(16, 1, 72).per_domain == 8
    assert span(9, 8, 72).inside  # 72 = 9 x 8: every dp9 group over tp8 fits a rack
    assert (span(32, 4, 8).per_domain, span(32, 4, 8).domains) == (2, 16)
    assert (span(4, 8, 8).inside, span(4, 8, 8).per_domain) == (False, 1)
    assert span(64, 1, 72).per_domain == 8  # the group of ranks 64-127: 8 in rack 0, 56 in rack 1


# --------------------------------------------------------------------------------------
# context parallelism, MoE folding and NVLink domains priced by hand


# hidden 64, 4 heads of 16, 2 kv heads; 8 experts of width 32, top 2
TINY = Model("tiny", layers=2, hidden=64, heads=4, vocab=100, attention=Attention("gqa", kv_heads=2, head_dim=16), moe_layers=(), dense_ffn=128)  # fmt: skip
TINY_MOE = replace(TINY, moe_layers=(0, 1), moe=MoE(experts=8, expert_ffn=32, top_k=2))
GPU = Cluster("t", "X", gpus=64, gpus_per_node=4, bf16_tflops=100, fp8_tflops=200, hbm_gb=80, nvlink_gbps=100, network_gbps=10, sms=4, hbm_tbps=1.0, gpu_speed_sd=0.0, **test_nccl.BANDWIDTH_ONLY)  # fmt: skip
T = Training(seq=64, global_batch=16, attention_efficiency=0.5, p2p_latency_us=0)


def test_ring_exposes_only_what_a_step_outlasts_its_block():
    """A ring of 4: 3 steps of 1 MB at 1 GB/s (1 ms each) against blocks of 3/4 ms
    forward: 0.25 ms a step shows; backward sends twice the bytes (2 ms) against 1.5 ms
    blocks: 0.5 ms a step; a block longer than the transfer hides it all."""
    f, b = ring_exposed(1e6, 4, 1e9, 3e-3, 6e-3)
    assert (f, b) == pytest.approx((3 * 0.25e-3, 3 * 0.5e-3))
    assert ring_exposed(1e6, 4, 1e9, 8e-3, 16e-3) == (0.0, 0.0)
    assert ring_exposed(1e6, 1, 1e9, 0.0, 0.0) == (0.0, 0.0)


def test_context_parallel_attention_and_all_gather_by_hand():
    """cp2 on 64-token sequences: a rank holds 32 tokens of each and 1/2 of the causal
    work: 32 x 4 heads x 64 x (16 + 16) FLOPs at 50 TFLOP/s. Llama 3's all-gather: each
    rank receives the other's K and V, 32 tokens x 2 kv heads x 32 x 2 bytes, over NVLink
    (the cp group sits in one 4-GPU node); backward Transformer Engine's all-gather scheme
    gathers them again and reduce-scatters their gradients, the same bytes."""
    lay = Layout(pp=1, dp=1, cp=2)
    f, _ = attention_core(TINY, GPU, T, lay, 0)
    assert f == pytest.approx(32 * 4 * 64 * 32 / 50e12)
    gather = replace(T, cp_comm="all_gather")
    x_f, x_b = cp_exchange(TINY, GPU, gather, lay, f, 2.5 * f)
    assert x_f == pytest.approx(32 * 2 * 32 * 2 / 100e9)
    assert x_b == pytest.approx(2 * 32 * 2 * 32 * 2 / 100e9)
    # the same group spread over nodes (tp4 puts cp ranks 4 apart): the network's pace
    wide = Layout(pp=1, dp=1, tp=4, cp=2)
    assert cp_exchange(TINY, GPU, gather, wide, f, f)[0] == pytest.approx(32 * 2 * 32 / 4 * 2 / 10e9)


def test_context_parallel_activations_are_the_local_chunk():
    """A GPU of cp4 keeps what a run on sequences 4 times shorter keeps (flash attention
    keeps no score matrix), and its optimizer shards over cp x dp."""
    long, short = replace(T, seq=256), replace(T, seq=64)
    a = memory_model(TINY, long, Layout(pp=1, dp=2, cp=4), 1, "selective")
    b = memory_model(TINY, short, Layout(pp=1, dp=2), 1, "selective")
    assert a.activation == b.activation and a.dp == 8


def test_folded_experts_see_their_shard_of_tokens():
    """tp2 x dp4 = 8 GPUs a stage, experts folded as ep4 x etp2 (edp1): each GPU routes its
    sequence shard (64 / 2 = 32 tokens), top 2 copies each; the etp pair gathers both
    halves' copies (2 x 64) over its 2 local experts: 64 token copies per expert, at half
    the expert width."""
    lay = Layout(pp=1, dp=4, tp=2, ep=4, etp=2)
    assert lay.edp == 1
    shapes = mlp_shapes(TINY_MOE, 0, T, lay)
    assert shapes[0] == (64, 2 * 16, 64, 2) and shapes[1] == (64, 64, 16, 2)


def test_all_to_all_inside_an_nvlink_domain_skips_the_network():
    """ep8 on 4-GPU nodes crosses the network; on the same nodes joined in 16-GPU NVLink
    domains it does not: every copy of a token bound elsewhere moves over NVLink,
    top_k x (1 - 1/8) copies of 64 x 2 bytes per token."""
    lay = Layout(pp=1, dp=8, ep=8)
    nodes = moe_comm(TINY_MOE, GPU, T, lay)[1]
    rack = moe_comm(TINY_MOE, replace(GPU, nvlink_domain=16), T, lay)[1]
    assert rack == pytest.approx(64 * 2 * (1 - 1 / 8) * 64 * 2 / 100e9)
    assert nodes > rack


def test_stage_transfers_inside_an_nvlink_domain_run_on_nvlink():
    """pp4 with nothing else on 4-GPU nodes: all four stages share a node, so a micro-batch's
    64 x 64 x 2-byte activation goes over NVLink (100 GB/s); dp2 between puts the stages
    two apart, the pipeline crosses nodes and the send runs at the network's 10 GB/s; the
    same layout on 16-GPU NVLink domains is back on NVLink."""
    bytes_ = 64 * 64 * 2
    assert p2p_seconds(TINY, GPU, T, Layout(pp=4, dp=1)) == pytest.approx(bytes_ / 100e9)
    spread = Layout(pp=4, dp=2)
    assert p2p_seconds(TINY, GPU, T, spread) == pytest.approx(bytes_ / 10e9)
    assert p2p_seconds(TINY, replace(GPU, nvlink_domain=16), T, spread) == pytest.approx(bytes_ / 100e9)


def test_nvl72_presets_name_their_domain():
    for name in ("gb200-nvl72", "gb300-nvl72"):
        c = load_cluster(name)
        assert (c.gpus_per_node, c.domain, c.gpus % 72) == (4, 72, 0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--seq", "4096", "--cp", "3"], "--cp 3 must divide"),
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--seq", "4100", "--cp", "4"], "divisible by 2 x cp = 8"),
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--cp", "4", "--cp-comm", "a2a", "--tp", "4"], "splits heads cp ways"),
        # 256 = 2^8: its divisors are the nine powers of two up to it
        (["--model", "deepseek-v3", "--cluster", "h800-2048", "--ep", "3"], "--ep 3 must divide deepseek-v3's 256 experts: give --ep one of 1, 2, 4, 8, 16, 32, 64, 128 or 256\n"),
        # Kimi K2's 384 experts (2^7 x 3) have 16 divisors: the two nearest 5 are named
        (["--model", "tests/data/hf/kimi-k2-instruct.json", "--cluster", "h800-2048", "--ep", "5"], "--ep 5 must divide kimi-k2-instruct's 384 experts: give --ep a divisor of 384, such as 4 or 6\n"),
        # DeepSeek-V3's experts are 2048 wide (moe_intermediate_size)
        (["--model", "deepseek-v3", "--cluster", "h800-2048", "--etp", "3"], "--etp 3 must divide deepseek-v3's expert width 2048: give --etp a divisor of 2048, such as 2 or 4\n"),
        # Llama 3 8B: 32 query heads, 8 key/value heads; tp divides both, so it divides 8
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "24", "--tp", "3"], "--tp 3 must divide llama3-8b's 32 attention heads and 8 key/value heads: give --tp one of 1, 2, 4 or 8\n"),
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--ep", "2"], "has no experts"),
        (["--model", "deepseek-v3", "--cluster", "h800-2048", "--tp", "1", "--pp", "16", "--dp", "128", "--ep", "64", "--etp", "4"], "must divide tp x cp x dp = 128"),
        # 25 trays split only into shares of 5 (20 GPUs, two could share a rack); 24 and 26 trays into 2 x 12 and 2 x 13
        (["--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "100"], "give e.g. 96 (2 NVLink domains of 48) or 104 (2 NVLink domains of 52)\n"),
        # 19 trays, a prime above the 18 of a rack: only shares of one tray
        (["--model", "llama3-8b", "--cluster", "gb200-nvl72", "--gpus", "76"], "equal shares of 40 to 72 GPUs, one a 72-GPU NVLink domain, as Slurm's --segment places a job across racks; give e.g. 72 or 80 (2 NVLink domains of 40)\n"),
        # the fold against a stage's GPUs when only --pp (or nothing) fixes them, not "no layout ... change or drop a pin"
        (["--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", "16", "--ep", "256", "--etp", "2"], "= 512 must divide a pipeline stage's tp x cp x dp GPUs (128: 2048 GPUs / --pp 16)"),
        (["--model", "deepseek-v3", "--cluster", "h800-2048", "--gpus", "1024", "--ep", "256", "--etp", "8"], "= 2048 must divide a pipeline stage's tp x cp x dp GPUs (1024: at most"),
        # a Megatron layout of 9 stages runs on 3 or 9 ranks, neither of which divides 64 GPUs: said so,
        # not "none for want of memory: 1f1b at pp1 ... has 1 stage"
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "64", "--stage-split", "E|(t*4|)*7t*4L"], "names 9 stages, which run on pp ranks dividing 9 (3, 9), but no such pp divides the 64 GPUs"),
        # 2048 sequences split into micro-batches of 3 nowhere: the size is named, not the GPUs
        (["--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--micro-batch-size", "3"], "--micro-batch-size 3 does not divide the global batch of 2048 sequences"),
    ],
)  # fmt: skip
def test_impossible_layouts_are_one_line(capsys, args, needle):
    code = main(["plan", *args])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_cluster_whose_domain_does_not_divide_its_gpus(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text(
        'name = "x"\ngpu = "X"\ngpus = 100\ngpus_per_node = 4\nnvlink_domain = 72\nbf16_tflops = 1\nfp8_tflops = 0\n'
        "memory_mib = 81559\nnvlink_gbps = 1\nnetwork_gbps = 1\n"
    )
    code = main(["plan", "--model", "llama3-8b", "--cluster", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "nvlink_domain 72" in err and err.count("\n") == 1, err


def test_pinned_cp_plan_reports_and_recipes(capsys):
    """A pinned cp plan names its scheme and settings; Megatron gets the CP flags."""
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--seq", "32768", "--global-batch", "8",
                 "--cp", "4", "--tp", "2", "--pp", "1", "--schedules", "1f1b", "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    best = out["recommendation"]
    assert code == 0 and (best["cp"], best["tp"], best["dp"]) == (4, 2, 2)
    assert "--context-parallel-size 4 --cp-comm-type p2p" in out["assumptions"]["context parallelism"]
    flags = out["recipe"]["megatron"]["flags"]
    assert "--context-parallel-size 4" in flags and "--cp-comm-type p2p" in flags
    tt = out["recipe"]["torchtitan"]
    assert tt["parallelism"]["context_parallel_degree"] == 4
    assert "context_parallel_degree=4" in tt["python"] and "def pipesim_plan" in tt["python"]


def test_odd_gpu_count_below_a_tensor_group_plans_without_tensor_parallelism(capsys):
    """3 GPUs on an 8-GPU node: tensor groups of 2, 4 or 8 cannot tile them, so the search
    keeps tp 1 (a fuzz case once divided by the empty 3 // 8 = 0 GPUs left per tensor group)."""
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "3", "--seq", "1024",
                 "--global-batch", "12", "--schedules", "1f1b,dualpipe", "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    best = json.loads(captured.out)["recommendation"]
    assert best["tp"] == 1 and best["pp"] * best["dp"] * best["cp"] == 3


def test_micro_batch_sizes_none_of_which_divide_the_batch_are_named(tmp_path, capsys):
    run = tmp_path / "run.toml"
    run.write_text("micro_batch_sizes = [3, 5]\n")
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--training", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "none of micro_batch_sizes [3, 5] divides the global batch of 2048 sequences" in err
