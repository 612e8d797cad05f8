"""NCCL's collectives as measured in public, beside pipesim's price for them (planner/
nccl.py), printed as a Markdown table.

    python benchmarks/collectives.py

Each row is one published nccl-tests (or DeepEP baseline) figure: the collective, the
GPUs and how they sit, the link that sets the pace, the message size, the measured bus
bandwidth (nccl-tests' busbw: the bytes a rank moves over the link, per second) or time,
and its source. pipesim prices the same collective on the preset of that hardware with
its default constants (NCCL's tuning model, planner/nccl.py: a ring at the fastest of
NCCL's LL, LL128 and Simple protocols, each at tuning.cc's latencies and share of
bandwidth, with its terms between nodes; an all-reduce at the faster of that and NCCL's
Tree; an all-to-all at LL's latencies; the network shares). Beside it, the same with the
ring alone (``nccl_algorithms = ["ring"]``), the lower envelope pipesim used before (LL's
latencies at the full bandwidth) and bandwidth only. Rows marked "(in sample)" are the
measurements a default was read from; the others were not used to set anything. The
Tree's and the terms between nodes are tuning.cc's own numbers, and the hosts' CPU
vendor (AMD EPYC on DGX A100 and ND96asr_v4) a data-sheet fact: none was read off a row.

The second table holds mid-sized messages (256 KiB - 64 MiB), where the algorithm and
protocol NCCL picks matter most; none of them set anything either, and the summary gives
their errors apart from the rest. Its last column names pipesim's pick.

The third holds NCCL all-to-alls across 2 to 16 nodes (benchmarks/data/nccl_alltoall.toml,
with sources), each beside pipesim's price and the rate at each GPU's NIC that the figure
implies (nccl-tests' busbw falls with the nodes by construction: the NIC carries (ranks -
gpus a node) / (ranks - 1) of its bus bytes), so that a NIC rate falling with the nodes
would show. Rows the source calls a fault are printed and not scored. Its 2-node DeepEP
rows and its 8-node H800 row repeat the first table's, as the anchors of the span.
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

from pipesim.planner import nccl
from pipesim.planner.layout import Span
from pipesim.planner.specs import load_cluster

A100, H100, H800 = load_cluster("a100"), load_cluster("h100"), load_cluster("h800-2048")
#: GH200 nodes of 4 on HPE Slingshot (200 Gb/s, 25 GB/s a GPU): the row's own links
GH200 = replace(H100, name="gh200", gpu="GH200", gpus_per_node=4, network_gbps=25)
BIG = 8 * 2**30  # "large": 8 GiB, where latency is under 0.1%


def ring_busbw(c, kind: str, n: int, where: Span, size: float = BIG) -> float:
    """nccl-tests' bus bandwidth of a ring collective: its bus bytes over pipesim's time."""
    return nccl.RING_PASSES[kind] * (n - 1) / n * size / nccl.collective_seconds(c, kind, size, n, where)


def a2a_time(c, n: int, near: int, size: float) -> float:
    """pipesim's time (s) for nccl-tests' alltoall of ``size`` bytes a rank (1/n to each rank)."""
    return nccl.alltoall_seconds(c, n, near, size * (n - 1) / n)


def a2a_busbw(c, n: int, near: int, size: float = BIG) -> float:
    return size * (n - 1) / n / a2a_time(c, n, near, size)


# (collective, GPUs, link, message, measured, unit, pipesim's figure on a cluster made by k, source)
ROWS = [
    ("all-reduce", "16 A100 (2 DGX A100)", "8 x 200 Gb/s IB", "large", 192, "GB/s",
     lambda k: ring_busbw(k(A100), "all_reduce", 16, Span(False, 8, 2)), "NVIDIA/nccl #812 (quoted in #1576) (in sample)"),
    ("all-gather (ring)", "8 H100 (one node)", "NVLink 4", "large", 370, "GB/s",
     lambda k: ring_busbw(k(H100), "all_gather", 8, Span(True, 8, 1)), "NVIDIA/nccl-tests #212 (sjeaugey: NCCL_ALGO=RING)"),
    ("all-to-all", "4 H100 (one node)", "NVLink 4", "500 MiB", 1174.14, "us",
     lambda k: a2a_time(k(H100), 4, 4, 524288000), "NVIDIA/nccl #2169 (Ring, Simple)"),
    ("all-to-all", "8 H20 (one node)", "NVLink 4", "128 B", 10.59, "us",
     lambda k: a2a_time(k(H100), 8, 8, 128), "deepseek-ai/DeepEP #303"),
    ("all-to-all", "16 H100 (2 DGX H100), NVLink off", "400 Gb/s", "large", 46, "GB/s",
     lambda k: a2a_busbw(k(H100), 16, 1), "deepseek-ai/DeepEP #3 (in sample)"),
    ("all-to-all", "16 H100 (2 DGX H100), NVLink off", "400 Gb/s", "small", 30, "us",
     lambda k: a2a_time(k(H100), 16, 1, 16), "deepseek-ai/DeepEP #3"),
    ("all-to-all", "one CX-7 NIC", "400 Gb/s", "large", 48.5, "GB/s",
     lambda k: a2a_busbw(k(H100), 16, 1), "NVIDIA/nccl-tests #267 (AddyLaddy: 'up to 48-49')"),
    ("all-to-all", "64 H800 (8 nodes; NICs as the preset's 400 Gb/s)", "8 x 400 Gb/s IB", "8 MiB", 337.8, "us",
     lambda k: a2a_time(k(H800), 64, 8, 8388608), "NVIDIA/nccl #1531"),
    ("all-to-all", "16 A100 (2 Selene DGX A100, 2020)", "8 x 200 Gb/s IB", "large", 25, "GB/s",
     lambda k: a2a_busbw(k(A100), 16, 8), "NVIDIA/nccl-tests PR #59 ('closer to 25 GB/s')"),
    ("send/recv", "32 GH200 (8 nodes)", "200 Gb/s Slingshot", "512 MiB", 24.2, "GB/s",
     lambda k: nccl.p2p_rate(k(GH200), inside=False), "NVIDIA/nccl #1272 (NCCL_NCHANNELS_PER_NET_PEER=4)"),
]  # fmt: skip


def collective_time(c, kind: str, n: int, where: Span, size: float) -> float:
    """pipesim's time (s) for nccl-tests' collective ``kind`` of ``size`` bytes."""
    return nccl.collective_seconds(c, kind, size, n, where)


#: two Azure ND96asr_v4 VMs: 8 A100 40 GB each on NVLink 3, each GPU with its own 200 Gb/s
#: HDR InfiniBand NIC, which is the a100 preset (its nvlink_gbps, 240, is what NCCL
#: reaches on NVLink 3; network_gbps 25 a GPU), so the 16 GPUs sit 8 a node on 2 nodes
NDV4_2 = Span(False, 8, 2)
NDV4_SOURCE = "Azure HPC blog 'Running GPU Enabled HPC Applications on Azure Machine Learning Platform' (NCCL AllReduce result)"

# Mid-sized messages: all_reduce_perf out-of-place times (us) from the post's table (16
# ranks, 8 a VM; 187.7 GB/s bus bandwidth at 8 GiB). The post sets no NCCL_ALGO or
# NCCL_PROTO, so NCCL chose between Ring and Tree itself, as pipesim now does by NCCL's
# tuning model. The sizes span its Tree, Ring, LL and LL128 choices.
MID_MEASURED = (
    ("256 KiB", 2**18, 68.98),
    ("1 MiB", 2**20, 96.57),
    ("4 MiB", 2**22, 147.0),
    ("16 MiB", 2**24, 332.4),
    ("64 MiB", 2**26, 947.8),
)
MID_SIZES = {label: size for label, size, _ in MID_MEASURED}
MID_ROWS = [
    ("all-reduce", "16 A100 (2 ND96asr_v4)", "8 x 200 Gb/s IB", label, measured, "us",
     lambda k, size=size: collective_time(k(A100), "all_reduce", 16, NDV4_2, size), NDV4_SOURCE)
    for label, size, measured in MID_MEASURED
]  # fmt: skip


def envelope(c):
    """The cluster with NCCL's protocols switched off: LL's latencies at the full
    bandwidth, what pipesim priced before them."""
    return replace(c, nccl_protocols=False)


def ring_only(c):
    """The cluster with NCCL's Tree switched off: every all-reduce a ring."""
    return replace(c, nccl_algorithms=("ring",))


