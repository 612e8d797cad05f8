"""Whether torchao's Float8 tensor parallelism (torchtitan's Float8 rows with tensor
parallelism) all-reduces each tensorwise cast's amax over the tensor group, counted on two
gloo ranks with torch 2.13 and held against ``torchao_tensor_parallel.amax_reductions``.

torchao eab345c neither asks for the reduction nor skips it: its cast of a DTensor runs
as DTensor ops (tests/torchao_tp.py says where each is read), so the amax of a sharded
tensor is ``Partial(max)`` and the scale computed from it all-reduces it. The casts are
written out in tests/torchao_tp.py (the scale as torchao takes it, the styles where
torchao's cast), and torchtitan's feed-forward half (tests/titan_ffn.py) is run through
them under torchtitan 9dec370's plan: the collectives counted are what DTensor issues.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
gloo_ranks = pytest.importorskip("gloo_ranks")  # after torch: it imports torch.multiprocessing

from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model  # noqa: E402
from pipesim.planner.torchao_tensor_parallel import amax_reductions  # noqa: E402
from pipesim.planner.training import Training  # noqa: E402

pytestmark = pytest.mark.runtime

B, S, H, F, TP = 2, 8, 16, 32, 2


class Collectives:
    """The collectives DTensor issues inside the block, by name (torch's CommDebugMode)."""

    def __enter__(self):
        from torch.distributed.tensor.debug import CommDebugMode

        self.mode = CommDebugMode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.counts = {str(op).split(".")[-1]: n for op, n in self.mode.get_comm_counts().items()}


def _rank(rank: int, store_file: str, out: str) -> None:
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    from titan_ffn import Half
    from torchao_tp import Float8Colwise, Float8PrepareInput, Float8Rowwise, tensorwise_scale, weight_scales

    mesh = gloo_ranks.join_group(rank, store_file, TP)
    result: dict[str, object] = {}
    # one cast of a [B, S, H] bf16 tensor, sharded as the sequence shard, as a
    # column-parallel output (or a row-parallel input), or replicated
    torch.manual_seed(rank)
    for name, placement in (("sequence shard", Shard(1)), ("hidden shard", Shard(-1)), ("replicated", Replicate())):
        x = DTensor.from_local(torch.randn(B, S, H, dtype=torch.bfloat16) * (rank + 1), mesh, [placement], run_check=False)
        with Collectives() as log:
            scale = tensorwise_scale(x)
        result[name] = {"collectives": log.counts, "scale": scale.to_local().item(), "full": x.full_tensor().abs().max().item()}
    # torchtitan's feed-forward half under its Float8 plan, weights scaled every forward or not
    for weights in (False, True):
        torch.manual_seed(0)
        half = Half(H, F).to(torch.bfloat16)
        plan = {
            "ffn_norm": SequenceParallel(),
            "feed_forward": Float8PrepareInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": Float8Colwise(),
            "feed_forward.w3": Float8Colwise(),
            "feed_forward.w2": Float8Rowwise(output_layouts=Shard(1)),
        }
        parallelize_module(half, mesh, plan)
        if weights:
            weight_scales(half)
        x = torch.randn(B, S // TP, H, dtype=torch.bfloat16, requires_grad=True)
        with Collectives() as forward:
            y = half(x)
        with Collectives() as backward:
            y.float().sum().backward()
        result[f"half, weights {weights}"] = {"forward": forward.counts, "backward": backward.counts}
    gloo_ranks.leave_group(rank, out, result)


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    return gloo_ranks.launched(tmp_path_factory, "torchao_tp", _rank, TP)


@pytest.mark.parametrize("name", ["sequence shard", "hidden shard"])
def test_a_sharded_tensors_cast_all_reduces_its_amax(counted, name):
    """One all-reduce, and both ranks then hold the whole tensor's scale."""
    got = counted[name]
    assert got["collectives"] == {"all_reduce": 1}
    assert got["scale"] == pytest.approx(448.0 / got["full"], rel=1e-6)


def test_a_replicated_tensors_cast_reduces_nothing(counted):
    assert counted["replicated"]["collectives"] == {}


def test_the_feed_forward_half_waits_for_one_amax_a_cast(counted):
    """Forward: the block input's cast before its all-gather and w2's input's; backward:
    the gradients of w1's, w3's and w2's outputs. Each weight's scale adds one forward
    when FSDP's float8 all-gather does not precompute it."""
    plain, weights = counted["half, weights False"], counted["half, weights True"]
    assert plain["forward"] == {"all_reduce": 2, "all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}
    assert plain["backward"] == {"all_reduce": 3, "all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}
    assert weights["forward"]["all_reduce"] == 2 + 3
    assert weights["backward"] == plain["backward"]


def test_pipesim_counts_what_torch_issued(counted):
    """amax_reductions for a SwiGLU layer's MLP half is the half's count; the attention
    half (wq, wk, wv column-parallel, wo row-parallel) follows the same plan: forward its
    input's cast and wo's input's, backward the four outputs' gradients."""
    plain, weights = counted["half, weights False"], counted["half, weights True"]
    m = Model("m", 1, H, 4, 128, Attention(), (), F)
    t = Training(seq=S, precision="fp8", fp8_scaling="tensor", fp8_casts="torchao", zero=3, fsdp_float8_all_gather=True)
    lay = Layout(1, 1, tp=TP, micro_batch=B)
    _, _, mlp_f, mlp_b = amax_reductions(m, 0, t, lay)
    assert (mlp_f, mlp_b) == (plain["forward"]["all_reduce"], plain["backward"]["all_reduce"])
    _, _, mlp_f, _ = amax_reductions(m, 0, replace(t, fsdp_float8_all_gather=False), lay)
    assert mlp_f == weights["forward"]["all_reduce"]
