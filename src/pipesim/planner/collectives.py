"""Communication of the parallel groups: tensor-parallel all-reduces, expert all-to-alls,
pipeline transfers, data-parallel rings and the tied embedding's all-reduce, in seconds."""

from __future__ import annotations

from . import nccl
from .layout import Layout, Span, span
from .params import attention_dims
from .specs import Cluster, Model, Training
from .training import te_current_scaling


def moe_comm(m: Model, c: Cluster, t: Training, lay: Layout) -> tuple[float, float, float, float]:
    """Seconds per micro-batch of (dispatch F, combine F, dispatch B, combine B).

    Each GPU sends its tokens (``Layout.expert_tokens``) to the top-k experts, spread over
    the ep GPUs of its expert group, wherever those sit (``Layout.span``). How a token's
    copies cross between NVLink domains is the dispatcher's (``Training.moe_dispatcher``):

    - ``deepep``: once per destination domain (DeepSeek-V3's node-limited routing caps
      those at ``max_nodes``), then forwarded inside it over NVLink (DeepEP's internode
      kernels: RDMA to the peer of the same rail, NVLink onward);
    - ``alltoall``: each of its top_k copies straight to its expert's GPU, so the share of
      the group outside the sender's domain crosses the network once per copy: Megatron-
      Core's default dispatcher (``MoEAlltoAllTokenDispatcher``: one ``all_to_all_single``
      over the ep group of the tokens permuted copy by copy). At top-8 over EP32 on four
      8-GPU nodes that is 6 copies a token on the network against DeepEP's 2.7.

    Inside one domain both send every copy over NVLink. The network and NVLink parts run
    at once, so the slower one sets the time. NCCL's all-to-all (``alltoall``) pays its
    latency and reaches ``network_alltoall_share`` of the network's line rate
    (``nccl.py``); DeepEP's own kernels are priced at line rate, without it. With expert
    tensor parallelism the etp GPUs of an expert shard then all-gather the copies they
    received (and reduce-scatter the outputs: the same bytes), on their own ring, each an
    NCCL ring collective. Dispatch is FP8 under DeepSeek's
    block-scaled FP8 training (its DeepEP dispatch sends FP8 tokens); Megatron-Core's
    all-to-all dispatcher under Transformer Engine's per-tensor FP8 sends BF16, as does
    everything else.
    """
    e, h = m.moe, m.hidden
    if e is None or lay.ep * lay.etp <= 1:
        return 0.0, 0.0, 0.0, 0.0
    tokens = lay.expert_tokens(t.seq)
    where = lay.span("ep", c.domain)
    if lay.ep <= 1:
        network = nvlink = 0.0
    elif not where.inside and t.moe_dispatcher == "alltoall":
        # every copy to its expert's GPU: the share of the group outside the sender's domain
        # goes over the network, the rest of the others over NVLink
        network = e.top_k * (1 - where.per_domain / lay.ep)
        nvlink = e.top_k * (where.per_domain - 1) / lay.ep
    elif not where.inside:
        domains = where.domains
        reach = min(e.max_nodes or domains, domains, e.top_k) if e.max_nodes else domains * (1 - (1 - 1 / domains) ** e.top_k)
        network = reach * (1 - 1 / domains)  # copies per token over the network
        nvlink = e.top_k * (1 - 1 / min(where.per_domain, lay.ep))
    else:
        network, nvlink = 0.0, e.top_k * (1 - 1 / lay.ep)
    etp = lay.span("etp", c.domain)
    nccl_a2a = t.moe_dispatcher == "alltoall" and lay.ep > 1

    def seconds(width: float) -> float:
        per_token = h * width
        if nccl_a2a:
            a2a = nccl.alltoall_transfer(c, tokens * network * per_token, tokens * nvlink * per_token)
            a2a += nccl.alltoall_latency(c, lay.ep, lay.ep if where.inside else where.per_domain)
        else:
            a2a = tokens * max(network * per_token / (c.network_gbps * 1e9), nvlink * per_token / (c.nvlink_gbps * 1e9))
        # the etp shards all-gather the e.top_k copies a token sends (each shard's copies)
        return a2a + nccl.collective_seconds(c, "all_gather", lay.etp * tokens * e.top_k * per_token, lay.etp, etp)

    dispatch = seconds(1 if t.precision == "fp8" and t.fp8_scaling == "block" else 2)
    combine = seconds(2)
    return dispatch, combine, combine, combine