def bandwidth_only(c):
    """The cluster with NCCL's terms switched off: what pipesim priced before them."""
    return replace(envelope(c), nccl_base_us=0, nvlink_hop_us=0, network_hop_us=0, network_share=1, network_alltoall_share=1)


def summary(errors: list[float]) -> str:
    return f"mean |error| {sum(abs(e) for e in errors) / len(errors):.1%}, bias {sum(errors) / len(errors):+.1%}"


MODELS = (lambda c: c, ring_only, envelope, bandwidth_only)
MODEL_NAMES = ("pipesim", "Ring only", "LL envelope", "bandwidth only")


def print_table(rows, picks=None) -> list[list[float]]:
    """Print one Markdown table of ``rows`` (with pipesim's pick of algorithm and protocol
    for each row, by ``picks``, where given); return each model's relative errors on the
    rows not used to set a default."""
    heads = " | ".join(f"{name} | error" for name in MODEL_NAMES)
    print(f"| collective | GPUs | link | message | measured | {heads} | source |" + (" pipesim picks |" if picks else ""))
    print("|---|---|---|---|---:|" + "---:|---:|" * len(MODELS) + "---|" + ("---|" if picks else ""))
    errors: list[list[float]] = [[] for _ in MODELS]
    for row in rows:
        what, gpus, link, size, measured, unit, price, source = row
        scale = 1e-9 if unit == "GB/s" else 1e6
        cells = []
        for k, errs in zip(MODELS, errors):
            p = price(k) * scale
            cells.append(f"{p:.4g} {unit} | {p / measured - 1:+.1%}")
            if "in sample" not in source:
                errs.append(p / measured - 1)
        pick = f" {picks(row)} |" if picks else ""
        print(f"| {what} | {gpus} | {link} | {size} | {measured:g} {unit} | {' | '.join(cells)} | {source} |{pick}")
    return errors


