"""What PyTorch's own parallelism keeps, measured on the CPU and held against pipesim.

Each case runs the real PyTorch code torchtitan runs on (DTensor tensor parallelism,
FSDP2's fully_shard, torch.distributed.pipelining) in one process: a fake process group
of the wanted size (``torch.testing._internal.distributed.fake_pg``) gives every
collective its real output shape without other ranks. The expected bytes come from the
run, never from the formula under test.
"""

from __future__ import annotations

import datetime
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from pipesim.memory import MemoryModel  # noqa: E402
from pipesim.planner.activations import cp_attention_transient, head_saved, layer_saved  # noqa: E402
from pipesim.planner.device_memory import pipeline_buffers  # noqa: E402
from pipesim.planner.footprint import memory_model  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.pipeline_io import stage_boundary_pairs  # noqa: E402
from pipesim.planner.specs import Attention, Model, Training  # noqa: E402
from torch_blocks import DT, saved_bytes  # noqa: E402

B, S, H, V = 2, 64, 32, 96


def _model() -> Model:
    return Model("tiny", 1, H, 4, V, Attention(kv_heads=4), (), 64)


def _owned(module) -> list:
    """The local tensors of a module's (DTensor) parameters."""
    return [p.to_local() if hasattr(p, "to_local") else p for p in module.parameters()]


