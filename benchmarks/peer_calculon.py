"""pipesim beside Calculon on Korthikanti et al. 2022's Megatron runs, against what was measured.

    python benchmarks/peer_calculon.py --calculon-src /tmp/calculon
    python benchmarks/peer_calculon.py --calculon-src /tmp/calculon --terms 175B
    python benchmarks/peer_calculon.py --switches      # pipesim's open assumptions, each flipped
    python benchmarks/peer_calculon.py                 # no Calculon: pipesim vs measured only

The runs (22B, 175B, 530B and 1T GPT on A100, each with full recomputation and with selective
recomputation plus sequence parallelism) and their measured iteration times are
benchmarks/data/korthikanti.toml, with the paper and the layouts' sources. Calculon
(calculon-ai/calculon, Isaev et al., SC23) is the peer: an analytical model validated on these
very runs. It is run here, in the same process, from a checkout outside this repository
(``--calculon-src``), on the model and execution files of its own validation and its
``systems/a100_80g.json``, as its ``llm-validation`` command runs them; nothing of it is
copied here. Without a checkout the benchmark says so in one line and prints pipesim alone.

``--terms RUN`` prints, for that run and both modes, each side's time per layer and per
step term by term (forward, backward, recomputation, tensor-parallel communication, pipeline
bubble and transfers, data-parallel and optimizer, the output head, memory),
to show where the two models part.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import tomllib
import types
from dataclasses import dataclass, replace
from pathlib import Path

from pipesim.planner.calibrate import check_layout, evaluate_layout
from pipesim.planner.layer_costs import head_costs, layer_costs
from pipesim.planner.specs import load_cluster, load_training, model_from_table
from pipesim.planner.stragglers import slowest_share

DATA = Path(__file__).parent / "data" / "korthikanti.toml"
MODES = ("full", "seqsel")
GIB = 2**30
SYSTEM = "systems/a100_80g.json"  # Calculon's A100 80 GB, the system its Table 5 validation runs on


def load_rows(path: Path = DATA) -> tuple[dict, list[dict]]:
    data = tomllib.loads(path.read_text())
    return data["common"], data["run"]


def specs(common: dict, row: dict, mode: str):
    """pipesim's model, cluster and training for one row in one mode."""
    m = model_from_table(row["model"], f"{DATA.name} [{row['name']}] model")
    c = load_cluster(common["cluster"]).resized(row["gpus"])
    table = {**common["training"], "global_batch": row["global_batch"]}
    if mode == "seqsel":
        table.update(common["seqsel"])
    return m, c, load_training(base=table)


# ---- Calculon, from a checkout ------------------------------------------------------------


