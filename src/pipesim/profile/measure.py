"""From attributed traces to what pipesim models: per-layer component times
(``component_times``), per-stage F/B/W/BW costs and the measured ``Timeline``
(``pipeline_actions``), gathered in one ``Profile``.

Times come from the GPU when the trace has kernels: a component's time is the sum of
its kernels' times (``busy``, the time at least one of them runs, is shown beside it:
it is shorter when a component runs kernels on two streams at once, as DeepSeek's
``mlp(W)`` does); an action's time is the span from its first kernel's start to its last
kernel's end. A trace without kernels (a CPU run) gives the CPU durations of
the annotated ranges instead, and says so. All times here are seconds.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..costs import Costs
from ..errors import PipesimError
from ..ir import Schedule
from ..timeline import Timeline
from .attribute import Attributed, attribute, union_length
from .component_times import ComponentRow, component_rows
from .labels import EXPECTED, Mapping, action
from .pipeline_actions import Filled, pipeline_of
from .trace import US, read_in_folder, read_trace


@dataclass
class Profile:
    sources: list[str]
    gpu: bool
    window: float  # seconds from the first to the last measured work, per trace (summed)
    rows: list[ComponentRow]
    layers: int
    kernels: int
    unassigned: int
    unassigned_time: float
    schedule: Schedule
    timeline: Timeline
    stage_costs: Costs | None  # from pipeline actions, when there are any
    device: str | None = None
    total_sms: int | None = None
    comm_sms_seen: float | None = None  # SMs the communication kernels held (their grid)
    overlapped: float = 0.0  # share of compute kernel time that ran beside communication
    notes: list[str] = field(default_factory=list)
    filled: tuple[Filled, ...] = ()  # per-stage costs not measured, filled from other stages

    @property
    def layer_times(self) -> dict[str, float]:
        """``LayerCosts`` fields measured (``attn_f`` -> seconds per layer)."""
        return {r.component.field: r.per_layer for r in self.rows}


def trace_paths(target: str | Path) -> list[Path]:
    """The traces of ``target``: the file itself, or a folder's ``rank*.json`` (what
    ``pipesim run --profile`` writes; ``.json.gz`` too), in rank order, else all its
    ``*.json`` / ``*.json.gz``."""
    p = Path(target)
    if p.is_dir():
        read = set(read_in_folder([f.name for f in p.iterdir() if f.is_file()]))
        files = sorted(
            [f for f in p.iterdir() if f.name in read],
            key=lambda f: (_rank_of_name(f.name) is None, _rank_of_name(f.name) or 0, f.name),
        )
        if not files:
            # run --schedules a,b --profile DIR writes a folder per schedule
            held = _held(p)
            if held:
                raise PipesimError(
                    f"{p}: no traces in this folder, but its folders {', '.join(held)} hold some (a run of several "
                    f"schedules): give one, e.g. {p / held[0]}"
                )
            raise PipesimError(f"{p}: no traces in this folder; expected rank0.json, rank1.json, ... (pipesim run --profile)")
        return files
    if not p.exists():
        raise PipesimError(f"no trace {str(p)!r}: give a torch.profiler trace (.json or .json.gz) or a folder of them")
    return [p]


def _held(folder: Path) -> list[str]:
    """The folders in ``folder`` that hold traces (``run --schedules a,b --profile DIR``'s)."""
    return sorted(d.name for d in folder.iterdir() if d.is_dir() and any(d.glob("rank*.json*")))


def _rank_of_name(name: str) -> int | None:
    digits = "".join(c for c in name.split(".")[0] if c.isdigit())
    return int(digits) if digits else None


def profile(target: str | Path, mapping: Mapping | None = None) -> Profile:
    mapping = mapping or Mapping()

    def wanted(name: str) -> bool:
        return mapping.component(name) is not None or action(name) is not None

    paths = trace_paths(target)
    runs = [attribute(read_trace(path, wanted), mapping.component, action) for path in paths]
    prof = measure(runs, one_file=not Path(target).is_dir())
    held = _held(Path(target)) if Path(target).is_dir() else []
    if held:  # a list run's folders beside a one-schedule run's traces: which was read is said
        names = ", ".join(p.name for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        prof.notes.append(
            f"read the traces in {target} itself ({names}); its folders {', '.join(held)} hold other runs' traces: "
            f"give one to read those, e.g. {Path(target) / held[0]}"
        )
    return prof


def measure(runs: list[Attributed], one_file: bool = False) -> Profile:
    if not any(run.components or [a for a in run.actions if a.what.compute] for run in runs):
        raise PipesimError(_nothing_found(runs))
    gpu = any(run.trace.kernels for run in runs)
    notes = []
    if not gpu:
        notes.append("no GPU kernels in the trace: times are the CPU durations of the annotated ranges")
    kernels = sum(len(run.trace.kernels) for run in runs)
    unassigned = [k for run in runs for k in run.unassigned]
    window = sum(_window(run, gpu) for run in runs)
    rows, layers, overlapped, comm_sms = component_rows(runs, gpu, window)
    schedule, timeline, costs, filled = pipeline_of(runs, gpu, notes, one_file)
    first = runs[0].trace
    if unassigned:
        notes.append(f"{len(unassigned)} kernels were launched outside every recognised annotation (not counted)")
    return Profile(
        sources=[run.trace.path for run in runs],
        gpu=gpu,
        window=window,
        rows=rows,
        layers=layers,
        kernels=kernels,
        unassigned=len(unassigned),
        unassigned_time=union_length([(k.start, k.end) for k in unassigned]) * US,
        schedule=schedule,
        timeline=timeline,
        stage_costs=costs,
        device=first.device,
        total_sms=first.total_sms,
        comm_sms_seen=comm_sms,
        overlapped=overlapped,
        notes=notes,
        filled=filled,
    )


def _nothing_found(runs: list[Attributed]) -> str:
    where = runs[0].trace.path if len(runs) == 1 else f"{len(runs)} traces in {Path(runs[0].trace.path).parent}"
    events = sum(r.trace.events for r in runs)
    kernels = sum(len(r.trace.kernels) for r in runs)
    ops = sum(r.trace.cpu_ops for r in runs)
    names = Counter()
    for r in runs:
        names.update(r.unrecognised)
    if events == 0:
        found = "no events at all"
    else:
        shown = ", ".join(repr(n) for n, _ in names.most_common(4))
        found = (
            f"{events} events ({ops} operators), {kernels} GPU kernels and {sum(names.values())} annotations"
            + (f" ({shown}{', ...' if len(names) > 4 else ''})" if names else "")
            + ", none of which pipesim reads"
        )
    return f"{where}: found {found}; expected {EXPECTED}"


def _window(run: Attributed, gpu: bool) -> float:
    if gpu and run.trace.kernels:
        return (max(k.end for k in run.trace.kernels) - min(k.start for k in run.trace.kernels)) * US
    spans = [i.range for i in run.components + run.actions]
    return (max(r.end for r in spans) - min(r.start for r in spans)) * US if spans else 0.0