@pytest.mark.parametrize("tp", [2, 4])
def test_output_projection_keeps_the_gathered_input(fake_group, tp):
    """torchtitan's head under tensor parallelism: the final norm SequenceParallel, the
    output ColwiseParallel(input_layouts=Shard(1)). The multiply keeps the all-gathered
    norm output, the whole sequence, not this rank's shard."""
    from torch import nn
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, SequenceParallel, parallelize_module

    mesh = fake_group(tp)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.output = nn.RMSNorm(H), nn.Linear(H, V, bias=False)

        def forward(self, x):
            return self.output(self.norm(x))

    head = Head().to(DT)
    plan = {
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False),
    }
    parallelize_module(head, mesh, plan)
    normed = head.norm(torch.randn(B, S // tp, H, dtype=DT)).detach()
    measured = saved_bytes(lambda: head.output(normed.requires_grad_()), _owned(head))
    assert measured == B * S * H * 2  # the gathered sequence, from torch
    t = Training(seq=S, sp_saves_gathered=True)
    assert head_saved(_model(), t, tp)["final norm output"] * B * S == measured
    megatron = head_saved(_model(), Training(seq=S), tp)["final norm output"] * B * S
    assert megatron == measured / tp  # Megatron-LM keeps the shard


def test_block_projections_keep_the_gathered_norm_output(fake_group):
    """A torchtitan block's attention input: PrepareModuleInput gathers the sequence-
    parallel norm output, and wq, wk, wv (ColwiseParallel) keep that one tensor."""
    from torch import nn
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, parallelize_module

    tp = 2
    mesh = fake_group(tp)

    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq, self.wk, self.wv = (nn.Linear(H, H, bias=False) for _ in range(3))

        def forward(self, x):
            return self.wq(x), self.wk(x), self.wv(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = QKV()

    block = Block().to(DT)
    plan = {
        "attention": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
    }
    parallelize_module(block, mesh, plan)
    x = torch.randn(B, S // tp, H, dtype=DT, requires_grad=True)
    measured = saved_bytes(lambda: block.attention(x), _owned(block))
    assert measured == B * S * H * 2
    t = Training(seq=S, sp_saves_gathered=True)
    assert layer_saved(_model(), 0, t, tp)["attention norm output"] * B * S == measured


def _stage_bytes_for(n: int, t: Training, lay: Layout) -> tuple[float, float, float]:
    """pipesim's (parameter, gradient, optimizer) bytes for a stage of ``n`` parameters
    under ``t`` and ``lay``: memory_model's per-parameter bytes and sharding applied to n."""
    mm = memory_model(_model(), t, lay, 1, "full")  # one stage: bytes per parameter only
    sized = MemoryModel(
        params=(n,),
        activation=(0.0,),
        param_bytes=mm.param_bytes,
        grad_bytes=mm.grad_bytes,
        optimizer_bytes=mm.optimizer_bytes,
        zero=mm.zero,
        dp=mm.dp,
    )
    return sized.stage_bytes(0)


def test_fsdp2_shards_are_fp32_with_no_bf16_copy(fake_group):
    """fully_shard with a bf16 MixedPrecisionPolicy over an fp32 model, after one AdamW
    step: the rank holds fp32 parameter shards, fp32 gradient shards and two fp32 moments,
    16 bytes per parameter over dp; pipesim's ZeRO-3 accounting with fsdp_fp32_shards
    holds the same, without it 18 (a bf16 shard beside a 12-byte optimizer state). With
    zero_grad_frees, no gradient shard through the next forward, as in torch."""
    from torch import nn
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dp = 8
    mesh = fake_group(dp)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.Linear(128, 64, bias=False))
    n = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model:
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    params = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())
    grads = sum(p.grad.to_local().nbytes for p in model.parameters())
    states = sum(v.to_local().nbytes for s in opt.state.values() for v in s.values() if v.dim() > 0)
    measured = params + grads + states

    def pipesim(**kw) -> float:
        return sum(_stage_bytes_for(n, Training(zero=3, **kw), Layout(1, dp)))

    assert pipesim(fsdp_fp32_shards=True) == measured
    assert pipesim() == measured * 18 / 16
    # the next step: zero_grad() (set_to_none, PyTorch's default) frees the gradient
    # shards, and the forward, whose end is the activations' peak, makes none
    opt.zero_grad()
    model(torch.randn(4, 64))
    assert all(p.grad is None for p in model.parameters())
    assert pipesim(fsdp_fp32_shards=True, zero_grad_frees=True) == params + states


@pytest.fixture
def one_rank_pipeline():
    """``run(widths, M, mb)``: one step of ScheduleInterleaved1F1B over linear stages of
    those output widths (the first takes H), all on one gloo rank (a world of one),
    with M micro-batches of mb sequences; returns the stages."""
    from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)

    def run(widths: list[int], M: int, mb: int) -> list:
        ins = [H, *widths[:-1]]
        dev = torch.device("cpu")
        stages = [PipelineStage(torch.nn.Linear(i, o).to(DT), s, len(widths), dev) for s, (i, o) in enumerate(zip(ins, widths))]
        sched = ScheduleInterleaved1F1B(stages, M, loss_fn=lambda y, t: y.float().pow(2).mean())
        sched.step(torch.randn(M * mb, S, H, dtype=DT), target=torch.zeros(M * mb), losses=[])
        return stages

    yield run
    dist.destroy_process_group()


def _kept_gathered_stage(mesh):
    """Two blocks under FSDP2 as torchtitan applies it under pipeline parallelism
    (reshard_after_forward False on every block and the root, bf16 weights, fp32
    reduction) and as torch.distributed.pipelining drives every backward but the stage's
    last (stage.py's backward_maybe_with_nosync): (model, its parameter count)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(_LlamaLinears(H, 16, 96) for _ in range(2)))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    model.set_is_last_backward(False)
    model.set_reshard_after_backward(False)
    model.set_requires_gradient_sync(False)
    return model, sum(p.numel() for p in model.parameters())


def test_fsdp2_stage_under_pipelining_holds_bf16_weights_and_fp32_gradients_whole(fake_group):
    """FSDP2 as torchtitan applies it under pipeline parallelism (reshard_after_forward
    False on every block and the root) and as torch.distributed.pipelining drives it for
    every backward but the step's last (set_reshard_after_backward(False),
    set_requires_gradient_sync(False), stage.py's backward_maybe_with_nosync): after two
    micro-batches the rank holds every weight gathered in bf16 and every gradient
    gathered in the fp32 reduce dtype, no bf16 gradient beside it and no shard yet. What
    pipesim's stage kept gathered holds: param_bytes and grad_bytes per parameter, whole."""
    from torch.distributed.fsdp import fully_shard

    dp = 8
    model, n = _kept_gathered_stage(fake_group(dp))
    for _ in range(2):
        model(torch.randn(2, 8, H)).sum().backward()
    states = fully_shard.state(model)._state_ctx.all_states
    held = [fp for st in states if st._fsdp_param_group for fp in st._fsdp_param_group.fsdp_params]
    assert all(fp.unsharded_param.grad is None for fp in held)  # no bf16 gradient kept
    assert all(p.grad is None for p in model.parameters())  # no shard before the last backward
    weights = sum(fp.unsharded_param.untyped_storage().nbytes() for fp in held)
    grads = sum(fp.unsharded_accumulated_grad.untyped_storage().nbytes() for fp in held)
    assert (weights, grads) == (2 * n, 4 * n)  # from torch
    t = Training(zero=3, grad_reduce_bytes=4, fsdp_fp32_shards=True, zero_grad_frees=True)
    p, g, _ = _stage_bytes_for(n, t, Layout(2, dp))  # pipeline parallel: the stage kept gathered
    assert (p, g) == (weights, grads)


def test_fsdp2_stage_under_pipelining_makes_its_gradients_at_its_first_backward(fake_group):
    """When the unsharded fp32 gradients of a stage kept gathered exist: none after the
    step's forwards (zero_grad freed the last step's, and FSDP2 makes them in
    post_backward), all of them after the first backward (to_accumulated_grad_if_needed),
    none once the last backward's post_backward has run with gradient sync, as
    torch.distributed.pipelining's backward_maybe_with_nosync runs it by hand at torch
    1963fc8 (the reduce-scatter copies them out and drops them). What pipesim's
    ``grads_from_first_backward`` holds: the stage's gradient bytes between its first and
    last backward only."""
    from torch.distributed.fsdp import fully_shard

    dp = 8
    model, n = _kept_gathered_stage(fake_group(dp))

    def unsharded_grads() -> int:
        held = [fp.unsharded_accumulated_grad for g in groups for fp in g.fsdp_params]
        return sum(x.untyped_storage().nbytes() for x in held if x is not None)

    outputs = [model(torch.randn(2, 8, H)) for _ in range(2)]  # two micro-batches in flight
    states = fully_shard.state(model)._state_ctx.all_states  # filled by the first forward's lazy init
    groups = [st._fsdp_param_group for st in states if st._fsdp_param_group]
    assert len(groups) == 2
    before = unsharded_grads()
    outputs[0].sum().backward()
    first = unsharded_grads()
    outputs[1].sum().backward()
    model.set_is_last_backward(True)
    model.set_reshard_after_backward(True)
    model.set_requires_gradient_sync(True)
    for g in groups:  # stage.py's run_post_backward at 1963fc8
        g.post_backward()
    fully_shard.state(model)._root_post_backward_final_callback()
    assert (before, first, unsharded_grads()) == (0, 4 * n, 0)  # from torch
    t = Training(zero=3, grad_reduce_bytes=4, fsdp_fp32_shards=True, zero_grad_frees=True, grads_from_first_backward=True)
    mm = memory_model(_model(), t, Layout(2, dp), 2, "full", [range(0, 1), range(1, 1)])  # pipelined: kept gathered
    assert mm.grads_in_backward and _stage_bytes_for(n, t, Layout(2, dp))[1] == first


def test_pipeline_last_stage_keeps_every_output(one_rank_pipeline):
    """torch.distributed.pipelining's last stage keeps each micro-batch's output until the
    next step starts: after a step of M micro-batches it holds M outputs, what
    ``pipeline_buffers`` counts on the last stage (with its receive buffers apart)."""
    M, mb = 4, 2
    kept = one_rank_pipeline([H, V], M, mb)[-1].output_chunks
    measured = sum(o.untyped_storage().nbytes() for o in kept)
    assert len(kept) == M
    lay = Layout(2, 1, micro_batch=mb)
    t = Training(seq=S, pp_keeps_outputs=True)
    outputs = pipeline_buffers(_model(), t, lay, M, last_stage=True, recv_sets=0)
    assert outputs == measured


def test_pipeline_stage_kept_its_input_gradients(one_rank_pipeline, monkeypatch):
    """torch.distributed.pipelining's stage_backward reads each micro-batch's input
    gradient off the receive buffer's ``.grad``. torch 2.13 then sets it to None
    (pytorch/pytorch#164329, October 2025); torch 1963fc8, torchtitan's published runs,
    left it there until the next step's clear_runtime_states. With that one assignment
    undone, a middle stage ends a step of M micro-batches holding M input gradients of
    its input's size: what ``pp_keeps_input_grads`` adds to ``pipeline_buffers``, per
    stage that receives an input."""
    import torch.distributed.pipelining.stage as stage_py

    today = stage_py.stage_backward

    def as_in_1963fc8(stage_output, output_grads, input_values, *args, **kwargs):
        grads = today(stage_output, output_grads, input_values, *args, **kwargs)
        for value, grad in zip(input_values, grads):
            if isinstance(value, torch.Tensor) and grad is not None:
                value.grad = grad
        return grads

    def input_grads(stage) -> list:
        return [a.buffer.grad for recv in stage.args_recv_info.values() for a in recv if not a.is_root_arg]

    M, mb = 4, 2
    assert all(g is None for g in input_grads(one_rank_pipeline([H, H, H], M, mb)[1]))  # torch 2.13 frees them
    monkeypatch.setattr(stage_py, "stage_backward", as_in_1963fc8)
    kept = input_grads(one_rank_pipeline([H, H, H], M, mb)[1])  # the middle stage
    assert len(kept) == M and all(g is not None for g in kept)
    measured = sum(g.untyped_storage().nbytes() for g in kept)
    assert measured == M * mb * S * H * 2  # one bf16 input's size each, from torch
    lay = Layout(3, 1, micro_batch=mb)
    off, on = (pipeline_buffers(_model(), Training(seq=S, pp_keeps_input_grads=x), lay, M) for x in (False, True))
    assert on - off == measured
    both = pipeline_buffers(_model(), Training(seq=S, pp_keeps_input_grads=True), lay, M, input_stages=2)
    assert both - off == 2 * measured  # a rank holding two such stages (interleaved)


def test_pipeline_stage_kept_its_outputs_before_153383(one_rank_pipeline, monkeypatch):
    """torch.distributed.pipelining's forward_one_chunk appended every stage's output to
    ``output_chunks`` until pytorch/pytorch#153383 (May 2025) kept it to the last stage;
    torch 1963fc8, torchtitan's published runs, is older. torch 2.13 keeps none on a
    middle stage; with the old unconditional append put back, a middle stage ends a step
    of M micro-batches holding M outputs of its boundary's size (cleared only when the
    next step starts): what ``pp_keeps_stage_outputs`` adds to ``pipeline_buffers`` per
    stage that sends an output."""
    import torch.distributed.pipelining.stage as stage_py

    today = stage_py._PipelineStageBase.forward_one_chunk

    def as_in_1963fc8(self, *args, **kwargs):
        output = today(self, *args, **kwargs)
        if not self.is_last:  # the last stage appends it already
            self.output_chunks.append(output)
        return output

    M, mb = 4, 2
    assert one_rank_pipeline([H, H, H], M, mb)[1].output_chunks == []  # torch 2.13
    monkeypatch.setattr(stage_py._PipelineStageBase, "forward_one_chunk", as_in_1963fc8)
    kept = one_rank_pipeline([H, H, H], M, mb)[1].output_chunks  # the middle stage
    assert len(kept) == M
    measured = sum(o.untyped_storage().nbytes() for o in kept)
    assert measured == M * mb * S * H * 2  # one bf16 boundary each, from torch
    lay = Layout(3, 1, micro_batch=mb)
    off, on = (
        pipeline_buffers(_model(), Training(seq=S, pp_keeps_outputs=True, pp_keeps_stage_outputs=x), lay, M, output_stages=1)
        for x in (False, True)
    )
    assert on - off == measured


def test_pipeline_stage_input_is_its_first_saved_tensor_and_its_output_waits(one_rank_pipeline, monkeypatch):
    """What ``pipeline_io.stage_boundary_pairs`` takes off and adds to a micro-batch's
    activation, seen in torch 2.13: on a middle stage the tensor its first layer saves
    for the backward is the stage's input buffer itself (``args_recv_info``), not a copy,
    and the stage's output sits in ``fwd_cache`` from its forward until its backward pops
    it; both one boundary in size."""
    import torch.distributed.pipelining.stage as stage_py

    saved, waiting = [], []
    pack = torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x) or x, lambda x: x)
    fwd, bwd = stage_py._PipelineStageBase.forward_one_chunk, stage_py._PipelineStageBase.backward_one_chunk

    def forward(self, chunk, *args, **kwargs):
        if self.stage_index == 1:
            inputs = [a.buffer for a in self.args_recv_info[chunk]]
            saved.clear()
            with pack:
                out = fwd(self, chunk, *args, **kwargs)
            assert any(x.untyped_storage().data_ptr() == inputs[0].untyped_storage().data_ptr() for x in saved)
            return out
        return fwd(self, chunk, *args, **kwargs)

    def backward(self, chunk, *args, **kwargs):
        if self.stage_index == 1:
            waiting.append(self.fwd_cache[chunk][0][0].untyped_storage().nbytes())
        return bwd(self, chunk, *args, **kwargs)

    monkeypatch.setattr(stage_py._PipelineStageBase, "forward_one_chunk", forward)
    monkeypatch.setattr(stage_py._PipelineStageBase, "backward_one_chunk", backward)
    M, mb = 4, 2
    stages = one_rank_pipeline([H, H, H], M, mb)
    b = mb * S * H * 2  # one bf16 boundary, [micro-batch, sequence, hidden]
    assert waiting == [b] * M and stages[1].fwd_cache == {}  # popped by each backward
    lay = Layout(3, 1, micro_batch=mb)
    t = Training(seq=S, pp_keeps_outputs=True)
    assert stage_boundary_pairs(_model(), t, lay, 1, 3, 0.5) == [(-b, 0.5), (b, 1.0)]
    assert stage_boundary_pairs(_model(), t, lay, 0, 3, 0.5) == [(b, 1.0)]  # the first: its output alone
    assert stage_boundary_pairs(_model(), t, lay, 2, 3, 0.5) == [(-b, 0.5)]  # the last: its input alone
    old = replace(t, pp_keeps_stage_outputs=True)  # the outputs counted to the step's end instead
    assert stage_boundary_pairs(_model(), old, lay, 1, 3, 0.5) == [(-b, 0.5)]


