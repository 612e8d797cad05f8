"""The plan's stage split on torchtitan's command line. tyro cannot read a list of lists
from it, so the command line names the settings torchtitan generates its split from; held
here to torchtitan's own rules, transcribed from pytorch/torchtitan at b5bcd76,
torchtitan/distributed/pipeline_parallel.py (``_get_pipeline_metadata`` and
``_generate_llm_fqn_per_model_part``), and to its docstring's example."""

from __future__ import annotations

import math

import pytest

from pipesim.planner.layout import Layout
from pipesim.planner.recipe import recipe
from pipesim.planner.search import Candidate, Plan, Result
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.torchtitan_split import generated

DEFAULTS = {  # ParallelismConfig at b5bcd76
    "pipeline_parallel_layers_per_stage": None,
    "pipeline_parallel_first_stage_less_layers": 1,
    "pipeline_parallel_last_stage_less_layers": 1,
}


def torchtitans_split(layers: int, pp: int, single_stage: bool, settings: dict) -> list[int]:
    """Layers per stage as torchtitan b5bcd76 makes them from these settings."""
    first = settings["pipeline_parallel_first_stage_less_layers"]
    last = settings["pipeline_parallel_last_stage_less_layers"]
    per_stage = settings["pipeline_parallel_layers_per_stage"]
    # _get_pipeline_metadata: ceil((layers + weights) / layers_per_stage), else 1 or 2 a rank
    stages = math.ceil((layers + first + last) / per_stage) if per_stage else pp * (1 if single_stage else 2)
    share, extra = divmod(layers + first + last, stages)
    out, current = [], 0
    for i in range(stages):  # _generate_llm_fqn_per_model_part
        n = share + (1 if i < extra else 0) - (first if i == 0 else last if i == stages - 1 else 0)
        taken = max(0, min(n, layers - current))
        out.append(taken)
        current += taken
    return out


def test_the_docstrings_example():
    # "_generate_llm_fqn_per_model_part(2, 3, input_weight=2, output_weight=2) treats
    # embeddings as 2 layers and norm+output as 2 layers": 7 effective layers, 4 and 3, so
    # tok_embeddings + layers.0-1, then layers.2 + norm and lm_head
    assert generated(2, 3, 2, 2) == [2, 1]


def command_line_settings(command_line: str) -> dict:
    words = command_line.split()
    given = {
        w.removeprefix("--parallelism."): int(v) for w, v in zip(words, words[1:]) if w.removeprefix("--parallelism.") in DEFAULTS
    }
    return DEFAULTS | given


@pytest.mark.parametrize(
    "model, pp, schedule, chunks",
    [
        ("llama3-8b", 2, "interleaved-1f1b", 4),  # torchtitan's default would make 2 stages a rank
        ("llama3-8b", 2, "interleaved-1f1b", 2),
        ("llama3-70b", 4, "1f1b", None),
        ("llama3-70b", 2, "zb-v", None),
        ("llama3-405b", 8, "interleaved-1f1b", 4),
    ],
)
def test_the_command_line_makes_the_plans_stages(model, pp, schedule, chunks):
    plan = Plan(load_model(model), load_cluster("h100", 64), load_training(seq=4096, global_batch=256))
    plan.results.append(
        Result(Candidate(Layout(pp=pp, dp=64 // pp // 8, tp=8), schedule, chunks, "full", 4 * pp), True, step_time=1.0)
    )
    d = recipe(plan)
    tt = d["torchtitan"]
    counts = [len(s["layers"]) and s["layers"][1] - s["layers"][0] + 1 for s in d["stages"]]
    single = len(counts) == pp
    made = torchtitans_split(plan.model.layers, pp, single, command_line_settings(tt["command_line"]))
    said = [n for n in tt["notes"] if "cannot carry the plan's split" in n]
    assert len(made) == len(counts)  # the schedule's stages, however the layers fall
    assert (made == counts) == (not said)
