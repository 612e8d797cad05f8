"""pipesim beside SimuMax term by term on measured Megatron-LM iterations on one DGX B200.

    python benchmarks/peer_simumax.py --simumax-src /tmp/simumax
    python benchmarks/peer_simumax.py --simumax-src /tmp/simumax --case llama3_70b_l12_tp8_pp1_dp1_mbc4_cef
    python benchmarks/peer_simumax.py            # no SimuMax: pipesim's terms alone

The cases are benchmarks/data/measured_b200.toml's (built as measured_b200.py builds them);
by default the two its error is worst on: tp8 Llama 3 70B and DeepSeek-V3 at EP8. SimuMax
(MooreThreads/SimuMax) is the peer that published those measurements with its own
predictions; it is run here, in the same process, from a checkout outside this repository
(``--simumax-src``) on its own model and strategy files and its measured B200 system file,
set up as its release pipeline sets each case up (tools/b200/run_megatron_perf_real_pipeline.py:
``configure_perf``, TE 2.11, no straggler term); nothing of it is copied here. Without a
checkout the benchmark says so in one line and prints pipesim's column alone.

Each table gives, for one micro-batch on the first pipeline stage (milliseconds), the
attention projections, the attention core, the MLP's multiplies (the dense layers' and the
experts', with the router and shared experts), the memory-bound kernels (norms, activations,
rotary, routing permutes), the output head with its loss, the tensor-parallel and
expert-parallel collectives as each model exposes them, and for the step the data-parallel
collectives with the optimizer, and the step, beside the measured one.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tomllib
from pathlib import Path

from pipesim.planner.calibrate import check_layout, evaluate_layout
from pipesim.planner.collectives import moe_comm
from pipesim.planner.compute import attention_core, attention_gemms, hbm_rate, mlp_gemms
from pipesim.planner.elementwise import elementwise_bytes
from pipesim.planner.layer_costs import embedding_costs, head_costs, layer_costs, local_sort_seconds
from pipesim.planner.specs import load_cluster, load_training

sys.path.insert(0, str(Path(__file__).parent))  # the sibling benchmark that builds the cases
from measured_b200 import DATA, model_for  # noqa: E402

DEFAULT_CASES = ("llama3_70b_l12_tp8_pp1_dp1_mbc4_cef", "deepseekv3_l4_tp1_ep8_pp1_dp8_mbc4_cef")
SYSTEM = "configs/system/b200_bf16_ceperm.json"  # SimuMax's measured B200 system file
#: SimuMax's model and strategy files for measured_b200.toml's models and layouts
MODEL_FILES = {
    "llama3-70b": "llama3-70b",
    "llama3-405b": "llama3-405b_padding_128",
    "deepseek-v2": "deepseekv2",
    "deepseek-v3": "deepseekv3",
}
TERMS = (
    "attention projections F / B / W",
    "attention core F / B",
    "MLP multiplies F / B / W",
    "memory-bound kernels F / B",
    "output head F / B / W",
    "tensor-parallel collectives F / B",
    "expert all-to-all F / B",
)


def case_specs(data: dict, case: dict):
    m = model_for(data["models"][case["model"]], case["layers"])
    c = load_cluster(data["cluster"]).resized(data["gpus"])
    lay = {**case["layout"], "micro_batch": 1, "schedule": "1f1b"}
    t = load_training(base={**data["training"], "seq": case["seq"], "global_batch": case["micro_batches"] * lay["dp"]})
    return m, c, t, lay


def _add(acc: dict, key: str, *parts: float) -> None:
    old = acc.get(key, (0.0,) * len(parts))
    acc[key] = tuple(a + b * 1e3 for a, b in zip(old, parts))


def pipesim_terms(data: dict, case: dict) -> tuple[dict, float, float]:
    """(terms per micro-batch in ms, step-end ms, step ms) of the first stage."""
    m, c, t, raw = case_specs(data, case)
    lay = check_layout(m, c, t, raw)
    r = evaluate_layout(m, c, t, raw)
    stage_layers = r.stage_layers[0] if r.stage_layers else m.layers
    terms: dict = {}
    for layer in range(stage_layers):
        _add(terms, TERMS[0], *attention_gemms(m, c, t, lay))
        _add(terms, TERMS[1], *attention_core(m, c, t, lay, 0))
        _add(terms, TERMS[2], *mlp_gemms(m, layer, c, t, lay))
        fwd, bwd = (sum(elementwise_bytes(m, layer, t, lay, backward=b)) / hbm_rate(c, t) for b in (False, True))
        sort = local_sort_seconds(m, layer, c, t, lay)
        _add(terms, TERMS[3], fwd + sort, bwd + sort)
        lc = layer_costs(m, layer, c, t, lay, "none")
        comm_f, comm_b = lc.dispatch_f + lc.combine_f, lc.dispatch_b + lc.combine_b
        if m.is_moe_layer(layer):
            a2a = moe_comm(m, c, t, lay)
            _add(terms, TERMS[6], a2a[0] + a2a[1], a2a[2] + a2a[3])
            comm_f, comm_b = comm_f - a2a[0] - a2a[1], comm_b - a2a[2] - a2a[3]
        _add(terms, TERMS[5], comm_f, comm_b)
    emb = embedding_costs(m, c, t, lay)
    _add(terms, TERMS[3], emb.attn_f, emb.attn_b)
    _add(terms, TERMS[5], emb.dispatch_f, emb.dispatch_b)
    if lay.pp == 1:
        head = head_costs(m, c, t, lay)
        _add(terms, TERMS[4], head.attn_f + head.mlp_f, head.attn_b + head.mlp_b, head.mlp_w)
        _add(terms, TERMS[5], head.dispatch_f, head.dispatch_b)
    return terms, r.dp_sync * 1e3, r.step_time * 1e3


# ---- SimuMax, from a checkout -------------------------------------------------------------


def load_simumax(src: Path | None):
    """(SimuMax's PerfLLM class, None) from the checkout, or (None, why not)."""
    if src is None:
        return None, "no --simumax-src given"
    src = Path(src)
    if not (src / "simumax" / "core" / "perf_llm.py").is_file() or not (src / SYSTEM).is_file():
        return None, f"{src} is not a SimuMax checkout with {SYSTEM} (no simumax/core/perf_llm.py or system file)"
    sys.path.insert(0, str(src))
    try:
        return importlib.import_module("simumax.core.perf_llm").PerfLLM, None
    except Exception as e:  # any failure of a foreign checkout is "not available", named
        for k in [k for k in sys.modules if k == "simumax" or k.startswith("simumax.")]:
            del sys.modules[k]
        return None, f"importing SimuMax from {src} failed: {type(e).__name__}: {e}"
    finally:
        sys.path.remove(str(src))


def run_simumax(PerfLLM, src: Path, case: dict, model: str):
    """SimuMax's estimate of one case, set up as its B200 release pipeline sets it up."""
    lay = case["layout"]
    strategy = f"tp{lay.get('tp', 1)}_pp{lay['pp']}_dp{lay['dp']}_mbs1"
    if lay.get("ep", 1) > 1:
        strategy = f"ep{lay['ep']}_pp{lay['pp']}_dp{lay['dp']}_mbs1"
    perf = PerfLLM()
    perf.configure(
        strategy_config=str(src / "configs" / "strategy" / f"{strategy}.json"),
        model_config=str(src / "configs" / "models" / f"{MODEL_FILES[model]}.json"),
        system_config=str(src / SYSTEM),
        debug_points=[],
    )
    s, mc = perf.strategy, perf.model_config
    s.world_size, s.tp_size, s.pp_size, s.ep_size, s.cp_size = 8, lay.get("tp", 1), lay["pp"], lay.get("ep", 1), 1
    s.micro_batch_size, s.micro_batch_num, s.interleaving_size = 1, case["micro_batches"], 1
    s.te_version, s.pp_comm_async, s.enable_straggler_model = "2.11.0", False, False
    s.cross_entropy_loss_fusion = case["name"].endswith("_cef")
    mc.layer_num, mc.padded_vocab_size, mc.make_vocab_size_divisible_by = case["layers"], True, 128
    if model.startswith("deepseek"):
        s.dispatch_probs = True
        mc.moe_pad_expert_input_to_capacity, mc.capacity, mc.dense_layers = True, 1, 1
    perf.run_estimate()
    return perf


def _ms(text) -> float:
    value, unit = str(text).split()
    return float(value) * {"ms": 1.0, "s": 1e3, "us": 1e-3}[unit]


def simumax_terms(perf) -> tuple[dict, float, float]:
    """(terms per micro-batch in ms, step-end ms, step ms) of SimuMax's first stage: its
    leaf modules' forward, input-gradient and weight-gradient times and collectives."""
    terms: dict = {}
    for mod in perf.model_chunk_dict["first_stage_chunk"].get_all_leaf_modules():
        ci, kind, name = mod.get_cost_info(), type(mod).__name__, str(getattr(mod, "full_name", ""))
        f, b, w = ci.fwd_compute_time / 1e3, ci.bwd_grad_act_time / 1e3, ci.bwd_grad_w_time / 1e3
        net_f, net_b = ci.fwd_net_time / 1e3, (ci.bwd_grad_act_net_time + ci.bwd_grad_w_net_time) / 1e3
        if kind in ("CoreAttention", "MLACoreAttention"):
            _add(terms, TERMS[1], f, b + w)
        elif kind in ("Permutation", "UnPermutation"):
            _add(terms, TERMS[3], f, b + w)
            _add(terms, TERMS[6], net_f, net_b)
            continue
        elif name.endswith("linear_out") and ".layer_" not in name or kind == "ParallelCE":
            _add(terms, TERMS[4], f, b, w)
        elif "Linear" in kind and ".attention." in name:
            _add(terms, TERMS[0], f, b, w)
        elif "Linear" in kind or kind == "Router":
            _add(terms, TERMS[2], f, b, w)
        else:  # norms, activations, rotary, the embedding
            _add(terms, TERMS[3], f, b + w)
        _add(terms, TERMS[5], net_f, net_b)
    cost = perf.analysis_cost().data
    chunk = cost["all_chunk_times"]["first_stage_chunk"]
    return terms, _ms(chunk["dp_and_optim_time"]), _ms(cost["duration_time_per_iter"])


def _cell(v: tuple | None) -> str:
    return "" if v is None else " / ".join(f"{x:.2f}" for x in v)


def print_case(case: dict, mine, theirs) -> None:
    terms, end, step = mine
    print(f"\n## {case['name']}: one micro-batch, first stage (ms); measured step {case['real_ms']:.1f} ms\n")
    print("| term | SimuMax | pipesim | pipesim - SimuMax (sum) |")
    print("|---|---|---|---:|")
    for key in TERMS:
        a, b = (theirs[0].get(key) if theirs else None), terms.get(key)
        gap = f"{sum(b or ()) - sum(a or ()):+.2f}" if theirs and (a or b) else ""
        print(f"| {key} | {_cell(a)} | {_cell(b)} | {gap} |")
    n = case["micro_batches"]
    for label, a, b in (
        (
            f"all of it, times {n} micro-batches",
            sum(map(sum, theirs[0].values())) * n if theirs else None,
            sum(map(sum, terms.values())) * n,
        ),
        ("data-parallel collectives and optimizer (step end)", theirs[1] if theirs else None, end),
        ("step", theirs[2] if theirs else None, step),
    ):
        gap = f"{b - a:+.2f}" if a is not None else ""
        print(f"| {label} | {'' if a is None else f'{a:.2f}'} | {b:.2f} | {gap} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simumax-src", type=Path, help="a checkout of MooreThreads/SimuMax (outside this repository)")
    ap.add_argument("--case", action="append", help="a measured_b200.toml case (repeatable; default: the two worst)")
    args = ap.parse_args(argv)
    data = tomllib.loads(DATA.read_text())
    by_name = {c["name"]: c for c in data["case"]}
    names = args.case or list(DEFAULT_CASES)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        ap.error(f"--case {unknown[0]!r}: not a case of {DATA.name} (benchmarks/measured_b200.py lists them)")
    PerfLLM, why = load_simumax(args.simumax_src)
    if PerfLLM is None:
        print(f"SimuMax not available ({why}): printing pipesim's terms only.")
    print(f"# pipesim beside SimuMax, term by term ({data['source']})")
    for name in names:
        case = by_name[name]
        theirs = simumax_terms(run_simumax(PerfLLM, args.simumax_src, case, case["model"])) if PerfLLM else None
        print_case(case, pipesim_terms(data, case), theirs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
