"""The planner: from a model and a cluster to a pipeline strategy and its cost.

specs.py (TOML specs and presets) -> estimate.py (times, bytes, parameters per layer) ->
search.py (every layout and schedule that fits, simulated, ranked) -> report.py
(Markdown or JSON); commands.py holds ``pipesim plan`` and ``pipesim memory``.

    from pipesim.planner import load_cluster, load_model, load_training
    from pipesim.planner.search import search
    plan = search(load_model("deepseek-v3"), load_cluster("h800-2048"), load_training())
"""

from .estimate import Layout
from .search import Plan, Result
from .specs import Cluster, Model, Training, load_cluster, load_model, load_training

__all__ = ["Cluster", "Layout", "Model", "Plan", "Result", "Training", "load_cluster", "load_model", "load_training"]
