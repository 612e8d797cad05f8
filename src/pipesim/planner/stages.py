"""A candidate's stages: their layers (``split``) and the component cost model over them."""

from __future__ import annotations

from ..components import ComponentCosts
from .collectives import p2p_seconds
from .layer_costs import blocking_p2p, embedding_costs, head_costs, layer_costs, mtp_costs
from .layout import Layout
from .specs import Cluster, Model, Training
from .split import balanced_partition, partition, work


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
    partitions by counting transformer layers (``partition_method="type:transformer"``)."""
    if t.stage_split == "even":
        return partition(m.layers, stages)
    kinds = {}
    for i in range(m.layers):
        key = m.is_moe_layer(i)
        if key not in kinds:
            kinds[key] = work(layer_costs(m, i, c, t, lay, recompute))
    layer_work = tuple(kinds[m.is_moe_layer(i)] for i in range(m.layers))
    last = work(head_costs(m, c, t, lay)) + sum(work(x) for x in mtp_costs(m, c, t, lay, recompute))
    return balanced_partition(layer_work, work(embedding_costs(m, c, t, lay)), last, stages, ranks, even_out)


def component_costs(
    m: Model, c: Cluster, t: Training, lay: Layout, stages: int, recompute: str, parts: list[range] | None = None
) -> ComponentCosts:
    parts = parts or stage_parts(m, c, t, lay, stages, recompute)
    per_layer = {}
    stage_layers = []
    for s, rng in enumerate(parts):
        row = [embedding_costs(m, c, t, lay)] if s == 0 else []
        for i in rng:
            key = (m.is_moe_layer(i),)
            if key not in per_layer:
                per_layer[key] = layer_costs(m, i, c, t, lay, recompute)
            row.append(per_layer[key])
        if s == stages - 1:
            row += [*mtp_costs(m, c, t, lay, recompute), head_costs(m, c, t, lay)]
        if not t.p2p_overlap and stages > 1:
            row.append(blocking_p2p(s, stages, p2p_seconds(m, c, t, lay)))
        stage_layers.append(tuple(row))
    # Tensor-parallel collectives overlap with the multiplies around them when the run
    # overlaps them (Megatron-Core and TransformerEngine chunk them so; ``tp_overlap``),
    # modelled by splitting a lone op's micro-batch in two; expert all-to-alls overlap
    # only inside overlapped pairs. Blocking transfers sit on the ranks' compute streams
    # instead of the edges between them.
    return ComponentCosts(
        tuple(stage_layers),
        p2p=p2p_seconds(m, c, t, lay) if t.p2p_overlap else 0.0,
        comm_sms=t.comm_sms,
        total_sms=c.sms,
        lone_overlap=m.moe is None and t.tp_overlap,
        held_in_pairs=t.comm_held_in_pairs,
    )
