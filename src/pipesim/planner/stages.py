"""A candidate's stages: their layers (``split``) and the component cost model over them."""

from __future__ import annotations

from functools import lru_cache

from ..components import ComponentCosts, LayerCosts
from .collectives import p2p_seconds
from .layer_costs import blocking_p2p, embedding_costs, head_costs, layer_costs, mtp_costs
from .layout import Layout
from .moe_layers import mtp_layer_kind
from .p2p_sync import sync_costs
from .pipeline_layout import is_layout, layout_sizes
from .specs import Cluster, Model, Training
from .split import balanced_partition, partition, ranges_of, work
from .tp_overlap import splits_lone_ops


# One search asks for the same layer's costs under one layout many times over: for each
# stage count, recomputation and split, in ``stage_parts`` and again in ``component_costs``.
# The specs are frozen (hashable) and a layer's costs depend only on its kind (MoE or
# dense, its window and its chunks), so they are kept here, the least recently used dropped past a few thousand.
@lru_cache(maxsize=4096)
def _layer(m: Model, first: int, c: Cluster, t: Training, lay: Layout, recompute: str):
    return _one_of(layer_costs(m, first, c, t, lay, recompute))


@lru_cache(maxsize=4096)
def _ends(m: Model, c: Cluster, t: Training, lay: Layout, recompute: str, mtp_kind: int | None = None):
    """(embedding, head, MTP modules) costs of a layout. Kept for as many layouts and
    recomputations as a wide search has (Qwen3-235B-A22B on h800-2048: about 1,700; with
    1024 kept, 3,134 were worked out). ``mtp_kind``: the layer the MTP modules are built
    as (``moe_layers.mtp_layer_kind``; the last by default)."""
    mtp = tuple(map(_one_of, mtp_costs(m, c, t, lay, recompute, mtp_kind)))
    return _one_of(embedding_costs(m, c, t, lay)), _one_of(head_costs(m, c, t, lay)), mtp


#: one object for equal layer costs: layouts that price a layer alike (tensor or data
#: parallelism a layer's costs do not read) then hand the cost models the same objects,
#: and the caches keyed by the layers' identities (``components._serial``: a stage's
#: serial times) serve them all. Qwen3-235B-A22B on h800-2048 makes 2014 layer costs, 250
#: of them distinct. Bounded: past it, sharing starts again from empty
_SAME: dict[LayerCosts, LayerCosts] = {}
SAME_KEPT = 1 << 14


def _one_of(costs: LayerCosts) -> LayerCosts:
    """The object kept for costs equal to ``costs`` (``_SAME``), ``costs`` if it is the first."""
    if len(_SAME) > SAME_KEPT:
        _SAME.clear()
    return _SAME.setdefault(costs, costs)


def _kind(m: Model, i: int) -> tuple[bool, int, int]:
    """What a layer's costs depend on: MoE or dense, the window it attends over and the
    chunks it attends within."""
    return m.is_moe_layer(i), m.window(i), m.chunk(i)


@lru_cache(maxsize=64)
def _kinds(m: Model) -> tuple[tuple[bool, int, int], ...]:
    """Each layer's kind (``_kind``), in layer order: read for every split and cost model
    of a search, worked out once a model."""
    return tuple(_kind(m, i) for i in range(m.layers))


@lru_cache(maxsize=64)
def _first_of_kinds(m: Model) -> tuple[tuple[int, tuple[bool, int, int]], ...]:
    """(the first layer of each kind, its kind), in layer order: once a model."""
    firsts: dict[tuple[bool, int, int], int] = {}
    for i, k in enumerate(_kinds(m)):
        firsts.setdefault(k, i)
    return tuple((i, k) for k, i in firsts.items())


def selective_changes_nothing(m: Model, c: Cluster, t: Training, lay: Layout) -> bool:
    """Whether selective recomputation costs nothing over none on this layout: every kind
    of layer (and the MTP modules) has the same op times under both, as under flash
    attention for grouped-query attention, where the kernel recomputes its scores
    anyway. Selective then keeps no more memory than none and needs no transient, so a
    candidate without recomputation is the same step as its selective twin, never a
    better one."""
    same = all(_layer(m, i, c, t, lay, "none") == _layer(m, i, c, t, lay, "selective") for i, _ in _first_of_kinds(m))
    return same and _ends(m, c, t, lay, "none") == _ends(m, c, t, lay, "selective")


