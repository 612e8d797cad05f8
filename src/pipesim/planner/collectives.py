"""Communication of the parallel groups: tensor-parallel all-reduces, expert all-to-alls,
pipeline transfers, data-parallel rings and the tied embedding's all-reduce, in seconds."""

from __future__ import annotations

import math

from .layout import Layout
from .specs import Cluster, Model, Training


def moe_comm(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Seconds per micro-batch of (dispatch F, combine F, dispatch B, combine B).

    Each GPU sends its tokens to the top-k experts, spread over the ep GPUs of its expert
    group. Between nodes a token is sent once per destination node (DeepSeek-V3's
    node-limited routing caps those at ``max_nodes``) and forwarded inside the node over
    NVLink; the two links work at once, so the slower one sets the time. Dispatch is
    FP8 under fp8 training, everything else BF16.
    """
    if lay.ep <= 1:
        return 0.0, 0.0, 0.0, 0.0
    e, h, gpn = m.moe, m.hidden, c.gpus_per_node
    tokens = lay.micro_batch * t.seq
    nodes = math.ceil(lay.ep / gpn)
    if nodes > 1:
        reach = min(e.max_nodes or nodes, nodes, e.top_k) if e.max_nodes else nodes * (1 - (1 - 1 / nodes) ** e.top_k)
        network = reach * (1 - 1 / nodes)  # copies per token over the network
        nvlink = e.top_k * (1 - 1 / min(gpn, lay.ep))
    else:
        network, nvlink = 0.0, e.top_k * (1 - 1 / lay.ep)

    def seconds(width: float) -> float:
        per_token = h * width
        return tokens * max(network * per_token / (c.network_gbps * 1e9), nvlink * per_token / (c.nvlink_gbps * 1e9))

    dispatch = seconds(1 if t.precision == "fp8" else 2)
    combine = seconds(2)
    return dispatch, combine, combine, combine


def tp_allreduce(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of one ring all-reduce of a micro-batch's hidden states over tp GPUs (or,
    with sequence parallelism, the all-gather and reduce-scatter that replace it: the
    same bytes)."""
    if lay.tp <= 1:
        return 0.0
    size = lay.micro_batch * t.seq * m.hidden * 2
    return 2 * (lay.tp - 1) / lay.tp * size / (c.nvlink_gbps * 1e9)


def p2p_seconds(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """One activation (or its gradient) between two stages: with tensor parallelism each
    shard sends its 1/tp, over the network (stages sit on different nodes once tp x pp
    exceeds a node; inside a node NVLink is faster, and the network bound is kept as the
    conservative one). Without sequence parallelism every shard needs the whole tensor, so
    the receiving shards all-gather it over NVLink (Megatron-LM 2021's scatter/gather
    optimisation, DeepSpeed's partitioned pipeline buffers); under it the shard is what
    the next stage consumes."""
    full = lay.micro_batch * t.seq * m.hidden * 2
    gather = 0.0 if t.sequence_parallel else (lay.tp - 1) / lay.tp * full / (c.nvlink_gbps * 1e9)
    return t.p2p_latency_us * 1e-6 + full / lay.tp / (c.network_gbps * 1e9) + gather


def domain(c: Cluster) -> int:
    """GPUs one NVLink fabric reaches: the cluster's node."""
    return c.gpus_per_node


def ring_bandwidth(c: Cluster, lay: Layout, group: str) -> float:
    """Bytes per second of a ring collective over the groups of dimension ``group``
    (``Layout.stride`` says where members sit). Inside an NVLink domain: NVLink. Across
    domains NCCL runs one ring per network interface (its channels), each crossing every
    domain boundary once, so a group with k members in a domain drives k interfaces at
    once: k times a GPU's network bandwidth, at most NVLink's (DGX A100's 8 x 200 Gb/s
    give the ~190 GB/s bus bandwidth nccl-tests show across nodes for 8 GPUs a node); a
    group with one member a domain has its own link only. The slowest link sets a ring's
    pace, so k is the fewest members the worst-placed group has in a domain it touches."""
    where = lay.span(group, domain(c))
    if where.inside:
        return c.nvlink_gbps * 1e9
    return min(c.nvlink_gbps, where.per_domain * c.network_gbps) * 1e9


def tied_embedding_sync(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of the all-reduce of a tied word embedding's gradient between the first
    stage (the input embedding) and the last (its copy, the output head), which Megatron-LM
    (``_allreduce_embedding_grads``) and DeepSpeed's pipeline engine (``ReduceTiedGrads``)
    run after the last backward, exposed. A two-rank all-reduce moves each rank's
    vocab * hidden / tp shard once across the link (half out, half back), over the network
    unless the whole pipeline shares a node; nothing without pp > 1 or tied embeddings."""
    if not m.tied_embeddings or lay.pp < 2:
        return 0.0
    bw = (c.nvlink_gbps if lay.span("pp", domain(c)).inside else c.network_gbps) * 1e9
    return m.vocab * m.hidden / lay.tp * t.grad_reduce_bytes / bw
