"""Invariants every `pipesim plan` answer must keep whatever the cost model, checked over a
spread of models, clusters, GPU counts, batches and pins.

    python benchmarks/plan_invariants.py            # every case (about 15 minutes on one core)
    python benchmarks/plan_invariants.py --quick    # one case in four
    python benchmarks/plan_invariants.py --verbose  # each violation as it is found

Each case runs ``pipesim plan ... --json``, the same plan as Markdown, and ``pipesim memory
--json`` for the layout of every row the report ranks, then checks what must
hold by arithmetic alone (the cost model is not consulted; the bounds on model FLOPs are
derived here from the model's shapes):

- mfu: 0 < MFU < 1 of BF16 peak, and MFU x GPUs x peak x step = model FLOPs of a step, with
  model FLOPs per token what the report prints, inside [6 x matmul parameters a token meets
  + causal attention, 6 x (the same + the output head and MTP modules) + full attention]
  (Kaplan et al. 2020, section 2.1: 6 FLOPs per parameter per token in training; PaLM,
  Chowdhery et al. 2022, appendix B: 12 L h s more for attention, half of it under a causal mask);
- tokens: tokens/s = global batch x sequence / step;
- hours: GPU-hours per 10^12 tokens = 10^12 / (tokens/s) / 3600 x GPUs, and the whole-run
  saving against 1F1B the difference of the two at ``Training.tokens``;
- floor: step >= model FLOPs of a step / (GPUs x the precision's dense peak);
- memory: each row's memory <= the usable memory it states; ``pipesim memory`` gives the
  same peak and usable for that layout;
- sizes: tp x cp x dp x pp = GPUs and etp x ep x edp = tp x cp x dp;
- batch: global batch = dp x micro-batch x micro-batches;
- bubble: 0 <= bubble < 1, 0 < utilization <= 1 - bubble (disjoint shares of the ranks'
  time), exposed communication within the step; and MFU x step <= utilization x pipeline time
  (no multiply runs past peak; under "mfu");
- order: the ranking is sorted by step time to 12 significant digits (GPUs are fixed, so by
  GPU-hours too);
- repeat: the same command twice gives the same JSON (one case in two);
- text: the Markdown's recommendation lines and runners-up table carry the JSON's numbers;
- recipe: the recipe's stages hold every layer once, in order, on ranks 0..pp-1; Megatron-LM's
  flags (sizes, batch, sequence, layers, the layout string's layers per stage) and
  torchtitan's configuration (degrees, micro-batches, tokens per step, modules per stage)
  say the recommendation's layout.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from pipesim.planner.specs import load_cluster, load_model  # noqa: E402  (shapes only)

HF = ROOT / "tests" / "data" / "hf"
INVARIANTS = (
    "mfu",
    "tokens",
    "hours",
    "floor",
    "memory",
    "sizes",
    "batch",
    "bubble",
    "order",
    "repeat",
    "text",
    "recipe",
    "runs",
)

# (model, cluster, extra flags): presets on preset clusters at small, odd and large GPU counts,
# several batches and sequences, pins and schedule choices; then every HF config
CASES: list[tuple[str, str, list[str]]] = [
    ("llama3-8b", "h100", ["--gpus", "8"]),
    ("llama3-8b", "a100", ["--gpus", "16", "--seq", "2048", "--global-batch", "256"]),
    ("llama3-8b", "b200", ["--gpus", "24", "--global-batch", "240"]),
    ("llama3-8b", "gb200-nvl72", ["--gpus", "96", "--seq", "32768", "--global-batch", "96"]),
    ("llama3-8b", "h800-2048", ["--gpus", "16", "--tp", "2", "--schedules", "1f1b,interleaved-1f1b"]),
    ("llama3-8b", "h100", ["--gpus", "16", "--precision", "fp8", "--zero", "3"]),
    ("llama3-8b", "h100", ["--gpus", "8", "--pp", "8", "--chunks", "2", "--recompute", "full"]),
    ("llama3-70b", "h100", ["--gpus", "64"]),
    ("llama3-70b", "a100", ["--gpus", "96", "--global-batch", "1536"]),
    ("llama3-70b", "h800-2048", ["--gpus", "24", "--seq", "1024", "--global-batch", "384"]),
    ("llama3-70b", "gb200-nvl72", ["--gpus", "72", "--cp", "2", "--seq", "16384", "--global-batch", "144"]),
    ("llama3-70b", "b200", ["--gpus", "16", "--pp", "4", "--global-batch", "64", "--schedules", "zb-v,1f1b"]),
    ("llama3-70b", "h100", ["--gpus", "32", "--tp-overlap", "none", "--zero", "2"]),
    ("llama3-405b", "h100", []),
    ("llama3-405b", "h100", ["--gpus", "8"]),
    ("llama3-405b", "gb200-nvl72", ["--gpus", "512"]),
    ("llama3-405b", "b200", ["--gpus", "96", "--seq", "4096", "--global-batch", "288"]),
    ("mixtral-8x22b", "h100", ["--gpus", "64", "--ep", "8"]),
    ("mixtral-8x22b", "gb200-nvl72", ["--gpus", "96"]),
    ("mixtral-8x22b", "a100", ["--gpus", "128", "--global-batch", "512"]),
    ("mixtral-8x22b", "h800-2048", ["--gpus", "64", "--ep", "4", "--etp", "1", "--tp", "2"]),
    ("deepseek-v3", "h800-2048", []),
    ("deepseek-v3", "gb200-nvl72", ["--gpus", "512", "--global-batch", "4096"]),
    ("deepseek-v3", "h100", ["--gpus", "256", "--pp", "8", "--ep", "32", "--precision", "bf16"]),
    ("deepseek-v3", "b200", ["--gpus", "1024", "--schedules", "dualpipe,1f1b", "--seq", "8192", "--global-batch", "2048"]),
    ("deepseek-v3", "h800-2048", ["--gpus", "96", "--global-batch", "1536"]),
    # more pins and settings, on the other clusters too
    ("llama3-8b", "h200", ["--gpus", "8", "--dp", "4", "--micro-batch-size", "2", "--recompute", "none"]),
    ("llama3-8b", "gb300-nvl72", ["--gpus", "72", "--zero", "0", "--stage-split", "even"]),
    ("llama3-8b", "h100", ["--gpus", "8", "--cp", "8", "--seq", "131072", "--global-batch", "8", "--cp-comm", "a2a"]),
    ("llama3-8b", "h100", ["--gpus", "16", "--pp", "4", "--microbatches", "32", "--global-batch", "128"]),
    ("llama3-70b", "h100", ["--gpus", "40", "--training", "tests/data/fp8_tensor.toml"]),
    ("llama3-70b", "h200", ["--gpus", "56", "--tp-overlap", "backward", "--precision", "fp8"]),
    ("llama3-405b", "h100", ["--gpus", "256", "--pp", "16", "--tp", "8", "--schedules", "interleaved-1f1b", "--chunks", "4"]),
    ("mixtral-8x22b", "b200", ["--gpus", "32", "--tp-overlap", "micro_pipeline", "--schedules", "1f1b,zb-v,dualpipev"]),
    ("deepseek-v3", "gb300-nvl72", ["--gpus", "256", "--pp", "8", "--etp", "1"]),
    ("deepseek-v3", "h800-2048", ["--gpus", "256", "--stage-split", "Et|(tt|)*30mL", "--global-batch", "1024"]),
    ("mixtral-8x22b", "h100", ["--gpus", "64", "--cp", "2", "--seq", "16384", "--global-batch", "128"]),
]
HF_PLACES = [  # cluster, gpus, extra: cycled over the HF configs
    ("h100", "8", []),
    ("b200", "24", ["--global-batch", "192"]),
    ("a100", "16", ["--seq", "2048"]),
    ("gb200-nvl72", "96", []),
    ("h800-2048", "64", ["--global-batch", "512"]),
    ("h100", "128", ["--seq", "8192", "--global-batch", "256"]),
]
for i, f in enumerate(sorted(HF.glob("*.json"))):
    cl, n, extra = HF_PLACES[i % len(HF_PLACES)]
    CASES.append((str(f.relative_to(ROOT)), cl, ["--gpus", n, *extra]))

MEMORY_ROWS = 10  # rows of each ranking checked against `pipesim memory` (all a default report shows)
# flags `pipesim memory` shares with `pipesim plan`
SHARED = {"--seq", "--global-batch", "--precision", "--zero", "--training", "--cp-comm", "--stage-split", "--gpus"}


def run(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "pipesim", *args], capture_output=True, text=True, env=env, cwd=ROOT)


def close(a: float, b: float, rel: float = 1e-9, abs_: float = 0.0) -> bool:
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


def flops_bounds(model: str, seq: int) -> tuple[float, float]:
    """Model FLOPs per token in training, a lower and an upper bound, from the shapes alone:
    6 per parameter of every multiply a token meets (forward 2, backward 4), plus attention's
    two sequence-long products per layer (scores q.k and their weighted sum of v: 2 x keys x
    width FLOPs each, forward; x3 in training). The lower bound attends causally (keys: half
    the sequence, or half the window) and leaves out the output head and MTP modules; the
    upper attends to every key and counts both."""
    m = load_model(model)
    d, a, h = m.hidden, m.attention, m.heads
    if a.kind == "mla":
        qk, v = h * (a.qk_nope_dim + a.qk_rope_dim), h * a.v_head_dim
        q = d * a.q_lora_rank + a.q_lora_rank * qk if a.q_lora_rank else d * qk
        attn = q + d * (a.kv_lora_rank + a.qk_rope_dim) + a.kv_lora_rank * h * (a.qk_nope_dim + a.v_head_dim) + v * d
    else:
        hd = a.head_dim or d // h
        kv = a.kv_heads or h
        qk, v = h * hd, h * hd
        attn = 2 * d * h * hd + 2 * d * kv * hd
    mats = 3 if m.activation == "swiglu" else 2
    lo_params = 0.0
    lo_attn = hi_attn = 0.0
    for i in range(m.layers):
        lo_params += attn
        if m.is_moe_layer(i):
            lo_params += mats * d * m.moe.expert_ffn * (m.moe.top_k + m.moe.shared_experts) + d * m.moe.experts
        else:
            lo_params += mats * d * m.dense_ffn
        w = m.window(i) or m.chunk(i) or seq  # a chunk of c tokens: about c / 2 keys a query, as a window's least
        lo_attn += 3 * 2 * min(seq, w) / 2 * (qk + v) * 0.98  # causal: on average under half the keys
        hi_attn += 3 * 2 * seq * (qk + v)
    head = m.vocab * d
    per_layer = lo_params / m.layers
    hi_params = lo_params + head + m.mtp_layers * (per_layer * 1.5 + 2 * d * d + head)
    return 6 * lo_params + lo_attn, (6 * hi_params + hi_attn * (1 + m.mtp_layers / m.layers)) * 1.02


def rows_of(d: dict) -> list[dict]:
    return ([d["recommendation"]] if d.get("recommendation") else []) + d.get("runners_up", [])


def parse_text(md: str) -> dict:
    """The numbers the Markdown prints for the recommendation and the runners-up table."""
    out: dict = {}
    m = re.search(r"time per step: ([\d.]+) s \(pipeline ([\d.]+) s \+ .*? ([\d.]+) s\)", md)
    if m:
        out["step"], out["pipeline"], out["sync"] = map(float, m.groups())
    m = re.search(r"- bubble ([\d.]+)%", md)
    if m:
        out["bubble"] = float(m.group(1)) / 100
    m = re.search(r"memory per GPU: ([\d.]+) GB of ([\d.]+) GB usable", md)
    if m:
        out["memory"], out["usable"] = map(float, m.groups())
    m = re.search(r"- ([\d,]+) tokens/s; MFU ([\d.]+)%", md)
    if m:
        out["tps"], out["mfu"] = float(m.group(1).replace(",", "")), float(m.group(2)) / 100
    m = re.search(r"Model FLOPs per token: (\d+) GFLOP", md)
    if m:
        out["gflop"] = float(m.group(1))
    table = []
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[0].isdigit():
            table.append(cells)
    out["table"] = table
    return out


def hours_text(h: float) -> str:
    """GPU-hours as the report's tables print them: 1.23M, 456K or 789."""
    return f"{h / 1e6:.2f}M" if h >= 1e6 else f"{h / 1e3:.0f}K" if h >= 1e3 else f"{h:.0f}"