def float8_gathers(t: Training) -> bool:
    """Whether a layer's tensor-parallel all-gathers move one-byte FP8 elements, under
    sequence parallelism, the reduce-scatters staying BF16:

    - torchao's Float8 tensor parallelism, which torchtitan 9dec370's ``apply_tp`` uses
      with Float8 linears (torchao eab345c float8/float8_tensor_parallel.py), casts the
      sequence shard to FP8 before the input's all-gather (``Float8ColwiseParallel`` and
      ``PrepareFloat8ModuleInput``'s ``hp_tensor_to_float8_dynamic``, then
      ``redistribute``) and, backward, the output's gradient before its all-gather (the
      row-parallel output's ``NoopFwToFloat8BwDynamic`` is applied after its
      reduce-scatter, so its backward runs before that all-gather);
    - Transformer Engine 2.7's current scaling (``te_current_scaling``) does the same
      (TransformerEngine fedd9ddc: module/layernorm_linear.py:187-189 and linear.py:176-187
      cast the column-parallel input's shard row-wise, distributed.py:922-937 gathers FP8;
      base.py:1101-1131 casts the row-parallel output's gradient shard before its gather;
      ``elementwise.te_current_cast_terms`` prices those casts on the shard)."""
    return t.sequence_parallel and t.precision == "fp8" and (t.fp8_casts == "torchao" or te_current_scaling(t))


def tp_halves(m: Model, c: Cluster, t: Training, lay: Layout, layer: bool = True) -> tuple[float, float]:
    """Seconds of (the all-gather, the reduce-scatter) around one block of a micro-batch's
    hidden states over tp GPUs under sequence parallelism, on NVLink while the tensor group
    stays inside a domain; the gather in FP8 for a layer's multiplies under per-tensor FP8
    (``float8_gathers``; ``layer`` False for the model's ends, which stay BF16). Without
    sequence parallelism: (0, the all-reduce)."""
    if lay.tp <= 1:
        return 0.0, 0.0
    size = lay.tokens(t.seq) * m.hidden * 2
    where = lay.span("tp", c.domain)
    if not t.sequence_parallel:
        return 0.0, nccl.collective_seconds(c, "all_reduce", size, lay.tp, where)
    gathered = size / 2 if layer and float8_gathers(t) else size
    return (
        nccl.collective_seconds(c, "all_gather", gathered, lay.tp, where),
        nccl.collective_seconds(c, "reduce_scatter", size, lay.tp, where),
    )


def tp_allreduce(m: Model, c: Cluster, t: Training, lay: Layout, layer: bool = True) -> float:
    """Seconds of one NCCL all-reduce of a micro-batch's hidden states over tp GPUs (or,
    with sequence parallelism, the all-gather and reduce-scatter that replace it: two
    collectives' latencies, and the same bytes unless the gather moves FP8: ``tp_halves``)."""
    return sum(tp_halves(m, c, t, lay, layer))


