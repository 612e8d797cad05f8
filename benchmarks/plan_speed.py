"""How long the planner's search takes, printed as a table.

    python benchmarks/plan_speed.py

The issue's target: the whole search for DeepSeek-V3 on 2,048 GPUs in under a minute on
two cores.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from pipesim.planner import load_cluster, load_model, load_training
from pipesim.planner.search import search
from pipesim.planner.specs import model_training

CASES = [
    ("deepseek-v3", "h800-2048", None),
    ("llama3-70b", "h100", 64),
    ("llama3-405b", "h100", 1024),
    ("mixtral-8x22b", "h100", 256),
    ("llama3-8b", "a100", 64),
]


def main() -> None:
    t = Table(title="pipesim plan: search time (one core)")
    for col in ("model", "cluster", "GPUs", "candidates", "simulated", "skipped by bound", "seconds", "recommendation"):
        t.add_column(col, justify="left" if col in ("model", "cluster", "recommendation") else "right")
    for model, cluster, gpus in CASES:
        m, c = load_model(model), load_cluster(cluster, gpus)
        tr = load_training(base=model_training(model))
        start = time.perf_counter()
        plan = search(m, c, tr)
        took = time.perf_counter() - start
        best = plan.best
        rec = (
            f"{best.candidate.label} pp{best.candidate.layout.pp} ep{best.candidate.layout.ep} tp{best.candidate.layout.tp}"
            if best
            else "nothing fits"
        )
        simulated = plan.considered - len([r for r in plan.rejected if not r.step_time < float("inf")]) - plan.skipped
        t.add_row(model, cluster, str(c.gpus), str(plan.considered), str(simulated), str(plan.skipped), f"{took:.1f}", rec)
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
