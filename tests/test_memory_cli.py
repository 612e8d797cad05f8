"""``pipesim memory`` as a user meets it: a layout that is the cluster, and words about a
second parameter copy only where the schedule keeps one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


def test_each_rank_is_held_against_its_own_usable_memory(capsys, tmp_path):
    # torch.distributed.pipelining keeps every micro-batch's logits on the last stage only
    # (pp_keeps_outputs), so torchtitan's ``del pred`` frees none of them. Llama 3
    # 8B's logits are 2 bytes x 128,256 x 8,192 tokens = 2.10 GB a micro-batch, 25.2 GB
    # for 12: the first rank, which holds the most activations under 1F1B (pp micro-batches
    # in flight), holds none of them, so its peak must be compared with its own usable memory
    t = tmp_path / "t.toml"
    t.write_text("zero = 3\nseq = 8192\nglobal_batch = 96\nloss_frees_logits = true\npp_keeps_outputs = true\n")
    argv = ["--model", "llama3-8b", "--pp", 4, "--gpus", 32, "--training", t, "--microbatches", 12, "-s", "1f1b"]
    code, out, _ = _run(capsys, *argv, "--json")
    row = json.loads(out)["schedules"][0]
    logits = 2 * 128256 * 8192
    first, *_, last = row["rank_usable_bytes"]
    # the first rank receives output gradients, the last inputs: one receive set each, the
    # same size; the 12 kept logits, less the 2.4% fragmentation share of them (the
    # allocator_fragmentation default), are the difference
    assert first - last == pytest.approx(12 * logits * (1 - 0.024), rel=1e-6)
    assert row["rank"] == 0 and row["fits"] and row["peak_gb"] * 1e9 < first
    assert last < row["peak_gb"] * 1e9  # what memory compared it with before: "does not fit"
    code, out, _ = _run(capsys, *argv)
    assert code == 0 and "does not fit" not in out
    assert "worst rank, the least room under its own usable memory: 1f1b rank 0" in out
    assert "on 1f1b's rank 0 (less" in out  # the usable line is that rank's


def test_a_rank_over_its_own_usable_memory_is_named(capsys):
    # Llama 3 70B at pp8 on H100s: 1F1B's first rank keeps 8 micro-batches of 80 layers / 8
    # = 10 layers in flight, far past the card; the line says which rank overflows
    code, out, _ = _run(capsys, "--model", "llama3-70b", "--pp", 8, "-s", "1f1b")
    assert code == 0 and "1f1b does not fit: its worst rank (rank 0) needs" in out and "GB usable there;" in out


def test_each_part_held_back_says_where_it_comes_from(capsys):
    code, out, _ = _run(capsys, "--model", "llama3-8b", "--pp", 2, "-s", "1f1b")
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("  usable "))
    # the issue's sources: PyTorch users' CUDA context, NCCL's per-communicator buffers,
    # a PyTorch OOM report's reserved but unallocated memory
    assert lines[at + 1].startswith("    CUDA context: cuda_context_mib") and "discuss.pytorch.org/t/73021" in lines[at + 1]
    assert lines[at + 2].startswith("    NCCL buffers: nccl_mib_per_group") and "NVIDIA/nccl#964" in lines[at + 2]
    assert "allocator fragmentation" in lines[at + 3] and "vllm-project/compressed-tensors#587" in lines[at + 3]
    code, out, _ = _run(capsys, "--model", "llama3-8b", "--pp", 2, "-s", "1f1b", "--json")
    held = json.loads(out)["usable"]["held"]
    assert [h["what"].split(" (")[0] for h in held] == [
        "CUDA context",
        "NCCL buffers",
        "backward transient",
        "FSDP gathered parameters",
        "allocator fragmentation",
    ]
    assert all(h["source"] for h in held) and "NVIDIA/nccl#964" in held[1]["source"]


def test_the_second_copy_is_explained_without_calling_it_small(capsys):
    # Mixtral 8x22B (config.json: 56 layers, hidden 6144, 48 heads, 8 KV heads of 128,
    # 8 experts of 3 x 6144 x 16384): a layer's attention is 2 x 6144^2 + 2 x 6144 x 1024
    # = 88.1M, its experts 8 x 302M = 2.416B, its router 49K; a pp8 stage of 7 layers
    # holds 17.5B, and with ep8 a GPU 7 x (88.1M + 302M) = 2.73B. The second copy adds
    # 10% of a GB200's memory here: no "small" about it
    code, out, _ = _run(capsys, "--model", "mixtral-8x22b", "--cluster", "gb200-nvl72", "--pp", 8)
    line = next(x for x in out.splitlines() if "the second copy doubles" in x)
    assert code == 0 and "small" not in line.lower()
    assert "a pp8 stage holds 17.5B parameters" in line and "keeps only 2.73B" in line and "doubles 2.73B, not 17.5B" in line


def test_zb_auto_is_ordered_as_the_plan_orders_it(capsys):
    """zb-auto's order is searched for a candidate's own per-stage costs and the room its
    ranks leave; memory built it at unit costs, so for Qwen2.5-72B at pp4 x dp64 x tp4, M=16
    it printed a 58.9 GB peak where the plan, for the same layout, gives 78.6 GB."""
    config = str(Path(__file__).parent / "data" / "hf" / "qwen2.5-72b-instruct.json")
    pins = ["--model", config, "--cluster", "h100", "--pp", "4", "--dp", "64", "--tp", "4", "--recompute", "selective"]
    assert main(["plan", *pins, "--schedules", "zb-auto", "--microbatches", "16", "--micro-batch-size", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["recommendation"]
    code, out, _ = _run(capsys, *pins, "-s", "zb-auto", "-m", 16, "--json")
    row = json.loads(out)["schedules"][-1]
    assert code == 0 and plan["schedule"] == "zb-auto"
    assert row["peak_gb"] == pytest.approx(plan["memory_gb"], rel=1e-9) and row["rank"] == plan["memory_rank"]


def test_a_plan_with_a_megatron_group_is_priced_as_planned(capsys):
    """M=8 at pp3 is not a multiple of pp, so Megatron runs combined 1F1B with a micro-batch
    group (--microbatch-group-size-per-virtual-pipeline-stage; the plan gives g=4): memory
    refused the plan's own layout, naming a --group-size flag that memory does not take."""
    config = str(Path(__file__).parent / "data" / "hf" / "qwen3-30b-a3b.json")
    pins = ["--model", config, "--cluster", "h100", "--gpus", "24", "--pp", "3", "--dp", "8", "--ep", "8"]
    pins += ["--global-batch", "64", "--recompute", "selective", "--chunks", "2"]
    plan_args = ["--schedules", "interleaved-1f1b-overlap", "--microbatches", "8", "--micro-batch-size", "1", "--json"]
    assert main(["plan", *pins, *plan_args]) == 0
    plan = json.loads(capsys.readouterr().out)["recommendation"]
    code, out, err = _run(capsys, *pins, "-s", "interleaved-1f1b-overlap", "-m", 8, "--json")
    assert code == 0, err
    row = json.loads(out)["schedules"][-1]
    assert plan["group_size"] == 4 and row["schedule"] == "interleaved-1f1b-overlap (v=2, g=4)"
    assert row["peak_gb"] == pytest.approx(plan["memory_gb"], rel=1e-9)


