"""A plan you can run, as the report's "How to run it" section and the JSON's ``recipe``:
for one result of the search (the recommendation, or a runner-up by its row number) the
stage split it simulated (plan_stages.py), and how to ask torchtitan
(torchtitan_config.py) and Megatron-LM (megatron_flags.py) for the same layout and
schedule, or that they cannot run it."""

from __future__ import annotations

from .megatron_flags import megatron
from .naming import layout_text
from .pipeline_layout import split_text
from .plan_stages import pick, stage_split
from .results import Plan
from .torchtitan_config import export_command, torchtitan


def recipe(plan: Plan, n: int = 1) -> dict:
    """Plan #n of the ranking as the JSON's ``recipe``: its stages, torchtitan's settings,
    Megatron-LM's flags and, where PyTorch needs one, the schedule CSV's export command."""
    r = pick(plan, n)
    parts = stage_split(plan, r)
    tt = torchtitan(plan, r, parts)
    path = tt.get("parallelism", {}).get("pipeline_parallel_schedule_csv")
    return {
        "layout": n,
        "schedule": r.candidate.label,
        "stages": [p.to_dict() for p in parts],
        "torchtitan": tt,
        "megatron": megatron(plan, r, parts),
        # the order as PyTorch's runtime reads it, when no class of its own runs it
        "schedule_csv": {"path": path, "command": export_command(r)} if path else None,
    }


def markdown(plan: Plan, n: int = 1) -> list[str]:
    """The 'How to run it' section of the report."""
    d = recipe(plan, n)
    r = pick(plan, n)
    which = "the recommendation" if n == 1 else f"plan #{n} of the ranking"
    out = [
        "## How to run it",
        "",
        f"For {which}: {d['schedule']} on {layout_text(r, plan)}, {r.candidate.microbatches} micro-batch{'es' if r.candidate.microbatches != 1 else ''}, with "
        + split_text(plan.training.stage_split, simulated=True)
        + " (ms: F + B + W of one micro-batch):",
        "",
        "| stage | rank | layers | also holds | ms per micro-batch |",
        "|---|---|---|---|---|",
    ]
    for p in d["stages"]:
        held = [x for x, on in (("embedding", p["embedding"]), ("output head", p["head"])) if on]
        held += [f"{p['mtp']} MTP"] if p["mtp"] else []
        first, last = p["layers"] or (None, None)  # a stage may hold no layer: Megatron's "mL"
        layers = "-" if first is None else str(first) if first == last else f"{first}-{last}"
        ranks = ", ".join(map(str, p["ranks"]))
        out.append(f"| {p['stage']} | {ranks} | {layers} | {', '.join(held) or '-'} | {p['seconds_per_microbatch'] * 1e3:.1f} |")
    out.append("")
    tt = d["torchtitan"]
    if tt["runs"]:
        if tt["python"]:
            out += ["torchtitan (a configuration function, its current form):", "", "```python", tt["python"].rstrip(), "```", ""]
        else:
            out += [f"torchtitan in its current form cannot run it: {tt['python_why']}.", ""]
        out += [
            f"{'The same as a TOML job file' if tt['python'] else 'Older torchtitan runs it from a TOML job file'} "
            f"({tt['toml_versions']}):",
            "",
            "```toml",
            tt["toml"].rstrip(),
            "```",
        ]
        out += [f"- {x}" for x in tt["notes"]]
    else:
        out.append(f"torchtitan: cannot run it: {tt['why']}.")
    out.append("")
    mg = d["megatron"]
    if mg["runs"]:
        out += ["Megatron-LM:", "", "```", " \\\n  ".join(mg["flags"]), "```"] + [f"- {x}" for x in mg["notes"]]
    else:
        out.append(f"Megatron-LM: no equivalent. {mg['why']}.")
    out.append("")
    if d["schedule_csv"]:
        out += [f"Schedule CSV: `{d['schedule_csv']['command']}`", ""]
    return out
