"""pipesim against measured Megatron-LM iterations of small GPT models on A100.

    python benchmarks/measured_a100.py
    python benchmarks/measured_a100.py --only 1.5B

The cases are benchmarks/data/measured_a100.toml: the Zero Bubble paper's 1F1B runs (GPT
models of 1.5B-28.3B, 2304-6144 hidden, pure pipelines over 8-32 A100s, Megatron-LM, fp16,
unfused attention), their measured throughput turned into step times, and their peak
memory. Each case is pinned to its layout and pipesim's step and memory are set beside the
measured ones in one Markdown table, then the mean absolute and mean signed errors.

Beside it, the same rows under the paper's other schedules (its Table 4: 1F1B-I, ZB-1p,
ZB-2p on the same GPUs): each one's measured speed-up over the row's 1F1B, a ratio in
which the unstated RoCE bandwidth and the kernels' absolute speed cancel, set beside
pipesim's ratio of the two pinned layouts, and each schedule's memory beside pipesim's
peak. The data file says how each schedule ran (virtual stages, activation cap,
transfers) and how sure that is.

A second table holds the kernels to the paper's own per-stage profile of the same runs
(Table 9: forward, input-gradient and weight-gradient time of a stage for one
micro-batch, timed between two CUDA synchronizations, so with the host's start-up
latency in each): pipesim's F, B and W of its busiest stage beside them, so a miss in the
step can be traced to the pass that makes it. No peer simulator publishes predictions for
these runs (SimuMax's A100 results are errors of its own, without measured times: the
data file says where).

A third table holds one layer to Korthikanti et al.'s measured layer times (their Table 4,
benchmarks/data/layer_times_a100.toml: a 22B GPT layer on 8 A100 under TP8, with and without
sequence parallelism and selective or full recomputation). Selective recomputation re-runs
only the unfused attention core (QK^T, softmax, dropout, PV) in the backward, so its
backward minus the plain one is a measured price of that core's forward, set beside
pipesim's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from dataclasses import replace
from pathlib import Path

from pipesim.planner.calibrate import evaluate_layout
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_training, model_from_table
from pipesim.planner.stages import component_costs

DATA = Path(__file__).parent / "data" / "measured_a100.toml"
LAYER_DATA = Path(__file__).parent / "data" / "layer_times_a100.toml"
ROOT = Path(__file__).parent.parent


def load() -> dict:
    return tomllib.loads(DATA.read_text())


def specs(data: dict, case: dict, sched: dict | None = None):
    """(model, cluster, training, layout) of one case, under 1F1B or ``sched`` (a
    ``[[schedule]]`` entry of the data file: its training flags, its virtual stages as
    layers per chunk over the layers padded to a multiple of pp, its activation cap as
    pending backwards per stage)."""
    m = model_from_table(data["models"][case["model"]], f"{DATA.name} model {case['model']}")
    c = load_cluster(data["cluster"]).resized(case["gpus"])
    pp, extra, lay = case["gpus"], {}, {"schedule": "1f1b"}
    if sched is not None:
        extra = dict(sched.get("training", {}))
        lay = {"schedule": sched["schedule"]}
        if "layers_per_chunk" in sched:
            lay["chunks"] = -(-m.layers // pp) // sched["layers_per_chunk"]
        if "pending_per_stage" in sched:
            extra["zb_max_pending_backward"] = sched["pending_per_stage"] * pp
    batch = case["micro_batch"] * case["micro_batches"]
    t = load_training(base={**data["training"], **extra, "global_batch": batch})
    return m, c, t, {"tp": 1, "pp": pp, "dp": 1, "micro_batch": case["micro_batch"], **lay}


def measured_step(case: dict) -> float:
    """Seconds a step took: the global batch over the measured samples per GPU per second
    of all the GPUs."""
    return case["micro_batch"] * case["micro_batches"] / (case["samples_per_gpu_s"] * case["gpus"])


def predict(data: dict, case: dict, sched: dict | None = None):
    m, c, t, lay = specs(data, case, sched)
    return evaluate_layout(m, c, t, lay)


def schedule_table(data: dict, cases: list[dict], base: dict) -> None:
    """Table 4's other schedules against each row's 1F1B: the measured speed-up (samples
    per GPU per second over 1F1B's) beside pipesim's (1F1B's step over the schedule's, each
    layout pinned), and each schedule's memory beside pipesim's peak. ``base``: pipesim's
    1F1B result per case name."""
    print("\n## Schedules: Table 4's speed-up over 1F1B on the same GPUs, and memory\n")
    print("| case | schedule | pinned as | real x | pipesim x | err | real GB | pipesim GB | memory err |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    ratios: dict[str, list[float]] = {s["name"]: [] for s in data["schedule"]}
    mems: dict[str, list[float]] = {s["name"]: [] for s in data["schedule"]}
    for case in cases:
        cells = data["schedule_cells"][case["name"]]
        for sched in data["schedule"]:
            name = sched["name"]
            speed, gb = cells[name]
            m, c, t, lay = specs(data, case, sched)
            r = evaluate_layout(m, c, t, lay)
            real, ours = speed / case["samples_per_gpu_s"], base[case["name"]].step_time / r.step_time
            ratios[name].append(err(ours, real))
            mems[name].append(err(r.memory_gb, gb))
            pinned = lay["schedule"] + (f" v{lay['chunks']}" if "chunks" in lay else "")
            pinned += f" cap {t.zb_max_pending_backward}" if "pending_per_stage" in sched else ""
            print(
                f"| {case['name']} | {name} | {pinned} | {real:.3f} | {ours:.3f} | {ratios[name][-1]:+.1%} | "
                f"{gb:.0f} | {r.memory_gb:.1f} | {mems[name][-1]:+.1%} |"
            )
    print()
    for name in ratios:
        if ratios[name]:
            print(f"- {name}: {summary('speed-up', ratios[name])}; {summary('memory', mems[name])}.")


def stage_passes(data: dict, case: dict, result) -> tuple[float, float, float]:
    """(F, B, W) seconds of pipesim's busiest stage for one micro-batch: its layers'
    compute without the stage-to-stage transfers (the paper times those apart, T_comm)."""
    m, c, t, _ = specs(data, case)
    lay = result.candidate.layout
    costs = component_costs(m, c, replace(t, p2p_overlap=True), lay, lay.pp, result.candidate.recompute)
    sums = [
        (
            sum(x.attn_f + x.mlp_f + x.dispatch_f + x.combine_f for x in row),
            sum(x.attn_b + x.mlp_b + x.dispatch_b + x.combine_b for x in row),
            sum(x.attn_w + x.mlp_w for x in row),
        )
        for row in costs.stages
    ]
    return max(sums, key=sum)


def profiled(data: dict, case: dict) -> dict | None:
    """The paper's Table 9 row for this case (model, stages, micro-batches), if any."""
    rows = json.loads((ROOT / data["stage_costs"]).read_text())["rows"]
    for r in rows:
        if (r["model"], r["p"], r["m"]) == (case["model"], case["gpus"], case["micro_batches"]):
            return r
    return None


def layer_passes(layers: dict, row: dict) -> tuple[float, float]:
    """(forward, backward) seconds pipesim gives one layer of the Table 4 model in the row's
    setting; the backward is the input and weight gradients together, as Megatron's."""
    m = model_from_table(layers["model"], f"{LAYER_DATA.name} model")
    c = load_cluster(layers["cluster"]).resized(layers["gpus"])
    t = load_training(base={**layers["training"], "sequence_parallel": row["sequence_parallel"]})
    x = layer_costs(m, 1, c, t, Layout(**layers["layout"]), row["recompute"])
    return (
        x.attn_f + x.mlp_f + x.dispatch_f + x.combine_f,
        x.attn_b + x.mlp_b + x.dispatch_b + x.combine_b + x.attn_w + x.mlp_w,
    )


def layer_table() -> None:
    layers = tomllib.loads(LAYER_DATA.read_text())
    print(f"\n## One layer: {layers['source']}, measured beside pipesim\n")
    print("| setting | forward ms | pipesim | err | backward ms | pipesim | err |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ours = {}
    for row in layers["rows"]:
        f, b = (x * 1e3 for x in layer_passes(layers, row))
        ours[row["name"]] = (row, b)
        print(
            f"| {row['name']} | {row['forward_ms']:.1f} | {f:.2f} | {err(f, row['forward_ms']):+.1%} | "
            f"{row['backward_ms']:.1f} | {b:.2f} | {err(b, row['backward_ms']):+.1%} |"
        )
    print("\nThe attention core recomputed (selective backward minus the plain one):")
    for plain, selective in (("no recompute", "selective recompute"), ("sequence parallel", "selective + sequence parallel")):
        (p, pb), (s, sb) = ours[plain], ours[selective]
        real = s["backward_ms"] - p["backward_ms"]
        print(f"- {selective}: measured {real:.1f} ms, pipesim {sb - pb:.2f} ms ({err(sb - pb, real):+.1%})")


def err(pred: float, real: float) -> float:
    return pred / real - 1


def summary(label: str, errors: list[float]) -> str:
    return (
        f"{label}: mean |err| {statistics.mean(map(abs, errors)):.1%}, bias {statistics.mean(errors):+.1%}, "
        f"worst {max(map(abs, errors)):.1%}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="cases whose name contains this")
    args = ap.parse_args(argv)
    data = load()
    cases = [x for x in data["case"] if args.only in x["name"]]
    print(f"# pipesim against measured A100 iterations ({data['source']})\n")
    print("| case | layout | real s | pipesim s | step err | real GB | pipesim GB | memory err |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    steps, mems, passes, base = [], [], [], {}
    for case in cases:
        r = base[case["name"]] = predict(data, case)
        real = measured_step(case)
        gb = r.memory_gb
        steps.append(err(r.step_time, real))
        mems.append(err(gb, case["memory_gb"]))
        lay = f"pp{case['gpus']} mb{case['micro_batch']} M{case['micro_batches']}"
        print(
            f"| {case['name']} | {lay} | {real:.3f} | {r.step_time:.3f} | {steps[-1]:+.1%} | "
            f"{case['memory_gb']:.0f} | {gb:.1f} | {mems[-1]:+.1%} |"
        )
        row = profiled(data, case)
        if row:
            passes.append((case, row, stage_passes(data, case, r)))
    if steps:
        print(f"\n{len(steps)} cases. {summary('Step time', steps)}. {summary('Peak memory', mems)}.")
        schedule_table(data, cases, base)
    if passes:
        print("\n## Kernels: the paper's profiled stage (Table 9) against pipesim's busiest stage, one micro-batch\n")
        print("| case | F ms | pipesim F | err | B ms | pipesim B | err | W ms | pipesim W | err | source |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        per_pass: dict[str, list[float]] = {"F": [], "B": [], "W": []}
        for case, row, (f, b, w) in passes:
            cells = []
            for key, ours in (("F", f), ("B", b), ("W", w)):
                real = row[f"{key}_ms"]
                per_pass[key].append(err(ours * 1e3, real))
                cells.append(f"{real:.2f} | {ours * 1e3:.2f} | {per_pass[key][-1]:+.1%}")
            print(f"| {case['name']} | {' | '.join(cells)} | {row['source']} |")
        print("\n" + "; ".join(summary(k, v) for k, v in per_pass.items()) + ".")
    if not args.only:
        layer_table()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