@pytest.mark.parametrize("cp", [2, 4])
def test_context_parallel_gathers_every_ranks_keys_and_values(fake_group, cp):
    """PyTorch's context parallelism with the all-gather rotate method (torchtitan's
    default): the backward's rotater holds the whole sequence's keys and values, cp times
    the local pair, and accumulates in fp32; ``cp_attention_transient`` grows by exactly
    that buffer from one cp to the next."""
    from torch.distributed.tensor.experimental._context_parallel import _attention as cpa

    fake_group(cp)
    heads, d, tokens = 4, 8, 16
    key, value = (torch.randn(1, heads, tokens, d, dtype=DT) for _ in range(2))
    rotater = cpa._create_rotater(dist.group.WORLD, 2, cpa._RotateMethod.ALL_GATHER)
    rotater.exchange_buffers(torch.cat([key.flatten(), value.flatten()]))
    gathered = rotater.next_buffer().untyped_storage().nbytes()
    assert gathered == cp * 2 * key.nbytes
    assert cpa._cp_options.convert_to_f32  # the gradients accumulate in fp32

    m = Model("tiny", 1, heads * d, heads, V, Attention(kv_heads=1), (), 64)
    t = Training(seq=tokens, torch_context_parallel=True, cp_comm="all_gather")
    grown = [cp_attention_transient(m, t, Layout(1, 1, cp=c)) for c in (cp, cp + 1)]
    assert grown[1] - grown[0] == gathered / cp  # one more rank's keys and values
    assert cp_attention_transient(m, Training(seq=tokens), Layout(1, 1, cp=cp)) == 0.0


