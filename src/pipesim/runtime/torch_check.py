"""Run an exported compute-only CSV in PyTorch's own runtime and check its gradients.

This is the proof that an export is usable: every rank builds ``PipelineStage``s for the
stages its CSV row names, loads the CSV into ``_PipelineScheduleRuntime`` (which lowers it
to sends and receives itself), takes one step, and compares its gradients and losses
with the single-process reference, exactly as ``pipesim run --check`` does.
"""

from __future__ import annotations

import os
import tempfile

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

from .check import max_relative_error
from .model import reference
from .plan import held_stages
from .results import RankReport
from .torch_export import from_torch_rows, read_csv


def run_torch_csvs(ctx, payload) -> list[RankReport]:
    """Worker body (see ``launch``): payload is ([(csv text, microbatches), ...], model)."""
    csvs, model = payload
    torch.set_num_threads(1)
    references: dict = {}
    out = []
    for text, microbatches in csvs:
        out.append(run_torch_csv(ctx, text, microbatches, model, references))
        torch.distributed.barrier()
    return out


def run_torch_csv(ctx, text: str, microbatches: int, model, references: dict) -> RankReport:
    schedule = from_torch_rows(read_csv(text), "csv", microbatches)
    S, M = schedule.placement.stages, microbatches
    chunk_stage = held_stages(schedule, ctx.rank)
    modules, stages = {}, []
    for chunk, s in sorted(chunk_stage.items(), key=lambda cs: cs[1]):
        module = model.build(s, S).to(ctx.device)
        # PyTorch infers the shapes between stages itself (numpy must be installed);
        # handing it example input_args/output_args instead made 2.13 run the first
        # stage's backward without its output gradient
        stages.append(PipelineStage(module, s, S, ctx.device))
        modules[chunk] = module
    ctx.at("loading the CSV into _PipelineScheduleRuntime")
    runtime = _PipelineScheduleRuntime(stages, M, loss_fn=model.loss, scale_grads=True)
    fd, path = tempfile.mkstemp(suffix=".csv")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        runtime._load_csv(path)
    finally:
        os.unlink(path)
    batches = [model.microbatch(mb) for mb in range(M)]
    args = (torch.cat([b[0] for b in batches]).to(ctx.device),) if 0 in chunk_stage.values() else ()
    has_last = S - 1 in chunk_stage.values()
    target = torch.cat([b[1] for b in batches]).to(ctx.device) if has_last else None
    losses: list = []
    ctx.at("PyTorch's step()")
    runtime.step(*args, target=target, losses=losses if has_last else None)
    got = {mb: loss.item() for mb, loss in enumerate(losses)}
    if (S, M) not in references:
        references[(S, M)] = reference(model, S, M)
    return RankReport(losses=got, error=max_relative_error(modules, chunk_stage, got, references[(S, M)]))
