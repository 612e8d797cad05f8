"""What torch Inductor's micro-pipeline pass (torchtitan's AsyncTP) can fuse in a
compiled torchtitan feed-forward half, held against ``tp_overlap = "micro_pipeline"``.

Two gloo ranks build the half as torchtitan's apply_tp does under sequence parallelism
(SequenceParallel norm, PrepareModuleInput from Shard(1) to Replicate, ColwiseParallel w1
and w3, RowwiseParallel w2 to Shard(1)), wrap it in full activation checkpointing, compile
it, and run the pass's own pattern finders on each post-grad graph
(``post_grad_custom_post_pass``): which all-gathers feed multiplies and which
reduce-scatters are fed by one. The fusion itself needs NCCL and symmetric memory, so it
is not run; what it would fuse is what these finders return (micro_pipeline_tp.py:
``fuse_all_gather_matmul`` on ``_find_consumer_matmuls``, ``fuse_matmul_reduce_scatter``
on ``_find_producer_matmul``).

tp_overlap.py's rule: the forward's all-gather feeds w1 and w3 and its reduce-scatter is
fed by w2; the backward's gradient all-gather feeds w2's input-gradient multiply and the
recomputed forward's all-gather w1 and w3 again; the backward's reduce-scatter is fed by
the sum of w1's and w3's input gradients, which no pattern matches.
"""

from __future__ import annotations

import datetime
import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
run_ranks = pytest.importorskip("gloo_ranks").run_ranks  # after torch: it imports torch.multiprocessing

pytestmark = pytest.mark.runtime

B, S, H, F, TP = 2, 8, 16, 32, 2


def _rank(rank: int, store_file: str, out: str) -> None:
    """One rank: compile, run forward and backward, and (rank 0) write what the finders saw."""
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch._inductor.fx_passes import micro_pipeline_tp as mpt
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    from titan_ffn import Half

    graphs = []

    class Finders(CustomGraphPass):
        def __call__(self, graph):
            gathers = [len(mpt._find_consumer_matmuls(ag.res_node)) for ag in mpt.find_all_gather_patterns(graph)]
            scatters = [mpt._find_producer_matmul(rs.input_node) is not None for rs in mpt.find_reduce_scatter_patterns(graph)]
            graphs.append({"backward": mpt._is_backward(graph), "gathers": gathers, "scatters": scatters})

        def uuid(self):
            return "pipesim-micro-pipeline-finders"

    inductor_config.post_grad_custom_post_pass = Finders()

    dist.init_process_group(
        "gloo", init_method=f"file://{store_file}", rank=rank, world_size=TP, timeout=datetime.timedelta(seconds=60)
    )
    mesh = init_device_mesh("cpu", (TP,))
    torch.manual_seed(0)
    half = Half(H, F)
    plan = {
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(half, mesh, plan)
    block = torch.compile(checkpoint_wrapper(half, preserve_rng_state=False), fullgraph=True)
    block(torch.randn(B, S // TP, H, requires_grad=True)).sum().backward()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(graphs, f)
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """The finders' results per post-grad graph, from one two-rank launch given up on
    (its processes killed) after 120 s."""
    d = tmp_path_factory.mktemp("micro_pipeline")
    out = d / "graphs.json"
    run_ranks(_rank, (str(d / "store"), str(out)), TP, 120)
    return {("backward" if g["backward"] else "forward"): g for g in json.loads(out.read_text())}


def test_forward_collectives_match(graphs):
    """Forward: one all-gather feeding w1 and w3, one reduce-scatter fed by w2."""
    assert graphs["forward"]["gathers"] == [2]
    assert graphs["forward"]["scatters"] == [True]


def test_backward_reduce_scatter_matches_nothing(graphs):
    """Backward: the gradient all-gather feeding w2's input-gradient multiply and the
    recomputed forward's all-gather feeding w1 and w3 both match; the one reduce-scatter
    (the recomputed w2 output's is dead code), fed by w1's plus w3's input gradients,
    does not."""
    assert sorted(graphs["backward"]["gathers"]) == [1, 2]
    assert graphs["backward"]["scatters"] == [False]
