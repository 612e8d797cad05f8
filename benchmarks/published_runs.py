"""The planner against published training runs, printed as Markdown tables.

    python benchmarks/published_runs.py            # every row, then the free searches
    python benchmarks/published_runs.py --no-search
    python benchmarks/published_runs.py --only Llama

The rows are benchmarks/data/published_runs.toml, transcribed from ../shared/PUBLISHED_RUNS.md
with the source of each. Every run is pinned to its published layout (what the source does
not give, such as micro-batch size or interleaving depth, is searched on that layout), and
its predicted step time is set against the step the published figure implies, with one set
of default efficiencies for all rows. The published step comes from the row's own metric:

- megatron_tflops: Narayanan et al.'s hardware FLOPs per step, 96 B s l h^2 (1 + s/6h + V/16lh),
  over GPUs x TFLOP/s;
- tflops_6n: 6N + 12 L h s FLOPs per token (N the parameters a token meets, the output
  head included; PaLM's convention) over GPUs x TFLOP/s;
- tokens_per_gpu, iteration_s: directly;
- gpu_hours_per_t (DeepSeek-V3): a whole-run average. The prediction is made the same
  way: the steady step at the full batch for the tokens after the ramp, plus the ramp
  (the batch rising linearly from ``ramp_from`` over ``ramp_tokens``, in eight slices,
  each simulated at its batch, or at DualPipe's least batch, M = 2pp, below it). The steady step the published figure implies is then
  (published GPU-hours - predicted ramp GPU-hours) / steady steps.

The headline figures (median, mean and worst absolute error, rows within 10%, and the bias:
the mean signed error) count the rows on known hardware; each group of rows left out (a
row's ``unknown_hardware``, or ``held_apart`` for rows added after the headline was set) is
printed with its reason and its own figures (and, where its source bounds the unknown, at
the other end of that range: the row's ``bound_fields``), then every row together. Two checks set
measured against predicted where the hardware's unknowns cancel or are measured:
torchtitan's runs on the same H100s one change apart (eager to torch.compile, BF16 to
Float8 linears, tensor parallelism's collectives exposed to AsyncTP, 1F1B to interleaved
1F1B: the speed-up), and the overlapped F&B pair of DeepSeek's public kernel
profile. Then the free search on the
same inputs for the rows marked ``search``: where the published layout ranks (with its
own schedule, and with the best pipesim has on that layout), and what pipesim prefers.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path

from pipesim.components import ComponentCosts
from pipesim.ir import Op, Pair
from pipesim.planner.calibrate import evaluate_layout
from pipesim.planner.compute import layer_flops, model_flops_per_token
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.pipeline_layout import is_layout
from pipesim.planner.search import search
from pipesim.planner.specs import (
    load_cluster,
    load_model,
    load_training,
    model_from_table,
    model_training,
)

DATA = Path(__file__).parent / "data" / "published_runs.toml"
ROOT = Path(__file__).resolve().parent.parent  # a row's HuggingFace config.json is named from here

#: DeepSeek's public training profile (deepseek-ai/profile-data, train.json): an overlapped
#: F&B pair of 4 MoE layers, EP64, 4K tokens, H800: the window of its GPU kernels, ms
PROFILE_PAIR_MS = 129.0


def specs(row: dict):
    name = row["model"]
    if isinstance(name, str):
        name = str(ROOT / name) if name.endswith(".json") else name
        m, base = load_model(name), model_training(name)
    else:
        m, base = model_from_table(name, f"{DATA.name} [{row['name']}] model"), {}
    c = load_cluster(row["cluster"])
    c = replace(c, **row.get("cluster_fields", {})).resized(row["gpus"])
    t = load_training(base={**base, **row.get("training", {})})
    return m, c, t


def flops_6n(m, seq: int) -> float:
    """6N + 12 L h s per token: pipesim's model FLOPs with the attention scores counted
    whole (not causal), which is what 12 L h s counts."""
    core = sum(layer_flops(m, i, seq)["attn_core"] for i in range(m.layers))
    return model_flops_per_token(m, seq) + 3 * core


def free_split(t):
    """``t`` for a free search: a row's stage_split written as a layout holds for its own
    stage count only, so the search splits its candidates its own way."""
    return replace(t, stage_split="balanced") if is_layout(t.stage_split) else t


def published_step(row: dict, m, c, t) -> float:
    pub = row["published"]
    metric, value = pub["metric"], pub["value"]
    tokens = t.global_batch * t.seq
    if metric == "megatron_tflops":
        B, s, L, h, V = t.global_batch, t.seq, m.layers, m.hidden, m.vocab
        flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
        return flops / (c.gpus * value * 1e12)
    if metric == "tflops_6n":
        return tokens * flops_6n(m, t.seq) / (c.gpus * value * 1e12)
    if metric == "mfu_6n":
        return tokens * flops_6n(m, t.seq) / (c.gpus * c.bf16_tflops * 1e12 * value)
    if metric == "tokens_per_gpu":
        return tokens / (c.gpus * value)
    if metric == "iteration_s":
        return value
    raise SystemExit(f"{row['name']}: unknown metric {metric!r}")


def whole_run(row: dict, m, c, t, lay: dict) -> tuple[float, float, float]:
    """(predicted GPU-hours per 10^12 tokens over the whole run, predicted ramp GPU-hours,
    steady step) for a run whose batch ramps up."""
    pub = row["published"]
    steady = evaluate_layout(m, c, t, lay)
    ramp_tokens, start = pub["ramp_tokens"], pub["ramp_from"]
    unit = lay["dp"] * lay.get("micro_batch", 1) * 2  # DualPipe wants an even M ...
    least = unit * lay["pp"]  # ... of at least 2pp: smaller batches run at its throughput
    ramp_hours = 0.0
    for k in range(8):
        batch = start + (t.global_batch - start) * (k + 0.5) / 8
        batch = max(least, int(batch // unit) * unit)
        r = evaluate_layout(m, c, replace(t, global_batch=batch), lay)
        ramp_hours += ramp_tokens / 8 / (batch * t.seq) * r.step_time * c.gpus / 3600
    steady_hours = (t.tokens - ramp_tokens) / (t.global_batch * t.seq) * steady.step_time * c.gpus / 3600
    return (ramp_hours + steady_hours) / t.tokens * 1e12, ramp_hours, steady.step_time


def layout_text(r, t=None) -> str:
    """The layout a row ran, and with tensor parallelism which of its collectives overlap
    (``tp_overlap``, when the row's training ``t`` is given)."""
    c = r.candidate
    lay = c.layout
    parts = [f"tp{lay.tp}", f"pp{lay.pp}"] + ([f"cp{lay.cp}"] if lay.cp > 1 else []) + [f"dp{lay.dp}"]
    parts += ([f"ep{lay.ep}"] if lay.ep > 1 else []) + ([f"etp{lay.etp}"] if lay.etp > 1 else [])
    sched = c.schedule + (f" v{c.chunks}" if c.chunks else "")
    overlap = f", tp overlap {t.tp_overlap}" if t is not None and lay.tp > 1 else ""
    return f"{' '.join(parts)} mb{lay.micro_batch} M{c.microbatches}, {sched}, {c.recompute}{overlap}"


def run_row(row: dict) -> dict:
    """Simulate one row on its published layout and set it against the published figure."""
    m, c, t = specs(row)
    lay = dict(row["layout"])
    start = time.process_time()
    r = evaluate_layout(m, c, t, lay)
    rec = {"row": row, "result": r, "specs": (m, c, t)}
    if row["published"]["metric"] == "gpu_hours_per_t":
        hours, ramp, steady = whole_run(row, m, c, t, lay)
        pub = row["published"]["value"]
        steady_steps = (t.tokens - row["published"]["ramp_tokens"]) / (t.global_batch * t.seq)
        implied = (pub * t.tokens / 1e12 - ramp) * 3600 / c.gpus / steady_steps
        rec.update(
            pred=steady, pub=implied, error=hours / pub - 1, note=f"whole run {hours / 1e3:.0f}K vs {pub / 1e3:.0f}K GPU-h/T"
        )
    else:
        pub = published_step(row, m, c, t)
        rec.update(pred=r.step_time, pub=pub, error=r.step_time / pub - 1, note="")
    rec["cpu"] = time.process_time() - start
    return rec


def run_rows(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        rec = run_row(row)
        print(f"{row['name']}: {rec['error']:+.1%} ({rec['cpu']:.1f} s)", file=sys.stderr)
        out.append(rec)
    return out


def at_bound(row: dict) -> dict:
    """The row with its ``bound_fields`` laid over its cluster: the other end of a range
    its source gives for hardware it does not fully specify (the row itself is simulated
    at the preset's end)."""
    return {**row, "cluster_fields": {**row.get("cluster_fields", {}), **row["bound_fields"]}}


def metric_text(rec: dict) -> str:
    row = rec["row"]
    m, c, t = rec["specs"]
    metric, value = row["published"]["metric"], row["published"]["value"]
    step = rec["pred"]
    tokens = t.global_batch * t.seq
    if metric == "megatron_tflops":
        return f"{value:g} -> {value * rec['pub'] / step:.0f} TFLOP/s (Megatron formula)"
    if metric == "tflops_6n":
        return f"{value:g} -> {value * rec['pub'] / step:.0f} TFLOP/s (6N+12Lhs)"
    if metric == "tokens_per_gpu":
        return f"{value:g} -> {tokens / (c.gpus * step):.0f} tokens/s/GPU"
    if metric == "iteration_s":
        return f"{value:g} -> {step:.1f} s"
    return rec["note"]


def apart(row: dict) -> str:
    """Why a row is left out of the headline figures ('' if it is counted): hardware
    whose figures are not published (``unknown_hardware``), or rows added after the
    headline was set, kept apart so that it stays the same rows (``held_apart``)."""
    return row.get("unknown_hardware") or row.get("held_apart", "")


def print_rows(done: list[dict]) -> None:
    print("## Pinned to the published layout (one set of default efficiencies)\n")
    print(
        "| run | layout simulated | fits | published step (s) | predicted (s) | error | published -> predicted | MFU (pipesim) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for rec in done:
        r = rec["result"]
        fits = "yes" if r.fits else f"no ({r.memory_gb:.0f} GB)"
        star = " *" if apart(rec["row"]) else ""
        print(
            f"| {rec['row']['name']}{star} | {layout_text(r, rec['specs'][2])} | {fits} | {rec['pub']:.2f} | {rec['pred']:.2f} | "
            f"{rec['error']:+.1%} | {metric_text(rec)} | {r.mfu:.1%} |"
        )
    counted = [rec for rec in done if not apart(rec["row"])]
    if counted:
        print(f"\n{len(counted)} rows on known hardware: {figures(counted)}.")
        print("(Calculon's published figures on Korthikanti et al.'s runs: mean |error| 3.65%, worst 8.87%.)")
    odd = sorted({apart(rec["row"]) for rec in done if apart(rec["row"])})
    for why in odd:
        rows = [rec for rec in done if apart(rec["row"]) == why]
        print(f"{len(rows)} rows (marked *) left out of those figures: {why}; {figures(rows)}.")
        bounds = sorted({rec["row"]["bound"] for rec in rows if "bound_fields" in rec["row"]})
        for bound in bounds:
            at = [run_row(at_bound(rec["row"])) for rec in rows if rec["row"].get("bound") == bound]
            print(f"The same {len(at)} rows at {bound}: {figures(at)}.")
    if odd:
        print(f"All {len(done)} rows together: {figures(done)}.")


def figures(recs: list[dict]) -> str:
    """Median, mean and worst absolute error, the rows within 10% and 15%, and the bias
    (mean signed error) with how many rows are predicted fast."""
    errors = [abs(rec["error"]) for rec in recs]
    signed = [rec["error"] for rec in recs]
    worst = recs[errors.index(max(errors))]["row"]["name"]
    return (
        f"median |error| {statistics.median(errors):.2%}, mean {statistics.mean(errors):.1%}, worst {max(errors):.1%} "
        f"({worst}), {sum(e <= 0.10 for e in errors)} within 10%, {sum(e <= 0.15 for e in errors)} within 15%; "
        f"bias (mean signed error) {statistics.mean(signed):+.1%}, {sum(e < 0 for e in signed)} of {len(signed)} predicted fast"
    )


#: same-hardware pairs: a row named "<base> + <step>" against the row "<base>", the change
#: the step makes (eager to torch.compile's fused kernels; BF16 to per-tensor Float8 linears)
SPEED_UP_STEPS = {" + compile": "eager -> torch.compile", " + Float8": "BF16 -> Float8 linears (per-tensor scaling)"}

#: same-hardware pairs named in full: (row before, row after, the change), from the same
#: table of torchtitan's page (Table 4: tensor parallelism's collectives exposed, then
#: overlapped by AsyncTP; Table 5: the 405B pipeline's schedule)
SPEED_UP_PAIRS = (
    ("torchtitan Llama 3 70B, 256 H100, FSDP + TP", "torchtitan Llama 3 70B, 256 H100, FSDP + AsyncTP", "TP -> AsyncTP"),
    (
        "torchtitan Llama 3 405B, 512 H100, 1F1B",
        "torchtitan Llama 3 405B, 512 H100, interleaved 1F1B",
        "1F1B -> interleaved 1F1B (v=2)",
    ),
)


def print_speed_ups(done: list[dict]) -> None:
    """One change on the same hardware (torchtitan's rows): the ratio of throughputs,
    which the H100s' unknown clocks and bandwidth cancel out of, against the ratio pipesim
    predicts for the two runs."""
    by_name = {rec["row"]["name"]: rec for rec in done}
    pairs = [
        (what, by_name[n.removesuffix(step)], rec)
        for n, rec in by_name.items()
        for step, what in SPEED_UP_STEPS.items()
        if n.endswith(step) and n.removesuffix(step) in by_name
    ]
    pairs += [(what, by_name[a], by_name[b]) for a, b, what in SPEED_UP_PAIRS if a in by_name and b in by_name]
    if not pairs:
        return
    print("\n## One change on the same hardware\n")
    print("| run | change | published speed-up | predicted | error |")
    print("|---|---|---|---|---|")
    for what, before, after in pairs:
        pub = before["pub"] / after["pub"]
        pred = before["pred"] / after["pred"]
        print(f"| {after['row']['name']} | {what} | {pub:.3f}x | {pred:.3f}x | {pred / pub - 1:+.1%} |")


def print_not_expressed(data: dict) -> None:
    print("\n## Rows pipesim does not express\n")
    print("| rows | reason |")
    print("|---|---|")
    for x in data.get("not_expressed", []):
        print(f"| {x['rows']} | {x['reason']} |")


def print_profile_pair() -> None:
    """The kernel-level check: the overlapped pair of DeepSeek's public profile."""
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    t = load_training(base=model_training("deepseek-v3"))
    lc = layer_costs(m, m.layers - 1, c, t, Layout(pp=16, dp=128, ep=64), "selective")
    cc = ComponentCosts.uniform(lc, 4, comm_sms=t.comm_sms, total_sms=c.sms, held_in_pairs=t.comm_held_in_pairs)
    pair = cc.pair_time(Pair(Op("F", 0, 0), Op("BW", 0, 1)), 0, 0) * 1e3
    print("\n## Kernel-level check: DeepSeek's public training profile\n")
    print("| what | measured | predicted | error |")
    print("|---|---|---|---|")
    print(
        f"| overlapped F&B pair, 4 MoE layers, EP64, 4K tokens (deepseek-ai/profile-data train.json) | "
        f"{PROFILE_PAIR_MS:.1f} ms | {pair:.1f} ms | {pair / PROFILE_PAIR_MS - 1:+.1%} |"
    )


def rank_of(plan, shape: tuple, schedule: str | None = None) -> int | None:
    """Rank (from 1) of the first result on layout ``shape`` (pp, dp, tp, ep, cp), and on
    ``schedule`` if given; None when none was kept."""
    for i, r in enumerate(plan.results, 1):
        lay = r.candidate.layout
        if (lay.pp, lay.dp, lay.tp, lay.ep, lay.cp) == shape and schedule in (None, r.candidate.schedule):
            return i
    return None


def rank_text(plan, rank: int | None) -> str:
    if rank is None:
        return f"not among the {len(plan.results)} kept"
    return f"#{rank} of {len(plan.results)} ({plan.results[rank - 1].step_time:.2f})"


def print_searches(done: list[dict]) -> None:
    """Where the published layout ranks in the free search: with the published schedule,
    and on the published (tp, pp, dp, ep) with whichever schedule pipesim ranks best."""
    print("\n## Free search on the same inputs\n")
    print(
        "| run | published layout and schedule: rank (step s) | published layout, any schedule: rank (step s) | "
        "pipesim's pick | its step (s) | pick faster by | search CPU s |"
    )
    print("|---|---|---|---|---|---|---|")
    for rec in done:
        row = rec["row"]
        if not row.get("search"):
            continue
        m, c, t = rec["specs"]
        start = time.process_time()
        plan = search(m, c, free_split(t), keep=30)
        took = time.process_time() - start
        want = row["layout"]
        shape = (want["pp"], want["dp"], want.get("tp", 1), want.get("ep", 1), want.get("cp", 1))
        exact = rank_of(plan, shape, want["schedule"])
        any_ = rank_of(plan, shape)
        best = plan.best
        mine = plan.results[exact - 1] if exact else None
        faster = f"{1 - best.step_time / mine.step_time:.1%}" if mine and best else "-"
        if any_ is None and m.moe is not None and shape[2] > 1:  # say why not
            plan_note = " (models with experts are searched at tp1; pin --tp to ask)"
        else:
            plan_note = ""
        print(
            f"| {row['name']} | {rank_text(plan, exact)}{plan_note} | {rank_text(plan, any_)} | {layout_text(best) if best else 'nothing fits'} | "
            f"{best.step_time if best else math.nan:.2f} | {faster} | {took:.0f} |"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-search", action="store_true", help="skip the free searches")
    ap.add_argument("--only", help="rows whose name contains this")
    args = ap.parse_args(argv)
    data = tomllib.loads(DATA.read_text())
    rows = [r for r in data["run"] if not args.only or args.only.lower() in r["name"].lower()]
    start = time.process_time()
    done = run_rows(rows)
    print_rows(done)
    print_speed_ups(done)
    print_profile_pair()
    print_not_expressed(data)
    if not args.no_search:
        print_searches(done)
    print(f"\n(CPU {time.process_time() - start:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
