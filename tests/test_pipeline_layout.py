"""A stage split given as Megatron-Core's --pipeline-model-parallel-layout: read as Megatron
reads it, held to the model and the candidate, and simulated as given."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.calibrate import evaluate_layout
from pipesim.planner.pipeline_layout import check_syntax, expand, layout_sizes
from pipesim.planner.specs import load_cluster, load_model, load_training, model_from_table, model_training

ROOT = Path(__file__).resolve().parent.parent


def test_expand_reads_megatrons_own_example():
    # megatron/core/transformer/pipeline_parallel_layer_layout.py's docstring: "Ettt|(tt|)*29,m|L"
    # is [["E","t","t","t"]] + [["t","t"]]*29 + [["m"],["L"]]
    assert expand("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]


def test_expand_unrolls_letters_and_groups():
    assert expand("Et*3|t*2L") == ["Ettt", "ttL"]
    assert expand("E|(t|)*2tL") == ["E", "t", "t", "tL"]
    # inner first: (tt|)*2 is tt|tt|, so the group is t|tt|tt| twice
    assert expand("E(t|(tt|)*2)*2L") == ["Et", "tt", "tt", "t", "tt", "tt", "L"]


def test_deepseek_v3_layout_of_megatron_bridge_on_h100():
    # Megatron-Bridge v0.1.0rc4 scripts/performance/run_script.py:66: "Et|(tt|)*30mL" on pp8 x vpp4:
    # the embedding and one layer, thirty stages of two, then the MTP module and the loss alone
    assert layout_sizes("Et|(tt|)*30mL", layers=61, mtp_layers=1, stages=32) == [1] + [2] * 30 + [0]


@pytest.mark.parametrize(
    "text, says",
    [
        ("Et|(tt|)*30xL", "'x' is not a layout letter"),
        ("tE|tL", "the embedding (E) opens the first stage"),
        ("Et|EtL", "the embedding (E) opens the first stage"),
        ("Et|Lt", "the head and loss (L) close the last stage"),
        ("Etm|tL", "MTP modules (m) come after every transformer layer"),
        ("Ettt|(tt|)*29,m|L", "keeps the MTP modules (m) on the last stage"),
    ],
)
def test_malformed_layouts_are_refused_with_what_is_wrong(text, says):
    with pytest.raises(PipesimError) as e:
        check_syntax(text)
    assert says in str(e.value)


def test_layout_held_to_the_model_and_the_stage_count():
    with pytest.raises(PipesimError, match="places 60 transformer layers"):
        layout_sizes("Et|(tt|)*29,t|mL", layers=61, mtp_layers=1, stages=32)
    with pytest.raises(PipesimError, match="places 0 MTP modules"):
        layout_sizes("Et|(tt|)*30L", layers=61, mtp_layers=1, stages=32)
    with pytest.raises(PipesimError, match="names 32 stages; this layout has 16"):
        layout_sizes("Et|(tt|)*30mL", layers=61, mtp_layers=1, stages=16)


def test_the_planner_simulates_the_split_given():
    m, c = load_model("llama3-70b"), load_cluster("h100").resized(64)
    t = load_training(base={**model_training("llama3-70b"), "seq": 8192, "global_batch": 128})
    lay = {"tp": 4, "pp": 8, "dp": 2, "schedule": "interleaved-1f1b", "chunks": 5, "micro_batch": 1}
    # Megatron-Core's default on 80 layers over pp8 x vpp5: two a stage (transformer_block.py)
    even = evaluate_layout(m, c, replace(t, stage_split="E(tt|)*39,ttL"), lay)
    assert even.stage_layers == (2,) * 40
    # the same count written stage by stage, and one that moves a layer to the last stage
    moved = evaluate_layout(m, c, replace(t, stage_split="Et|(tt|)*38,tttL"), lay)
    assert moved.stage_layers == (1,) + (2,) * 38 + (3,)
    assert moved.step_time != even.step_time
    # a candidate with another stage count is refused, naming both counts
    with pytest.raises(PipesimError, match="has 16 stages; stage_split .* names 40"):
        evaluate_layout(m, c, replace(t, stage_split="E(tt|)*39,ttL"), {**lay, "chunks": 2})


def _pipesim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "pipesim", *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_a_bad_layout_in_a_training_file_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "t.toml").write_text('stage_split = "Et|(tt|)*30xL"\n')
    out = tmp_path / "plan.md"
    r = _pipesim("plan", "--model", "deepseek-v3", "--cluster", "h100", "--gpus", "1024", "--training", "t.toml",
                 "--output", str(out), cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and not out.exists()
    assert r.stderr.count("\n") == 1 and "'x' is not a layout letter" in r.stderr and "Traceback" not in r.stderr


def test_a_layout_may_name_more_stages_than_layers():
    # the Zero Bubble fork's padding written out: the end stages hold only the embedding and the head
    m = model_from_table(
        {"name": "tiny", "layers": 6, "hidden": 1024, "heads": 8, "vocab": 32000, "mlp": {"dense_ffn": 4096}}, "t"
    )
    c = load_cluster("a100").resized(4)
    t = load_training(seq=1024, global_batch=8, stage_split="E|(t|)*6,L")
    lay = {"tp": 1, "pp": 4, "dp": 1, "schedule": "interleaved-1f1b", "chunks": 2, "micro_batch": 1}
    assert evaluate_layout(m, c, t, lay).stage_layers == (0, 1, 1, 1, 1, 1, 1, 0)


def test_the_stage_split_flag_sets_it_and_refuses_a_misspelt_rule(tmp_path):
    r = _pipesim("plan", "--model", "deepseek-v3", "--cluster", "h100", "--gpus", "1024", "--stage-split", "cost", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert 'stage_split must be "balanced", "even" or a Megatron layout' in r.stderr
    r = _pipesim("plan", "--model", "deepseek-v3", "--cluster", "h100", "--gpus", "1024", "--tp", "2", "--pp", "8",
                 "--ep", "64", "--chunks", "2", "--stage-split", "Et|(tt|)*30mL", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "has 16 stages; stage_split 'Et|(tt|)*30mL' names 32" in r.stderr


def test_the_recipes_layout_reads_back_as_the_split_it_came_from():
    from pipesim.planner.megatron_flags import megatron_layout
    from pipesim.planner.plan_stages import Part
    from pipesim.planner.split import ranges_of

    sizes = [1, 2, 2, 2, 2, 1]
    parts = [Part(s, (s,), r, s == 0, s == 5, 1 if s == 5 else 0, 0.0) for s, r in enumerate(ranges_of(sizes))]
    text = megatron_layout(parts)
    # four alike middle stages written once, as Megatron's parser unrolls (...)*n
    assert text == "Et|(t*2|)*4tmL"
    assert layout_sizes(text, layers=10, mtp_layers=1, stages=6) == sizes


def test_a_repeat_past_any_model_is_refused_before_it_is_built():
    # unrolled, "(t|)*999999999" would be two gigabytes of letters
    with pytest.raises(PipesimError, match="repeats to more than 100,000 letters"):
        expand("E(t|)*999999999L")
    with pytest.raises(PipesimError, match="repeats to more than 100,000 letters"):
        expand("E((t|)*1000|)*1000L")
