"""Which multiplies the backward of a compiled, fully checkpointed torchtitan block runs
again, counted in torch 2.13's own post-grad graphs, against ``layer_costs``' full-recompute
rerun under ``fused_kernels = "inductor"``: the partitioner keeps of the recomputed forward
only what a gradient reads, and w2's output (the block's) is read by none, so w2's
multiply is not run again (tests/titan_block.py: torchtitan's block with its attention in
plain ops, nine forward multiplies: wq, wk, wv, two batched for the scores, wo, w1, w3, w2)."""

from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
if not any(shutil.which(cxx) for cxx in ("g++", "c++", "clang++")):
    pytest.skip("Inductor's CPU backend needs a C++ compiler", allow_module_level=True)

from pipesim.planner.compute import mlp_shapes  # noqa: E402
from pipesim.planner.layer_costs import recomputed_mlp_shapes  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import model_from_table  # noqa: E402
from pipesim.planner.training import Training  # noqa: E402

MULTIPLIES = ("aten.mm.", "aten.addmm.", "aten.bmm.")


def _multiplies_by_graph() -> dict[str, int]:
    import torch._inductor.config as inductor_config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch._inductor.fx_passes.micro_pipeline_tp import _is_backward
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from titan_block import Block

    counts: dict[str, int] = {}

    class Count(CustomGraphPass):
        def __call__(self, graph):
            n = sum(1 for x in graph.nodes if x.op == "call_function" and str(x.target).startswith(MULTIPLIES))
            counts["backward" if _is_backward(graph) else "forward"] = n

        def uuid(self):
            return "pipesim-compiled-recompute-multiplies"

    torch._dynamo.reset()
    torch.manual_seed(0)
    block = checkpoint_wrapper(Block(16, 4, 32))  # torchtitan's ptd_checkpoint_wrapper: non-reentrant
    # no cached graph: a cache hit skips the post-grad passes, the count among them
    uncached = torch._functorch.config.patch(enable_autograd_cache=False)
    with inductor_config.patch(post_grad_custom_post_pass=Count(), fx_graph_cache=False), uncached:
        try:
            out = torch.compile(block)(torch.randn(2, 8, 16, requires_grad=True))
        except Exception as e:  # noqa: BLE001
            if "CppCompileError" in f"{type(e).__name__}: {e}":
                pytest.skip(f"Inductor could not compile its C++ kernels here: {str(e).splitlines()[0][:200]}")
            raise
        out.sum().backward()
    return counts


def test_the_compiled_recompute_leaves_out_w2s_multiply():
    checkpointed = _multiplies_by_graph()
    assert checkpointed["forward"] == 9
    # each forward multiply has two in the backward (its two operands' gradients: 18, as
    # the same block compiled without checkpointing counts), and the recomputation reruns
    rerun = checkpointed["backward"] - 2 * 9
    assert rerun == 8  # every forward multiply but w2's
    # pipesim's rerun of the MLP: w1 and w3 (one priced shape of twice the width), not w2
    m = model_from_table({"name": "titan", "layers": 1, "hidden": 16, "heads": 4, "vocab": 32, "mlp": {"dense_ffn": 32}}, "t")
    assert m.activation == "swiglu"
    t, lay = Training(seq=8, fused_kernels="inductor"), Layout(pp=1, dp=1)
    assert mlp_shapes(m, 0, t, lay)[:-1] == recomputed_mlp_shapes(m, 0, t, lay)
    attention_rerun = 6  # wq, wk, wv, the two batched score multiplies, wo: all read by a gradient
    assert rerun - attention_rerun == 2 and recomputed_mlp_shapes(m, 0, t, lay)[0][1] == 2 * 32
