"""Run schedules for real: the library entry points behind ``pipesim run``.

>>> from pipesim import build
>>> from pipesim.runtime import execute, TinyTransformer
>>> result = execute(build("dualpipe", 4, 8), TinyTransformer(), check=True)
>>> result.passed, result.timeline.source
(True, 'measured')
"""

from __future__ import annotations

import inspect
import os

from ..costs import Costs
from ..engine import validate
from ..errors import PipesimError
from ..ir import Schedule
from .capacity import check_capacity, refuse_mixed_sizes, under_torchrun
from .executor import Fault
from .launch import launch, pick_backend, run_as_torchrun_rank
from .memory_need import check_memory
from .model import TinyTransformer
from .results import RunResult, assemble
from .trace_folders import refuse_shared_folders, refuse_unwritable
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
    ep: int = 1,
    a2a_delay: float = 0.0,
    overlap: bool = True,
) -> Job:
    """One schedule to run; ``profile``: a folder to record each rank's torch.profiler
    trace in (``rank{r}.json``; the ranks create the folder if missing, so a refusal
    leaves none behind), for ``pipesim profile``; ``ep``:
    expert-parallel ranks per stage (the model's experts sharded over them, pp x ep
    processes); ``a2a_delay``: the least time an all-to-all takes, in seconds;
    ``overlap=False`` runs overlapped pairs as their two halves one after the other."""
    validate(schedule)
    if profile is not None:
        profile = os.fspath(profile)
        # the ranks make and write it after the whole run: a folder they cannot was a
        # RunFailed then, naming '<frozen os>'
        refuse_unwritable(profile, f"profile={profile!r}")
    if synthetic is not None:
        if ep != 1:
            raise PipesimError("--ep shards a model's experts; --synthetic runs no model: drop one of them")
        return Job(schedule, None, synthetic, False, tolerance, profile)
    model = model if model is not None else TinyTransformer()
    check_model(model, ep)
    if callable(getattr(model, "check_stages", None)):  # a model that cannot be cut this finely
        model.check_stages(schedule.placement.stages)
    return Job(schedule, model, None, check, tolerance, profile, ep, a2a_delay, overlap)


def check_model(model, ep: int) -> None:
    """What can be refused before any process starts: an EP size the model cannot take,
    a pair function of the wrong shape."""
    if ep < 1:
        raise PipesimError(f"--ep must be >= 1, got {ep}")
    if ep > 1:
        if not callable(getattr(model, "check_ep", None)):
            raise PipesimError(
                f"--ep {ep} shards a model's experts, and {type(model).__name__} has none: use --model moe "
                "(or a stage model with experts, see docs/runtime-moe.md)"
            )
        model.check_ep(ep)
    check_pair_function(model)


PAIR_PARAMS = ("f_module", "f_input", "b_module", "b_output", "b_grad")


def check_pair_function(model) -> None:
    """A stage model's ``pair`` must take the five arguments the runtime passes."""
    fn = getattr(model, "pair", None)
    if fn is None:
        return
    if not callable(fn):
        raise PipesimError(
            f"{type(model).__name__}.pair must be a method pair({', '.join(PAIR_PARAMS)}), not {type(fn).__name__}"
        )
    try:
        sig = inspect.signature(fn)
        sig.bind(*PAIR_PARAMS)
    except (TypeError, ValueError):
        raise PipesimError(
            f"{type(model).__name__}.pair{_signature(fn)} cannot be called as pair({', '.join(PAIR_PARAMS)}): "
            "the runtime passes those five (see docs/runtime-moe.md)"
        ) from None


def _signature(fn) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(?)"


def execute_many(
    jobs: list[Job], *, backend: str = "auto", timeout: float = 600.0, since: float | None = None
) -> list[RunResult] | None:
    """Run several schedules (all with the same pp) in one launch: the processes and the
    process group are set up once. Returns None on torchrun ranks other than 0.
    ``timeout`` counts from ``since`` (a ``time.monotonic()``; default: this call)."""
    if not jobs:
        return []
    refuse_mixed_sizes([(j.schedule.name, j.schedule.pp, j.schedule.placement.stages, j.ep) for j in jobs])
    # two jobs of one launch tracing into one folder: the second's rank files replaced the
    # first's after the run, unsaid (pipesim run gives each schedule its own, DIR/NAME)
    refuse_shared_folders(None, [j.profile and os.path.realpath(j.profile) for j in jobs], [j.schedule.name for j in jobs])
    pp, ep = jobs[0].schedule.pp, jobs[0].ep
    nprocs = pp * ep
    backend = pick_backend(backend, nprocs)
    try:
        fault = Fault.parse(os.environ.get(FAULT_ENV))
    except ValueError as e:
        raise PipesimError(str(e)) from None
    if under_torchrun():
        per_rank = run_as_torchrun_rank(RUN_JOBS, jobs, nprocs, backend, timeout, fault)
        if per_rank is None:
            return None
    else:
        check_capacity(nprocs, pp, ep)
        check_memory(jobs, nprocs)
        per_rank = launch(RUN_JOBS, jobs, nprocs, backend, timeout, fault, since=since)
    return [assemble(j.schedule, [reports[i] for reports in per_rank], j.tolerance, j.costs) for i, j in enumerate(jobs)]


def check_exports(schedules: list[Schedule], model=None, *, backend: str = "auto", timeout: float = 600.0) -> list[list[float]]:
    """Export each schedule to PyTorch's CSV, run it in PyTorch's own
    ``_PipelineScheduleRuntime`` (all in one launch), and return, per schedule, each
    rank's largest relative error against one process. PipesimError for a schedule
    PyTorch cannot run."""
    from .torch_export import rows_to_csv, to_torch_rows

    if not schedules:
        return []
    refuse_mixed_sizes([(s.name, s.pp, s.placement.stages, 1) for s in schedules])
    pp = schedules[0].pp
    model = model if model is not None else TinyTransformer()
    payload = ([(rows_to_csv(to_torch_rows(s)), s.microbatches) for s in schedules], model)
    check_capacity(pp, pp)
    per_rank = launch(
        "pipesim.runtime.torch_check:run_torch_csvs",
        payload,
        pp,
        pick_backend(backend, pp),
        timeout,
        preload=("pipesim.runtime.torch_check",),
    )
    return [[reports[i].error for reports in per_rank] for i in range(len(schedules))]
