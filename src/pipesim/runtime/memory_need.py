"""The least memory a real run of pipesim's own models takes, weighed before any process
starts. ``--dim 100000`` failed in the ranks after the launch (a 240 GB allocation), and a
size between that and this machine's memory was allocated for real, rank after rank, until
the kernel's out-of-memory killer chose a process, perhaps not one of ours.

Counted: parameters and their gradients, nothing else (activations, the optimizer-free
step's temporaries and torch itself come on top), so the figure is a floor and a run
refused by it could not have fitted. Each stage's parameters are counted by building it
on torch's meta device, which allocates nothing."""

from __future__ import annotations

import dataclasses

import torch

from ..errors import PipesimError
from .capacity import available_memory
from .model import TinyTransformer
from .moe import MoETransformer


def stage_bytes(model, stages: int) -> list[int] | None:
    """Bytes of each stage's parameters, for the tiny and MoE models (an MoE stage with
    all its experts: the EP ranks of a stage hold them between them, plus copies of the
    rest); None for a model of the user's, whose build may be costly or touch files.

    Built small and scaled: a stage's layers are alike, and so are a layer's experts
    (the router grows by one row per expert), so one layer of one and of two experts
    gives every size exactly; building all of them took 0.9 s per thousand experts."""
    if type(model) not in (TinyTransformer, MoETransformer):
        return None

    def size(**kw) -> int:
        with torch.device("meta"):
            built = dataclasses.replace(model, layers_per_stage=1, **kw).build(0, stages)
        return sum(p.numel() * p.element_size() for p in built.parameters())

    if isinstance(model, MoETransformer):
        one, two = size(experts=1, top_k=1), size(experts=2, top_k=1)
        layer = one + (model.experts - 1) * (two - one)
    else:
        layer = size()
    return [model.layers_per_stage * layer] * stages  # the stage number only seeds the weights


def least_bytes(stage: list[int], held: set[tuple[int, int]], nprocs: int, check: bool) -> int:
    """The floor of a run's memory: every stage a rank holds (``held``: (rank, stage)
    pairs; DualPipe holds each stage on two ranks), parameters and gradients; with
    ``check``, every rank also runs the single-process reference while its own stages are
    alive (worker.run_job calls model.reference, which builds every stage, takes their
    gradients and clones them: three copies of the model)."""
    own = 2 * sum(stage[s] for _, s in held)
    return own + (nprocs * 3 * sum(stage) if check else 0)


def check_memory(jobs, nprocs: int) -> None:
    """Refuse jobs whose floor is above this machine's free memory (one job at a time:
    a launch runs them in turn, each rank keeping only the references it has made)."""
    avail = available_memory()
    if avail is None:
        return
    for j in jobs:
        if j.model is None:
            continue
        s = j.schedule
        stage = stage_bytes(j.model, s.placement.stages)
        if stage is None:
            continue
        held = {(rank, st) for route in s.placement.routes for st, (rank, _) in enumerate(route)}
        need = least_bytes(stage, held, nprocs, j.check)
        if need > avail:
            m = j.model
            sizes = [f"--dim {m.dim}", f"--layers {m.layers_per_stage}"]
            if isinstance(m, MoETransformer):
                sizes.append(f"--experts {m.experts}")
            flags = [x.split()[0] for x in sizes]
            raise PipesimError(
                f"{s.name} with {', '.join(sizes[:-1])} and {sizes[-1]} on {nprocs} processes needs at least "
                f"{_size(need)} (parameters and gradients in {m.dtype}"
                f"{', and the --check reference on every rank' if j.check else ''}), more than the "
                f"{_size(avail)} of free memory here: lower {', '.join(flags[:-1])} or {flags[-1]}"
            )


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.2f} MB"