def check_case(model: str, cluster: str, extra: list[str], repeat: bool) -> tuple[Counter, list[str]]:
    checked: Counter = Counter()
    bad: list[str] = []

    def check(name: str, ok: bool, what: str) -> None:
        checked[name] += 1
        if not ok:
            bad.append(f"{name}: {what}")

    base = ["plan", "--model", model, "--cluster", cluster, *extra]
    pj = run([*base, "--json"])
    if pj.returncode == 2 and "nothing fits" in pj.stderr:  # an answer too: no rows to check
        checked["runs"] += 1
        return checked, bad
    check("runs", pj.returncode == 0, f"exit {pj.returncode}: {pj.stderr.strip().splitlines()[-1:]}")
    if pj.returncode != 0:
        return checked, bad
    d = json.loads(pj.stdout)
    rows = rows_of(d)
    if not rows:
        return checked, bad
    t = d["training"]
    gpus, seq, gb = d["gpus"], t["seq"], t["global_batch"]
    c = load_cluster(cluster, gpus)
    peak = c.bf16_tflops * 1e12
    prec_peak = (c.fp8_tflops if t["precision"] == "fp8" and c.fp8_tflops else c.bf16_tflops) * 1e12
    lo, hi = flops_bounds(model, seq)
    tokens = gb * seq
    md = run(base)
    check("runs", md.returncode == 0, f"text exit {md.returncode}")
    text = parse_text(md.stdout) if md.returncode == 0 else {"table": []}
    gflop = text.get("gflop")
    for i, r in enumerate(rows):
        where = f"row {i + 1} ({r['layout']}, {r['schedule']})"
        step = r["step_seconds"]
        check("mfu", 0 < r["mfu"] < 1, f"{where}: MFU {r['mfu']:.4f}")
        flops = r["mfu"] * gpus * peak * step / tokens  # per token, as the MFU implies
        check(
            "mfu",
            lo <= flops <= hi,
            f"{where}: MFU implies {flops / 1e9:.1f} GFLOP/token, outside [{lo / 1e9:.1f}, {hi / 1e9:.1f}]",
        )
        if gflop is not None:
            check(
                "mfu",
                close(flops / 1e9, gflop, 1e-6, 0.5 + 1e-6),
                f"{where}: MFU implies {flops / 1e9:.2f} GFLOP/token, report says {gflop:.0f}",
            )
        check(
            "tokens",
            close(r["tokens_per_second"], tokens / step),
            f"{where}: {r['tokens_per_second']:.6g} tokens/s, {tokens / step:.6g} expected",
        )
        want_h = 1e12 / r["tokens_per_second"] / 3600 * gpus
        check(
            "hours",
            close(r["gpu_hours_per_trillion_tokens"], want_h),
            f"{where}: {r['gpu_hours_per_trillion_tokens']:.6g} GPU-h/T, {want_h:.6g} expected",
        )
        check(
            "floor",
            step >= lo * tokens / (gpus * prec_peak) * (1 - 1e-9),
            f"{where}: step {step:.4g} s under the FLOP floor {lo * tokens / (gpus * prec_peak):.4g} s",
        )
        check(
            "memory",
            r["usable_gb"] is not None and r["memory_gb"] <= r["usable_gb"] * (1 + 1e-12),
            f"{where}: {r['memory_gb']:.3f} GB over usable {r['usable_gb']}",
        )
        check(
            "sizes",
            r["tp"] * r["cp"] * r["dp"] * r["pp"] == gpus,
            f"{where}: tp{r['tp']} cp{r['cp']} dp{r['dp']} pp{r['pp']} on {gpus}",
        )
        check(
            "sizes",
            r["etp"] * r["ep"] * r["edp"] == r["tp"] * r["cp"] * r["dp"],
            f"{where}: etp{r['etp']} ep{r['ep']} edp{r['edp']} vs tp cp dp",
        )
        check(
            "batch",
            r["dp"] * r["micro_batch_size"] * r["microbatches"] == gb,
            f"{where}: dp{r['dp']} x mb{r['micro_batch_size']} x M{r['microbatches']} != {gb}",
        )
        check("bubble", 0 <= r["bubble_ratio"] < 1, f"{where}: bubble {r['bubble_ratio']}")
        # idle and computing are disjoint shares of the ranks' time
        util = r["compute_utilization"]
        check(
            "bubble", 0 < util <= 1 - r["bubble_ratio"] + 1e-9, f"{where}: utilization {util} beside bubble {r['bubble_ratio']}"
        )
        check(
            "bubble", 0 <= r["exposed_comm_seconds"] <= step, f"{where}: exposed {r['exposed_comm_seconds']} s of a {step} s step"
        )
        if i < MEMORY_ROWS:
            check_memory(model, cluster, extra, r, t, check, where)
        if i < len(text["table"]):
            cells = text["table"][i]
            ok = (
                cells[1] == r["layout"]
                and close(float(cells[5]), step, 0, 0.005 + 1e-9)
                and close(float(cells[6].rstrip("%")) / 100, r["bubble_ratio"], 0, 5e-4 + 1e-9)
                and close(float(cells[8]), r["memory_gb"], 0, 0.05 + 1e-9)
                and close(float(cells[9].replace(",", "")), r["tokens_per_second"], 0, 0.5 + 1e-6)
                and close(float(cells[10].rstrip("%")) / 100, r["mfu"], 0, 5e-4 + 1e-9)
                and cells[11] == hours_text(r["gpu_hours_per_trillion_tokens"])
                and cells[3] == f"{r['microbatches']} x {r['micro_batch_size']}"
            )
            check("text", ok, f"{where}: table row {cells} against the JSON")
    check("text", len(text["table"]) == len(rows), f"{len(text['table'])} table rows, {len(rows)} JSON rows")
    best = rows[0]
    if "step" in text:
        check(
            "text", close(text["step"], best["step_seconds"], 0, 0.005 + 1e-9), f"step {text['step']} vs {best['step_seconds']}"
        )
        check("text", close(text["mfu"], best["mfu"], 0, 5e-4 + 1e-9), f"MFU {text['mfu']} vs {best['mfu']}")
        check(
            "text",
            close(text["tps"], best["tokens_per_second"], 0, 0.5 + 1e-6),
            f"tokens/s {text['tps']} vs {best['tokens_per_second']}",
        )
        check("text", close(text["memory"], best["memory_gb"], 0, 0.05 + 1e-9), f"memory {text['memory']} vs {best['memory_gb']}")
        check("text", close(text["usable"], best["usable_gb"], 0, 0.05 + 1e-9), f"usable {text['usable']} vs {best['usable_gb']}")
        check(
            "text",
            close(text["bubble"], best["bubble_ratio"], 0, 5e-4 + 1e-9),
            f"bubble {text['bubble']} vs {best['bubble_ratio']}",
        )
        # no multiply runs past peak: the model FLOPs of a step fit in the seconds the ranks
        # compute (utilization x pipeline time) at peak
        pipe_hi = text["pipeline"] + 0.005
        check(
            "mfu",
            best["mfu"] * best["step_seconds"] <= best["compute_utilization"] * pipe_hi * (1 + 1e-9),
            f"MFU {best['mfu']:.4f} x step {best['step_seconds']:.3f} s over utilization {best['compute_utilization']:.4f} "
            f"x pipeline {text['pipeline']} s",
        )
        # the step is the pipeline plus what of data-parallel sync and the optimizer is exposed
        check(
            "text",
            close(text["pipeline"] + text["sync"], text["step"], 0, 0.015 + 1e-9),
            f"pipeline {text['pipeline']} + {text['sync']} != step {text['step']}",
        )
    else:
        check("text", False, "no recommendation lines in the Markdown")
    # ranked by step time, steps equal to 12 significant digits tying (orders that run the
    # same ops sum them in another order and differ in the last bits; the tie goes to memory)
    steps = [float(f"{r['step_seconds']:.12g}") for r in rows]
    check("order", all(a <= b for a, b in zip(steps, steps[1:])), f"steps not sorted: {steps}")
    one = d.get("versus_1f1b")
    if one:
        h = lambda s: s * gpus / 3600 * t["tokens"] / tokens  # noqa: E731  GPU-hours of the whole run at step s
        want = h(one["step_seconds_1f1b"]) - h(best["step_seconds"])
        check(
            "hours",
            close(one["gpu_hours_recovered_whole_run"], want, 1e-9, 1e-6),
            f"saved {one['gpu_hours_recovered_whole_run']:.6g} vs {want:.6g}",
        )
    check_recipe(d, load_model(model).layers, check)
    if repeat:
        again = run([*base, "--json"])
        check("repeat", again.stdout == pj.stdout, "a second run gave another JSON")
    return checked, bad