def stage_parts(
    m: Model,
    c: Cluster,
    t: Training,
    lay: Layout,
    stages: int,
    recompute: str,
    ranks: tuple[tuple[int, ...], ...] | None = None,
    even_out: bool = True,
) -> list[range]:
    """The layers of each model stage, balanced by cost (see ``balanced_partition``), or
    with ``stage_split = "even"`` the same number of layers on every stage whatever else
    the end stages hold: Megatron-LM 2021 gives each stage (and each interleaved chunk)
    layers / stages of them (its arguments.py asserts they divide), DeepSpeed's pipeline
    partitions by counting transformer layers (``partition_method="type:transformer"``);
    up to two stages more than layers leave the end stages none (``split.most_stages``:
    the Zero Bubble fork's padding); or the split a run used, written as Megatron-Core's
    layout (``pipeline_layout``)."""
    if t.stage_split == "even":
        return partition(m.layers, stages, padded=True)
    if is_layout(t.stage_split):
        return ranges_of(layout_sizes(t.stage_split, m.layers, m.mtp_layers, stages))
    return balanced_partition(*_works(m, c, t, lay, recompute), stages, ranks, even_out)


@lru_cache(maxsize=4096)
def _works(m: Model, c: Cluster, t: Training, lay: Layout, recompute: str) -> tuple[tuple[float, ...], float, float]:
    """What ``balanced_partition`` weighs: each layer's work, the embedding's, and the head's
    with the MTP modules'. The same for every stage count and placement of a layout:
    worked out once (a search asks for thousands of splits of a few hundred layouts)."""
    kinds = {k: work(_layer(m, i, c, t, lay, recompute)) for i, k in _first_of_kinds(m)}
    layer_work = tuple(kinds[k] for k in _kinds(m))
    embed, head, mtp = _ends(m, c, t, lay, recompute)
    last = work(head) + sum(work(x) for x in mtp)
    return layer_work, work(embed), last


def component_costs(
    m: Model, c: Cluster, t: Training, lay: Layout, stages: int, recompute: str, parts: list[range] | None = None
) -> ComponentCosts:
    parts = parts or stage_parts(m, c, t, lay, stages, recompute)
    embed, head, mtp = _ends(m, c, t, lay, recompute, mtp_layer_kind(m, len(parts[-1])))
    # one lookup per kind of layer, not per layer: the cache's key hashes every spec
    kinds = {k: _layer(m, i, c, t, lay, recompute) for i, k in _first_of_kinds(m)}
    layers = tuple(kinds[k] for k in _kinds(m))  # each layer's costs, in layer order
    stage_layers = []
    for s, rng in enumerate(parts):
        row = [embed] if s == 0 else []
        row += layers[rng.start : rng.stop : rng.step]  # a stage's layers are a range: one slice
        if s == stages - 1:
            row += [*mtp, head]
        if not t.p2p_overlap and stages > 1:
            row.append(blocking_p2p(s, stages, p2p_seconds(m, c, t, lay)))
        sync = sync_costs(t, s, stages, lay.pp)  # Megatron's device synchronize after each exchange
        if sync is not None:
            row.append(sync)
        stage_layers.append(tuple(row))
    # Every tensor-parallel collective overlaps the multiplies around it when the run
    # chunks them so (``tp_overlap = "all"``: Megatron-Core's userbuffers, AsyncTP),
    # modelled by splitting a lone op's micro-batch in two; "backward" hides the
    # backward's asynchronous ones inside the layer's costs (tp_overlap.py); expert
    # all-to-alls overlap only inside overlapped pairs, so an MoE model's lone ops do not
    # split and its userbuffer halves hide under their own multiplies there instead. Blocking transfers sit on the ranks' compute streams
    # instead of the edges between them.
    return ComponentCosts(
        tuple(stage_layers),
        p2p=p2p_seconds(m, c, t, lay) if t.p2p_overlap else 0.0,
        comm_sms=t.comm_sms,
        total_sms=c.sms,
        lone_overlap=splits_lone_ops(m, t),
        held_in_pairs=t.comm_held_in_pairs,
    )
