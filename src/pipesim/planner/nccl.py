"""NCCL's collectives priced by message size: a fixed latency plus bytes at the bus
bandwidth NCCL reaches on large messages (the alpha-beta, or Hockney, form), per
collective kind and per link.

Latency (alpha). NCCL's own tuning model (NVIDIA/nccl src/graph/tuning.cc, the default
tuner constants, commit 5067397c) prices a ring collective as a base latency plus one
hardware latency per ring step: ``2 (n - 1)`` steps for an all-reduce, ``n - 1`` for an
all-gather or reduce-scatter, of which ``2 (d - 1)`` (``d - 1``) cross the network when
the ring spans d NVLink domains and the rest stay on NVLink. Its low-latency protocol
(LL), the one NCCL picks for small messages, has the smallest of them: base 6.6 us for a
ring, 0.6 us a step on NVLink, 2.7 us a step over the network (the cluster's
``nccl_base_us``, ``nvlink_hop_us``, ``network_hop_us``). An all-to-all is a send and a
receive to every peer; NCCL's tuning model does not price it, so each peer costs a step
of its link: 6.6 + 7 x 0.6 = 10.8 us on 8 GPUs of a node, as measured (10.6 us for 128 B
on 8 H20s: deepseek-ai/DeepEP issue #303), and 6.6 + 7 x 0.6 + 56 x 2.7 = 162 us for 64
GPUs on 8 nodes (``benchmarks/collectives.py`` holds it against NVIDIA/nccl issue #1531:
321.6 us priced, 337.8 measured for 8 MiB). It overstates the one small all-to-all
measured wholly over the network: 47 us priced against 30 measured for 16 ranks on two
DGX H100 with NVLink off (deepseek-ai/DeepEP issue #3).

Bandwidth (beta). The cluster's ``nvlink_gbps`` is already what NCCL reaches on NVLink
(the presets give it so: 360 of H100's 450 GB/s line rate, as NCCL's developers quote
370 GB/s "with the protocol overhead (~20%)" in NVIDIA/nccl-tests issue #212), so NVLink
takes no further share. ``network_gbps`` is the NIC's line rate (400 Gb/s: 50 GB/s), of
which NCCL reaches:

- ``network_share`` 0.96 for rings and send/recv: a DGX A100's 8 x 200 Gb/s (200 GB/s)
  give a 192 GB/s all-reduce bus bandwidth between nodes (NVIDIA/nccl issue #812, quoted
  in #1576); send/recv over 200 Gb/s Slingshot 24.2 of 25 GB/s (NVIDIA/nccl issue #1272);
- ``network_alltoall_share`` 0.92 for an all-to-all: 46 GB/s bus bandwidth on 400 Gb/s
  NICs between two DGX H100 (deepseek-ai/DeepEP issue #3, NVLink off so that all of it
  crosses the network); NCCL's developers expect "up to 48-49 GB/s" of a CX-7 NIC
  (NVIDIA/nccl-tests issue #267).

Protocols. NCCL runs a ring collective under one of three protocols and its tuner
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in tuning.cc) predicts each one's
time as its latency plus the bytes at its bandwidth, then takes the fastest. Each
protocol has its own base latency, hop latencies and share of the ring's bus bandwidth
(tuning.cc's Ring rows; ``protocols`` below): LL (8-byte lines, half of each a flag)
reaches half of it, LL128 (120 bytes of data in each 128-byte line) 0.92 of it, Simple
all of it. So LL wins small messages, LL128 mid-sized ones and Simple large ones; for a
ring of 8 GPUs on NVLink at 360 GB/s the all-reduce crosses from LL to LL128 near 5.9 MB
and from LL128 to Simple near 37 MB. LL's latencies are the cluster's fields (a cluster
file may give its own); LL128's and Simple's are tuning.cc's. Left out of the tuner's
model: LL's absolute bandwidth cap (``llMaxBws``, per GPU generation), the Tree, NVLS,
CollNet and PAT algorithms, the extra network latency it adds with one GPU a node or for
Simple's flush, its floor of 1 us (3 us for Simple) on every step of a multi-node ring
for the network's posting overhead, and the 1.4x "plateau" of a multi-node Simple
all-reduce. An all-to-all
is NCCL's send/recv, which the tuner does not price: it keeps LL's latencies above.

``nccl_protocols = false`` prices every ring at LL's latency with the large-message
bandwidth (the lower envelope of the three, pipesim's model before); with it, zero
latencies and shares of 1 give the bandwidth-only model pipesim had before NCCL's terms.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import Span
from .specs import Cluster

#: the ring collectives and how many times a ring step moves 1/n of the buffer
RING_PASSES = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}


def ring_rate(c: Cluster, where: Span) -> float:
    """Bus bytes per second of a ring collective over a group placed as ``where``. Inside
    an NVLink domain: NVLink. Across domains NCCL runs one ring per network interface (its
    channels), each crossing every domain boundary once, so a group with k members in a
    domain drives k interfaces at once: k times a GPU's achieved network bandwidth, at
    most NVLink's; the slowest domain (``where.per_domain``, its fewest) sets the pace."""
    if where.inside:
        return c.nvlink_gbps * 1e9
    return min(c.nvlink_gbps, where.per_domain * c.network_gbps * c.network_share) * 1e9


@dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols as its tuner prices a ring: base latency, latency of a
    ring step on NVLink and over the network (us), and the share of the ring's bus
    bandwidth it reaches."""

    name: str
    base_us: float
    nvlink_hop_us: float
    network_hop_us: float
    share: float


#: LL's share of the ring's bus bandwidth (tuning.cc: ``busBw * .5`` for Ring/LL); its
#: latencies are the cluster's (defaults: tuning.cc's Ring/LL 6.6, 0.6 and 2.7 us)
LL_SHARE = 0.5
#: NVIDIA/nccl src/graph/tuning.cc at commit 5067397c, the default tuner constants' Ring
#: column: baseLatencies, hwLatencies[NVLINK] and hwLatencies[NET], and the bandwidth
#: factor the tuner applies (LL128: ``busBw * 0.92``, the 120 of 128 bytes a line carries;
#: Simple: none)
LL128 = Protocol("LL128", 14.0, 1.9, 4.0, 0.92)
SIMPLE = Protocol("Simple", 8.4, 3.4, 14.0, 1.0)


def protocols(c: Cluster) -> tuple[Protocol, ...]:
    """The protocols a ring collective may run under on cluster ``c``: LL at the
    cluster's latencies, LL128 and Simple at tuning.cc's; with ``nccl_protocols`` off,
    LL's latencies alone at the full bandwidth (the lower envelope)."""
    if not c.nccl_protocols:
        return (Protocol("LL", c.nccl_base_us, c.nvlink_hop_us, c.network_hop_us, 1.0),)
    return (Protocol("LL", c.nccl_base_us, c.nvlink_hop_us, c.network_hop_us, LL_SHARE), LL128, SIMPLE)


def ring_latency(p: Protocol, kind: str, n: int, domains: int) -> float:
    """Seconds of fixed cost of one ring collective ``kind`` under protocol ``p`` over
    ``n`` ranks in ``domains`` NVLink domains: the base latency and one hop a ring step,
    the steps that cross a domain boundary at the network's hop latency (tuning.cc's
    ring model)."""
    if n <= 1:
        return 0.0
    passes = RING_PASSES[kind]
    network = passes * (domains - 1)
    nvlink = passes * (n - 1) - network
    return (p.base_us + nvlink * p.nvlink_hop_us + network * p.network_hop_us) * 1e-6


def ring_times(c: Cluster, kind: str, nbytes: float, n: int, where: Span) -> dict[str, float]:
    """Seconds of one ring collective ``kind`` over ``n`` ranks placed as ``where`` on a
    buffer of ``nbytes`` under each protocol, by name: its latency, then (n - 1)/n of
    the buffer each pass at its share of the ring's bus bandwidth."""
    domains = 1 if where.inside else where.domains
    bus = RING_PASSES[kind] * (n - 1) / n * nbytes
    rate = ring_rate(c, where)
    return {p.name: ring_latency(p, kind, n, domains) + bus / (rate * p.share) for p in protocols(c)}


def ring_seconds(c: Cluster, kind: str, nbytes: float, n: int, where: Span) -> float:
    """Seconds of one ring collective ``kind`` over ``n`` ranks placed as ``where`` on a
    buffer of ``nbytes`` (the whole buffer: an all-reduce's input, an all-gather's
    output, a reduce-scatter's input) under the fastest protocol, as NCCL's tuner picks
    it. Nothing for one rank or an empty buffer."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return min(ring_times(c, kind, nbytes, n, where).values())


def alltoall_latency(c: Cluster, n: int, per_domain: int) -> float:
    """Seconds of fixed cost of an all-to-all over ``n`` ranks, ``per_domain`` of them
    in the sender's NVLink domain: the base latency and one hop per peer, on NVLink for
    the peers in the domain and over the network for the rest."""
    if n <= 1:
        return 0.0
    near = min(per_domain, n) - 1
    return (c.nccl_base_us + near * c.nvlink_hop_us + (n - 1 - near) * c.network_hop_us) * 1e-6


def alltoall_transfer(c: Cluster, network_bytes: float, nvlink_bytes: float) -> float:
    """Seconds to move what a rank of an all-to-all sends over the network and over
    NVLink, at once (the slower part sets the time): the network at NCCL's all-to-all
    share of its line rate."""
    return max(network_bytes / (c.network_gbps * c.network_alltoall_share * 1e9), nvlink_bytes / (c.nvlink_gbps * 1e9))


def alltoall_seconds(c: Cluster, n: int, per_domain: int, per_rank: float) -> float:
    """Seconds of an all-to-all in which each of ``n`` ranks, ``per_domain`` of them in
    a domain, sends ``per_rank`` bytes spread evenly over the others: the share bound for
    other domains leaves on the GPU's own network link, the rest crosses NVLink."""
    if n <= 1:
        return 0.0
    near = min(per_domain, n)
    away = 1 - (near - 1) / (n - 1)
    return alltoall_latency(c, n, near) + alltoall_transfer(c, per_rank * away, per_rank * (1 - away))


def p2p_rate(c: Cluster, inside: bool) -> float:
    """Bytes per second of one send/recv: NVLink inside a domain, else the network at
    NCCL's share of its line rate."""
    return c.nvlink_gbps * 1e9 if inside else c.network_gbps * c.network_share * 1e9