def megatron_stages(layout: str) -> list[int]:
    """Transformer layers per stage of a --pipeline-model-parallel-layout string
    ("Et*3|(t*4|)*8tL": groups and letters repeated by *n, stages split by |)."""
    prev = None
    while prev != layout:
        prev = layout
        layout = re.sub(r"\(([^()]*)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    layout = re.sub(r"([A-Za-z])\*(\d+)", lambda m: m.group(1) * int(m.group(2)), layout)
    return [part.count("t") for part in layout.split("|")]


def check_recipe(d: dict, layers: int, check) -> None:
    r, best, t = d.get("recipe"), d["recommendation"], d["training"]
    if not r:
        check("recipe", False, "no recipe beside a recommendation")
        return
    spans = [s["layers"] for s in r["stages"]]  # [first, last], or [] for a stage of no layer (the head and MTP alone)
    sizes = [sp[1] - sp[0] + 1 if sp else 0 for sp in spans]
    flat = [i for sp in spans if sp for i in range(sp[0], sp[1] + 1)]
    check("recipe", flat == list(range(layers)), f"stages hold layers {spans}, not 0..{layers - 1} once each")
    ranks = {k for s in r["stages"] for k in s["ranks"]}
    check("recipe", ranks <= set(range(best["pp"])), f"stage ranks {sorted(ranks)} outside pp{best['pp']}")
    meg = r.get("megatron") or {}
    if meg.get("runs"):
        flags = dict(f.split(" ", 1) if " " in f else (f, "") for f in meg["flags"])
        want = {
            "--tensor-model-parallel-size": best["tp"],
            "--pipeline-model-parallel-size": best["pp"],
            "--micro-batch-size": best["micro_batch_size"],
            "--global-batch-size": t["global_batch"],
            "--seq-length": t["seq"],
            "--num-layers": layers,
        }
        if best["cp"] > 1:
            want["--context-parallel-size"] = best["cp"]
        if "--expert-model-parallel-size" in flags:
            want["--expert-model-parallel-size"] = best["ep"]
        for k, v in want.items():
            check("recipe", flags.get(k) == str(v), f"Megatron {k} {flags.get(k)}, the plan's {v}")
        if "--pipeline-model-parallel-layout" in flags:
            per = megatron_stages(flags["--pipeline-model-parallel-layout"].strip('"'))
            check("recipe", per == sizes, f"Megatron layout {per}, the stages {spans}")
    tt = r.get("torchtitan") or {}
    if tt.get("runs"):
        par, tr = tt["parallelism"], tt.get("training", {})
        check(
            "recipe", par.get("pipeline_parallel_degree", 1) == best["pp"], f"torchtitan pp {par.get('pipeline_parallel_degree')}"
        )
        check("recipe", par.get("tensor_parallel_degree", 1) == best["tp"], f"torchtitan tp {par.get('tensor_parallel_degree')}")
        check(
            "recipe", par.get("context_parallel_degree", 1) == best["cp"], f"torchtitan cp {par.get('context_parallel_degree')}"
        )
        dp = par.get("data_parallel_shard_degree", -1)
        if dp != -1:
            dp *= par.get("data_parallel_replicate_degree", 1)
            check("recipe", dp == best["dp"], f"torchtitan dp {dp}, the plan's {best['dp']}")
        if best["pp"] > 1:
            check(
                "recipe", par.get("num_pp_microbatches") == best["microbatches"], f"torchtitan M {par.get('num_pp_microbatches')}"
            )
        if "num_tokens_per_train_step" in tr:
            check("recipe", tr["num_tokens_per_train_step"] == t["global_batch"] * t["seq"], f"torchtitan tokens/step {tr}")
        parts = par.get("module_fqns_per_model_part")
        if parts:
            per = [sum(x.startswith("layers.") for x in p) for p in parts]
            check("recipe", per == sizes, f"torchtitan parts {per}, the stages {spans}")


def check_memory(model, cluster, extra, r, t, check, where) -> None:
    args = ["memory", "--model", model, "--cluster", cluster, "--json"]
    i = 0
    while i < len(extra):
        if extra[i] in SHARED:
            args += extra[i : i + 2]
        i += 2
    args += ["--pp", r["pp"], "--dp", r["dp"], "--tp", r["tp"], "--ep", r["ep"], "--cp", r["cp"], "--etp", r["etp"]]
    args += ["-s", r["schedule"], "--micro-batch-size", r["micro_batch_size"], "--microbatches", r["microbatches"]]
    args += ["--recompute", r["recompute"]] + (["--chunks", r["chunks"]] if r["chunks"] else [])
    p = run([str(a) for a in args])
    check("memory", p.returncode == 0, f"{where}: pipesim memory exit {p.returncode}: {p.stderr.strip()[-200:]}")
    if p.returncode != 0:
        return
    rows = [s for s in json.loads(p.stdout)["schedules"] if s["schedule"].split(" (")[0] == r["schedule"]]
    if not rows:
        check("memory", False, f"{where}: pipesim memory has no {r['schedule']} row")
        return
    s = rows[-1]
    got, usable = s["peak_gb"], s["usable"]["usable_bytes"] / 1e9
    check(
        "memory",
        close(got, r["memory_gb"], 1e-6),
        f"{where}: plan {r['memory_gb']:.3f} GB, memory {got:.3f} GB ({' '.join(map(str, args))})",
    )
    check("memory", s["rank"] == r["memory_rank"], f"{where}: plan's fullest rank {r['memory_rank']}, memory's {s['rank']}")
    check("memory", close(usable, r["usable_gb"], 1e-6), f"{where}: plan usable {r['usable_gb']:.3f} GB, memory {usable:.3f} GB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one case in four")
    ap.add_argument("--verbose", action="store_true", help="print each violation as found")
    ap.add_argument("--only", help="cases whose model or cluster contains this")
    a = ap.parse_args()
    cases = CASES[::4] if a.quick else CASES
    if a.only:
        cases = [x for x in cases if a.only in x[0] or a.only in x[1]]
    checked: Counter = Counter()
    violated: Counter = Counter()
    found: list[str] = []
    t0 = time.time()
    for n, (model, cluster, extra) in enumerate(cases):
        ch, bad = check_case(model, cluster, extra, repeat=n % 2 == 0)
        checked.update(ch)
        for b in bad:
            violated[b.split(":")[0]] += 1
            line = f"pipesim plan --model {model} --cluster {cluster} {' '.join(extra)} -> {b}"
            found.append(line)
            if a.verbose:
                print(line, flush=True)
    print(f"{len(cases)} cases in {time.time() - t0:.0f} s\n")
    print("| invariant | checked | violations |\n|---|---|---|")
    for k in INVARIANTS:
        print(f"| {k} | {checked[k]} | {violated[k]} |")
    if found:
        print("\nviolations:")
        print("\n".join(f"- {f}" for f in found))


if __name__ == "__main__":
    main()
