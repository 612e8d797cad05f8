"""NCCL's collectives by message size (planner/nccl.py): latency that dominates small
messages and fades beside large ones, the protocol NCCL's tuner would pick, the network's
measured shares, rings inside a domain against across, each value worked by hand from the
stated constants (NVIDIA/nccl src/graph/tuning.cc's ring rows: LL 6.6 us base, 0.6 us an
NVLink step, 2.7 us a network step, half the bus bandwidth; LL128 14, 1.9, 4.0 us and 0.92
of it; Simple 8.4, 3.4, 14 us and all of it; shares 0.96 and 0.92 of the network's line
rate; between nodes its posting overhead, LL cap and Simple plateau; its Tree rows for an
all-reduce: 6.8/14/8.4 us base, 0.6/1.25/4.0 us on NVLink, 5.0/8.5/14 us over the
network), and the cluster file's checks."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import load_script, printed
from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.planner import nccl
from pipesim.planner.collectives import moe_comm, p2p_seconds, tp_allreduce
from pipesim.planner.layout import Layout, Span
from pipesim.planner.specs import HOST_CPUS, Attention, Cluster, Model, MoE, Training, cluster_from_table, load_cluster

#: the cluster fields that switch NCCL's terms off: bandwidth-only collectives, for the
#: tests that work bandwidth arithmetic by hand
BANDWIDTH_ONLY = dict(nccl_base_us=0, nvlink_hop_us=0, network_hop_us=0, network_share=1, network_alltoall_share=1, nccl_protocols=False)  # fmt: skip

# 8 GPUs a node, NVLink 100 GB/s (as NCCL reaches it), network 10 GB/s line rate, the defaults otherwise
C = Cluster("t", "X", gpus=64, gpus_per_node=8, bf16_tflops=100, fp8_tflops=0, hbm_gb=80, nvlink_gbps=100, network_gbps=10)  # fmt: skip
INSIDE = Span(True, 8, 1)
LL = nccl.protocols(C)[0]


def test_defaults_are_nccls_ring_constants_and_the_measured_shares():
    assert (C.nccl_base_us, C.nvlink_hop_us, C.network_hop_us) == (6.6, 0.6, 2.7)
    assert (C.network_share, C.network_alltoall_share) == (0.96, 0.92)
    assert [(p.name, p.base_us, p.nvlink_hop_us, p.network_hop_us, p.share) for p in nccl.protocols(C)] == [
        ("LL", 6.6, 0.6, 2.7, 0.5),
        ("LL128", 14.0, 1.9, 4.0, 0.92),
        ("Simple", 8.4, 3.4, 14.0, 1.0),
    ]
    # switched off: LL's latencies at the full bandwidth, alone
    assert [(p.name, p.share) for p in nccl.protocols(replace(C, nccl_protocols=False))] == [("LL", 1.0)]


def test_latency_dominates_small_messages_and_fades_beside_large_ones():
    """An 8-GPU all-reduce inside a node: 14 ring steps, then 2 x 7/8 of the buffer.
    8 KB goes by LL: 6.6 + 14 x 0.6 = 15 us, and 14,336 B at half of 100 GB/s, 0.29 us.
    1 GB goes by Simple: 8.4 + 14 x 3.4 = 56 us and 1.75 GB at 100 GB/s, 17.5 ms."""
    small, large = 8192, 1e9
    assert nccl.collective_seconds(C, "all_reduce", small, 8, INSIDE) == pytest.approx(15e-6 + 1.75 * small / 50e9)
    assert nccl.collective_seconds(C, "all_reduce", large, 8, INSIDE) == pytest.approx(56e-6 + 1.75 * large / 100e9)
    # the latency is 98% of the small one and under 0.4% of the large one
    assert 15e-6 / nccl.collective_seconds(C, "all_reduce", small, 8, INSIDE) > 0.98
    assert 56e-6 / nccl.collective_seconds(C, "all_reduce", large, 8, INSIDE) < 4e-3
    # the lower envelope (protocols off): LL's 15 us with the full bandwidth
    envelope = replace(C, nccl_protocols=False)
    assert nccl.collective_seconds(envelope, "all_reduce", large, 8, INSIDE) == pytest.approx(15e-6 + 1.75 * large / 100e9)
    # bandwidth-only pricing (the switch) leaves the small one at 0.14 us
    bare = replace(C, **BANDWIDTH_ONLY)
    assert nccl.collective_seconds(bare, "all_reduce", small, 8, INSIDE) == pytest.approx(1.75 * small / 100e9)


def test_the_fastest_protocol_wins_ll_then_ll128_then_simple():
    """The same all-reduce (8 GPUs, 100 GB/s, bus bytes 1.75 x the buffer) under each
    protocol: LL 15 us + B / 50 GB/s, LL128 14 + 14 x 1.9 = 40.6 us + B / 92 GB/s, Simple
    56 us + B / 100 GB/s. LL128 overtakes LL at a 1.60 MB buffer (25.6 us = 1.75 S x
    (1/50 - 1/92) / GB/s) and Simple overtakes LL128 at 10.1 MB (15.4 us = 1.75 S x
    (1/92 - 1/100) / GB/s). 1 MB: LL; 4 MB: LL128; 32 MB: Simple."""
    t = nccl.ring_times(C, "all_reduce", 1e6, 8, INSIDE)
    assert t == pytest.approx({"LL": 15e-6 + 35e-6, "LL128": 40.6e-6 + 1.75e6 / 92e9, "Simple": 56e-6 + 17.5e-6})
    assert min(t, key=t.get) == "LL"
    t = nccl.ring_times(C, "all_reduce", 4e6, 8, INSIDE)
    assert t["LL128"] == pytest.approx(40.6e-6 + 7e6 / 92e9)  # 116.7 us, against LL's 155 and Simple's 126
    assert min(t, key=t.get) == "LL128"
    assert nccl.collective_seconds(C, "all_reduce", 4e6, 8, INSIDE) == pytest.approx(40.6e-6 + 7e6 / 92e9)
    t = nccl.ring_times(C, "all_reduce", 32e6, 8, INSIDE)
    assert min(t, key=t.get) == "Simple"
    assert nccl.collective_seconds(C, "all_reduce", 32e6, 8, INSIDE) == pytest.approx(56e-6 + 56e6 / 100e9)
    # the crossovers sit where worked above
    for size, fastest in ((1.55e6, "LL"), (1.65e6, "LL128"), (9.9e6, "LL128"), (10.3e6, "Simple")):
        t = nccl.ring_times(C, "all_reduce", size, 8, INSIDE)
        assert min(t, key=t.get) == fastest, size


def test_all_gather_and_reduce_scatter_take_one_pass():
    """n - 1 steps: 6.6 + 7 x 0.6 = 10.8 us under LL, 8.4 + 7 x 3.4 = 32.2 us under Simple,
    and 7/8 of the gathered buffer: 8 MB goes by Simple (32.2 + 70 = 102.2 us, against
    LL128's 14 + 7 x 1.9 + 76.1 = 103.4 and LL's 10.8 + 140 = 150.8)."""
    assert nccl.ring_latency(C, LL, "all_gather", 8, 1) == pytest.approx(10.8e-6)
    assert nccl.ring_latency(C, nccl.SIMPLE, "all_gather", 8, 1) == pytest.approx(32.2e-6)
    assert nccl.collective_seconds(C, "reduce_scatter", 8e6, 8, INSIDE) == pytest.approx(32.2e-6 + 7e6 / 100e9)
    assert nccl.collective_seconds(C, "all_gather", 8e6, 1, INSIDE) == 0.0  # one rank: nothing to do


def test_a_ring_across_domains_against_inside_one():
    """16 ranks, 8 a node on 2 nodes (Intel hosts, the default): of the all-reduce's 30
    steps 2 cross the network and 28 stay on NVLink, each of those at least the 1 us
    network posting overhead (3 us under Simple) tuning.cc charges once a ring leaves
    its node; Simple's sum then takes the 1.4x plateau. LL: 6.6 + 28 x 1 + 2 x 2.7 = 40
    us; Simple: 1.4 x (8.4 + 28 x 3.4 + 2 x 14) = 184.24 us. The ring runs at 8 NICs x
    10 GB/s x 0.96 = 76.8 GB/s instead of NVLink's 100. With one rank a node (16 nodes)
    every step crosses at Tree's network latency (LL: 6.6 + 30 x 5 = 156.6 us; Simple:
    1.4 x (8.4 + 30 x 14) = 599.76 us) at one NIC's 9.6 GB/s. 100 MB goes by a Simple
    ring (the tree's 92.4 us + 2 x 100 MB at 0.8 x 0.92 x 76.8 GB/s is 3.63 ms)."""
    two_nodes = Span(False, 8, 2)
    assert nccl.ring_rate(C, two_nodes) == pytest.approx(76.8e9)
    assert nccl.ring_rate(C, INSIDE) == pytest.approx(100e9)
    assert nccl.ring_latency(C, LL, "all_reduce", 16, 2) == pytest.approx(40e-6)
    assert nccl.ring_latency(C, nccl.SIMPLE, "all_reduce", 16, 2) == pytest.approx(184.24e-6)
    assert nccl.collective_seconds(C, "all_reduce", 1e8, 16, two_nodes) == pytest.approx(184.24e-6 + 2 * 15 / 16 * 1e8 / 76.8e9)
    assert nccl.tree_times(C, 1e8, 16, two_nodes)["Simple"] == pytest.approx(92.4e-6 + 2e8 / (0.8 * 0.92 * 76.8e9))
    spread = Span(False, 1, 16)
    assert nccl.ring_latency(C, LL, "all_reduce", 16, 16) == pytest.approx(156.6e-6)
    assert nccl.collective_seconds(C, "all_reduce", 1e8, 16, spread) == pytest.approx(599.76e-6 + 2 * 15 / 16 * 1e8 / 9.6e9)
    # across is slower than inside for the same 8 ranks' worth of steps
    assert nccl.collective_seconds(C, "all_reduce", 1e8, 16, two_nodes) > nccl.collective_seconds(
        C, "all_reduce", 1e8, 16, Span(True, 16, 1)
    )
    # the ring is capped at NVLink's pace however many NICs a node gives it
    assert nccl.ring_rate(replace(C, network_gbps=50), two_nodes) == pytest.approx(100e9)
    # all-gathers take no plateau: 8.4 + 14 x 3.4 + 1 x 14 = 70 us under Simple
    assert nccl.ring_latency(C, nccl.SIMPLE, "all_gather", 16, 2) == pytest.approx(70e-6)
    # the lower envelope (protocols off) keeps pipesim's ring before: 6.6 + 28 x 0.6 + 2 x 2.7
    envelope = replace(C, nccl_protocols=False)
    assert nccl.ring_latency(envelope, nccl.protocols(envelope)[0], "all_reduce", 16, 2) == pytest.approx(28.8e-6)


A100 = load_cluster("a100")
NDV4 = Span(False, 8, 2)  # 16 A100 on two nodes of 8 (AMD hosts, 8 x 200 Gb/s NICs)


def test_amd_hosts_pay_more_between_nodes():
    """The a100 preset's AMD hosts: a 2 us posting overhead (6 us under Simple) and LL
    capped at 22.5 GB/s on two nodes (tuning.cc's llMaxBws; Intel: 39). 16 ranks on two
    nodes at 8 x 25 x 0.96 = 192 GB/s: LL 6.6 + 28 x 2 + 2 x 2.7 = 68 us, LL128 14 + 28 x 2
    + 2 x 4 = 78 us, Simple 1.4 x (8.4 + 28 x 6 + 2 x 14) = 286.16 us. 64 KiB under LL:
    1.875 x 64 KiB at min(96, 22.5) GB/s = 5.46 us; on Intel hosts at 39 GB/s, 3.15 us."""
    assert A100.host_cpu == "amd"
    t = nccl.ring_times(A100, "all_reduce", 65536, 16, NDV4)
    assert t == pytest.approx(
        {"LL": 68e-6 + 122880 / 22.5e9, "LL128": 78e-6 + 122880 / (0.92 * 192e9), "Simple": 286.16e-6 + 122880 / 192e9}
    )
    intel = replace(A100, host_cpu="intel")
    assert nccl.ring_times(intel, "all_reduce", 65536, 16, NDV4)["LL"] == pytest.approx(40e-6 + 122880 / 39e9)
    # more than two nodes: 19.0 GB/s (AMD) and 20.4 (Intel)
    assert nccl.ll_cap(A100, 3) == 19.0e9 and nccl.ll_cap(intel, 4) == 20.4e9
    assert nccl.ll_cap(A100, 1) == math.inf  # inside a node: no cap (left out)


def test_tree_wins_mid_sized_all_reduces_between_nodes():
    """1 MiB over the two AMD nodes, each of NCCL's candidates worked from tuning.cc:
    Tree/LL128 48.5 us (14 + 2 x (7 x 1.25 + 8.5)) and 2 MiB at 0.6 (the size correction
    for 2^14 x 64 B) x 192 x 0.92 x 120/128 GB/s = 99.36 GB/s: 69.61 us, against the
    ring's best, LL128's 78 us + 1.875 MiB at 176.64 GB/s = 89.13 us. NCCL's tuner takes
    the tree, and so does pipesim; with nccl_algorithms ["ring"] the ring's LL128."""
    mib = 2**20
    tree = nccl.tree_times(A100, mib, 16, NDV4)
    assert tree["LL128"] == pytest.approx(48.5e-6 + 2 * mib / (0.6 * 0.92 * 120 / 128 * 192e9))
    assert tree["LL128"] == pytest.approx(69.61e-6, rel=1e-4)
    ring_ll128 = 78e-6 + 1.875 * mib / (0.92 * 192e9)
    assert ring_ll128 == pytest.approx(89.13e-6, rel=1e-4)
    t = nccl.times(A100, "all_reduce", mib, 16, NDV4)
    assert min(t, key=t.get) == "Tree/LL128"
    assert nccl.collective_seconds(A100, "all_reduce", mib, 16, NDV4) == pytest.approx(tree["LL128"])
    ring_only = replace(A100, nccl_algorithms=("ring",))
    assert nccl.collective_seconds(ring_only, "all_reduce", mib, 16, NDV4) == pytest.approx(ring_ll128)
    # 8 KiB goes by Tree/LL: 6.8 + 2 x (7 x 0.6 + 5.0) = 25.2 us and 16 KiB at 0.7 x
    # min(192 x 0.92 / 3.8, 22.5) GB/s, against the ring's 68 us of LL latency alone
    assert nccl.collective_seconds(A100, "all_reduce", 8192, 16, NDV4) == pytest.approx(25.2e-6 + 16384 / (0.7 * 22.5e9))
    # 1 GiB: the ring's Simple, 286.16 us + 1.875 GiB at 192 GB/s (the tree moves twice the
    # buffer at 0.92 of the rate and loses)
    gib = 2**30
    assert nccl.collective_seconds(A100, "all_reduce", gib, 16, NDV4) == pytest.approx(286.16e-6 + 1.875 * gib / 192e9)
    # the tree is an all-reduce algorithm only
    assert set(nccl.times(A100, "all_gather", mib, 16, NDV4)) == {"Ring/LL", "Ring/LL128", "Ring/Simple"}


def test_the_tree_latency_grows_with_the_log_of_the_nodes():
    """Tree/LL over 8 ranks a node: 6.8 + 2 x (7 x 0.6 + floor(log2 d) x 5.0) us, 25.2 on
    2 nodes, 35.2 on 4, 55.2 on 16 and 17 (the ring's LL on 16 nodes: 6.6 + 224 x 2 + 30 x
    2.7 = 535.6 us); with one rank a node no chain: 6.8 + 2 x 4 x 5.0 = 46.8 us on 16."""
    ll = nccl.TREE_BY_NAME["LL"]
    for domains, us in ((2, 25.2), (4, 35.2), (16, 55.2), (17, 55.2)):
        assert nccl.tree_latency(ll, 8 * domains, domains) == pytest.approx(us * 1e-6)
    assert nccl.tree_latency(ll, 16, 16) == pytest.approx(46.8e-6)
    assert nccl.ring_latency(A100, nccl.protocols(A100)[0], "all_reduce", 128, 16) == pytest.approx(535.6e-6)


def test_the_trees_size_correction_is_indexed_by_powers_of_two_from_64_bytes():
    """tuning.cc's treeCorrectionFactor: one factor a power of two of the buffer over 64 B,
    64 B to 256 MiB; none below 64 B or from 512 MiB."""
    ll = nccl.TREE_BY_NAME["LL"]
    assert nccl.tree_correction(ll, 63) == 1.0
    assert nccl.tree_correction(ll, 64) == 1.0 and nccl.tree_correction(ll, 127) == 1.0
    assert nccl.tree_correction(ll, 256 * 2**10) == 0.4  # 2^12 x 64 B
    assert nccl.tree_correction(ll, 512 * 2**10 - 1) == 0.4
    assert nccl.tree_correction(nccl.TREE_BY_NAME["Simple"], 2**28) == 0.9  # 256 MiB: the last
    assert nccl.tree_correction(nccl.TREE_BY_NAME["Simple"], 2**29) == 1.0


@pytest.mark.parametrize("preset", ["a100", "h100", "h200", "b200", "h800-2048", "gb200-nvl72"])
def test_inside_one_node_the_ring_still_wins(preset):
    """tuning.cc prices the tree inside a node too (a chain), but the ring wins there at
    every size on every preset, so tensor-parallel all-reduces keep the ring's price:
    the same with the tree allowed as without it, 2 to 8 (72) GPUs, 1 KiB to 4 GiB."""
    c = load_cluster(preset)
    ring_only = replace(c, nccl_algorithms=("ring",))
    for n in (2, 4, 8, c.domain):
        for size in (2**k * f for k in range(10, 33) for f in (1, 1.5)):
            assert nccl.collective_seconds(c, "all_reduce", size, n, Span(True, n, 1)) == nccl.collective_seconds(
                ring_only, "all_reduce", size, n, Span(True, n, 1)
            ), (n, size)


def test_network_all_to_all_reaches_the_measured_share():
    """Each of 16 ranks (8 a node) sends 150 MB spread over the 15 others: 8/15 of it
    leaves the node at 10 GB/s x 0.92 (DeepEP issue #3: 46 of 50 GB/s), 7/15 over NVLink;
    latency 6.6 + 7 x 0.6 + 8 x 2.7 = 32.4 us. With every rank in its own node (one NIC,
    nothing over NVLink) the bus bandwidth it shows is 9.2 GB/s: 0.92 of line rate."""
    t = nccl.alltoall_seconds(C, 16, 8, 150e6)
    assert t == pytest.approx(32.4e-6 + 150e6 * 8 / 15 / 9.2e9)
    assert nccl.alltoall_latency(C, 16, 8) == pytest.approx(32.4e-6)
    big = 1e10
    busbw = big / nccl.alltoall_seconds(C, 16, 1, big)
    assert busbw == pytest.approx(9.2e9, rel=1e-4)
    # inside a node: NVLink only, 6.6 + 7 x 0.6 = 10.8 us
    assert nccl.alltoall_seconds(C, 8, 8, 7e6) == pytest.approx(10.8e-6 + 7e6 / 100e9)
    assert nccl.alltoall_seconds(C, 1, 1, 7e6) == 0.0


def test_send_recv_over_the_network_at_its_share():
    assert nccl.p2p_rate(C, inside=False) == pytest.approx(9.6e9)
    assert nccl.p2p_rate(C, inside=True) == pytest.approx(100e9)


TINY = Model("tiny", layers=2, hidden=64, heads=4, vocab=100, attention=Attention("gqa", kv_heads=2, head_dim=16), moe_layers=(), dense_ffn=128)  # fmt: skip


def test_the_planners_collectives_pay_it():
    """tp4 inside a node, 64 tokens of hidden 64 (8192 bytes), small enough for LL:
    6.6 + 6 x 0.6 = 10.2 us and 2 x 3/4 x 8192 B at half of 100 GB/s. Under sequence
    parallelism the all-gather and the reduce-scatter each pay 6.6 + 3 x 0.6 = 8.4 us. A stage-to-stage send across nodes
    (pp2 on 1-GPU nodes) moves 8192 B at 9.6 GB/s after p2p_latency_us."""
    t = Training(seq=64, global_batch=16, sequence_parallel=False, p2p_latency_us=10)
    lay = Layout(pp=1, dp=1, tp=4)
    assert tp_allreduce(TINY, C, t, lay) == pytest.approx(10.2e-6 + 1.5 * 8192 / 50e9)
    sp = replace(t, sequence_parallel=True)
    assert tp_allreduce(TINY, C, sp, lay) == pytest.approx(2 * 8.4e-6 + 1.5 * 8192 / 50e9)
    one_a_node = replace(C, gpus=2, gpus_per_node=1)
    assert p2p_seconds(TINY, one_a_node, sp, Layout(pp=2, dp=1)) == pytest.approx(10e-6 + 8192 / 9.6e9)


def test_megatrons_all_to_all_dispatcher_pays_ncclS_terms_and_deepep_does_not():
    """ep16 over two 8-GPU nodes, top-2 of 16 experts, 64 tokens of hidden 64: every copy
    goes to its expert's GPU, 8/16 of them across the network, 7/16 over NVLink, 2 bytes
    an element. NCCL's all-to-all: the network's 2 x 8/16 x 64 x 128 B at 9.2 GB/s and its
    latency 6.6 + 7 x 0.6 + 8 x 2.7 = 32.4 us. DeepEP's kernels: at line rate, no latency."""
    moe = replace(TINY, moe_layers=(0, 1), moe=MoE(experts=16, expert_ffn=32, top_k=2))
    t = Training(seq=64, global_batch=16, moe_dispatcher="alltoall")
    lay = Layout(pp=1, dp=16, ep=16)
    assert lay.expert_tokens(64) == 64
    net = 64 * 2 * 8 / 16 * 64 * 2
    dispatch = moe_comm(moe, C, t, lay)[0]
    assert dispatch == pytest.approx(net / 9.2e9 + 32.4e-6)
    assert moe_comm(moe, replace(C, **BANDWIDTH_ONLY), t, lay)[0] == pytest.approx(net / 10e9)


def test_cluster_file_checks_the_terms(tmp_path, capsys):
    base = dict(
        name="x",
        gpu="X",
        gpus=8,
        gpus_per_node=8,
        bf16_tflops=100,
        fp8_tflops=0,
        memory_mib=81559,
        nvlink_gbps=100,
        network_gbps=10,
    )
    assert cluster_from_table({**base, "network_share": 1.0}, "c").network_share == 1.0
    assert cluster_from_table({**base, "nccl_base_us": 0}, "c").nccl_base_us == 0.0
    assert cluster_from_table({**base, "nccl_protocols": False}, "c").nccl_protocols is False
    with pytest.raises(PipesimError, match="nccl_protocols.*true or false"):
        cluster_from_table({**base, "nccl_protocols": "yes"}, "c")
    for key, bad in (
        ("network_share", 0),
        ("network_share", 1.5),
        ("network_alltoall_share", 0),
        ("network_alltoall_share", -0.1),
    ):
        with pytest.raises(PipesimError, match=rf"{key} must be above 0 and at most 1"):
            cluster_from_table({**base, key: bad}, "c")
    for key in ("nccl_base_us", "nvlink_hop_us", "network_hop_us"):
        with pytest.raises(PipesimError, match=rf"{key} must be"):
            cluster_from_table({**base, key: -1}, "c")
    f = tmp_path / "c.toml"
    f.write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in {**base, "network_share": 2}.items()))
    assert main(["plan", "--model", "llama3-8b", "--cluster", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "network_share" in err[0] and "at most 1" in err[0]


def test_cluster_file_picks_the_algorithms_and_the_host(tmp_path, capsys):
    base = dict(name="x", gpu="X", gpus=16, gpus_per_node=8, bf16_tflops=100, fp8_tflops=0, memory_mib=81559, nvlink_gbps=100, network_gbps=10)  # fmt: skip
    assert cluster_from_table(base, "c").nccl_algorithms == ("ring", "tree")
    assert cluster_from_table(base, "c").host_cpu == "intel"
    assert cluster_from_table({**base, "nccl_algorithms": ["ring"]}, "c").nccl_algorithms == ("ring",)
    assert cluster_from_table({**base, "nccl_algorithms": ["Tree", "RING"]}, "c").nccl_algorithms == ("tree", "ring")
    assert cluster_from_table({**base, "host_cpu": "amd"}, "c").host_cpu == "amd"
    for bad in (["tree"], [], ["ring", "nvls"], "ring", [1]):
        with pytest.raises(PipesimError, match=r'nccl_algorithms must be a list of .*holding "ring"'):
            cluster_from_table({**base, "nccl_algorithms": bad}, "c")
    with pytest.raises(PipesimError, match="host_cpu must be one of 'intel', 'amd', 'arm', got 'power'"):
        cluster_from_table({**base, "host_cpu": "power"}, "c")
    assert set(nccl.HOSTS) == set(HOST_CPUS)
    for line in ('nccl_algorithms = ["mesh"]', 'host_cpu = "sparc"'):
        f = tmp_path / "c.toml"
        f.write_text("\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in base.items()) + "\n" + line)
        assert main(["plan", "--model", "llama3-8b", "--cluster", str(f)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line.split()[0] in err[0] and "must be" in err[0], err


def test_the_presets_load_with_the_defaults():
    c = load_cluster("h100")
    assert (c.network_share, c.network_alltoall_share, c.nccl_base_us) == (0.96, 0.92, 6.6)


def test_the_benchmark_prints_the_measured_rows_and_pipesims_pick():
    """benchmarks/collectives.py: the mid-sized all-reduces on two ND96asr_v4 VMs, each
    with its measured time, pipesim's, the ring alone's, and the algorithm pipesim picks
    (the tree's LL128 where tuning.cc's times make it faster, as worked above)."""
    bench = load_script(Path(__file__).parents[1] / "benchmarks" / "collectives.py")
    _, text = printed(lambda argv: bench.main(), [])
    rows = {line.split(" | ")[3]: line for line in text.splitlines() if "ND96asr_v4" in line and line.startswith("|")}
    assert set(rows) == {"256 KiB", "1 MiB", "4 MiB", "16 MiB", "64 MiB"}
    assert "| 96.57 us | 69.61 us |" in rows["1 MiB"] and "| 89.13 us |" in rows["1 MiB"]
    assert rows["1 MiB"].endswith("| Tree/LL128 |") and rows["64 MiB"].endswith("| Ring/LL128 |")
    assert "The 5 mid-sized rows (none used to set a default): pipesim mean |error|" in text