class _LlamaLinears(torch.nn.Module if torch else object):
    """A Llama block's seven multiplies (wq, wk, wv, wo; w1, w3, w2) in fp32, as torchtitan
    builds its model before FSDP2 casts the all-gather to bf16; the forward touches each
    weight so that each gets a gradient."""

    def __init__(self, h, kv, f):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.wq, self.wk, self.wv, self.wo = lin(h, h), lin(h, kv), lin(h, kv), lin(h, h)
        self.w1, self.w3, self.w2 = lin(h, f), lin(h, f), lin(f, h)

    def forward(self, x):
        kv = (self.wk(x) * self.wv(x)).sum(-1, keepdim=True)
        x = x + self.wo(self.wq(x) * kv)
        return x + self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


@pytest.mark.parametrize("dp", [2, 8])
def test_fsdp2_side_stream_buffers(fake_group, monkeypatch, dp):
    """FSDP2's collectives' buffers, recorded as fully_shard hands them to its all-gather
    and reduce-scatter (a fake process group on the CPU): each layer's flat all-gather
    output holds the layer in the all-gather dtype (bf16), each reduce-scatter input the
    layer's gradients in the reduce dtype (fp32), and the outputs, the gradient shards,
    1/dp of the model in fp32. What ``fsdp_stream_pools`` keeps on the side streams is
    two of the first, one of the second and all of the third."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from pipesim.planner.device_memory import fsdp_stream_pools

    seen = {"gather": [], "scatter_in": [], "scatter_out": []}
    gather, scatter = dist.all_gather_single, dist.reduce_scatter_single

    def record_gather(output, input, *a, **kw):
        seen["gather"].append(output.nbytes)
        return gather(output, input, *a, **kw)

    def record_scatter(output, input, *a, **kw):
        seen["scatter_in"].append(input.nbytes)
        seen["scatter_out"].append(output.nbytes)
        return scatter(output, input, *a, **kw)

    monkeypatch.setattr(dist, "all_gather_single", record_gather)
    monkeypatch.setattr(dist, "reduce_scatter_single", record_scatter)
    mesh = fake_group(dp)
    h, kv, f, layers = 32, 16, 96, 3
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(_LlamaLinears(h, kv, f) for _ in range(layers)))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model:
        fully_shard(block, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    model(torch.randn(2, 8, h)).sum().backward()
    assert seen["gather"] and seen["scatter_in"]
    measured = 2 * max(seen["gather"]) + max(seen["scatter_in"]) + sum(seen["scatter_out"])

    m = Model("linears", layers, h, 4, V, Attention(kv_heads=2), (), f)  # kv: 2 heads of 8
    n = sum(p.numel() for p in model.parameters())
    t = Training(zero=3, grad_reduce_bytes=4, zero_grad_frees=True, fsdp_stream_pools=True)
    assert fsdp_stream_pools(m, t, Layout(1, dp), n) == pytest.approx(measured, rel=1e-9)
    assert fsdp_stream_pools(m, Training(zero=3), Layout(1, dp), n) == 0.0
    # gradients kept through the run (no zero_grad_frees): the shards are the static
    # gradients already, only the buffers stay
    kept = Training(zero=3, grad_reduce_bytes=4, fsdp_stream_pools=True)
    assert fsdp_stream_pools(m, kept, Layout(1, dp), n) == pytest.approx(measured - sum(seen["scatter_out"]), rel=1e-9)


class _OneByteWeight(torch.Tensor if torch else object):
    """A weight whose FSDP2 all-gather carries its float8 cast, as torchao's
    WeightWithDynamicFloat8CastTensor does (fsdp_pre_all_gather hands over the float8
    data, fsdp_post_all_gather keeps the gathered bytes): every op but the all-gather
    sees the fp32 tensor inside."""

    @staticmethod
    def __new__(cls, t):
        return torch.Tensor._make_wrapper_subclass(cls, t.size(), strides=t.stride(), dtype=t.dtype, device=t.device)

    def __init__(self, t):
        self._t = t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_map

        inner = lambda x: x._t if isinstance(x, _OneByteWeight) else x  # noqa: E731
        out = func(*tree_map(inner, args), **tree_map(inner, kwargs or {}))
        kept = ("detach", "alias", "view", "as_strided", "slice", "split", "chunk", "_to_copy", "new_zeros", "clone")
        if func.__name__.startswith(kept):  # FSDP2 shards and pads the weight with these
            wrap = lambda x: _OneByteWeight(x) if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x  # noqa: E731
            return tree_map(wrap, out)
        return out

    def __tensor_flatten__(self):
        return ["_t"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, size, stride):
        return _OneByteWeight(inner["_t"])

    def fsdp_pre_all_gather(self, mesh):
        return (self._t.to(torch.float8_e4m3fn),), None

    def fsdp_post_all_gather(self, outputs, metadata, param_dtype, *, out=None):
        if out is None:
            return outputs[0], outputs
        return None


def test_fsdp2_float8_all_gather_keeps_one_byte_gathered(fake_group):
    """A stage FSDP2 keeps gathered (reshard_after_forward=False, torchtitan under
    pipeline parallelism) whose linears all-gather their float8 cast holds one byte per
    gathered element, where the bf16 all-gather holds two: the difference between the
    two runs is what fsdp_float8_all_gather takes off the stage's parameter bytes."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from pipesim.planner.footprint import memory_model

    dp, h, kv, f = 8, 32, 16, 96
    mesh = fake_group(dp)

    def gathered_bytes(one_byte: bool) -> int:
        torch.manual_seed(0)
        block = _LlamaLinears(h, kv, f)
        if one_byte:
            for mod in block.children():
                mod.weight = torch.nn.Parameter(_OneByteWeight(mod.weight.detach()))
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
        if one_byte:  # the forward upcasts the gathered float8 weights itself
            block.forward = lambda x: sum(
                (x @ mod.weight.to(x.dtype).t()).sum() for mod in block.children() if mod.in_features == h
            )
        block(torch.randn(2, 8, h, dtype=torch.bfloat16))
        return sum(p.untyped_storage().nbytes() for p in block.parameters())

    bf16, fp8 = gathered_bytes(False), gathered_bytes(True)
    assert bf16 == 2 * fp8  # every weight gathered, two bytes then one
    m = Model("linears", 1, h, 4, V, Attention(kv_heads=2), (), f)
    t = Training(zero=3, precision="fp8", fp8_scaling="tensor", fsdp_reshard="never")
    lay = Layout(1, dp)
    off, on = (memory_model(m, replace(t, fsdp_float8_all_gather=x), lay, 1, "full").stage_bytes(0)[0] for x in (False, True))
    assert off - on == bf16 - fp8


