"""What a simulation of a candidate says, as totals that grow affinely with the number of
micro-batches, and M's totals extrapolated from shorter runs past the warm-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

from ..memory import memory
from ..metrics import busy_and_span, stream_times
from ..simulate import Program, simulate
from .grad_reduction import reduction_tails
from .param_gather import gather_heads
from .step import StepSync


@dataclass(frozen=True)
class Measured:
    """What a simulation says of a candidate, as totals that grow affinely with M."""

    makespan: float
    busy: tuple[float, ...]  # per rank
    compute: tuple[float, ...]  # compute-stream busy time per rank
    exposed: tuple[float, ...]  # communication with compute idle, per rank
    peak: tuple[float, ...]  # memory, bytes per rank
    static: tuple[float, ...]
    params: tuple[float, ...]
    # per rank, what its timed gradient reductions show past its last item
    # (grad_reduction.reduction_tails; empty where none is timed): the cool-down's
    # shape, the same at every M past the warm-up, so the line keeps it
    reduced: tuple[float, ...] = ()
    # per rank, how much its timed parameter gathers delay it (param_gather.gather_heads;
    # empty where none is timed): the warm-up's, the same at every M past it
    gathered: tuple[float, ...] = ()

    def toward(self, other: Measured, k: float) -> Measured:
        """self + k * (other - self), field by field: the affine extrapolation in M."""

        def line(x, y):
            if isinstance(x, tuple):
                return tuple(u + k * (v - u) for u, v in zip(x, y))
            return x + k * (y - x)

        return Measured(*(line(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)))

    def matches(self, other: Measured) -> bool:
        """Every field equal to ``other``'s, to rounding (1e-9 of its size)."""
        mine = [v for f in fields(self) for v in _values(getattr(self, f.name))]
        theirs = [v for f in fields(other) for v in _values(getattr(other, f.name))]
        return _close(mine, theirs)


def _values(x) -> tuple[float, ...]:
    return x if isinstance(x, tuple) else (x,)


def _close(xs, ys) -> bool:
    return all(abs(x - y) <= 1e-9 * max(abs(x), abs(y), 1e-12) for x, y in zip(xs, ys))


def extrapolated(run: Callable[[int], Measured], M: int, points: tuple[int, int]) -> Measured:
    """M's totals from shorter runs (``run(x)``: the candidate simulated at x micro-batches):
    two sample points a period apart (``sample_points``) and a third a period on, which
    must continue their line before it is followed to M. Past the warm-up a periodic
    schedule repeats itself, but where the ranks' work differs (the end stages' embedding
    and head) the pipeline reaches its steady pace only once the slack between them is
    used up, which can take longer: Llama 3 70B's interleaved 1F1B (v2) on pp2 x tp8 grows
    1.386 s every 4 micro-batches from M=8 to 12 and 1.423 s from 16 on, and the line through 8 and 12
    put it 2.3% fast with a negative bubble; so did the line through 4, 8 and 12, a
    transient with the faster rank's pace, which no rank's work may outgrow
    (``_steady``). What the timed gradient reductions show (``reduced``) must be the same
    at all three: it is the cool-down's, which a periodic order repeats whatever M, but
    where a chunk's last backward lies further from the end the more micro-batches there
    are (LoopedBFS: every backward of the later chunk before any of the earlier's) it
    shrinks with M until the reduction hides, and a line through it would run on below
    what it levels off at. While the third point is off the line, outgrown or its
    reductions not yet settled the window moves a period on; with no room left before M,
    or once the runs have cost more micro-batches than M itself, M is simulated. A pace
    that settles only to rounding never puts the third point on the line (DeepSeek-V3's
    dualpipev on pp9 x tp4 of 72 GB200s, M=7680: each period's growth still moved by
    1e-5 of the step after 200 periods), and the window slid all the way to M, 213
    simulations of 48 to 7680 micro-batches where one of M was exact."""
    m1, m2 = points
    q = m2 - m1
    a, b = run(m1), run(m2)
    spent = m1 + m2
    while m2 + q < M and spent + m2 + q <= M:
        spent += m2 + q
        c = run(m2 + q)
        if a.toward(b, 2.0).matches(c) and _steady(b, c) and _close(a.reduced, b.reduced) and _close(a.gathered, b.gathered):
            return b.toward(c, (M - m2) / q)
        a, b, m2 = b, c, m2 + q
    return run(M)


def _steady(b: Measured, c: Measured) -> bool:
    """Whether a period's growth could be the pipeline's steady pace: no rank busier in it
    than the time it adds (a line through a transient can run below the slowest rank's
    work, three points on it: the faster ranks' pace while the slack lasts)."""
    grows = c.makespan - b.makespan
    return all(y - x <= grows * (1 + 1e-9) + 1e-12 for x, y in zip(b.busy, c.busy))


def measure(prog: Program, costs, mm, sync: StepSync | None = None) -> Measured:
    """The simulation's totals; with ``sync``'s timed reductions (``StepSync.reduce``) and
    parameter gathers (``StepSync.gather``) what they show on this timeline."""
    tl = simulate(prog, costs)
    makespan = tl.end - tl.start
    busy, _ = busy_and_span(tl)
    streams = stream_times(tl)  # the component cost model always sees inside ops
    # compute as summarize's utilization times the makespan gives it (the same floats)
    compute = tuple((c / makespan if makespan > 0 else 0.0) * makespan for c, _ in streams)
    mem = memory(prog.schedule, tl, mm, curves=False)
    reduced = () if sync is None or sync.reduce is None else reduction_tails(tl, sync.reduce, sync.rate)
    gathered = () if sync is None or sync.gather is None else gather_heads(tl, sync.gather, sync.rate)
    return Measured(
        makespan,
        tuple(busy),
        compute,
        tuple(x for _, x in streams),
        tuple(mem.peak),
        tuple(mem.static),
        tuple(mem.params),
        reduced,
        gathered,
    )
