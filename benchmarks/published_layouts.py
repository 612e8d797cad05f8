"""Where pipesim's free search ranks each published layout, at the published set-up.

    python benchmarks/published_layouts.py                 # every row of published_runs.toml
    python benchmarks/published_layouts.py --only Llama --keep 40

For every row of benchmarks/data/published_runs.toml (the rows of ../shared/PUBLISHED_RUNS.md
pipesim expresses) the free search runs on the row's own model, cluster, GPU count,
global batch, sequence and training settings, with nothing pinned. The published layout
(its tp, cp, pp, dp, ep, etp and schedule; what the source leaves open, such as the
micro-batch size, chosen as the planner would) is simulated on its own, and its rank is
the number of distinct layouts (tp, cp, pp, dp, ep, etp) the search found faster, plus
one. The search keeps its ``--keep`` best exactly (``search``: bounds prune only what
cannot enter them), so a rank up to that is exact; past it the row says "> N layouts".
A second rank comes from the same search on the published schedule alone (the layouts
the published framework could have run its schedule on).

Target (issue 19): the published layout in the top 3, or a reason printed beside it. The
reason column compares the published layout's step with the search's pick term by term
(pipeline makespan, its bubble, the exposed data-parallel sync) and names the largest
difference, after what else the pick chose on the same layout (micro-batch size, schedule,
recomputation), or says the published layout does not fit pipesim's memory model.
"""

from __future__ import annotations

import argparse
import sys
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import DATA, free_split, specs  # noqa: E402  (the rows' specs, one reading of the data)

from pipesim.errors import PipesimError  # noqa: E402
from pipesim.planner.calibrate import evaluate_layout  # noqa: E402
from pipesim.planner.candidates import layouts  # noqa: E402
from pipesim.planner.search import search  # noqa: E402


def shape(lay) -> tuple[int, ...]:
    return (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.etp)


def shape_text(s: tuple[int, ...]) -> str:
    names = ("tp", "cp", "pp", "dp", "ep", "etp")
    return " ".join(f"{n}{v}" for n, v in zip(names, s) if v > 1 or n in ("tp", "pp", "dp"))


def schedule_text(c) -> str:
    return c.schedule + (f" v{c.chunks}" if c.chunks else "")


def result_text(r) -> str:
    c = r.candidate
    return f"{shape_text(shape(c.layout))} mb{c.layout.micro_batch}, {schedule_text(c)}, {c.recompute}"


def layout_rank(plan, pub, keep: int) -> tuple[int | None, int]:
    """(rank of the published layout among distinct layouts, or None past the exact ones;
    how many distinct layouts the search kept)."""
    best: dict[tuple, float] = {}
    for r in plan.results:
        best.setdefault(shape(r.candidate.layout), r.step_time)
    mine = shape(pub.candidate.layout)
    exact_to = plan.results[keep - 1].step_time if len(plan.results) >= keep else float("inf")
    if pub.step_time > exact_to * (1 + 1e-9):
        return None, len(best)
    faster = sum(1 for s, x in best.items() if s != mine and x < pub.step_time * (1 - 1e-9))
    return faster + 1, len(best)


def run_choices(r) -> dict[str, str]:
    """What a run chooses on a layout: its micro-batch size, schedule and recomputation."""
    c = r.candidate
    return {"micro-batch": f"mb{c.layout.micro_batch}", "schedule": schedule_text(c), "recompute": c.recompute}


def differences(pub, top) -> str:
    """How the pick differs from the published run on the same layout: "mb1 vs mb2,
    1f1b vs v-half" (the published one first), or nothing where the two choose alike."""
    mine, theirs = run_choices(pub), run_choices(top)
    return ", ".join(f"{mine[k]} vs {theirs[k]}" for k in mine if mine[k] != theirs[k])


def reason(pub, top) -> str:
    """The term that most separates the published layout's step from the pick's; on the
    same layout (tp, cp, pp, dp, ep, etp), what else the pick chose differently first:
    "same layout" alone said nothing of a gap of 2 s (GPT-OSS 120B: mb1 1f1b 5.36 s
    against mb2 v-half 3.27 s)."""
    if not pub.fits:
        return f"published layout does not fit: {pub.reason}"
    said = ""
    if shape(pub.candidate.layout) == shape(top.candidate.layout):
        said = f"same layout, {differences(pub, top) or 'same schedule, micro-batch and recomputation'}; "
    gap = pub.step_time - top.step_time
    bubble = pub.makespan * pub.bubble - top.makespan * top.bubble
    terms = {
        "pipeline bubble": bubble,
        "exposed data-parallel sync and optimizer": pub.dp_sync - top.dp_sync,
        "busy time per GPU (compute and exposed comm)": (pub.makespan - top.makespan) - bubble,
    }
    name, x = max(terms.items(), key=lambda kv: kv[1])
    return f"{said}{name}: +{x:.2f} s of the {gap:.2f} s gap (bubble {pub.bubble:.0%} vs {top.bubble:.0%})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="rows whose name contains this")
    ap.add_argument("--keep", type=int, default=30, help="results the search keeps exactly (default 30)")
    args = ap.parse_args(argv)
    rows = [r for r in tomllib.loads(DATA.read_text())["run"] if not args.only or args.only.lower() in r["name"].lower()]
    print(
        "| run | published layout | its step (s) | layout rank | rank on its schedule | pipesim's pick | its step (s) "
        "| why not top 3 | search CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    top3 = 0
    for row in rows:
        m, c, t = specs(row)
        try:
            pub = evaluate_layout(m, c, t, dict(row["layout"]))
        except PipesimError as e:
            print(f"| {row['name']} | - | - | - | - | - | - | published layout cannot run: {e} | - |", flush=True)
            continue
        start = time.process_time()
        try:
            plan = search(m, c, free_split(t), keep=args.keep)
        except PipesimError as e:
            print(f"| {row['name']} | {result_text(pub)} | {pub.step_time:.2f} | - | - | - | - | free search refused: {e} | - |")
            continue
        took = time.process_time() - start
        top = plan.best
        searched = {shape(x) for x in layouts(m, c, t)}
        rank, kept = layout_rank(plan, pub, args.keep) if top else (None, 0)
        top3 += rank is not None and rank <= 3
        rank_s = f"#{rank}" if rank else f"> {kept} layouts" if top else "-"
        # the same search on the published schedule alone: layouts as the published framework runs them
        same = search(m, c, free_split(t), schedules=[pub.candidate.schedule], keep=args.keep)
        own, kept_same = layout_rank(same, pub, args.keep) if same.best else (None, 0)
        own_s = f"#{own}" if own else f"> {kept_same} layouts" if same.best else "-"
        if shape(pub.candidate.layout) not in searched:
            why = f"{shape_text(shape(pub.candidate.layout))} is outside the free search's layouts (pin it to ask)"
        else:
            why = "" if rank is not None and rank <= 3 else reason(pub, top) if top else "nothing fits"
        print(
            f"| {row['name']} | {result_text(pub)} | {pub.step_time:.2f} | {rank_s} | {own_s} | "
            f"{result_text(top) if top else '-'} | {top.step_time if top else float('nan'):.2f} | {why} | {took:.1f} |",
            flush=True,
        )
    print(f"\n{top3} of {len(rows)} published layouts rank in the top 3 of pipesim's free search.")


if __name__ == "__main__":
    main()