def load_calculon(src: Path | None, needed: tuple[str, ...] = ()):
    """(Calculon's ``Llm`` and ``System`` classes and its JSON reader, None) from the
    checkout, or (None, why not). Its package ``__init__`` also imports its command-line tools,
    which need pandas and psutil; the model itself needs only numpy, so the package is set up
    with just the modules the model needs. ``needed``: the files under the checkout the runs read."""
    if src is None:
        return None, "no --calculon-src given"
    src = Path(src)
    if not (src / "calculon" / "llm" / "llm.py").is_file():
        return None, f"{src} is not a Calculon checkout (no calculon/llm/llm.py)"
    missing = [name for name in needed if not (src / name).is_file()]
    if missing:
        return None, f"{src} lacks {missing[0]} (a Calculon checkout older or newer than its validation files)"
    saved = {k: v for k, v in sys.modules.items() if k == "calculon" or k.startswith("calculon.")}
    try:
        pkg = types.ModuleType("calculon")
        pkg.__path__ = [str(src / "calculon")]
        sys.modules["calculon"] = pkg
        for name in ("util", "io", "system"):
            mod = importlib.import_module(f"calculon.{name}")
            pkg.__dict__.update({k: v for k, v in vars(mod).items() if not k.startswith("_")})
        llm_pkg = types.ModuleType("calculon.llm")
        llm_pkg.__path__ = [str(src / "calculon" / "llm")]
        sys.modules["calculon.llm"] = llm_pkg
        llm = importlib.import_module("calculon.llm.llm")
        return (llm.Llm, pkg.System, pkg.read_json_file), None
    except Exception as e:  # any failure of a foreign checkout is "not available", named
        for k in [k for k in sys.modules if k == "calculon" or k.startswith("calculon.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        return None, f"importing Calculon from {src} failed: {type(e).__name__}: {e}"


def run_calculon(calc, src: Path, row: dict, mode: str) -> dict:
    """Calculon's stats for one row and mode, as its validation computes them."""
    Llm, System, read = calc
    app = Llm.Application(read(str(src / row["calculon"]["model"])))
    exe = Llm.Execution.from_json(read(str(src / row["calculon"]["exe"].format(mode=mode))))
    syst = System(read(str(src / SYSTEM)))
    model = Llm(app, logging.getLogger("calculon"))
    model.compile(syst, exe)
    model.run(syst)
    return model.get_stats_json(False)


# ---- pipesim --------------------------------------------------------------------------------


@dataclass
class Pipesim:
    result: object  # the planner's Result on the published layout
    specs: tuple
    layout: object


def run_pipesim(common: dict, row: dict, mode: str) -> Pipesim:
    m, c, t = specs(common, row, mode)
    lay = dict(row["layout"])
    return Pipesim(evaluate_layout(m, c, t, lay), (m, c, t), check_layout(m, c, t, lay))


def pipesim_terms(p: Pipesim, mode: str) -> dict:
    """pipesim's terms for one GPU of the last stage (seconds; per layer per micro-batch, then
    per step): the per-layer costs the simulation is built from, and the step's bubble,
    straggler wait and data-parallel/optimizer tail from its result."""
    m, c, t = p.specs
    lay, r = p.layout, p.result
    recompute = "full" if mode == "full" else "selective"
    mine = layer_costs(m, 0, c, t, lay, recompute)
    plain = layer_costs(m, 0, c, t, lay, "none")
    M = r.candidate.microbatches
    per_gpu = m.layers // lay.pp
    bwd = plain.attn_b + plain.attn_w + plain.mlp_b + plain.mlp_w
    re = mine.attn_b + mine.attn_w + mine.mlp_b + mine.mlp_w - bwd
    tp_f, tp_b = mine.dispatch_f + mine.combine_f, mine.dispatch_b + mine.combine_b
    head = head_costs(m, c, t, lay)  # on the last stage, the GPU these terms follow
    ends = head.forward_compute + head.backward_compute + head.forward_comm + head.backward_comm
    share = slowest_share(c.gpus, c.gpu_speed_sd)  # the makespan is the median GPU's over this
    busy = M * per_gpu * (mine.attn_f + mine.mlp_f + bwd + re + tp_f + tp_b) + M * ends
    return {
        "layer fwd": mine.attn_f + mine.mlp_f,
        "layer bwd": bwd,
        "layer recompute": re,
        "layer tp comm fwd": tp_f,
        "layer tp comm bwd (recomm incl.)": tp_b,
        "step fwd": M * per_gpu * (mine.attn_f + mine.mlp_f),
        "step bwd": M * per_gpu * bwd,
        "step recompute": M * per_gpu * re,
        "step tp comm": M * per_gpu * (tp_f + tp_b),
        "step output head": M * ends,
        # what the last stage's GPU does not spend on the above: the pipeline's fill and
        # drain, its blocking stage-to-stage transfers, waits on slower stages
        "step bubble + pp transfers": r.makespan * share - busy,
        "step straggler wait": r.makespan * (1 - share),
        "step dp + optimizer": r.dp_sync,
        "step total": r.step_time,
        "memory GiB": r.memory_gb * 1e9 / GIB,
    }


def calculon_terms(s: dict) -> dict:
    """Calculon's terms under the same names (its blocks: one transformer layer each)."""
    return {
        "layer fwd": s["block_fw_time"],
        "layer bwd": s["block_agrad_time"] + s["block_wgrad_time"],
        "layer recompute": s["block_re_time"],
        "layer tp comm fwd": s["baseblock_fw_tp_time_exposed"],
        "layer tp comm bwd (recomm incl.)": s["baseblock_agrad_tp_time_exposed"] + s["baseblock_recomm_time_exposed"],
        "step fwd": s["fw_time"],
        "step bwd": s["bw_time"],
        "step recompute": s["recompute_time"],
        "step tp comm": s["tp_comm_exposed_time"] + s["recomm_exposed_time"],
        "step output head": 0.0,  # Calculon models the transformer blocks only
        "step bubble + pp transfers": s["bubble_time"] + s["pp_comm_exposed_time"],
        "step straggler wait": 0.0,  # Calculon models every GPU alike
        "step dp + optimizer": s["dp_comm_exposed_time"] + s["optim_step_time"],
        "step total": s["total_time"],
        "memory GiB": s["proc_mem_tier1_cap_req"] / GIB,
    }


# ---- printing -------------------------------------------------------------------------------


def summary(errors: list[float]) -> str:
    n = len(errors)
    return (
        f"mean |error| {sum(abs(e) for e in errors) / n:.1%}, worst {max(errors, key=abs):+.1%}, "
        f"bias (mean signed) {sum(errors) / n:+.1%}"
    )


def print_table(common: dict, rows: list[dict], calc, src) -> dict:
    """Measured, Calculon and pipesim per run and mode; returns what was computed, by (run, mode)."""
    done = {}
    peer = calc is not None
    print("## Korthikanti et al. 2022, Table 5: iteration time (s), A100 80 GB\n")
    head = "| run | mode | layout | measured | " + ("Calculon | error | " if peer else "") + "pipesim | error |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    calc_err, pipe_err = [], []
    for row in rows:
        for mode in MODES:
            measured = row["measured_s"][mode]
            p = run_pipesim(common, row, mode)
            s = run_calculon(calc, src, row, mode) if peer else None
            done[row["name"], mode] = (p, s)
            lay = row["layout"]
            text = f"tp{lay['tp']} pp{lay['pp']} mb{lay['micro_batch']}" + (f" v{lay['chunks']}" if lay.get("chunks") else "")
            cells = [row["name"], mode, text, f"{measured:.2f}"]
            if peer:
                e = s["total_time"] / measured - 1
                calc_err.append(e)
                cells += [f"{s['total_time']:.2f}", f"{e:+.1%}"]
            e = p.result.step_time / measured - 1
            pipe_err.append(e)
            cells += [f"{p.result.step_time:.2f}", f"{e:+.1%}"]
            print("| " + " | ".join(cells) + " |")
    print()
    if peer:
        print(f"Calculon: {summary(calc_err)}")
    print(f"pipesim:  {summary(pipe_err)}")
    return done


def print_terms(name: str, done: dict, rows: list[dict]) -> None:
    row = next(r for r in rows if r["name"] == name)
    for mode in MODES:
        p, s = done[name, mode]
        mine = pipesim_terms(p, mode)
        theirs = calculon_terms(s) if s else {}
        print(f"\n## {name} {mode}: term by term (seconds; memory GiB), measured step {row['measured_s'][mode]:.2f} s\n")
        print("| term | Calculon | pipesim | pipesim / Calculon |")
        print("|---|---|---|---|")
        for key in dict.fromkeys([*theirs, *mine]):
            a, b = theirs.get(key), mine.get(key)
            ratio = f"{b / a:.2f}" if a and b is not None else ""
            fmt = "{:.4f}" if key.startswith("layer") else "{:.3f}"
            print(f"| {key} | {'' if a is None else fmt.format(a)} | {'' if b is None else fmt.format(b)} | {ratio} |")


#: pipesim's assumptions these runs leave open, each flipped alone by --switches: (label,
#: cluster fields, training fields, what the evidence says)
SWITCHES = (
    (
        "fused accumulation",
        {},
        {"grad_accumulation_bytes": 0, "wgrad_fp32_accumulate": True},
        "Megatron-LM's gradient_accumulation_fusion (Feb 2022) ran only with fp32 accumulation, forced on for bf16; "
        "the paper does not name fp16 or bf16",
    ),
    ("no straggler", {"gpu_speed_sd": 0.0}, {}, "every GPU at the median speed, as Calculon has them"),
    (
        "tp exposed",
        {},
        {"tp_overlap": "none"},
        "every tensor-parallel collective waited for (Megatron-LM before 6e1bde1e0f, Sep 2021); the rows' code "
        "overlaps the backward's (tp_overlap = backward: mpu/layers.py at 9aad9203aa)",
    ),
    (
        "tp all overlapped",
        {},
        {"tp_overlap": "all"},
        "every tensor-parallel collective under the multiplies (Megatron-Core's --tp-comm-overlap, which came after the paper)",
    ),
)


def print_switches(common: dict, rows: list[dict]) -> None:
    """pipesim's error on every run with each open assumption flipped alone."""
    print("\n## pipesim with one assumption flipped (error against measured)\n")
    print("| run | mode | as set | " + " | ".join(label for label, *_ in SWITCHES) + " |")
    print("|---|---|---|" + "---|" * len(SWITCHES))
    errors: dict[str, list[float]] = {"as set": [], **{label: [] for label, *_ in SWITCHES}}
    for row in rows:
        for mode in MODES:
            measured = row["measured_s"][mode]
            m, c, t = specs(common, row, mode)
            steps = {"as set": evaluate_layout(m, c, t, dict(row["layout"])).step_time}
            for label, cf, tf, _ in SWITCHES:
                steps[label] = evaluate_layout(m, replace(c, **cf), replace(t, **tf), dict(row["layout"])).step_time
            cells = []
            for key, step in steps.items():
                errors[key].append(step / measured - 1)
                cells.append(f"{step / measured - 1:+.1%}")
            print(f"| {row['name']} | {mode} | " + " | ".join(cells) + " |")
    print()
    for key, e in errors.items():
        print(f"{key}: {summary(e)}")
    for label, _, _, why in SWITCHES:
        print(f"- {label}: {why}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calculon-src", type=Path, help="a checkout of calculon-ai/calculon (outside this repository)")
    ap.add_argument("--switches", action="store_true", help="also print pipesim with each open assumption flipped alone")
    ap.add_argument("--terms", metavar="RUN", help="print the term-by-term comparison for this run (22B, 175B, 530B or 1T)")
    args = ap.parse_args(argv)
    common, rows = load_rows()
    names = [r["name"] for r in rows]
    if args.terms is not None and args.terms not in names:
        ap.error(f"--terms {args.terms!r}: expected one of {', '.join(names)}")
    needed = [SYSTEM] + [r["calculon"][k].format(mode=mode) for r in rows for k in ("model", "exe") for mode in MODES]
    calc, why = load_calculon(args.calculon_src, tuple(dict.fromkeys(needed)))
    if calc is None:
        print(f"Calculon not available ({why}): printing pipesim against the measured times only.\n")
    done = print_table(common, rows, calc, args.calculon_src)
    if args.terms:
        print_terms(args.terms, done, rows)
    if args.switches:
        print_switches(common, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
