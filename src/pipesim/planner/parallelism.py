"""What the report says about the layout's newer dimensions: context parallelism (the
scheme assumed and the framework settings that select it), the expert mesh, the NVLink
domains, and whether the global batch can feed the GPUs at all."""

from __future__ import annotations

from .candidates import fed, pipeline_sizes
from .collectives import a2a_size
from .domains import placement_text
from .layout import Layout
from .results import Plan
from .specs import Cluster, Model, Training
from .torchtitan_sharding import CP_LOAD_BALANCER

#: torchtitan's context parallelism (pytorch/torchtitan at b5bcd76, 2026-08-21): the
#: degree and the load balancer for its flex attention (torchtitan_sharding.CP_LOAD_BALANCER)
#: in ParallelismConfig; the exchange is PyTorch's context_parallel, which
#: all-gathers key/value shards (its rotate method setting was removed in #3666, 2026-06;
#: before it, ``context_parallel_rotate_method`` chose "allgather" or "alltoall")
TORCHTITAN_CP = (
    f'context_parallel_degree = {{cp}}, context_parallel_load_balancer = "{CP_LOAD_BALANCER}" (PyTorch\'s all-gather of K/V)'
)

#: Training.cp_comm -> (what it does, Megatron-LM flags, whether torchtitan runs it)
CP_SCHEMES = {
    "p2p": ("a ring passing key/value chunks, overlapped with blockwise attention", "--cp-comm-type p2p", False),
    "all_gather": (
        "keys and values all-gathered before attention, gradients reduce-scattered after (Llama 3's scheme)",
        "--cp-comm-type all_gather",
        True,
    ),
    "a2a": ("an all-to-all from sequence to head shards around attention (DeepSpeed-Ulysses)", "--cp-comm-type a2a", False),
    "a2a+p2p": (
        "an all-to-all inside the NVLink domain, a ring of key/value chunks between domains",
        "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes A P",
        False,
    ),
}


def cp_text(m: Model, c: Cluster, t: Training, lay: Layout) -> str:
    """The assumption line for context parallelism."""
    what, megatron, same = CP_SCHEMES[t.cp_comm]
    if t.cp_comm == "a2a+p2p":
        a = a2a_size(m, c, lay)
        megatron = megatron.replace("A P", f"{a} {lay.cp // a}")
    head = f"cp{lay.cp}: each GPU holds 1/cp of every sequence in 2 of 2cp chunks (causal load balancing); "
    return (
        f"{head}cp_comm = {t.cp_comm}: {what}; activations and the attention work divided by cp, what the "
        f"exchange does not hide added to attention. Megatron-LM: --context-parallel-size {lay.cp} {megatron}; "
        f"torchtitan: {TORCHTITAN_CP.format(cp=lay.cp)}"
        + ("" if same else f", a different exchange from the {t.cp_comm} assumed (set cp_comm = all_gather to price it)")
    )


def mesh_text(lay: Layout) -> str:
    """The two meshes of a layout with experts (MoE parallel folding)."""
    return (
        f"attention and dense layers on tp{lay.tp} x cp{lay.cp} x dp{lay.dp} x pp{lay.pp}; experts folded over the same "
        f"GPUs as etp{lay.etp} x ep{lay.ep} x edp{lay.edp} x pp{lay.pp} (Megatron-Core's MoE parallel folding; rank "
        "order tp, cp, dp, pp and etp, ep, edp, pp)"
    )


def domain_text(c: Cluster) -> str:
    """The report's line on where the GPUs sit: nodes, and on an NVLink fabric larger than
    a node, the job's share of each domain (domains.placement_text)."""
    if c.gpus < c.gpus_per_node:  # part of one node (--gpus below a node's)
        return f"{c.gpus} of one node's {c.gpus_per_node} GPUs"
    if not c.nvlink_domain or c.nvlink_domain == c.gpus_per_node:
        return f"{c.nodes} x {c.gpus_per_node} GPUs"
    return (
        f"{c.nodes} x {c.gpus_per_node} GPUs, {placement_text(c.gpus, c.gpus_per_node, c.nvlink_domain, c.domain_share)}; each group "
        "priced by where its members sit (NVLink inside a domain, the network between, the slowest link setting a ring)"
    )


def batch_note(c: Cluster, t: Training, layers: int, tp: int) -> str | None:
    """A line when the global batch is too small for the GPUs: at no pipeline depth searched
    (``pipeline_sizes``, up to the layers) does each data-parallel pipeline get 2pp micro-batches
    of one sequence without context parallelism; with what would change that."""
    gpus = c.gpus
    if t.seq >= 16384:  # long sequences: context parallelism is the usual answer, not a batch too small
        return None
    pps = [pp for pp in pipeline_sizes(gpus // tp) if pp <= layers]
    if any(fed(t, gpus // (tp * pp), pp) for pp in pps if gpus % (tp * pp) == 0):
        return None
    tokens = t.global_batch * t.seq / gpus
    need = min(2 * pp * gpus // (tp * pp) for pp in pps if gpus % (tp * pp) == 0)
    return (
        f"The global batch is small for {gpus} GPUs: {t.global_batch} sequences of {t.seq} tokens are {tokens:,.0f} tokens "
        f"per GPU per step, and at no pipeline depth does each data-parallel pipeline get 2pp micro-batches without "
        f"context parallelism (at tp{tp}). A global batch of {need:,} sequences or more (or fewer GPUs) would; otherwise context "
        "parallelism (--cp) trades data-parallel pipelines for context ranks, as searched here."
    )


def layout_assumptions(plan: Plan) -> list[tuple[str, str]]:
    """The report's assumption rows for context parallelism and the expert mesh of the
    recommendation, where it has them."""
    best = plan.best
    if best is None:
        return []
    lay, rows = best.candidate.layout, []
    if lay.cp > 1:
        rows.append(("context parallelism", cp_text(plan.model, plan.cluster, plan.training, lay)))
    if plan.model.moe:
        rows.append(("expert mesh", mesh_text(lay)))
    return rows
