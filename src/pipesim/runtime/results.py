"""What a run hands back, as plain data: the measured Timeline, the check's errors, and the
measured-versus-simulated comparison. No torch here; the CLI and tests read these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..costs import Costs, item_time
from ..ir import Item, Schedule
from ..metrics import Report, summarize
from ..profile.pipeline_actions import between_items, timeline_costs
from ..simulate import simulate
from ..timeline import Event, Timeline


class RunFailed(RuntimeError):
    """A run that could not finish: a rank raised, died or hung. The message is one line
    naming the rank and the op; ``pids`` are the rank processes of a local launch (all
    stopped by the time this is raised)."""

    pids: list[int] = []


@dataclass
class RankReport:
    """One rank's account of one schedule: (item, start, end) in seconds from the common
    start; the losses it computed; its largest relative error when checked; the measured
    one-way P2P latency (rank 0 of a synthetic run)."""

    events: list[tuple[Item, float, float]] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)
    error: float | None = None
    latency: float | None = None
    parts: list[tuple[str, str, float, float]] = field(default_factory=list)  # (item, component, start, end)


@dataclass
class RunResult:
    schedule: Schedule
    timeline: Timeline
    errors: list[float | None]
    tolerance: float
    losses: dict[int, float]
    latency: float | None = None
    costs: Costs | None = None  # the synthetic durations, when the run was synthetic
    parts: list[list[tuple[str, str, float, float]]] = field(default_factory=list)  # per pipeline rank, each component step

    @property
    def checked(self) -> bool:
        return any(e is not None for e in self.errors)

    @property
    def passed(self) -> bool:
        return all(e is None or e <= self.tolerance for e in self.errors)


def assemble(schedule: Schedule, reports: list[RankReport], tolerance: float, costs: Costs | None = None) -> RunResult:
    """``reports`` of every process; with expert parallelism the timeline is the first
    replica's (ranks 0..pp-1), the errors every process's."""
    events = tuple(
        tuple(Event(r, item, start, end) for item, start, end in rep.events) for r, rep in enumerate(reports[: schedule.pp])
    )
    losses: dict[int, float] = {}
    for rep in reports:
        losses.update(rep.losses)
    latency = next((rep.latency for rep in reports if rep.latency is not None), None)
    return RunResult(
        schedule,
        Timeline(schedule.pp, events, (), source="measured"),
        [rep.error for rep in reports],
        tolerance,
        dict(sorted(losses.items())),
        latency,
        costs,
        [rep.parts for rep in reports[: schedule.pp]],
    )


@dataclass(frozen=True)
class Accounting:
    """What a synthetic run spent beyond the durations it was given, read off its measured
    timeline, and its order simulated again with those measurements. Where ``makespan``
    is close to the measured one, the ranks waited as the simulation says they wait, and
    the difference from the simulation is the ops' overrun (a sleep wakes late: 0.04-0.2 ms
    on a shared 2-core machine) and the runtime's time between ops; where the waits are
    milliseconds against a start-up latency of microseconds, other processes held the
    cores when a rank or its transfer was to wake."""

    overrun: float  # the ops' measured time over the time they were given, less 1
    overhead: float  # s: mean gap between a rank's items where nothing remote was awaited
    wait: float  # s: mean time from a remote input's end to its consumer's start, less the overhead
    makespan: float  # s: the order simulated with the measured op times, overhead and wait


@dataclass(frozen=True)
class Comparison:
    measured: Report
    simulated: Report
    comm: float  # the P2P latency the simulation was given
    accounted: Accounting | None = None

    @property
    def makespan_error(self) -> float | None:
        """(measured - simulated) / simulated makespan; None where the simulation ran 0 s
        (every duration 0 and no latency: nothing to divide by, and a relative error of
        a run against no time means nothing), as the metrics leave a ratio of no time
        undefined. ``pipesim run`` refuses such a run before its launch; the library's
        ``compare`` of one gave a ZeroDivisionError. JSON has it null, the table n/a."""
        if self.simulated.makespan == 0:
            return None
        return (self.measured.makespan - self.simulated.makespan) / self.simulated.makespan

    @property
    def bubble_difference(self) -> float:
        return self.measured.bubble_ratio - self.simulated.bubble_ratio


def compare(result: RunResult, comm: float | None = None) -> Comparison:
    """Measured against simulated for a synthetic run: the same schedule simulated with the
    durations the ranks were given to sleep and ``comm`` (default: the latency measured at
    start-up); and ``accounted``, the same order simulated with the times the run shows."""
    if result.costs is None:
        raise ValueError("only a synthetic run has durations to simulate")
    if comm is None:
        comm = result.latency or 0.0
    costs = replace(result.costs, comm=comm)
    simulated = simulate(result.schedule, costs)
    measured = summarize(result.schedule, result.timeline)
    return Comparison(measured, summarize(result.schedule, simulated), comm, account(result))


def account(result: RunResult) -> Accounting:
    """``Accounting`` of a synthetic run: its ops' measured time against the time each was
    given, and its order simulated with what its timeline shows (``timeline_costs``)."""
    s, pl = result.schedule, result.schedule.placement
    given = ran = 0.0
    for evs in result.timeline.events:
        for e in evs:
            ran += e.end - e.start
            given += item_time(result.costs, pl, e.rank, e.item)  # what the rank slept for it
    overhead, wait = between_items(s, result.timeline)
    again = summarize(s, simulate(s, timeline_costs(s, result.timeline))).makespan
    return Accounting(ran / given - 1 if given else 0.0, overhead, wait, again)