def p2p_seconds(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """One activation (or its gradient) between two stages: with tensor parallelism each
    shard sends its 1/tp to its peer in the next stage. Where every stage of a pipeline
    sits in one NVLink domain (``Layout.span("pp")``: tp x cp x dp x pp within a DGX node,
    or up to 72 GPUs of an NVL72 rack) the send runs over NVLink, as NCCL's send/recv
    between GPUs of one NVLink fabric does; otherwise at least one hop leaves the domain
    and the pipeline is priced at the network's pace on every hop (the conservative bound:
    the engine takes one transfer time for all ranks). Without sequence parallelism every
    shard needs the whole tensor, so the receiving shards all-gather it over NVLink
    (Megatron-LM 2021's scatter/gather optimisation, DeepSpeed's partitioned pipeline
    buffers); under it the shard is what the next stage consumes. The send pays
    ``Training.p2p_latency_us`` and crosses the network at ``network_share`` of its line
    rate; the gather is an NCCL all-gather (``nccl.py``)."""
    full = lay.tokens(t.seq) * m.hidden * 2
    gather = 0.0 if t.sequence_parallel else nccl.collective_seconds(c, "all_gather", full, lay.tp, lay.span("tp", c.domain))
    rate = nccl.p2p_rate(c, lay.span("pp", c.domain).inside)
    return t.p2p_latency_us * 1e-6 + full / lay.tp / rate + gather


def ring_bandwidth(c: Cluster, lay: Layout, group: str) -> float:
    """Bus bytes per second of a ring collective over the groups of dimension ``group``
    (``Layout.stride`` says where members sit; ``nccl.ring_rate``)."""
    return nccl.ring_rate(c, lay.span(group, c.domain))


def ring_seconds(c: Cluster, lay: Layout, group: str, kind: str, nbytes: float) -> float:
    """Seconds of one NCCL collective ``kind`` (a ring collective's name) on a buffer of
    ``nbytes`` over the groups of dimension ``group``: an all-reduce at the faster of
    Ring and Tree where the cluster allows the tree (``nccl.collective_seconds``)."""
    return nccl.collective_seconds(c, kind, nbytes, lay.size(group), lay.span(group, c.domain))


def tied_embedding_sync(m: Model, c: Cluster, t: Training, lay: Layout) -> float:
    """Seconds of the all-reduce of a tied word embedding's gradient between the first
    stage (the input embedding) and the last (its copy, the output head), which Megatron-LM
    (``_allreduce_embedding_grads``) and DeepSpeed's pipeline engine (``ReduceTiedGrads``)
    run after the last backward, exposed. A two-rank all-reduce moves each rank's
    vocab * hidden / tp shard once across the link (half out, half back), over the network
    unless the whole pipeline shares a node; nothing without pp > 1 or tied embeddings."""
    if not m.tied_embeddings or lay.pp < 2:
        return 0.0
    ends = Span(True, 2, 1) if lay.span("pp", c.domain).inside else Span(False, 1, 2)
    return nccl.collective_seconds(c, "all_reduce", m.vocab * m.hidden / lay.tp * t.grad_reduce_bytes, 2, ends)


def kv_width(m: Model) -> float:
    """Elements per token of the keys and values context parallelism exchanges, over all
    heads: grouped-query attention's kv heads; MLA's keys and values per query head (as
    Megatron-Core's CP runs MLA: after the up-projection)."""
    qk, v = attention_dims(m)
    a = m.attention
    if a.kind == "mla":
        return m.heads * (qk + v)
    return (a.kv_heads or m.heads) * (qk + v)


def a2a_size(m: Model, c: Cluster, lay: Layout) -> int:
    """The all-to-all part of hierarchical context parallelism (``a2a+p2p``): the largest
    power of two dividing cp whose group stays inside an NVLink domain and splits the
    tensor rank's query and key/value heads evenly (Megatron-Core's
    --hierarchical-context-parallel-sizes, a2a first); the ring runs over the rest."""
    kv = m.heads if m.attention.kind == "mla" else (m.attention.kv_heads or m.heads)
    a = lay.cp
    while a > 1 and (lay.tp * a > c.domain or (m.heads // lay.tp) % a or (kv // lay.tp) % a or lay.cp % a):
        a //= 2
    return a


def a2a_ranks(m: Model, c: Cluster, t: Training, lay: Layout) -> int:
    """Ranks of a context group's all-to-all: all cp for ``a2a`` (Ulysses), ``a2a_size``
    for ``a2a+p2p``, 1 (none) for the ring and the all-gather and for PyTorch's ring."""
    if lay.cp <= 1 or t.torch_context_parallel:
        return 1
    return lay.cp if t.cp_comm == "a2a" else a2a_size(m, c, lay) if t.cp_comm == "a2a+p2p" else 1


def alltoall_seconds(c: Cluster, lay: Layout, n: int, per_rank: float) -> float:
    """Seconds of an all-to-all in which each of ``n`` ranks, ``lay.tp`` apart (a context
    group), sends ``per_rank`` bytes spread evenly over the others: on NVLink inside a
    domain; across domains the share bound for other domains leaves on the GPU's own
    network link while the rest crosses NVLink, at once (``nccl.alltoall_seconds``)."""
    where = span(n, lay.tp, c.domain)
    return nccl.alltoall_seconds(c, n, n if where.inside else where.per_domain, per_rank)


def ring_exposed(kv_bytes: float, n: int, link: float, core_f: float, core_b: float, latency: float = 0.0) -> tuple[float, float]:
    """(forward, backward) exposed seconds of a ring of ``n`` context ranks passing key/value
    chunks of ``kv_bytes`` along ``link`` bytes/s: n - 1 steps, each sending the next
    chunk while the attention of the current block runs (1/n of the rank's attention
    work; Megatron-Core's p2p CP and torchtitan's ring attention), so a step shows only
    what its transfer exceeds that block by. Backward sends the keys and values and their
    gradients: twice the bytes. Each step also pays ``latency`` (a point-to-point
    transfer's fixed cost, ``Training.p2p_latency_us``)."""
    if n <= 1:
        return 0.0, 0.0
    step = kv_bytes / link
    return (n - 1) * max(0.0, latency + step - core_f / n), (n - 1) * max(0.0, latency + 2 * step - core_b / n)


def torch_ring_exposed(
    kv_bytes: float, n: int, link: float, gather: float | None, core_f: float, core_b: float, latency: float
) -> tuple[float, float]:
    """(forward, backward) exposed seconds of PyTorch's ring (torch/distributed/tensor/
    experimental/_attention.py at 0123248a, ``_templated_ring_attention`` and its backward;
    ``cp_steps`` says what was taken as unchanged since December 2024). With the allgather
    rotation (``gather``: its seconds; torchtitan's default) the keys and values are
    gathered once, issued before step 0's attention and waited for after it, forward and
    again backward; with the alltoall rotation they pass round the ring as in
    ``ring_exposed``. The backward passes each step's dk, dv accumulators on in fp32 (twice
    the bf16 bytes), waited for after the next step's attention, the last after the loop."""
    dkv = 2 * kv_bytes / link
    if gather is not None:
        forward = max(0.0, gather - core_f / n)
        backward = max(0.0, gather - core_b / n) + (n - 1) * max(0.0, latency + dkv - core_b / n)
    else:
        step = kv_bytes / link
        forward = (n - 1) * max(0.0, latency + step - core_f / n)
        backward = (n - 1) * max(0.0, latency + step + dkv - core_b / n)
    return forward, backward + latency + dkv


def cp_exchange(m: Model, c: Cluster, t: Training, lay: Layout, core_f: float, core_b: float) -> tuple[float, float]:
    """Exposed seconds (forward, backward) of context parallelism's key/value exchange in
    one attention layer for one micro-batch (``Training.cp_comm``; core_f, core_b: the
    rank's attention kernel time):

    - ``p2p``: a ring overlapped with blockwise attention (``ring_exposed``), on NVLink
      while the context group stays in a domain, else at the network's pace (the hop
      that leaves a domain sets the step);
    - ``all_gather``: keys and values all-gathered before attention, and backward gathered
      again and their gradients reduce-scattered after it (Transformer Engine 2.7's
      ``AttnFuncWithCPAndKVAllGather``), exposed (Llama 3: small with few kv heads);
    - ``a2a``: DeepSpeed-Ulysses, an all-to-all of q, k, v from sequence to head shards
      before attention and of its output back, forward and backward, exposed;
    - ``a2a+p2p``: the all-to-all inside a domain over ``a2a_size`` ranks, then a ring
      over the cp / a2a_size groups;
    - PyTorch's ring (``Training.torch_context_parallel``): ``torch_ring_exposed``, with
      ``all_gather`` its allgather rotation and ``p2p`` its alltoall one."""
    if lay.cp <= 1:
        return 0.0, 0.0
    tokens = lay.tokens(t.seq)
    kv_bytes = tokens * kv_width(m) / lay.tp * 2
    scheme = t.cp_comm
    latency = t.p2p_latency_us * 1e-6
    gather = ring_seconds(c, lay, "cp", "all_gather", lay.cp * kv_bytes) if scheme == "all_gather" else None
    if t.torch_context_parallel:
        link = nccl.p2p_rate(c, span(lay.cp, lay.tp, c.domain).inside)
        return torch_ring_exposed(kv_bytes, lay.cp, link, gather, core_f, core_b, latency)
    if gather is not None:
        return gather, gather + ring_seconds(c, lay, "cp", "reduce_scatter", lay.cp * kv_bytes)
    qk, v = attention_dims(m)
    qo_bytes = tokens * m.heads * (qk + v) / lay.tp * 2  # queries and the attention output
    a = a2a_ranks(m, c, t, lay)
    ulysses = alltoall_seconds(c, lay, a, (a - 1) / a * (qo_bytes + kv_bytes)) if a > 1 else 0.0
    rest = lay.cp // a
    link = nccl.p2p_rate(c, span(rest, lay.tp * a, c.domain).inside)
    # after the all-to-all a rank holds a times the tokens of 1/a of the heads: the same
    # key/value bytes per ring step
    f, b = ring_exposed(kv_bytes, rest, link, core_f, core_b, latency)
    return ulysses + f, ulysses + b