def _compiled_saved_bytes(block, x) -> int:
    """Bytes of the tensors the forward graph torch.compile makes for ``block`` hands to
    its backward: AOTAutograd with inductor's partitioner (min-cut rematerialization,
    what ``torch.compile``'s default backend runs), the compilers themselves left out."""
    from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
    from torch._dynamo.backends.common import aot_autograd

    saved = []

    def forward_compiler(gm, inputs):
        outputs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
        saved.extend(v.meta["val"] for v in outputs[1:])  # the block's one output, then what backward gets
        return make_boxed_func(gm.forward)

    backend = aot_autograd(
        fw_compiler=forward_compiler,
        bw_compiler=lambda gm, inputs: make_boxed_func(gm.forward),
        partition_fn=min_cut_rematerialization_partition,
    )
    torch._dynamo.reset()
    torch.compile(block, backend=backend, fullgraph=True, dynamic=False)(x).sum().backward()
    # the generator's state, saved for a rerun of a random op, has a size the graph does
    # not know (an unbacked symbol): bytes, not per token; counted out here
    sized = [t for t in saved if not isinstance(t.numel(), torch.SymInt)]
    assert all(t.dtype == torch.uint8 for t in saved if isinstance(t.numel(), torch.SymInt))
    return sum(t.numel() * t.element_size() for t in sized)