def test_the_second_copy_is_weighed_on_one_gpu(capsys):
    # DualPipe's rank r holds stage r of one direction and stage pp-1-r of the other
    # (DeepSeek's DualPipe, deepseek-ai/DualPipe dualpipe.py), each stage split as 1F1B
    # splits it: on dualpipe's worst rank the second copy is 1F1B's rank pp-1-r's static
    # memory. Comparing the two schedules' worst ranks (1F1B's rank 0 holds the
    # embedding) gave 51.0 GB here, where the copy on one GPU is 52.1.
    code, out, _ = _run(capsys, "--model", "llama3-70b", "--pp", 8, "-s", "dualpipe", "--json")
    assert code == 0
    data = json.loads(out)
    first, second = data["schedules"]
    r = data["extra_copy_rank"]
    assert r == second["rank"]
    assert data["extra_copy_gb"] == pytest.approx(first["static_per_rank_gb"][8 - 1 - r], rel=1e-9)
    assert second["static_per_rank_gb"][r] == pytest.approx(
        first["static_per_rank_gb"][r] + first["static_per_rank_gb"][8 - 1 - r], rel=1e-9
    )


# Llama 3 8B's 32 layers as Megatron-Core's --pipeline-model-parallel-layout writes a split
# of 8 stages: on pp4, two virtual stages a rank (stage v x pp + r on rank r)
EIGHT_STAGES = "Etttt|(tttt|)*6ttttL"
PINNED = ["--model", "llama3-8b", "--cluster", "h100", "--gpus", 8, "--pp", 4, "--tp", 2, "--dp", 1]
PINNED += ["--global-batch", 16, "--recompute", "selective", "--stage-split", EIGHT_STAGES]


