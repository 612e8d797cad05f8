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
import math
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import PipesimError
from ..inputs import MAX_COUNT
from ..schedule_checks import whole
from .capacity import MAX_BLOCKS, available_memory

# torch's CPU allocator failing ("DefaultCPUAllocator: can't allocate memory: you tried to
# allocate 6400000000000 bytes", torch 2.13, raised at alloc_cpu.cpp as it says); check_stages
# runs the sample forward on the CPU, where this is the message
_ALLOCATION = re.compile(r"tried to allocate (\d+) bytes", re.IGNORECASE)


def _bytes(n: int, exact: bool = True) -> str:
    """Bytes as a person reads them, the exact count beside (unless not ``exact``)."""
    for unit, size in (("TB", 2**40), ("GB", 2**30), ("MB", 2**20)):
        if n >= size:
            return f"{n / size:,.1f} {unit}" + (f" ({n:,} bytes)" if exact else "")
    return f"{n:,} bytes"


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

    def __post_init__(self) -> None:
        # the bound --layers has (capacity.MAX_BLOCKS): made from the library, 100,000
        # layers a stage were taken and built for minutes in every rank
        whole(self.layers_per_stage, f"{type(self).__name__}'s layers_per_stage", 1, MAX_COUNT)
        if self.layers_per_stage > MAX_BLOCKS:
            raise PipesimError(
                f"TinyTransformer(layers_per_stage={self.layers_per_stage}) builds {self.layers_per_stage:,} blocks a stage, "
                f"above the {MAX_BLOCKS:,} pipesim's models take (each about 1 ms to build): lower layers_per_stage"
            )

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
        shape = ",".join(map(str, self.input_shape))
        self._refuse_too_large(shape, available_memory())
        try:
            self.boundary(0, stages)
        except Exception as e:  # whatever a layer raises on an input of the wrong shape
            text = str(e).strip().splitlines()
            tried = _ALLOCATION.search(str(e))
            if tried and int(tried[1]) == self._input_bytes():  # where free memory is not known beforehand
                self._refuse_too_large(shape, 0)
            if tried:  # an activation past free memory: the shape is wrong by its size, not its form
                raise PipesimError(
                    f"--input-shape {shape}: the layers' outputs on it are too large for memory, one needs "
                    f"{_bytes(int(tried[1]))}, more than is free here; give a smaller micro-batch"
                ) from None
            raise PipesimError(
                f"--input-shape {shape}: the layers cannot take it ({type(e).__name__}: {text[0] if text else ''}); "
                "give the shape of one micro-batch's input"
            ) from None

    def _input_bytes(self) -> int:
        return math.prod(self.input_shape) * torch.empty((), dtype=self._dtype()).element_size()

    def _refuse_too_large(self, shape: str, avail: int | None) -> None:
        """The input alone past ``avail`` bytes of free memory (None: not known) or past
        what a tensor can index was said to be a shape 'the layers cannot take', quoting
        torch's failed allocation."""
        size = self._input_bytes()
        if size >= 2**63 or (avail is not None and size > avail):
            free = (
                "what a tensor can hold"
                if avail is None
                else f"the {_bytes(avail, exact=False)} of free memory here"
                if avail
                else "is free here"
            )
            raise PipesimError(
                f"--input-shape {shape}: too large for memory, one micro-batch's input in {self._dtype()} is "
                f"{_bytes(size)}, more than {free}; give a smaller micro-batch"
            )

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
