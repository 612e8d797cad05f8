"""The planner: from a model and a cluster to a pipeline strategy and its cost.

specs.py (TOML specs and presets; training.py, the run's fields) -> layout.py (one candidate's parallel degrees) ->
params.py, compute.py, collectives.py (parameters, kernel times, communication) ->
layer_costs.py, split.py, stages.py, step.py, footprint.py (each layer's costs, the stage
split, the step's ends, bytes held) -> candidates.py, programs.py, bounds.py, evaluate.py
(what is searched, what candidates share, one candidate checked, bounded and simulated) ->
search.py (every layout and schedule that fits, ranked) -> verdicts.py, advice.py,
assumptions.py and recipe.py (why the others lost, advice, assumptions, how to run it:
plan_stages.py, torchtitan_config.py, megatron_flags.py; over naming.py and
memory_lines.py) -> report.py (Markdown or JSON); commands.py registers ``pipesim plan``
(plan_command.py) and ``pipesim memory`` (memory_command.py) over the arguments both take
(spec_args.py).

    from pipesim.planner import load_cluster, load_model, load_training
    from pipesim.planner.search import search
    plan = search(load_model("deepseek-v3"), load_cluster("h800-2048"), load_training())
"""

from __future__ import annotations

from importlib import import_module

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from .layout import Layout
    from .results import Plan, Result
    from .specs import Cluster, Model, Training, load_cluster, load_model, load_training

#: each public name and its submodule, loaded on first use (PEP 562): importing
#: pipesim.planner.commands to build ``pipesim plan --help`` imported this package, and
#: with its layout and results the schedule builders and numpy
_HOMES = {
    "Layout": "layout",
    "Plan": "results",
    "Result": "results",
    **dict.fromkeys(("Cluster", "Model", "Training", "load_cluster", "load_model", "load_training"), "specs"),
}

__all__ = ["Cluster", "Layout", "Model", "Plan", "Result", "Training", "load_cluster", "load_model", "load_training"]


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
