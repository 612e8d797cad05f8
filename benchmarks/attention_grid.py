"""Fused attention by shape: SimuMax's measured attention kernels beside pipesim's price.

    python benchmarks/attention_grid.py --simumax-src /tmp/simumax
    python benchmarks/attention_grid.py            # no checkout: one line says so

MooreThreads/SimuMax timed causal attention (Megatron-Core's TEDotProductAttention,
TransformerEngine, bf16, one sequence) shape by shape on a DGX B200 and an A100 PCIe
(simu_tools/efficency_test/test_fa_efficiency.py) and keeps the results in its system files
(configs/system/b200_bf16_ceperm.json, a100_pcie.json: ``sdp_fwd`` and ``sdp_bwd``) as an
efficiency against peak under its FLOP convention, forward 2 b s^2 h (qk + v) and backward
5 b s^2 h (qk + v). This script reads those files from a checkout outside this repository
(``--simumax-src``), turns each efficiency back into the measured microseconds, and sets
pipesim's forward and backward (``compute.attention_core`` on the b200 and a100 presets:
the same 2250 and 312 TFLOP/s peaks SimuMax divides by) beside them, with the grid term
(``attention_waves``) off and on. Nothing of SimuMax's is copied here.

The measured tables are what the term is checked against, not fitted to: its only inputs
are the kernels' block sizes and the SM counts. Each row also gives the measured rate as a
share of the rate of the largest grid measured at the same sequence and head sizes ("rel"),
beside the share of the SMs pipesim's grid term keeps busy ("fill"): where the grid is
small the measured rate falls at least as far as the fill says, and further (per-block
costs the term does not model). The summary lines give, per device and pass, the mean
signed and mean absolute error and the worst row, off and on, and, of the shapes the term
slows, how many it slows no further than measured (fill at or above "rel").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

from pipesim.planner.attention_grid import attention_grid_fill  # noqa: E402
from pipesim.planner.compute import FLASH_BACKWARD_TILE_ROWS, attention_core
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, load_cluster, load_training

#: SimuMax's measured system file for each pipesim cluster preset
SYSTEMS = {"b200": "configs/system/b200_bf16_ceperm.json", "a100": "configs/system/a100_pcie.json"}
KEY = re.compile(r"(\w+)=(\w+)")


def measured_rows(src: Path, preset: str) -> list[dict]:
    """The shapes of one SimuMax system file with their measured forward and backward
    seconds (q, k, v laid out as the training runs them: qkv_contiguous)."""
    op = json.loads((src / SYSTEMS[preset]).read_text())["accelerator"]["op"]
    fwd, bwd = op["sdp_fwd"], op["sdp_bwd"]
    rows = []
    for key, f_eff in fwd["accurate_efficient_factor"].items():
        p = dict(KEY.findall(key))
        if p.get("qkv_contiguous") != "True" or key not in bwd["accurate_efficient_factor"]:
            continue
        b, s, h, kv, qk, v = (int(p[k]) for k in ("batch", "seq_len", "head_num", "kv_head_num", "qk_head_dim", "v_head_dim"))
        base = b * s * s * max(h, kv) * (qk + v)
        rows.append(
            {
                "b": b, "s": s, "h": h, "kv": kv, "qk": qk, "v": v,
                "fwd": 2 * base / (f_eff * fwd["tflops"] * 1e12),
                "bwd": 5 * base / (bwd["accurate_efficient_factor"][key] * bwd["tflops"] * 1e12),
            }
        )  # fmt: skip
    return sorted(rows, key=lambda r: (r["s"], r["qk"], -r["h"]))


def shape_model(r: dict) -> Model:
    """A one-layer model whose attention has the row's heads and head sizes."""
    if r["qk"] != r["v"]:  # MLA: 128 + 64 rotary query/key, 128 value (DeepSeek-V2/V3)
        att = Attention(kind="mla", qk_nope_dim=r["v"], qk_rope_dim=r["qk"] - r["v"], v_head_dim=r["v"], kv_lora_rank=512)
    else:
        att = Attention(kv_heads=r["kv"], head_dim=r["qk"])
    return Model("shape", 1, r["h"] * r["qk"], r["h"], 32000, att, (), 4 * r["h"] * r["qk"])


