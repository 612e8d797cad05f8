"""When DTensor tensor parallelism (torchtitan without AsyncTP) issues and waits for its
backward collectives, run on two real gloo ranks and held against ``tp_overlap = "none"``.

Two CPU processes build a Llama feed-forward half the way torchtitan's parallelize_llama
does (ColwiseParallel w1 and w3, RowwiseParallel w2; with sequence parallelism also
SequenceParallel on the norm and a PrepareModuleInput from Shard(1) to Replicate), run
forward and backward, and log every op the backward dispatches (``TorchDispatchMode``:
DTensor's aten ops and the ``_c10d_functional`` collectives with their ``wait_tensor``).
DTensor decides where the waits go (the functional collectives, the same for every
backend), so gloo's order is NCCL's: on a GPU a collective starts after the kernels
issued before it, and the compute issued after its wait starts after it ends.

The log is reduced to the multiplies (told apart by their output shapes), collectives,
waits and other compute. Megatron-LM and Transformer Engine (``tp_overlap = "backward"``)
issue the column-parallel multiply's input-gradient collective between its input- and
weight-gradient multiplies and wait after the second. torch 2.13 runs, per linear, the
weight-gradient then the input-gradient multiply (autograd's MmBackward), then issues
the all-reduce (without sequence parallelism, one per column-parallel linear) or the one
reduce-scatter (with it, after every column-parallel linear of the half) and waits for
it before the next op: nothing hides, as the pins in
benchmarks/data/published_runs.toml say. These tests fail if that stops being so.
"""

from __future__ import annotations

import datetime
import json
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
run_ranks = pytest.importorskip("gloo_ranks").run_ranks  # after torch: it imports torch.multiprocessing

pytestmark = pytest.mark.runtime

# tokens, hidden and FFN width all differ, so a multiply's output shape names it (the log
# sees DTensor's ops, hence global shapes)
B, S, H, F, TP = 2, 8, 12, 40, 2
T = B * S
# (a weight gradient comes out in its weight's shape: w1 and w3 are [F, H], w2 [H, F])
MM_ROLES = {(T, H): "col.dgrad", (F, H): "col.wgrad", (T, F): "row.dgrad", (H, F): "row.wgrad"}
COLLECTIVES = {"all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor"}
BOOKKEEPING = {"view", "t", "detach", "expand", "split", "cat", "clone", "_wrap_tensor_autograd", "ones_like"}


def reduce(ops: list[tuple[str, list[int]]]) -> list[str]:
    """The backward's ops as roles: multiplies by output shape, collectives and waits by
    name, every other computing op as ``compute``; views and copies that move no work
    (and the collectives' own bookkeeping) dropped."""
    out = []
    for name, shape in ops:
        if name == "mm":
            out.append(MM_ROLES[tuple(shape)])
        elif name in COLLECTIVES or name == "wait_tensor":
            out.append(name)
        elif name not in BOOKKEEPING:
            out.append("compute")
    return out


