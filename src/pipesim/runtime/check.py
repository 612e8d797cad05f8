"""The correctness check: a rank's losses and gradients against a single-process run.

Every rank recomputes the single-process reference itself (the test model is small), so
the check needs no extra communication and works the same under ``torchrun``.
"""

from __future__ import annotations

import torch

from .model import Reference


def relative_error(got: torch.Tensor | None, want: torch.Tensor) -> float:
    """max |got - want| / max |want|: 0 for equal tensors, about 1e-16 for float64 sums in
    another order, order 1 for a wrong micro-batch or a missing contribution."""
    if got is None:
        got = torch.zeros_like(want)
    scale = want.abs().max().item() if want.numel() else 0.0
    diff = (got.detach().to(want.device, want.dtype) - want).abs().max().item() if want.numel() else 0.0
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / scale


def max_relative_error(
    modules: dict[int, torch.nn.Module], chunk_stage: dict[int, int], losses: dict[int, float], ref: Reference
) -> float:
    """The largest relative error over every parameter gradient of the stages held here and
    every loss computed here. Parameters are matched by name: a stage whose experts are
    sharded holds some of the reference stage's parameters, under the same names."""
    errors = [0.0]
    for chunk, stage in chunk_stage.items():
        params = dict(modules[chunk].named_parameters())
        if not params.keys() <= ref.grads[stage].keys():
            return float("inf")
        errors += [relative_error(p.grad, ref.grads[stage][n]) for n, p in params.items()]
    for mb, loss in losses.items():
        want = ref.losses[mb]
        errors.append(abs(loss - want) / abs(want) if want else abs(loss))
    return max(errors)
