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

The all-to-all share does not fall with the nodes the group spans, as NCCL's code and the
measurements have it. NCCL's all-to-all is one send/recv pair a peer. Its p2p plan
(src/graph/paths.cc at 5067397c, ``ncclTopoGetNchannels`` and
``ncclTopoComputeP2pChannels``) gives a remote peer enough channels for the GPU's NICs
(one a NIC at least, ``NCCL_P2P_PER_CHANNEL_NET_BW`` 14 GB/s a channel), then, across
nodes, halves that until every peer of the group fits one round of its p2p channels at 8
peers a channel (``NCCL_MAX_DEV_WORK_P2P_PER_BATCH``; src/enqueue.cc runs a round's peers
together). A larger group gets fewer channels a peer and as many more peers in flight, so
the NIC stays fed up to 8 x the p2p channels ranks; what the halving slows is one
send/recv to a single peer (32 GH200 on 8 nodes until ``NCCL_NCHANNELS_PER_NET_PEER=4``,
NVIDIA/nccl issue #1272). Measured (``benchmarks/collectives.py``'s table by node span),
the NIC rate a large all-to-all implies is 46 GB/s on 2 nodes over InfiniBand, 41.7 and
45.4 on 4 and 8 nodes over AWS EFA, and at 64 MiB 34.9 and 35.9 on 4 and 8 (EFA); the
drops reported past a few nodes are the fabric's (adaptive routing: NVIDIA/nccl issue
#780) or faults (#1792, #2409). At 64 MiB this price gives the EFA rows 14-23% more bus
bandwidth than measured, a shortfall by message size rather than by span; the one
InfiniBand row of that kind (64 H800, 8 MiB, NVIDIA/nccl issue #1531) is within 5%, so
none is priced.

Protocols. NCCL runs a ring collective under one of three protocols and its tuner
(``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime`` in tuning.cc) predicts each one's
time as its latency plus the bytes at its bandwidth, then takes the fastest. Each
protocol has its own base latency, hop latencies and share of the ring's bus bandwidth
(tuning.cc's Ring rows; ``protocols`` below): LL (8-byte lines, half of each a flag)
reaches half of it, LL128 (120 bytes of data in each 128-byte line) 0.92 of it, Simple
all of it. So LL wins small messages, LL128 mid-sized ones and Simple large ones; for a
ring of 8 GPUs on NVLink at 360 GB/s the all-reduce crosses from LL to LL128 near 5.9 MB
and from LL128 to Simple near 37 MB. LL's latencies are the cluster's fields (a cluster
file may give its own); LL128's and Simple's are tuning.cc's.

Between NVLink domains (NCCL's nodes; a multi-node NVLink fabric is one) tuning.cc adds
three terms to a ring, all kept here (``ring_latency``, ``ll_cap``):

- every NVLink step of the ring costs at least the host's network posting overhead
  (``getNetOverhead``: 1 us on Intel and other CPUs, 2 us on AMD, the cluster's
  ``host_cpu``), three times that under Simple; a ring with one rank a domain pays
  Tree's network latency on its network steps (LL 5.0, LL128 8.5, Simple 14 us);
- LL's bus bandwidth is capped by the host (``llMaxBws``: Intel and other CPUs 39.0 GB/s
  on two domains and 20.4 on more, AMD 22.5 and 19.0), the rate at which its proxy
  posts LL's small lines;
- a Simple all-reduce's latency is 1.4 times its sum (the ring's "plateau"; 1.9 before
  Ampere, which no preset is).

Tree. For an all-reduce NCCL also prices its Tree algorithm (a chain inside each
domain, a double binary tree between domains: reduce up, broadcast down) and takes
whichever of Ring and Tree, under whichever protocol, its model says is faster
(``tree_times``; the cluster's ``nccl_algorithms``). tuning.cc's Tree rows: base 6.8,
14 and 8.4 us (LL, LL128, Simple), 0.6, 1.25 and 4.0 us a step on NVLink, 5.0, 8.5 and
14 us a step over the network; ``2 ((n / domains - 1) NVLink + floor(log2 domains)
network)`` steps, so its latency grows with the logarithm of the domains where a ring's
grows with the ranks. Its bandwidth is 0.92 of the ring's bus bandwidth, further 1/3.8
under LL (and at most LL's cap above between domains), 120/128 under LL128 between
domains (7/9 inside one), and it moves twice the buffer (NCCL's algorithm bandwidth is
half of it), times tuning.cc's ``treeCorrectionFactor`` for mid-sized buffers (down to
0.4 near 256 KiB under LL: "Trees are not perfectly sticking to the model for medium
sizes"). Inside one node the ring wins at every size on the presets, so a tensor-
parallel all-reduce is priced as before; between domains the tree wins the small and
mid-sized all-reduces (on two A100 nodes up to about 10 MiB, the ring's LL128 taking a
few sizes between 3 and 10 MiB where the tree's correction steps down), and on many
domains the large ones too (16 A100 nodes: up to about 2 GiB). The tuner's times are
for ranking and run fast in absolute terms: on two ND96asr_v4 VMs
(``benchmarks/collectives.py``) the mid-sized all-reduces NCCL ran took 17-28% longer
than the model's price of whichever algorithm it picks (Tree at 256 KiB-4 MiB, Ring at
16-64 MiB); pricing them as rings alone would be nearer (the ring's model is slower
there) but is not what NCCL runs.

Left out of the tuner's model: the per-channel bandwidth caps (``perChMaxRingLL128Bws``,
``perChMaxTreeBws``, ``perChMaxTreeLL128Bws``: they need the channel count NCCL's topology
search settles on), the tree's wider links on exactly two domains (the search may give
its channels up to twice the network's bandwidth inside a node, since a tree there sends
half as much over the network: NVIDIA/nccl issue #946, src/graph/search.cc; the caps
above then bound it, on Ampere near the ring's 24 GB/s a channel), LL's cap inside one
node (``llMaxBws`` by GPU generation: 87.7 GB/s on Ampere, 141 on Hopper), the 0.85 Tree
penalty when every NIC's traffic goes through one GPU (``NCCL_TOPO_PATTERN_TREE``, not a
DGX's balanced tree), the network plugin's own latency (``latencyInter``: InfiniBand and
sockets report 0), the NVLS, NVLS Tree, CollNet and PAT algorithms, and the condition on
the plateau (at least 64 bytes a channel and rank: Simple never wins below it). An all-to-all is NCCL's send/recv, which
the tuner does not price: it keeps LL's latencies above.

``nccl_algorithms = ["ring"]`` keeps the ring alone. ``nccl_protocols = false`` prices
every ring at LL's latency with the large-message bandwidth and none of the terms
between domains (the lower envelope of the three, pipesim's model before), and no tree;
with it, zero latencies and shares of 1 give the bandwidth-only model pipesim had before
NCCL's terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .layout import Span
from .specs import Cluster

#: the ring collectives and how many times a ring step moves 1/n of the buffer
RING_PASSES = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}


def ring_rate(c: Cluster, where: Span) -> float:
    """Bus bytes per second of a ring collective over a group placed as ``where``. Inside
    an NVLink domain: NVLink. Across domains NCCL runs one ring per network interface (its
    channels), each crossing every domain boundary once, so a group with k members in a
    domain drives k interfaces at once: k times a GPU's achieved network bandwidth, at
    most NVLink's; the slowest domain (``where.per_domain``, its fewest) sets the pace.
    A tree's channels use the same links (``tree_times``)."""
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

# The same file's terms for a ring that leaves its NVLink domain (``ncclTopoTuneModel``,
# ``getNetOverhead`` and ``ncclTopoGetAlgoTime``):
#: per host CPU (the cluster's ``host_cpu``): the network posting overhead a ring step
#: costs at least (us; NCCL_NET_OVERHEAD's default) and LL's bus bandwidth cap on two
#: domains and on more (GB/s; llMaxBws' multi-node columns, AMD's row for AMD CPUs, the
#: Intel row for every other)
HOSTS = {"intel": (1.0, 39.0, 20.4), "amd": (2.0, 22.5, 19.0), "arm": (1.0, 39.0, 20.4)}
#: how many posting overheads a step of each protocol costs at least (Simple's flush: 3)
POSTS_PER_STEP = {"LL": 1, "LL128": 1, "Simple": 3}
#: a Simple all-reduce ring's latency across domains, times this (Ampere and later)
SIMPLE_PLATEAU = 1.4


@dataclass(frozen=True)
class TreeProtocol:
    """NCCL's Tree all-reduce under one protocol as its tuner prices it: base latency, a
    step on NVLink and over the network (us), its share of the ring's bus bandwidth
    inside one domain and across domains, and the correction its bandwidth takes by
    message size (one factor per power of two of the buffer from 64 B; none past them)."""

    name: str
    base_us: float
    nvlink_hop_us: float
    network_hop_us: float
    share_inside: float
    share_across: float
    correction: tuple[float, ...]


#: tuning.cc's all-reduce factor on a tree's bus bandwidth (``busBw * .92``)
TREE_SHARE = 0.92
#: tuning.cc at commit 5067397c: the Tree column of baseLatencies, hwLatencies[NVLINK] and
#: hwLatencies[NET], the protocols' factors on its bandwidth (LL: 1/3.8; LL128: 7/9 inside
#: a node, 120/128 across), and ``treeCorrectionFactor`` for 64 B, 128 B, ... 256 MiB
TREE = (
    TreeProtocol("LL", 6.8, 0.6, 5.0, TREE_SHARE / 3.8, TREE_SHARE / 3.8,
                 (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1)),
    TreeProtocol("LL128", 14.0, 1.25, 8.5, TREE_SHARE * 7 / 9, TREE_SHARE * 120 / 128,
                 (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1)),
    TreeProtocol("Simple", 8.4, 4.0, 14.0, TREE_SHARE, TREE_SHARE,
                 (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9)),
)  # fmt: skip
TREE_BY_NAME = {t.name: t for t in TREE}


def protocols(c: Cluster) -> tuple[Protocol, ...]:
    """The protocols a ring collective may run under on cluster ``c``: LL at the
    cluster's latencies, LL128 and Simple at tuning.cc's; with ``nccl_protocols`` off,
    LL's latencies alone at the full bandwidth (the lower envelope)."""
    if not c.nccl_protocols:
        return (Protocol("LL", c.nccl_base_us, c.nvlink_hop_us, c.network_hop_us, 1.0),)
    return (Protocol("LL", c.nccl_base_us, c.nvlink_hop_us, c.network_hop_us, LL_SHARE), LL128, SIMPLE)


def ll_cap(c: Cluster, domains: int) -> float:
    """Bytes per second LL's bus bandwidth reaches at most over ``domains`` NVLink
    domains (tuning.cc's llMaxBws by host CPU); no cap inside one (left out: see above)."""
    if domains <= 1 or not c.nccl_protocols:
        return math.inf
    _, two, more = HOSTS[c.host_cpu]
    return (two if domains == 2 else more) * 1e9


def ring_latency(c: Cluster, p: Protocol, kind: str, n: int, domains: int) -> float:
    """Seconds of fixed cost of one ring collective ``kind`` under protocol ``p`` over
    ``n`` ranks in ``domains`` NVLink domains: the base latency and one hop a ring step,
    the steps that cross a domain boundary at the network's hop latency (tuning.cc's
    ring model), with its terms between domains (module docstring) under NCCL's
    protocols."""
    if n <= 1:
        return 0.0
    passes = RING_PASSES[kind]
    network = passes * (domains - 1)
    nvlink = passes * (n - 1) - network
    nvlink_hop, network_hop, plateau = p.nvlink_hop_us, p.network_hop_us, 1.0
    if domains > 1 and c.nccl_protocols:
        nvlink_hop = max(nvlink_hop, POSTS_PER_STEP[p.name] * HOSTS[c.host_cpu][0])
        if n == domains:  # one rank a domain: every step's latency is exposed, at Tree's
            network_hop = TREE_BY_NAME[p.name].network_hop_us
        if p.name == "Simple" and kind == "all_reduce":
            plateau = SIMPLE_PLATEAU
    return plateau * (p.base_us + nvlink * nvlink_hop + network * network_hop) * 1e-6


def ring_times(c: Cluster, kind: str, nbytes: float, n: int, where: Span) -> dict[str, float]:
    """Seconds of one ring collective ``kind`` over ``n`` ranks placed as ``where`` on a
    buffer of ``nbytes`` under each protocol, by name: its latency, then (n - 1)/n of
    the buffer each pass at its share of the ring's bus bandwidth (LL's at most its
    cap between domains)."""
    domains = 1 if where.inside else where.domains
    bus = RING_PASSES[kind] * (n - 1) / n * nbytes
    rate = ring_rate(c, where)
    out = {}
    for p in protocols(c):
        bw = min(rate * p.share, ll_cap(c, domains)) if p.name == "LL" else rate * p.share
        out[p.name] = ring_latency(c, p, kind, n, domains) + bus / bw
    return out


def tree_correction(t: TreeProtocol, nbytes: float) -> float:
    """tuning.cc's factor on a tree's bandwidth for a buffer of ``nbytes``: indexed by
    the power of two of nbytes / 64 (rounded down)."""
    step = int(nbytes) >> 6
    i = step.bit_length() - 1
    return t.correction[i] if 0 <= i < len(t.correction) else 1.0


def tree_latency(t: TreeProtocol, n: int, domains: int) -> float:
    """Seconds of fixed cost of a Tree all-reduce under ``t`` over ``n`` ranks in
    ``domains`` domains: up and down the chain of n / domains ranks inside a domain and
    the floor(log2 domains) levels of the tree between them."""
    levels = domains.bit_length() - 1
    return (t.base_us + 2 * ((n // domains - 1) * t.nvlink_hop_us + levels * t.network_hop_us)) * 1e-6


def tree_times(c: Cluster, nbytes: float, n: int, where: Span) -> dict[str, float]:
    """Seconds of one Tree all-reduce over ``n`` ranks placed as ``where`` on a buffer of
    ``nbytes`` under each protocol, by name: its latency, then twice the buffer at its
    share of the ring's bus bandwidth, corrected for the size (module docstring)."""
    domains = 1 if where.inside else where.domains
    rate = ring_rate(c, where)
    out = {}
    for t in TREE:
        bw = rate * (t.share_inside if domains == 1 else t.share_across)
        if t.name == "LL":
            bw = min(bw, ll_cap(c, domains))
        out[t.name] = tree_latency(t, n, domains) + 2 * nbytes / (bw * tree_correction(t, nbytes))
    return out


def times(c: Cluster, kind: str, nbytes: float, n: int, where: Span) -> dict[str, float]:
    """Seconds of collective ``kind`` under every algorithm and protocol NCCL's tuner
    weighs on cluster ``c``, by "Ring/LL", "Tree/Simple" and so on: the ring's always,
    the tree's for an all-reduce where ``nccl_algorithms`` holds it (and NCCL's protocols
    are on)."""
    out = {f"Ring/{k}": v for k, v in ring_times(c, kind, nbytes, n, where).items()}
    if kind == "all_reduce" and c.nccl_protocols and "tree" in c.nccl_algorithms:
        out.update({f"Tree/{k}": v for k, v in tree_times(c, nbytes, n, where).items()})
    return out


@lru_cache(maxsize=16384)
def collective_seconds(c: Cluster, kind: str, nbytes: float, n: int, where: Span) -> float:
    """Seconds of one collective ``kind`` (a ring collective's name) over ``n`` ranks
    placed as ``where`` on a buffer of ``nbytes`` (the whole buffer: an all-reduce's
    input, an all-gather's output, a reduce-scatter's input) under the fastest algorithm
    and protocol, as NCCL's tuner picks them. Nothing for one rank or an empty buffer.
    Kept by its inputs: a search asks the same few collectives of every candidate of a
    layout (its step's reductions, each stage's gathers), each priced under six
    algorithm and protocol pairs."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return min(times(c, kind, nbytes, n, where).values())


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
