"""Which tensor-parallel collectives the backward of a compiled, fully checkpointed
torchtitan block runs again, counted in torch 2.13's own graphs on two gloo ranks and held
against ``layer_costs``' full-recompute rerun under ``fused_kernels = "inductor"``.

torchtitan 9dec370 wraps each block in full activation checkpointing (non-reentrant:
``ptd_checkpoint_wrapper``) and then compiles it (``apply_compile``). The backward graph
holds the recomputed forward, and the partitioner keeps only what the gradients need:
the block's last row-parallel collective (w2's reduce-scatter, or its all-reduce without
sequence parallelism) feeds only the block's output, which no gradient reads, so it is
not run again; wo's feeds the MLP's norm, whose backward reads its input, so it is.
Counted on each post-grad graph (``post_grad_custom_post_pass``) of the block built as
torchtitan's apply_tp plans it (tests/titan_block.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")
gloo_ranks = pytest.importorskip("gloo_ranks")  # after torch: it imports torch.multiprocessing

from pipesim.planner.collectives import tp_halves  # noqa: E402
from pipesim.planner.layer_costs import layer_costs  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, load_cluster  # noqa: E402
from pipesim.planner.training import Training  # noqa: E402

pytestmark = pytest.mark.runtime

B, S, H, HEADS, F, TP = 2, 8, 16, 4, 32, 2
KINDS = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce")


def _rank(rank: int, store_file: str, out: str) -> None:
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch._inductor.fx_passes.micro_pipeline_tp import _is_backward
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.tensor.parallel import parallelize_module

    from titan_block import Block, titan_plan

    graphs: list[dict] = []

    class Count(CustomGraphPass):
        def __call__(self, graph):
            counts = dict.fromkeys(KINDS, 0)
            for node in graph.nodes:
                target = str(node.target)
                for k in KINDS:
                    if node.op == "call_function" and target.startswith(f"_c10d_functional.{k}."):
                        counts[k] += 1
            graphs.append({"backward": _is_backward(graph), **counts})

        def uuid(self):
            return "pipesim-compiled-recompute-collectives"

    inductor_config.post_grad_custom_post_pass = Count()
    mesh = gloo_ranks.join_group(rank, store_file, TP)
    result = {}
    for sp in (True, False):
        graphs.clear()
        torch._dynamo.reset()
        torch.manual_seed(0)
        block = Block(H, HEADS, F)
        parallelize_module(block, mesh, titan_plan(sp))
        compiled = torch.compile(checkpoint_wrapper(block, preserve_rng_state=False), fullgraph=True)
        x = torch.randn(B, S // TP if sp else S, H, requires_grad=True)
        compiled(x).sum().backward()
        result["sp" if sp else "no sp"] = {("backward" if g.pop("backward") else "forward"): g for g in graphs}
    # eager, each pass's collectives as the styles issue them (DTensor's redistributions)
    from torch.utils._python_dispatch import TorchDispatchMode

    class Issued(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.counts = dict.fromkeys(KINDS, 0)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            for k in KINDS:
                if str(func).startswith(f"_c10d_functional.{k}."):
                    self.counts[k] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    block = Block(H, HEADS, F)
    parallelize_module(block, mesh, titan_plan(True))
    forward, backward = Issued(), Issued()
    with forward:
        y = checkpoint_wrapper(block, preserve_rng_state=False)(torch.randn(B, S // TP, H, requires_grad=True))
    with backward:
        y.sum().backward()
    result["eager sp"] = {"forward": forward.counts, "backward": backward.counts}
    gloo_ranks.leave_group(rank, out, result)


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    return gloo_ranks.launched(tmp_path_factory, "compiled_recompute", _rank, TP, 240)


def test_sequence_parallel_rerun_drops_the_last_reduce_scatter(graphs):
    """Forward: two all-gathers and two reduce-scatters. Backward: the rerun's two
    all-gathers and wo's reduce-scatter, then the gradients' two all-gathers and two
    reduce-scatters; w2's reduce-scatter is not run again."""
    g = graphs["sp"]
    assert g["forward"] == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2, "all_reduce": 0}
    assert g["backward"] == {"all_gather_into_tensor": 2 + 2, "reduce_scatter_tensor": 1 + 2, "all_reduce": 0}


def test_without_sequence_parallelism_the_last_all_reduce(graphs):
    """Forward: two all-reduces (wo's, w2's outputs). Backward: wo's again, then one for
    each column-parallel linear's input gradient (wq, wk, wv, w1, w3); w2's is not run
    again."""
    g = graphs["no sp"]
    assert g["forward"] == {"all_gather_into_tensor": 0, "reduce_scatter_tensor": 0, "all_reduce": 2}
    assert g["backward"] == {"all_gather_into_tensor": 0, "reduce_scatter_tensor": 0, "all_reduce": 1 + 5}


M = Model("m", 1, 4096, 32, 32000, Attention(kv_heads=8), (), 14336)
H100 = load_cluster("h100")
TP8 = Layout(1, 1, tp=8, micro_batch=1)
COMPILED = Training(seq=8192, fused_kernels="inductor", tp_overlap="none", sequence_parallel=True)


def test_eager_checkpointing_stops_before_it_too(graphs):
    """Non-reentrant torch.utils.checkpoint stops recomputing once the last tensor the
    backward needs is rebuilt (w2's input), before w2's reduce-scatter: the same counts
    eager (not priced: no published row runs torchtitan eager with tensor parallelism)."""
    assert graphs["eager sp"] == graphs["sp"]


@pytest.mark.parametrize("sp", [True, False], ids=["sp", "no sp"])
def test_pipesim_reruns_what_torch_reruns(sp):
    """layer_costs' compiled full recompute adds back the forward's collectives (tp_halves,
    around attention and around the MLP) less the MLP's row-parallel one, which the tests
    above find torch does not run again; other kernels' full recompute reruns them all
    (Megatron-LM's CheckpointFunction reruns the whole forward)."""
    t = replace(COMPILED, sequence_parallel=sp)
    gather, row = tp_halves(M, H100, t, TP8)
    full, none = (layer_costs(M, 0, H100, t, TP8, rc) for rc in ("full", "none"))
    rerun = full.dispatch_b + full.combine_b - none.dispatch_b - none.combine_b
    assert rerun == pytest.approx(2 * (gather + row) - row)
    eager = replace(t, fused_kernels="te")
    full, none = (layer_costs(M, 0, H100, eager, TP8, rc) for rc in ("full", "none"))
    assert full.dispatch_b + full.combine_b - none.dispatch_b - none.combine_b == pytest.approx(2 * (gather + row))