def relative_rates(rows: list[dict], key: str) -> list[float]:
    """Each row's measured FLOP rate over that of the row with the most heads x sequences
    at its sequence length and head sizes (the largest grid measured there)."""
    groups: dict = {}
    for r in rows:
        g = (r["s"], r["qk"], r["v"])
        if g not in groups or r["b"] * r["h"] > groups[g]["b"] * groups[g]["h"]:
            groups[g] = r
    rate = lambda r: r["b"] * r["h"] / r[key]  # noqa: E731 (FLOPs per second, up to the group's shared factor)
    return [rate(r) / rate(groups[(r["s"], r["qk"], r["v"])]) for r in rows]


def pipesim_row(cluster, r: dict, **training) -> dict:
    """pipesim's (forward, backward) seconds with the grid term off and on, and its fills
    (``training``: more training-file fields, e.g. the kernel's attention_block_order)."""
    m, lay = shape_model(r), Layout(pp=1, dp=1, micro_batch=r["b"])
    on = load_training(base={"seq": r["s"], "attention_waves": True, **training})
    off = replace(on, attention_waves=False)
    fills = [
        attention_grid_fill(cluster, on, lay, r["h"], cluster.attention_tile_rows),
        attention_grid_fill(cluster, on, lay, r["h"], FLASH_BACKWARD_TILE_ROWS, backward=True),
    ]
    return {"off": attention_core(m, cluster, off, lay, 0), "on": attention_core(m, cluster, on, lay, 0), "fill": fills}


def _err(pred: float, real: float) -> float:
    return pred / real - 1


def summary(errors: list[float]) -> str:
    mean = sum(errors) / len(errors)
    worst = max(errors, key=abs)
    return f"bias {mean:+.1%}, mean |err| {sum(map(abs, errors)) / len(errors):.1%}, worst {worst:+.1%}"


def print_device(preset: str, rows: list[dict], **training) -> dict:
    c = load_cluster(preset)
    print(
        f"\n## {preset}: {c.sms} SMs, forward blocks of {c.attention_tile_rows} query rows, backward of {FLASH_BACKWARD_TILE_ROWS} key rows\n"
    )
    print("| seq | heads | kv | qk/v | F measured us | pipesim off / on | err off / on | rel / fill "
          "| B measured us | pipesim off / on | err off / on | rel / fill |")  # fmt: skip
    print("|---:|---:|---:|---|---:|---:|---|---|---:|---:|---|---|")
    errs: dict = {}
    lowered = {"F": 0, "B": 0}
    within = {"F": 0, "B": 0}
    rel = {"F": relative_rates(rows, "fwd"), "B": relative_rates(rows, "bwd")}
    for n, r in enumerate(rows):
        p = pipesim_row(c, r, **training)
        cells = []
        for i, name in enumerate(("F", "B")):
            real, off, on, fill = r[("fwd", "bwd")[i]], p["off"][i], p["on"][i], p["fill"][i]
            for mode, pred in (("off", off), ("on", on)):
                errs.setdefault((name, mode), []).append(_err(pred, real))
            lowered[name] += fill < 1
            within[name] += rel[name][n] <= fill < 1
            cells.append(
                f"{real * 1e6:.0f} | {off * 1e6:.0f} / {on * 1e6:.0f} | {_err(off, real):+.0%} / {_err(on, real):+.0%} "
                f"| {rel[name][n]:.2f} / {fill:.2f}"
            )
        print(f"| {r['s']} | {r['h']} | {r['kv']} | {r['qk']}/{r['v']} | {cells[0]} | {cells[1]} |")
    print()
    for (name, mode), e in errs.items():
        print(f"{preset} {'forward' if name == 'F' else 'backward'}, grid term {mode}: {len(e)} shapes, {summary(e)}")
    for name in ("F", "B"):
        print(
            f"{preset} {'forward' if name == 'F' else 'backward'}: the grid term slows {lowered[name]} of the shapes, "
            f"{within[name]} of them no further than measured"
        )
    return errs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simumax-src", type=Path, help="a checkout of MooreThreads/SimuMax (outside this repository)")
    args = ap.parse_args(argv)
    src = args.simumax_src
    if src is None or not all((src / f).is_file() for f in SYSTEMS.values()):
        why = "no --simumax-src given" if src is None else f"{src} has no {' or '.join(SYSTEMS.values())}"
        print(f"SimuMax's measured attention tables not available ({why}): nothing to compare.")
        return 0
    print("# Fused attention by shape: SimuMax's measured kernels beside pipesim (us)")
    for preset in SYSTEMS:
        print_device(preset, measured_rows(src, preset))
    return 0


if __name__ == "__main__":
    sys.exit(main())
