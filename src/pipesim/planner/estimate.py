"""Where the planner's estimates live (this module only re-exports them, for code written
against the single estimate module the planner had before it was split by what it models):

- ``layout``: the ``Layout`` of one candidate;
- ``params``: parameter counts;
- ``compute``: FLOPs and kernel times (matrix multiplies, attention, memory-bound kernels);
- ``collectives``: tensor-parallel, expert, pipeline and data-parallel communication;
- ``layer_costs``: each layer as ``LayerCosts``;
- ``split`` and ``stages``: the layers of each stage and the component cost model over them;
- ``step``: the data-parallel collectives and the optimizer at the step's ends;
- ``footprint``: activation and parameter bytes, the memory model.
"""

from .collectives import moe_comm, p2p_seconds, ring_bandwidth, tied_embedding_sync, tp_allreduce
from .compute import (
    accumulation_seconds,
    attention_core,
    elementwise_bytes,
    gemm,
    layer_flops,
    model_flops_per_token,
)
from .footprint import layer_activation, memory_model, stage_params
from .layer_costs import embedding_costs, head_costs, layer_costs
from .layout import Layout, default_ep
from .params import active_params, attention_params, embedding_params, layer_params, mlp_params, total_params
from .split import balanced_partition, partition, ranges_of
from .stages import component_costs, stage_parts
from .step import step_overhead

__all__ = [
    "Layout",
    "accumulation_seconds",
    "active_params",
    "attention_core",
    "attention_params",
    "balanced_partition",
    "component_costs",
    "default_ep",
    "elementwise_bytes",
    "embedding_costs",
    "embedding_params",
    "gemm",
    "head_costs",
    "layer_activation",
    "layer_costs",
    "layer_flops",
    "layer_params",
    "memory_model",
    "mlp_params",
    "model_flops_per_token",
    "moe_comm",
    "p2p_seconds",
    "ring_bandwidth",
    "partition",
    "ranges_of",
    "stage_params",
    "stage_parts",
    "step_overhead",
    "tied_embedding_sync",
    "total_params",
    "tp_allreduce",
]
