"""pipesim's price of the tensor-parallel collectives inside one DGX B200 beside SimuMax's,
at the message sizes the measured Megatron-LM rows use, and where the tp8 gap sits.

    python benchmarks/b200_collectives.py --simumax-src /tmp/simumax
    python benchmarks/b200_collectives.py        # no SimuMax: pipesim's column alone

Issue 20 asks whether pipesim prices NVLink collectives fast at these sizes, to be judged
on MEASURED B200 collective times only. This script first looks for such tables in the
SimuMax checkout (``--simumax-src``) and says what it finds: nccl-tests output (rows of
size, count, type, ..., time, algbw, busbw) in any text file, and the device each file
names. At MooreThreads/SimuMax 4dcaae51 there is none for B200: its B200 system file
(configs/system/b200_bf16_ceperm.json) keeps, per collective, only a line fitted to NCCL
runs on 8 GPUs (bandwidth share and a latency intercept, ``networks.high_intra_node.op``),
and the one nccl-tests table in the tree (simu_tools/efficency_test/nccl_fit.py) is an
8-rank run on another machine (its own fit gives an all-reduce share of 0.49 of 900 GB/s
where the B200 file has 0.74; the script labels its device H100).

So the second table sets pipesim's price (src/pipesim/planner/nccl.py: NCCL's tuner
model, ``nvlink_gbps`` 606) beside SimuMax's FITTED line, computed by SimuMax's own
``SystemConfig.compute_net_op_time`` from the checkout. The fitted line is a peer's
model, not a measurement: it is evidence of nothing by itself, and at tp2 and tp4 it is
SimuMax's extrapolation from 8 ranks (latency linear in the ranks).

The third sets the same model (pipesim's h100 preset, 360 GB/s from NCCL's developers,
nothing fitted here) beside the one measured nccl-tests table the checkout does hold: at
the rows' 64 and 128 MiB an all-gather or reduce-scatter is priced 5-8% under the
measured time; at 1-4 MiB, under the run's floor of about 45 us, at a third to two
thirds of it. It is another GPU, so it shows the model's error by size, not B200's.

The last table splits the tp8 Llama 3 70B case's tensor-parallel collectives per
micro-batch into their two differences from SimuMax: the price of one collective (pipesim
with every collective exposed, ``tp_overlap = "none"``, scaled to SimuMax's fitted price
at the same size) and how many of them are exposed (pipesim hides the backward re-gather
and reduce-scatter under the multiplies beside them, tp_overlap.py; SimuMax exposes all).
Nothing of SimuMax is copied here; its files are read from the checkout at run time.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

from pipesim.planner import nccl
from pipesim.planner.layout import Span
from pipesim.planner.specs import load_cluster

sys.path.insert(0, str(Path(__file__).parent))  # the sibling benchmarks that build the cases
from measured_b200 import DATA, model_for, predict  # noqa: E402
from peer_simumax import SYSTEM, load_simumax, pipesim_terms, run_simumax, simumax_terms  # noqa: E402

MIB = 2**20
KINDS = ("all_reduce", "all_gather", "reduce_scatter")
GROUPS = (2, 4, 8)
CONTEXT_MIB = (4, 16, 64, 128, 256)  # sizes printed beside the rows' own
TP8_CASE = "llama3_70b_l12_tp8_pp1_dp1_mbc4_cef"
INSIDE = Span(inside=True, per_domain=8, domains=1)
#: a line of nccl-tests output: size, count, type, redop, root, then time, algbw, busbw
NCCL_ROW = re.compile(r"^\s*(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+")
DEVICES = re.compile(r"\b(B200|B100|GB200|H100|H800|H200|H20|A100|A800)\b")


def measured_tables(src: Path) -> list[tuple[str, int, str]]:
    """(path, nccl-tests rows, devices named) of every text file in the checkout holding
    nccl-tests output."""
    found = []
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.suffix not in {".py", ".txt", ".log", ".md", ".json", ".csv", ".sh"}:
            continue
        text = path.read_text(errors="replace")
        rows = sum(1 for line in text.splitlines() if NCCL_ROW.match(line))
        if rows:
            found.append((str(path.relative_to(src)), rows, ", ".join(sorted(set(DEVICES.findall(text)))) or "none"))
    return found


#: the nccl-tests runs simu_tools/efficency_test/nccl_fit.py holds (SimuMax's worked
#: example of its fit), each a quoted block of output with its ranks and op in the call
FIT_SCRIPT = "simu_tools/efficency_test/nccl_fit.py"
FIT_BLOCK = re.compile(r"data='''(.*?)'''.*?ranks\s*=\s*(\d+).*?title\s*=\s*'(\w+?)_nccl_test'", re.S)


def fit_script_runs(src: Path) -> dict[tuple[str, int], list[tuple[int, float]]]:
    """(op, ranks) -> [(bytes, out-of-place us)] of the nccl-tests runs in SimuMax's fit
    example; empty where the file is absent or holds none."""
    path = src / FIT_SCRIPT
    runs: dict = {}
    if not path.is_file():
        return runs
    for block, ranks, op in FIT_BLOCK.findall(path.read_text(errors="replace")):
        rows = [line.split() for line in block.splitlines() if NCCL_ROW.match(line)]
        runs[(op, int(ranks))] = [(int(r[0]), float(r[5])) for r in rows]
    return runs


def print_measured_h100(src: Path, sizes: dict[int, list[str]]) -> None:
    """pipesim's H100 preset against the one measured table the checkout holds: the same
    model of NVLink collectives by message size, held to measurements out of sample (the
    preset's 360 GB/s is NCCL's developers' figure, nothing fitted to these rows)."""
    runs = {k: v for k, v in fit_script_runs(src).items() if k[0] in KINDS}
    if not runs:
        print(f"\n{FIT_SCRIPT}: no nccl-tests runs found; no measured check of the model by size.")
        return
    c = load_cluster("h100")
    print(
        f"\n## Out of family: the checkout's one measured table ({FIT_SCRIPT}, 8 ranks, labelled H100) "
        f"against pipesim's h100 preset ({c.nvlink_gbps:g} GB/s)\n"
    )
    print("| op | MiB | measured us | measured busbw | pipesim us | pick | pipesim busbw | pipesim / measured |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    at_rows = []
    for (kind, n), rows in sorted(runs.items()):
        for nbytes, us in rows:
            ours, pick = pipesim_price(c, kind, nbytes, n)
            ratio = ours * 1e6 / us
            if nbytes in sizes and kind != "all_reduce":
                at_rows.append(ratio)
            print(
                f"| {kind} | {nbytes / MIB:g} | {us:.1f} | {busbw(kind, nbytes, n, us * 1e-6):.0f} | "
                f"{ours * 1e6:.1f} | {pick} | {busbw(kind, nbytes, n, ours):.0f} | {ratio:.2f} |"
            )
    if at_rows:
        print(
            f"\nAll-gather and reduce-scatter at the tp rows' sizes ({', '.join(f'{s / MIB:.0f}' for s in sorted(sizes))} MiB): "
            f"pipesim / measured {min(at_rows):.2f}-{max(at_rows):.2f} on that node."
        )


def row_sizes(data: dict) -> dict[int, list[str]]:
    """Bytes of one tensor-parallel collective's whole buffer (a micro-batch of one sequence's
    hidden states in BF16) -> the measured tp>1 cases that move it."""
    sizes: dict[int, list[str]] = {}
    for case in data["case"]:
        if case["layout"].get("tp", 1) > 1 and case["layout"].get("cp", 1) == 1:
            hidden = model_for(data["models"][case["model"]], 1).hidden
            sizes.setdefault(case["seq"] * hidden * 2, []).append(case["name"])
    return sizes


def simumax_system(src: Path | None):
    """(SimuMax's PerfLLM class, its SystemConfig of the B200 system file, None) from the
    checkout, or (None, None, why not)."""
    PerfLLM, why = load_simumax(src)
    if PerfLLM is None:
        return None, None, why
    config = sys.modules["simumax.core.config"]  # imported with perf_llm
    return PerfLLM, config.SystemConfig.init_from_config_file(str(Path(src) / SYSTEM)), None


def simumax_seconds(system, kind: str, nbytes: float, n: int) -> float:
    """SimuMax's fitted time of one collective over n GPUs of the node (its TP network)."""
    return system.compute_net_op_time(kind, nbytes, n, net="high_intra_node", comm_stage="tp") * 1e-3


def pipesim_price(c, kind: str, nbytes: float, n: int) -> tuple[float, str]:
    """pipesim's seconds and the algorithm/protocol NCCL's tuner model picks."""
    options = nccl.times(c, kind, nbytes, n, INSIDE)
    pick = min(options, key=options.get)
    return options[pick], pick


def busbw(kind: str, nbytes: float, n: int, seconds: float) -> float:
    """GB/s of bus bandwidth, as nccl-tests reports it."""
    return nccl.RING_PASSES[kind] * (n - 1) / n * nbytes / seconds / 1e9


def print_prices(c, system, sizes: dict[int, list[str]]) -> None:
    print("\n## One collective inside a DGX B200: pipesim's price beside SimuMax's fitted line\n")
    print("(us, and bus GB/s; sizes are the whole buffer: an all-reduce's input, an all-gather's output)\n")
    print(
        "| op | GPUs | MiB | used by | pipesim us | pick | pipesim busbw | SimuMax fitted us | fitted busbw | pipesim / fitted |"
    )
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|")
    all_sizes = sorted(set(sizes) | {m * MIB for m in CONTEXT_MIB})
    for kind in KINDS:
        for n in GROUPS:
            for nbytes in all_sizes:
                ours, pick = pipesim_price(c, kind, nbytes, n)
                used = "tp rows: " + ", ".join(sorted({"_".join(s.split("_")[:2]) for s in sizes.get(nbytes, ())}))
                used = used if nbytes in sizes else ""
                cells = f"| {kind} | {n} | {nbytes / MIB:.0f} | {used} | {ours * 1e6:.1f} | {pick} | {busbw(kind, nbytes, n, ours):.0f} |"
                if system is None:
                    print(cells + " | | |")
                    continue
                theirs = simumax_seconds(system, kind, nbytes, n)
                print(cells + f" {theirs * 1e6:.1f} | {busbw(kind, nbytes, n, theirs):.0f} | {ours / theirs:.2f} |")


def print_split(data: dict, c, system, PerfLLM, src: Path) -> None:
    """The tp8 case's tensor-parallel collectives per micro-batch, split into price and exposure."""
    case = next(x for x in data["case"] if x["name"] == TP8_CASE)
    key = "tensor-parallel collectives F / B"
    as_is = pipesim_terms(data, case)[0][key]
    none = {**data, "training": {**data["training"], "tp_overlap": "none"}}
    exposed = pipesim_terms(none, case)[0][key]
    nbytes = next(s for s, names in row_sizes(data).items() if TP8_CASE in names)
    pair = KINDS[1:]  # under sequence parallelism: an all-gather and a reduce-scatter
    ratio = sum(simumax_seconds(system, k, nbytes, 8) for k in pair) / sum(pipesim_price(c, k, nbytes, 8)[0] for k in pair)
    theirs = simumax_terms(run_simumax(PerfLLM, src, case, case["model"]))[0][key]
    step, step_none = (predict(d, case).step_time * 1e3 for d in (data, none))
    short = (case["real_ms"] - step) / case["micro_batches"]
    print(f"\n## {TP8_CASE}: tensor-parallel collectives per micro-batch (ms, forward / backward)\n")
    print("| pricing | F | B | F + B |")
    print("|---|---:|---:|---:|")
    rows = (
        ("SimuMax (its fitted line, every collective exposed)", theirs),
        ("pipesim as it stands (NCCL tuner model, backward overlapped)", as_is),
        ('pipesim, every collective exposed (tp_overlap = "none")', exposed),
        (f"the same at SimuMax's fitted price ({nbytes / MIB:.0f} MiB all-gather + reduce-scatter: x{ratio:.2f})",
         tuple(x * ratio for x in exposed)),
    )  # fmt: skip
    for label, (f, b) in rows:
        print(f"| {label} | {f:.2f} | {b:.2f} | {f + b:.2f} |")
    print(
        f"\nMeasured step {case['real_ms']:.1f} ms, pipesim {step:.1f} ms: pipesim is {short:.2f} ms a micro-batch short; "
        f"of SimuMax's {sum(theirs) - sum(as_is):+.2f} ms more on these collectives, exposure accounts for "
        f"{sum(exposed) - sum(as_is):+.2f} and the fitted price of each for {sum(exposed) * (ratio - 1):+.2f}. "
        f"With every collective exposed the step is {step_none:.1f} ms ({step_none / case['real_ms'] - 1:+.1%} against "
        f"{step / case['real_ms'] - 1:+.1%}); a what-if, not a setting chosen by this row."
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simumax-src", type=Path, help="a checkout of MooreThreads/SimuMax (outside this repository)")
    args = ap.parse_args(argv)
    data = tomllib.loads(DATA.read_text())
    c = load_cluster(data["cluster"]).resized(data["gpus"])
    PerfLLM, system, why = simumax_system(args.simumax_src)
    if system is None:
        print(f"SimuMax not available ({why}): printing pipesim's prices only.")
    print(f"# B200 collectives: pipesim beside SimuMax ({data['source']})")
    if system is not None:
        tables = measured_tables(args.simumax_src)
        b200 = [t for t in tables if "B200" in t[2].split(", ")]
        print("\n## Measured collective tables in the checkout (nccl-tests output)\n")
        for path, rows, devices in tables:
            print(f"- {path}: {rows} rows; devices named in the file: {devices}")
        print(f"\nMeasured B200 collective tables: {len(b200) if b200 else 'none'}.", end=" ")
        print("SimuMax's B200 collectives below are its fitted line, not measurements." if not b200 else "")
    sizes = row_sizes(data)
    print_prices(c, system, sizes)
    if system is not None:
        print_measured_h100(args.simumax_src, sizes)
    if system is not None:
        print_split(data, c, system, PerfLLM, args.simumax_src)
    return 0


if __name__ == "__main__":
    sys.exit(main())