def mid_pick(row) -> str:
    """The algorithm and protocol pipesim prices a mid-sized row's all-reduce under."""
    t = nccl.times(A100, "all_reduce", MID_SIZES[row[3]], 16, NDV4_2)
    return min(t, key=t.get)


SPAN_DATA = Path(__file__).parent / "data" / "nccl_alltoall.toml"


def span_rows() -> list[dict]:
    return tomllib.loads(SPAN_DATA.read_text())["row"]


def span_cluster(row: dict):
    """The row's preset with its NICs: network_gbps (GB/s a GPU) from the row's Gb/s."""
    c = load_cluster(row["preset"])
    return c if c.network_gbps * 8 == row["nic_gbps"] else replace(c, network_gbps=row["nic_gbps"] / 8)


def span_near(row: dict) -> int:
    """The ranks a rank reaches without its NIC, itself included: its node's, or only
    itself where the run switched NVLink off."""
    return row["gpus_per_node"] if row["nvlink"] else 1


def nic_rate(row: dict, busbw: float) -> float:
    """The rate at each GPU's NIC (GB/s) that an all-to-all's busbw implies: its share
    (ranks - near) / (ranks - 1) of the bus bytes crosses the network."""
    n = row["nodes"] * row["gpus_per_node"]
    return busbw * (n - span_near(row)) / (n - 1)