def _rank(rank: int, store_file: str, out_dir: str) -> None:
    """One tensor-parallel rank: the two layouts' backward op logs, written by rank 0."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    from torch.utils._python_dispatch import TorchDispatchMode

    from titan_ffn import Half

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            shape = list(out.shape) if isinstance(out, torch.Tensor) else []
            self.ops.append((func.overloadpacket.__name__, shape))
            return out

    dist.init_process_group(
        "gloo", init_method=f"file://{store_file}", rank=rank, world_size=TP, timeout=datetime.timedelta(seconds=30)
    )
    mesh = init_device_mesh("cpu", (TP,))
    logs = {}
    for sp in (False, True):
        torch.manual_seed(0)
        half = Half(H, F)
        columns = {"feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel()}
        if sp:  # torchtitan's parallelize_llama (apply_tp), its feed-forward entries
            plan = columns | {
                "ffn_norm": SequenceParallel(),
                "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            }
        else:
            plan = columns | {"feed_forward.w2": RowwiseParallel()}
        parallelize_module(half, mesh, plan)
        x = torch.randn(B, S // TP if sp else S, H, requires_grad=True)
        loss = half(x).sum()
        with Log() as log:
            loss.backward()
        logs["sp" if sp else "plain"] = log.ops
    if rank == 0:
        with open(os.path.join(out_dir, "ops.json"), "w") as f:
            json.dump(logs, f)
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def backward_ops(tmp_path_factory):
    """Both layouts' backward op logs from one two-rank launch, given up on (its
    processes killed) after 60 s so a stuck collective cannot hang the suite."""
    d = tmp_path_factory.mktemp("tp_overlap")
    run_ranks(_rank, (str(d / "store"), str(d)), TP, 60)
    logs = json.loads((d / "ops.json").read_text())
    return {k: reduce(v) for k, v in logs.items()}


def column_overlap(ops: list[str]) -> list[str]:
    """pipesim's ``tp_overlap`` word for each column-parallel multiply's backward in a
    reduced log: ``"backward"`` when the first reduction after its input-gradient multiply
    is issued before its weight-gradient multiply and waited for after it (Megatron-LM,
    Transformer Engine), ``"none"`` when it is issued after both and waited for before any
    other op, ``"other"`` otherwise."""
    dgrads = [i for i, op in enumerate(ops) if op == "col.dgrad"]
    wgrads = [i for i, op in enumerate(ops) if op == "col.wgrad"]
    verdicts = []
    for d, w in zip(dgrads, wgrads, strict=True):
        issued = next(i for i in range(d, len(ops)) if ops[i] in ("all_reduce", "reduce_scatter_tensor"))
        waited = ops.index("wait_tensor", issued)
        if issued < w < waited:
            verdicts.append("backward")
        elif issued > max(d, w) and waited == issued + 1:
            verdicts.append("none")
        else:
            verdicts.append("other")
    return verdicts


def test_column_overlap_tells_megatron_from_none():
    """The verdict the torch runs are held to can come out otherwise: Megatron-LM's order
    (the all-reduce or reduce-scatter launched between the two multiplies, waited for
    after the weight gradient) reads "backward"."""
    megatron = ["col.dgrad", "all_reduce", "col.wgrad", "wait_tensor", "compute"]
    assert column_overlap(megatron) == ["backward"]
    assert column_overlap([op.replace("all_reduce", "reduce_scatter_tensor") for op in megatron]) == ["backward"]
    assert column_overlap(["col.dgrad", "col.wgrad", "all_reduce", "compute", "wait_tensor"]) == ["other"]
    assert column_overlap(["col.wgrad", "col.dgrad", "all_reduce", "wait_tensor", "compute"]) == ["none"]


def test_plain_tp_all_reduces_after_the_weight_gradient_and_waits_at_once(backward_ops):
    """Without sequence parallelism each column-parallel multiply's input gradient is
    all-reduced only after both its multiplies, and waited for before the next op (w3's
    before w1's backward starts): nothing hides (tp_overlap = "none")."""
    ops = backward_ops["plain"]
    assert column_overlap(ops) == ["none", "none"], ops
    assert ops.count("all_reduce") == 2 and ops.count("wait_tensor") == 2, ops
    # the row-parallel multiply's backward (first, w2) is the identity: no collective before it
    assert ops.index("all_reduce") > ops.index("row.dgrad") and ops.index("all_reduce") > ops.index("row.wgrad")


def test_sequence_parallel_reduce_scatters_after_both_columns(backward_ops):
    """With sequence parallelism the row-parallel multiply's output gradient is gathered
    and waited for first; the column-parallel input gradients (w1's and w3's, summed) are
    reduce-scattered once, after all four of their multiplies, and waited for at once; no
    re-gather of the input (the forward kept the gathered one: sp_saves_gathered)."""
    ops = backward_ops["sp"]
    assert column_overlap(ops) == ["none", "none"], ops
    assert ops[:2] == ["all_gather_into_tensor", "wait_tensor"], ops
    assert ops.index("row.dgrad") > 1 and ops.index("row.wgrad") > 1
    scatter = ops.index("reduce_scatter_tensor")
    assert all(i < scatter for i, op in enumerate(ops) if op.startswith("col.")), ops
    assert "all_reduce" not in ops and ops.count("all_gather_into_tensor") == 1 and ops.count("wait_tensor") == 2