def test_compiled_block_under_full_checkpointing_saves_its_input():
    """torchtitan's full activation checkpointing under torch.compile (apply_ac wraps each
    block in checkpoint_wrapper, apply_compile compiles the wrapped block): the compiled
    forward hands its backward the block's input and nothing per token beyond it, what
    pipesim's ``full`` keeps. The parameters and the RNG state (flash attention's, saved
    for the rerun) do not grow with the tokens; two sequence lengths' difference leaves
    the per-token bytes, from torch."""
    from torch.utils.checkpoint import checkpoint

    heads, kv, f = 4, 2, 64
    d = H // heads
    F = torch.nn.functional

    class Block(torch.nn.Module):  # a Llama block as torchtitan's: RMSNorm, GQA, SDPA, SwiGLU
        def __init__(self):
            super().__init__()
            lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
            self.attention_norm, self.ffn_norm = torch.nn.RMSNorm(H), torch.nn.RMSNorm(H)
            self.wq, self.wk, self.wv, self.wo = lin(H, H), lin(H, kv * d), lin(H, kv * d), lin(H, H)
            self.w1, self.w3, self.w2 = lin(H, f), lin(H, f), lin(f, H)

        def inner(self, x):
            b, s, _ = x.shape
            h = self.attention_norm(x)
            q = self.wq(h).view(b, s, heads, d).transpose(1, 2)
            k, v = (w(h).view(b, s, kv, d).repeat_interleave(heads // kv, 2).transpose(1, 2) for w in (self.wk, self.wv))
            x = x + self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, H))
            g = self.ffn_norm(x)
            return x + self.w2(F.silu(self.w1(g)) * self.w3(g))

        def forward(self, x):
            return checkpoint(self.inner, x, use_reentrant=False, preserve_rng_state=False)

    torch.manual_seed(0)
    block = Block().to(DT)
    short, long = (_compiled_saved_bytes(block, torch.randn(B, s, H, dtype=DT, requires_grad=True)) for s in (S, 2 * S))
    per_token = (long - short) / (B * S)
    assert per_token == 2 * H  # the bf16 input alone, from torch
    assert sum(layer_saved(_model(), 0, Training(seq=S), 1, "full").values()) == per_token