def span_busbw(row: dict) -> float:
    """pipesim's nccl-tests busbw (GB/s) for the row's all-to-all."""
    return a2a_busbw(span_cluster(row), row["nodes"] * row["gpus_per_node"], span_near(row), row["size"] or BIG) * 1e-9


def span_price(row: dict) -> float:
    """pipesim's figure for the row, in the row's unit (us where it gives a time, else busbw GB/s)."""
    if "time_us" in row:
        return a2a_time(span_cluster(row), row["nodes"] * row["gpus_per_node"], span_near(row), row["size"]) * 1e6
    return span_busbw(row)


def print_span_table(rows: list[dict]) -> list[float]:
    """Print the all-to-alls by node span; return pipesim's errors on the out-of-sample rows."""
    print("| GPUs | nodes | fabric | message | measured | pipesim | error | NIC rate: measured | pipesim | role | source |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---|---|")
    errors = []
    for row in rows:
        unit = "us" if "time_us" in row else "GB/s"
        measured = row["time_us"] if unit == "us" else row["busbw"]
        price = span_price(row)
        error = price / measured - 1
        # the NIC rate nccl-tests' busbw implies, the row's and pipesim's at its size
        rates = (
            f"{nic_rate(row, row['busbw']):.1f} GB/s | {nic_rate(row, span_busbw(row)):.1f} GB/s" if "busbw" in row else "- | -"
        )
        size = f"{row['size'] / 2**20:g} MiB" if row["size"] >= 2**20 else (f"{row['size']} B" if row["size"] else "large")
        role = row["role"].replace("_", " ") + (f" ({row['why']})" if row["role"] == "excluded" else "")
        gpus = f"{row['nodes'] * row['gpus_per_node']} {row['gpu']}" + ("" if row["nvlink"] else ", NVLink off")
        cells = f"{measured:g} {unit} | {price:.4g} {unit} | {error:+.1%}"
        print(f"| {gpus} | {row['nodes']} | {row['fabric']} | {size} | {cells} | {rates} | {role} | {row['source']} |")
        if row["role"] == "out_of_sample":
            errors.append(error)
    return errors


def span_trend(rows: list[dict]) -> str:
    """The NIC rate each scored busbw row implies, grouped by message size, in order of
    the nodes spanned: whether it falls as the group spans more nodes."""
    groups: dict[str, list[str]] = {}
    for row in sorted(rows, key=lambda r: r["nodes"]):
        if "busbw" in row and row["role"] != "excluded":
            label = f"{row['size'] / 2**20:g} MiB" if row["size"] else "large"
            groups.setdefault(label, []).append(
                f"{row['nodes']} nodes {nic_rate(row, row['busbw']):.1f} GB/s ({row['gpu']}, {row['net']})"
            )
    return "; ".join(f"{label}: {', '.join(items)}" for label, items in groups.items())


def main() -> None:
    results = [summary(e) for e in print_table(ROWS)]
    n = sum("in sample" not in row[-1] for row in ROWS)
    line = "; ".join(f"{name} {r}" for name, r in zip(MODEL_NAMES, results))
    print(f"\nThe {n} rows not used to set a default: {line}.\n")
    results = [summary(e) for e in print_table(MID_ROWS, mid_pick)]
    line = "; ".join(f"{name} {r}" for name, r in zip(MODEL_NAMES, results))
    print(f"\nThe {len(MID_ROWS)} mid-sized rows (none used to set a default): {line}.\n")
    rows = span_rows()
    errors = print_span_table(rows)
    print(f"\nThe {len(errors)} all-to-alls across nodes not used to set a default: pipesim {summary(errors)}.")
    print(f"NIC rate the measured busbw implies, by nodes spanned: {span_trend(rows)}.")


if __name__ == "__main__":
    main()
