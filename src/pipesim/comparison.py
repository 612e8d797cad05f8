"""A comparison of schedules, shared by ``compare`` and ``report``: one row per schedule
(built and simulated, or why it cannot run) and the table's columns."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from .components import ComponentCosts
from .costs import CostModel, Costs, chunk_costs
from .errors import PipesimError
from .ir import Schedule
from .metrics import Report, summarize
from .options import options_for, shape
from .output import num, pct, share
from .schedules import build, family
from .simulate import simulate
from .timeline import Timeline

COMPARE_COLUMNS: list[tuple[str, Callable[[Report], str]]] = [
    ("schedule", lambda r: r.schedule),
    ("makespan", lambda r: num(r.makespan)),
    ("bubble", lambda r: share(r.bubble_ratio, r.makespan)),
    ("steady-state util", lambda r: pct(r.steady_state_utilization)),
    ("min rank util", lambda r: share(min(r.utilization), r.makespan)),
    ("peak act. (chunks)", lambda r: str(max(r.peak_activations))),
    ("peak act. (stages)", lambda r: f"{max(r.peak_activation_memory):g}"),
    ("params", lambda r: f"{r.parameter_copies:g}x"),
]
COMPONENT_COLUMNS: list[tuple[str, Callable[[Report], str]]] = [
    ("compute util", lambda r: share(sum(r.compute_utilization) / len(r.compute_utilization), r.makespan)),
    ("steady compute util", lambda r: pct(r.steady_state_compute_utilization)),
    ("exposed comm (worst rank)", lambda r: num(max(r.exposed_comm))),
]


def compare_columns(costs: CostModel) -> list[tuple[str, Callable[[Report], str]]]:
    """The comparison table's columns: header and cell of a report."""
    return COMPARE_COLUMNS + (COMPONENT_COLUMNS if isinstance(costs, ComponentCosts) else [])


@dataclass
class Row:
    """One schedule in a comparison: its timeline and report, or why it cannot run."""

    name: str
    schedule: Schedule | None = None
    timeline: Timeline | None = None
    report: Report | None = None
    error: str | None = None


def compare_rows(
    args: argparse.Namespace,
    names: list[str],
    costs: Costs,
    costs_for: Callable[[Schedule], CostModel] | None = None,
    files: dict[str, Schedule] | None = None,
) -> list[Row]:
    """Each schedule built (or, for a schedule file, as read: ``options.listed_files``)
    and simulated; ``costs_for`` (a model's costs, which depend on the schedule's stage
    count) replaces ``costs`` when given."""
    files = files or {}
    rows = []
    for name in names:
        if name not in files:
            family(name)  # an unknown name is an error, not a row
        try:
            # each schedule gets the options it takes: --chunks, and for zb-auto the
            # costs and the memory limit (it then uses all the memory allowed)
            s = files[name] if name in files else build(name, *shape(args, files), **options_for(args, name))
            tl = simulate(s, costs_for(s) if costs_for else chunk_costs(costs, s, args.costs_per))
            rows.append(Row(name, s, tl, summarize(s, tl)))
        except PipesimError as e:
            if name in files:  # a file that cannot run is bad input, not a row of n/a
                raise
            rows.append(Row(name, error=str(e)))
    return rows


def refuse_if_none_runs(rows: list[Row], names: list[str], pp: int, M: int) -> None:
    """A table (or report) of nothing but n/a rows is bad input, as sweep and run take it:
    one line with each schedule's reason."""
    if not any(r.report for r in rows):
        reasons = "; ".join(dict.fromkeys(r.error for r in rows))
        raise PipesimError(f"no schedule of {', '.join(names)} can take pp={pp}, M={M}: {reasons}")
