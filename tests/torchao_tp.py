"""torchao's Float8 tensor parallelism as torchtitan 9dec370's ``apply_tp`` runs it with
Float8 linears, written out for the tests that count its collectives on gloo ranks
(test_torchao_tp_amax_torch.py). Only the scale of each tensorwise cast is computed, as
torchao's does it; the data stays in its dtype (gloo gathers no float8), which changes
nothing the collectives see.

Read in pytorch/ao at eab345c (20 Dec 2024, the torchao of torchtitan's December 2024
Float8 rows) and unchanged in what follows at 36027d82 (August 2026):

- the cast (float8_scaling_utils.py ``hp_tensor_to_float8_dynamic`` ->
  float8_utils.py ``tensor_to_scale``): ``max(abs(x))`` over the whole tensor, with
  ``reduce_amax`` left False ("assume that it will happen elsewhere"), then
  ``amax_to_scale`` (to float64, clamp at EPS, the format's max over it, to float32), and
  the tensor multiplied by the scale (float8_tensor.py ``_ToFloat8ConstrFunc``). On a
  DTensor those are DTensor ops: a sharded tensor's amax is ``Partial(max)``, and the
  first op after it makes it ``Replicate``, one all-reduce (fsdp_utils.py:68-72 says as
  much of the weights' amax: "clamp is dispatched through DTensor, it will issue a single
  all-reduce");
- ``PrepareFloat8ModuleInput`` casts the block's sequence shard before redistributing it
  to ``Replicate``; ``Float8ColwiseParallel`` would cast its input the same way but finds
  it already cast (``tensor_already_casted_to_fp8``); ``Float8RowwiseParallel`` casts its
  ``Shard(-1)`` input; both apply ``NoopFwToFloat8BwDynamic`` to their output DTensor
  (after the row-parallel reduce-scatter), whose backward casts the output's gradient;
- ``Float8Linear`` (float8_linear.py ``get_weight_scale``) takes its weight's scale every
  forward unless FSDP's float8 all-gather handed it an FP8 weight (precomputed scales).
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max
EPS = 1e-12


def tensorwise_scale(x: torch.Tensor) -> torch.Tensor:
    """The scale of a tensorwise dynamic cast, as torchao computes it."""
    with torch.no_grad():
        amax = torch.max(torch.abs(x)).to(torch.float64)
        return (E4M3_MAX / torch.clamp(amax, min=EPS)).to(torch.float32)


class Cast(torch.autograd.Function):
    """The forward cast: the scale taken, the values scaled and clamped to the format's
    range; the gradient passes through (``_ToFloat8ConstrFunc``'s backward)."""

    @staticmethod
    def forward(ctx, x):
        scale = tensorwise_scale(x)
        return (torch.clamp(x.to(torch.float32) * scale, -E4M3_MAX, E4M3_MAX) / scale).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


class CastGradient(torch.autograd.Function):
    """``NoopFwToFloat8BwDynamic``: nothing forward, the output's gradient cast backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return Cast.apply(grad)


def _as_dtensor(x, mesh, layouts):
    return x if isinstance(x, DTensor) else DTensor.from_local(x, mesh, layouts, run_check=False)


class Float8Colwise(ColwiseParallel):
    """Its input arrives cast and replicated by ``Float8PrepareInput`` in torchtitan's
    plan (so the cast is skipped); its output's gradient is cast."""

    @staticmethod
    def _prepare_output_fn(output_layouts, use_local_output, mod, outputs, device_mesh):
        if outputs.placements != output_layouts:
            outputs = outputs.redistribute(placements=output_layouts, async_op=True)
        outputs = CastGradient.apply(outputs)
        return outputs.to_local() if use_local_output else outputs


class Float8Rowwise(RowwiseParallel):
    """Its ``Shard(-1)`` input cast before any redistribution; its output's gradient cast
    after the reduce-scatter, so before that gradient's all-gather backward."""

    @staticmethod
    def _prepare_input_fn(input_layouts, desired_input_layouts, mod, inputs, device_mesh):
        x = Cast.apply(_as_dtensor(inputs[0], device_mesh, input_layouts))
        if input_layouts != desired_input_layouts:
            x = x.redistribute(placements=desired_input_layouts, async_op=True)
        return x

    _prepare_output_fn = staticmethod(Float8Colwise._prepare_output_fn)


class Float8PrepareInput(PrepareModuleInput):
    """The block's sequence shard cast, then gathered."""

    def _prepare_input_arg(self, input, mesh, input_layout, desired_layout):
        if input_layout is None:
            return input
        x = Cast.apply(_as_dtensor(input, mesh, (input_layout,)))
        if desired_layout is not None and input_layout != desired_layout:
            x = x.redistribute(placements=(desired_layout,))
        return x.to_local() if self.use_local_output else x


def weight_scales(module: torch.nn.Module) -> None:
    """Each linear's weight scale taken every forward (no FSDP float8 all-gather)."""

    def take(mod, args):
        tensorwise_scale(mod.weight)

    for linear in module.modules():
        if isinstance(linear, torch.nn.Linear):
            linear.register_forward_pre_hook(take)
