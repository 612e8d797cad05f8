"""The models the executor runs: a small transformer, or your own list of layers.

A stage model is any object with four methods (see ``TinyTransformer``):

* ``build(stage, stages)``: the ``nn.Module`` of ``stage`` when the model is cut into
  ``stages`` pieces. It must come out with the same parameters wherever and however
  often it is built (seeded), since every rank builds its own stages and the check builds
  all of them again in one process.
* ``boundary(stage, stages)``: ``(shape, dtype)`` of that stage's output, so receives can
  be posted before the sender has run.
* ``microbatch(mb)``: ``(input, target)`` of micro-batch ``mb``, deterministic.
* ``loss(output, target)``: a scalar.

Optionally ``check_stages(stages)``: raise ``PipesimError`` for a number of stages the model
cannot be cut into; ``pipesim run`` calls it before any process starts.

Each stage takes one tensor and returns one tensor. The model object is pickled to every
worker, so it must be picklable (plain attributes, modules; no lambdas).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import PipesimError


@dataclass(frozen=True)
class TinyTransformer:
    """Pre-norm transformer encoder blocks, ``layers_per_stage`` per stage, on random data
    with a mean-squared-error loss. float64 by default so the check can tell a real
    mistake (errors of order 1) from summation order (1e-16)."""

    dim: int = 16
    heads: int = 2
    seq: int = 8
    batch: int = 2
    layers_per_stage: int = 1
    seed: int = 0
    dtype: str = "float64"

    @property
    def _dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    def build(self, stage: int, stages: int) -> nn.Module:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed * 100_003 + stage)
            layers = [
                nn.TransformerEncoderLayer(
                    self.dim,
                    self.heads,
                    2 * self.dim,
                    dropout=0.0,
                    batch_first=True,
                    norm_first=True,
                    dtype=self._dtype,
                )
                for _ in range(self.layers_per_stage)
            ]
        return nn.Sequential(*layers)

    def boundary(self, stage: int, stages: int) -> tuple[tuple[int, ...], torch.dtype]:
        return (self.batch, self.seq, self.dim), self._dtype

    def microbatch(self, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + mb)
        shape = (self.batch, self.seq, self.dim)
        return torch.randn(shape, generator=g, dtype=self._dtype), torch.randn(shape, generator=g, dtype=self._dtype)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target)


@dataclass
class Sequential:
    """Your own layers, cut into contiguous stages (the first stages take one layer more
    when they do not divide evenly); inputs are seeded normal noise of ``input_shape`` and
    targets noise shaped like the output, with a mean-squared-error loss.

    >>> model = Sequential(nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh()), (4, 8))
    >>> model.boundary(1, 2)
    ((4, 8), torch.float32)
    """

    layers: nn.Module | list[nn.Module]
    input_shape: tuple[int, ...]
    seed: int = 0
    _shapes: dict = field(default_factory=dict, repr=False)

    def check_stages(self, stages: int) -> None:
        """Refuse, before any rank starts, more stages than layers (every stage needs one)
        and an input the layers cannot take: the stage boundaries every rank computes
        first (one forward pass of the sample input) are computed here once."""
        n = len(list(self.layers))
        if n < stages:
            raise PipesimError(
                f"the model has {n} layers, too few for the schedule's {stages} stages (each takes at least one): "
                "lower --pp (or --chunks), or give it more layers"
            )
        try:
            self.boundary(0, stages)
        except Exception as e:  # whatever a layer raises on an input of the wrong shape
            shape = ",".join(map(str, self.input_shape))
            text = str(e).strip().splitlines()
            raise PipesimError(
                f"--input-shape {shape}: the layers cannot take it ({type(e).__name__}: {text[0] if text else ''}); "
                "give the shape of one micro-batch's input"
            ) from None

    def _groups(self, stages: int) -> list[list[nn.Module]]:
        layers = list(self.layers)
        if len(layers) < stages:
            raise ValueError(f"the model has {len(layers)} layers, too few for {stages} stages")
        q, extra = divmod(len(layers), stages)
        out, i = [], 0
        for s in range(stages):
            n = q + (s < extra)
            out.append(layers[i : i + n])
            i += n
        return out

    def build(self, stage: int, stages: int) -> nn.Module:
        return copy.deepcopy(nn.Sequential(*self._groups(stages)[stage]))

    def boundary(self, stage: int, stages: int) -> tuple[tuple[int, ...], torch.dtype]:
        if stages not in self._shapes:
            x = self._input()
            shapes = []
            with torch.no_grad():
                for group in self._groups(stages):
                    x = nn.Sequential(*group)(x)
                    shapes.append((tuple(x.shape), x.dtype))
            self._shapes[stages] = shapes
        return self._shapes[stages][stage]

    def _dtype(self) -> torch.dtype:
        return next((p.dtype for p in nn.ModuleList(list(self.layers)).parameters()), torch.get_default_dtype())

    def _input(self, mb: int = 0) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + mb)
        return torch.randn(self.input_shape, generator=g, dtype=self._dtype())

    def microbatch(self, mb: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(list(self.layers))
        shape, dtype = self.boundary(n - 1, n)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + mb + 7_777_777)
        return self._input(mb), torch.randn(shape, generator=g, dtype=dtype)

    def loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output, target)


@dataclass
class Reference:
    """A single-process run: the loss of every micro-batch and every stage's parameter
    gradients (by parameter name) of the mean loss over micro-batches."""

    losses: list[float]
    grads: list[dict[str, torch.Tensor]]


def reference(model, stages: int, microbatches: int) -> Reference:
    mods = [model.build(s, stages) for s in range(stages)]
    losses = []
    for mb in range(microbatches):
        x, target = model.microbatch(mb)
        for m in mods:
            x = m(x)
        loss = model.loss(x, target)
        losses.append(loss.item())
        (loss / microbatches).backward()
    grads = [
        {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for n, p in m.named_parameters()} for m in mods
    ]
    return Reference(losses, grads)
