"""Run schedules for real: the library entry points behind ``pipesim run``.

>>> from pipesim import build
>>> from pipesim.runtime import execute, TinyTransformer
>>> result = execute(build("dualpipe", 4, 8), TinyTransformer(), check=True)
>>> result.passed, result.timeline.source
(True, 'measured')
"""

from __future__ import annotations

import os

from ..costs import Costs
from ..errors import PipesimError
from ..ir import Schedule
from ..validate import validate
from .executor import Fault
from .launch import launch, pick_backend, run_as_torchrun_rank, under_torchrun
from .model import TinyTransformer
from .results import RunResult, assemble
from .worker import Job

RUN_JOBS = "pipesim.runtime.worker:run_jobs"
FAULT_ENV = "PIPESIM_FAULT"  # tests: RANK:ITEM[:raise|die|corrupt], e.g. 2:B0.3:die


def execute(
    schedule: Schedule,
    model=None,
    *,
    check: bool = False,
    synthetic: Costs | None = None,
    backend: str = "auto",
    timeout: float = 600.0,
) -> RunResult:
    """Run ``schedule`` on ``pp`` local processes (or as a torchrun rank) and return the
    measured timeline; with ``check``, each rank's largest relative error against one
    process; with ``synthetic`` costs (seconds), ops sleep instead of computing."""
    out = execute_many([job(schedule, model, check=check, synthetic=synthetic)], backend=backend, timeout=timeout)
    return out[0] if out else None


def job(
    schedule: Schedule,
    model=None,
    *,
    check: bool = False,
    synthetic: Costs | None = None,
    tolerance: float = 1e-9,
    profile: str | os.PathLike | None = None,
) -> Job:
    """One schedule to run; ``profile``: a folder to record each rank's torch.profiler
    trace in (``rank{r}.json``, created if missing), for ``pipesim profile``."""
    validate(schedule)
    if profile is not None:
        os.makedirs(profile, exist_ok=True)
        profile = os.fspath(profile)
    if synthetic is not None:
        return Job(schedule, None, synthetic, False, tolerance, profile)
    return Job(schedule, model if model is not None else TinyTransformer(), None, check, tolerance, profile)


def execute_many(jobs: list[Job], *, backend: str = "auto", timeout: float = 600.0) -> list[RunResult] | None:
    """Run several schedules (all with the same pp) in one launch: the processes and the
    process group are set up once. Returns None on torchrun ranks other than 0."""
    if not jobs:
        return []
    pps = {j.schedule.pp for j in jobs}
    if len(pps) != 1:
        raise PipesimError(f"schedules run together must have one --pp, got {sorted(pps)}")
    pp = pps.pop()
    backend = pick_backend(backend, pp)
    try:
        fault = Fault.parse(os.environ.get(FAULT_ENV))
    except ValueError as e:
        raise PipesimError(str(e)) from None
    if under_torchrun():
        per_rank = run_as_torchrun_rank(RUN_JOBS, jobs, pp, backend, timeout, fault)
        if per_rank is None:
            return None
    else:
        per_rank = launch(RUN_JOBS, jobs, pp, backend, timeout, fault)
    return [assemble(j.schedule, [reports[i] for reports in per_rank], j.tolerance, j.costs) for i, j in enumerate(jobs)]


def check_exports(schedules: list[Schedule], model=None, *, backend: str = "auto", timeout: float = 600.0) -> list[list[float]]:
    """Export each schedule to PyTorch's CSV, run it in PyTorch's own
    ``_PipelineScheduleRuntime`` (all in one launch), and return, per schedule, each
    rank's largest relative error against one process. PipesimError for a schedule
    PyTorch cannot run."""
    from .torch_export import rows_to_csv, to_torch_rows

    if not schedules:
        return []
    pp = schedules[0].pp
    if any(s.pp != pp for s in schedules):
        raise PipesimError("schedules checked together must have one --pp")
    model = model if model is not None else TinyTransformer()
    payload = ([(rows_to_csv(to_torch_rows(s)), s.microbatches) for s in schedules], model)
    per_rank = launch(
        "pipesim.runtime.torch_check:run_torch_csvs",
        payload,
        pp,
        pick_backend(backend, pp),
        timeout,
        preload=("pipesim.runtime.torch_check",),
    )
    return [[reports[i].error for reports in per_rank] for i in range(len(schedules))]
