"""What a new user of ``pipesim memory`` and ``plan`` meets first: a cluster file's memory
in the wrong unit, a share out of range, the default schedule on an odd --pp, a layout
that cannot fit. Each ends in one line that names the key and what is accepted (exit 2,
nothing written), or, for a layout that does not fit, says which part overflows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.device_memory import usable
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster
from pipesim.planner.training import Training

PRESETS = Path(__file__).resolve().parents[1] / "src" / "pipesim" / "planner" / "presets"
H100 = (PRESETS / "clusters" / "h100.toml").read_text()


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code, err, *needles):
    assert code == 2, err
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("mib", ["80", "81.559", "723"])
def test_memory_mib_given_in_gb_is_refused(capsys, tmp_path, mib):
    # an H100 80GB is 81,559 MiB (nvidia-smi); 80 or 81.559 is the same card in GB, and a
    # card no larger than the CUDA context (723 MiB by default) holds no tensor at all
    c = tmp_path / "c.toml"
    c.write_text(H100.replace("memory_mib = 81559", f"memory_mib = {mib}"))
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", c, "--pp", "4")
    one_line(code, err, f"memory_mib = {mib} ", "nvidia-smi --query-gpu=memory.total", "memory_mib = 81559")


def test_plan_with_memory_in_gb_writes_nothing(capsys, tmp_path):
    c = tmp_path / "c.toml"
    c.write_text(H100.replace("memory_mib = 81559", "memory_mib = 80"))
    kept = tmp_path / "kept.md"
    kept.write_text("mine\n")
    for target in (tmp_path / "new.md", kept):
        code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", c, "-o", target)
        one_line(code, err, "memory_mib = 80 ")
        assert out == ""
    assert not (tmp_path / "new.md").exists() and kept.read_text() == "mine\n"


def test_an_unknown_cluster_key_is_not_offered_hbm_gb(capsys, tmp_path):
    # hbm_gb is refused as ambiguous, so the list of accepted keys must not offer it
    c = tmp_path / "c.toml"
    c.write_text(H100.replace("memory_mib = 81559", "memory = 80"))
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", c, "--pp", "4")
    one_line(code, err, "unknown key 'memory' (did you mean memory_mib?)")
    assert "hbm_gb" not in err


@pytest.mark.parametrize(
    "kind,text",
    [
        ("training", "allocator_fragmentation = -0.1\n"),
        ("training", 'allocator_fragmentation = "2.4%"\n'),
        ("training", "dp_overlap = -0.5\n"),
        ("cluster", H100 + "gpu_speed_sd = -0.1\n"),
    ],
)
def test_a_share_below_zero_names_the_share_range(capsys, tmp_path, kind, text):
    f = tmp_path / "f.toml"
    f.write_text(text)
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", f"--{kind}", f, "--pp", "4")
    key = re.search(r"^(\w+) =", text.splitlines()[-1]).group(1)
    # a share, not "a number from 0 to 1e+18"
    one_line(
        code, err, f"{key} must be {'a number from 0 to 1,' if key == 'dp_overlap' else 'a share from 0 up to (not including) 1'}"
    )


def test_the_default_schedule_on_an_odd_pp_says_where_it_came_from(capsys):
    # DualPipe needs an even pp; a user who never named it must learn how to set another
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--pp", "3", "--gpus", "3")
    one_line(code, err, "dualpipe needs an even --pp", "--schedule 1f1b")
    assert run(capsys, "memory", "--model", "llama3-8b", "--pp", "3", "--gpus", "3", "--schedule", "1f1b")[0] == 0
    # a layout no schedule takes (64 stages of Llama 3 8B's 32 layers) is not blamed on dualpipe
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--pp", "64")
    one_line(code, err, "64 stages need at least 64 layers")
    assert "dualpipe" not in err


@pytest.mark.parametrize(
    "argv,part,knob",
    [
        # 16 sequences of 8K tokens a micro-batch: the activations overflow
        (["--model", "llama3-8b", "--pp", "2", "--tp", "8", "--gpus", "16", "--micro-batch-size", "16"], "activations", "--micro-batch-size"),
        # 405B on 16 GPUs: 25B parameters a GPU, 16 bytes each with Adam before any activation
        (["--model", "llama3-405b", "--pp", "2", "--tp", "8", "--gpus", "16"], "parameters, gradients and optimizer states", "--zero"),
    ],
)  # fmt: skip
def test_a_layout_that_does_not_fit_says_what_overflows(capsys, argv, part, knob):
    code, out, _ = run(capsys, "memory", *argv, "--schedule", "1f1b")
    assert code == 0  # an answer, not bad input
    needs, usable_gb = map(
        float,
        re.search(r"1f1b does not fit: its worst rank \(rank \d+\) needs ([\d.]+) GB, ([\d.]+) GB usable there", out).groups(),
    )
    peak = float(re.search(r"peak ([\d.]+) GB", out).group(1))
    assert needs == peak > usable_gb == float(re.search(r"usable ([\d.]+) GB of the card", out).group(1))
    line = next(x for x in out.splitlines() if "does not fit:" in x)
    assert f"its {part} " in line and knob in line


def test_one_communicator_is_singular():
    c = load_cluster("h100")
    held = dict(usable(c, Training(), Layout(pp=2, dp=1)).held)
    assert "NCCL buffers (1 communicator: pipeline)" in held
    assert "NCCL buffers (2 communicators: data, pipeline)" in dict(usable(c, Training(), Layout(pp=2, dp=2)).held)


def test_no_knob_at_its_end_is_offered(capsys):
    # one sequence a micro-batch is the least there is: a user told to lower it cannot
    code, out, _ = run(capsys, "memory", "--model", "llama3-70b", "--pp", "8", "--schedule", "1f1b")
    line = next(x for x in out.splitlines() if "does not fit:" in x)
    assert code == 0 and "its activations" in line and "--micro-batch-size" not in line and "--recompute full" in line


def test_a_transient_larger_than_the_card_is_named_as_what_is_held_back(capsys):
    # full recomputation re-materialises one layer: Llama 3 70B's at 8 x 65,536 tokens keeps
    # over 150 KB a token (Korthikanti et al.'s 34 h bytes alone are 278 KB at h = 8192), so
    # 524,288 tokens take far more than the card's 85.5 GB before any tensor is placed
    argv = ["--model", "llama3-70b", "--pp", "8", "--gpus", "64", "--recompute", "full", "--micro-batch-size", "8"]
    code, out, _ = run(capsys, "memory", *argv, "--seq", "65536", "--schedule", "1f1b")
    assert code == 0 and re.search(r"usable -[\d.]+ GB of the card's 85.5 GB", out)
    assert "what the card holds back (listed above) takes all of it" in out


@pytest.mark.parametrize("cluster", ["b200", "gb200-nvl72"])
def test_the_usable_line_adds_up_on_cards_past_100_gb(capsys, cluster):
    # the card was printed to 3 figures (192 GB) beside parts to 0.1 GB: 192 - 0.8 - 2.2
    # - 4.5 is not the 184.8 printed. The capacity is the preset's nvidia-smi MiB
    mib = float(re.search(r"^memory_mib = ([\d.]+)", (PRESETS / "clusters" / f"{cluster}.toml").read_text(), re.M).group(1))
    code, out, _ = run(capsys, "memory", "--model", "llama3-70b", "--cluster", cluster, "--pp", "8", "--tp", "8")
    line = next(x for x in out.splitlines() if x.strip().startswith("usable"))
    got, card = map(float, re.search(r"usable ([\d.]+) GB of the card's ([\d.]+) GB", line).groups())
    assert code == 0 and card == round(mib * 2**20 / 1e9, 1)
    parts = [float(x) for x in re.findall(r" ([\d.]+)(?=, | GB\)$)", line)]
    assert len(parts) == 3 and abs(card - sum(parts) - got) <= 0.2, (card, parts, got)


def test_memory_picks_an_expert_degree_the_layout_takes(capsys):
    # GB200 NVL72's 1,152 GPUs at pp16 leave 72 a stage; DeepSeek-V3's 256 experts over
    # ep ranks that divide 72: gcd(72, 256) = 8, so ep8, not the refused ep64
    code, out, err = run(capsys, "memory", "--model", "deepseek-v3", "--cluster", "gb200-nvl72", "--pp", "16")
    assert code == 0, err
    assert "pp16 x dp72, ep8," in out


def test_a_training_file_with_a_model_files_training_table_says_so(capsys, tmp_path):
    # a model preset's [training] table, copied into a training file as it stands
    f = tmp_path / "t.toml"
    f.write_text("[training]\nseq = 8192\n")
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--training", f, "--pp", "4")
    one_line(code, err, "holds its keys at the top level; drop the [training] header")


@pytest.mark.parametrize(
    "flag,text,needle",
    [
        # what the device holds back is split over two files: each key named where it goes
        ("--cluster", H100 + "allocator_fragmentation = 0.05\n", "allocator_fragmentation is a training setting: put it in the --training file"),
        ("--training", "cuda_context_mib = 500\n", "cuda_context_mib is a cluster setting: put it in the --cluster file"),
        ("--training", "nccl_mib_per_group = 500\n", "nccl_mib_per_group is a cluster setting"),
        ("--model", 'name = "g"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 100\nactivation = "gelu"\n[mlp]\ndense_ffn = 256\n',
         "activation belongs in the [mlp] table"),
    ],
)  # fmt: skip
def test_a_key_in_the_wrong_file_says_where_it_goes(capsys, tmp_path, flag, text, needle):
    f = tmp_path / "f.toml"
    f.write_text(text)
    argv = [flag, f] + (["--model", "llama3-8b"] if flag != "--model" else [])
    code, _, err = run(capsys, "memory", *argv, "--pp", "2", "--gpus", "2", "--schedule", "1f1b")
    one_line(code, err, needle)


def test_the_default_expert_degree_divides_the_stage_and_the_experts():
    # memory and compare --model: DeepSeek-V3's 256 experts over 72 GPUs a stage take
    # ep8 (gcd(72, 256)); over 128 (the h800-2048 preset at pp16) its published ep64
    from pipesim.planner import load_model
    from pipesim.planner.layout import with_default_ep

    m, t = load_model("deepseek-v3"), Training()
    assert with_default_ep(m, t, Layout(pp=16, dp=72)).ep == 8
    assert with_default_ep(m, t, Layout(pp=16, dp=128)).ep == 64
    assert with_default_ep(load_model("llama3-8b"), t, Layout(pp=4, dp=8)).ep == 1  # no experts


def test_the_json_lists_each_kind_of_layer_from_its_first(capsys, tmp_path):
    import json

    # DeepSeek-V3's config.json: first_k_dense_replace = 3 of num_hidden_layers = 61, so
    # layers 0-2 dense and 3-60 MoE; "first_layer" said 2 and 60 (the last of each kind)
    code, out, _ = run(capsys, "memory", "--model", "deepseek-v3", "--cluster", "h800-2048", "--pp", "16", "--json")
    rows = [(r["layer"], r["first_layer"], r["layers"]) for r in json.loads(out)["activations_per_layer"][:-1]]
    assert code == 0 and rows == [("dense", 0, 3), ("moe", 3, 58)]
    # every-2 checkpoints every second layer (torchtitan counts from one): 16 of Llama 3
    # 8B's 32 layers keep their input only, 16 keep everything; both are listed
    (tmp_path / "t.toml").write_text('recompute = "every-2"\n')
    code, out, _ = run(
        capsys, "memory", "--model", "llama3-8b", "--pp", "4", "--schedule", "1f1b", "--training", tmp_path / "t.toml", "--json"
    )
    d = json.loads(out)
    rows = [(r["first_layer"], r["layers"], r["recompute"]) for r in d["activations_per_layer"][:-1]]
    assert rows == [(0, 16, "none"), (1, 16, "full")]
    full = d["activations_per_layer"][1]
    assert full["tensors"] == {"layer input": 2 * 4096 * 8192}  # bf16 hidden x the 8K sequence


@pytest.mark.parametrize(
    "value,shown",
    [("true", "got true"), ("false", "got false"), ("[true, 72]", "got [true, 72]"), ("{ gpus = true }", "got {gpus = true}")],
)
def test_a_cluster_value_of_the_wrong_kind_is_shown_as_toml_spells_it(capsys, tmp_path, value, shown):
    # TOML's booleans are lowercase (toml.io, v1.0.0 "Boolean"): the error quotes what the
    # user wrote, not Python's True
    c = tmp_path / "c.toml"
    c.write_text(H100 + f"nvlink_domain = {value}\n")
    code, _, err = run(capsys, "memory", "--model", "llama3-8b", "--cluster", c, "--pp", "4")
    one_line(code, err, f"nvlink_domain must be a whole number from 0 to 1,000,000, {shown}")
    assert "True" not in err and "False" not in err


# as plan leaves them out of its search (docs/plan.md, planner/runnable.py): Megatron-LM
# d98e8a6 refuses virtual stages at pp1 (parallel_state.initialize_model_parallel) and
# --overlap-moe-expert-parallel-comm without expert parallelism (TransformerConfig)
@pytest.mark.parametrize(
    "model, argv, needle",
    [
        ("llama3-8b", ["--pp", "1", "-s", "interleaved-1f1b", "--chunks", "2"], "more than one chunk per rank needs pp 2"),
        ("llama3-8b", ["--pp", "2", "-s", "1f1b-overlap"], "without expert parallelism"),
        ("llama3-8b", ["--pp", "2", "-s", "interleaved-1f1b-overlap", "--chunks", "2"], "without expert parallelism"),
        ("deepseek-v3", ["--pp", "8", "-s", "1f1b-overlap"], "only with virtual stages when pp > 1"),
    ],
)
def test_memory_refuses_what_plan_says_no_trainer_runs(capsys, model, argv, needle):
    code, out, err = run(capsys, "memory", "--model", model, "--gpus", "2048", *argv)
    one_line(code, err, needle)
    assert out == ""


@pytest.mark.parametrize("flag", [["--tokens", "1e9"], ["--tp-overlap", "none"]])
def test_memory_takes_no_flag_that_sets_only_a_time(capsys, flag):
    # --tokens sets the run's GPU-hours and --tp-overlap which collectives hide: memory
    # printed the same bytes whatever they said
    code, out, err = run(capsys, "memory", "--model", "llama3-8b", "--pp", "2", *flag)
    one_line(code, err, f"unrecognized arguments: {' '.join(flag)}")
    assert out == ""


@pytest.mark.parametrize("schedule, M", [("gpipe", 256), ("looped-bfs", 256), ("dualpipe", 8)])
def test_a_schedule_whose_peak_grows_with_m_is_sized_at_the_steps(capsys, schedule, M):
    # GPipe (and looped BFS) run every micro-batch's forward before any backward, so their
    # peak grows with M: at 2048 sequences of llama3-8b's training over dp8 in micro-batches
    # of 1, a step is 256 micro-batches, which plan prices; DualPipe's peak stops at 2pp
    code, out, _ = run(capsys, "memory", "--model", "llama3-8b", "--gpus", "16", "--pp", "2", "-s", schedule)
    assert code == 0 and f", M={M}; per GPU" in out.splitlines()[0]


@pytest.mark.parametrize("gpus", ["48"])
def test_a_schedule_whose_peak_grows_with_m_needs_the_steps_micro_batches(capsys, gpus):
    # 2048 sequences over dp24 split into no whole micro-batches; GPipe was sized at
    # M = 4pp = 8, under a header that gave no reason, far below the 85 or more a step of
    # this layout would hold
    code, out, err = run(capsys, "memory", "--model", "llama3-8b", "--gpus", gpus, "--pp", "2", "-s", "gpipe")
    one_line(code, err, "gpipe's peak grows with the step's micro-batches, but the global batch of 2048 sequences")
    assert out == ""
    code, out, _ = run(capsys, "memory", "--model", "llama3-8b", "--gpus", gpus, "--pp", "2", "-s", "gpipe", "-m", "8")
    assert code == 0 and ", M=8; per GPU" in out.splitlines()[0]


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_one_pipeline_rank_holds_every_layer(capsys, schedule):
    # at pp1 the "full stage of middle layers" ran from layer 16 to 48 of 32: an IndexError
    # traceback for every model. By hand, a Llama 3.1 8B layer holds q and o (4096 x 4096
    # each), k and v (4096 x 1024 each), gate, up and down (3 x 4096 x 14336) and two norms
    # (2 x 4096): 218,112,000 parameters; 32 of them are 6,979,584,000 (the model's
    # published 8,030,261,248 less the two 128256 x 4096 embeddings and the final norm)
    code, out, _ = run(capsys, "memory", "--model", "llama3-8b", "--pp", "1", "-s", schedule, "--json")
    assert code == 0
    d = json.loads(out)
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert layer == 218_112_000 and 32 * layer == 8_030_261_248 - 2 * 128256 * 4096 - 4096
    assert d["stage_parameters"] == d["stage_parameters_per_gpu"] == 32 * layer


@pytest.mark.parametrize("argv", [["--gpus", "8192"], ["--gpus", "4096", "--micro-batch-size", "2"]])
def test_replicas_without_a_sequence_are_refused(capsys, argv):
    # llama3-8b's 2048 sequences a step over dp4096 (or dp2048 micro-batches of 2) leave
    # replicas with nothing to train: plan refuses such a layout, memory sized it
    code, out, err = run(capsys, "memory", "--model", "llama3-8b", "--pp", "2", *argv)
    one_line(code, err, "need 4096 sequences a step, but the global batch is 2048: give --global-batch 4096 or more")
    assert out == ""


@pytest.mark.parametrize(("model", "gpus", "ep"), [("llama3-70b", "1024", False), ("mixtral-8x22b", "16", True)])
def test_what_does_not_fit_offers_ep_only_where_there_are_experts(capsys, model, gpus, ep):
    # memory refuses --ep for a dense model ("has no experts; drop --ep"), yet told Llama 3
    # 70B's overflowing parameters to shard over "--pp, --tp, --ep, or --zero"
    code, out, _ = run(capsys, "memory", "--model", model, "--gpus", gpus, "--pp", "2", "-s", "1f1b", "--recompute", "full")
    line = next(x for x in out.splitlines() if x.startswith("1f1b does not fit:"))
    assert code == 0 and "alone take" in line and ("--ep" in line) == ep