@pytest.mark.parametrize("schedule", ["dualpipev", "interleaved-1f1b"])
def test_a_split_of_pp_x_v_stages_is_sized_as_the_plan_sizes_it(capsys, schedule):
    """A layout string naming pp x v stages: memory sized 1f1b beside every schedule, which
    runs pp stages, and refused the split the plan ranks; now it sizes the schedule asked
    for on it, with the plan's memory for that row, and says why 1f1b is not beside it."""
    pins = list(map(str, PINNED))
    assert main(["plan", *pins, "--schedules", schedule, "--microbatches", "16", "--micro-batch-size", "1", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["recommendation"]
    code, out, err = _run(capsys, *pins, "-s", schedule, "-m", 16, "--json")  # interleaved's v=2 read from the split
    assert code == 0, err
    data = json.loads(out)
    (row,) = data["schedules"]
    assert plan["schedule"] == schedule and row["schedule"].split(" (")[0] == schedule
    assert row["peak_gb"] == pytest.approx(plan["memory_gb"], rel=1e-9) and row["rank"] == plan["memory_rank"]
    assert row["usable"]["usable_bytes"] / 1e9 == pytest.approx(plan["usable_gb"], rel=1e-9)
    assert row["stage_layers"] == [4] * 8 and data["extra_copy_gb"] is None
    code, out, _ = _run(capsys, *pins, "-s", schedule, "-m", 16)
    assert code == 0 and "1f1b is not set beside" in out and "names 8 stages, pp4 x 2 chunks a rank" in out


@pytest.mark.parametrize(
    ("split", "schedule", "runs"),
    [("Et|(tt|)*7t,tL", "dualpipev", 8), (EIGHT_STAGES, "dualpipe", 4), ("Etttttttt|(tttttttt|)*2ttttttttL", "zb-v", 8)],
)
def test_a_split_that_fits_not_the_schedule_is_refused_in_one_line(capsys, split, schedule, runs):
    # 9 stages fit neither 1f1b (4) nor dualpipev (8); 8 not dualpipe's 4; 4 fit 1f1b, not zb-v's V of 8
    pins = [*PINNED[:-1], split]
    code, out, err = _run(capsys, *pins, "-s", schedule)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"on pp4 runs {runs}" in err and f"give a split of {runs} stages" in err


@pytest.mark.parametrize("schedule", ["1f1b", "dualpipev"])
def test_a_split_refused_for_a_schedule_without_chunks_names_no_chunks(capsys, schedule):
    # 9 stages fit neither 1f1b's 4 nor dualpipev's 8; the refusal offered --chunks, which
    # neither takes: the run it suggested was refused in turn
    pins = [*PINNED[:-1], "Et|(tt|)*7t,tL", "-s", schedule]
    code, out, err = _run(capsys, *pins)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "or --chunks" not in err and f"({schedule} takes no --chunks)" in err
    code, _, err = _run(capsys, *pins, "--chunks", 3)
    assert code == 2 and "--chunks" in err  # the flag the old line named: refused


@pytest.mark.parametrize(("schedule", "chunks"), [("dualpipe", None), ("interleaved-1f1b", 3), ("v-half", None)])
def test_the_schedule_beside_1f1b_is_built_once(capsys, monkeypatch, schedule, chunks):
    from pipesim.planner import memory_command

    built: list[str] = []
    real = memory_command.build
    monkeypatch.setattr(memory_command, "build", lambda name, *a, **o: built.append(name) or real(name, *a, **o))
    more = [] if chunks is None else ["--chunks", chunks]
    code, _, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "-s", schedule, *more)
    assert code == 0, err
    assert built.count(schedule) == 1 and built.count("1f1b") == 1


@pytest.mark.parametrize("given", [[], ["-s", "1f1b"]])
def test_chunks_for_a_schedule_without_them_names_one_that_takes_them(capsys, given):
    # the default dualpipe's refusal said "give --schedule 1f1b or another", and 1f1b
    # refused --chunks in turn
    code, out, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "--chunks", 3, *given)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "give --schedule 1f1b" not in err and "interleaved-1f1b" in err
    # the schedule it names takes them: 32 layers on pp4 x 3 chunks
    code, out, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "--chunks", 3, "-s", "interleaved-1f1b", "--json")
    assert code == 0, err
    assert json.loads(out)["schedules"][1]["chunks"] == 3


def test_a_gpu_count_the_layout_does_not_divide_says_which_counts_do(capsys):
    # "(or give --gpus)" where --gpus 6 was given: 4 GPUs a pipeline divide 4, 8, 12, ...
    code, out, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "--gpus", 6)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "give --gpus a multiple of 4" in err and "(or give --gpus)" not in err
    code, _, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "--gpus", 8)
    assert code == 0, err


def test_the_rows_figures_line_up_under_a_long_schedule_name(capsys):
    code, out, err = _run(capsys, "--model", "llama3-8b", "--pp", 4, "-s", "interleaved-1f1b")
    assert code == 0, err
    first, second = out.splitlines()[1:3]
    assert first.lstrip().startswith("1f1b ") and second.lstrip().startswith("interleaved-1f1b (v=2) ")
    assert first.index(" copy of ") == second.index(" copy of ")
