"""Sweeps: the metrics of several schedules over a range of micro-batch counts.

The range syntax (``--microbatches`` of ``pipesim sweep``):

* ``8:128``: powers of two from 8 to 128 (8, 16, 32, 64, 128), the doubling that shows
  a bubble shrinking as 1/M;
* ``8:128:8``: from 8 to 128 in steps of 8 (both ends included when the step lands there);
* ``8,12,16``: exactly these (each once: a repeat is refused, not run twice or dropped, and
  so is an empty item, 4,,8);
* ``16``: one value.

A (pp, M) a schedule cannot take (DualPipe needs M >= 2pp, interleaved needs pp | M)
is skipped, and the reason kept for the user.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .errors import PipesimError
from .inputs import MAX_COUNT

TYPE_CHECKING = False  # typing's own flag, without importing typing
if TYPE_CHECKING:
    from .costs import CostModel
    from .ir import Schedule

# the builders, the simulator and the metrics import numpy: imported in run_sweep, so that
# the help that quotes RANGE_HELP (sweep --help, report --help) does without

RANGE_HELP = "A:B (powers of two from A to B), A:B:STEP, a list A,B,C, or one number"
MAX_POINTS = 10_000  # micro-batch counts in one sweep (each is a whole simulation)


def parse_range(text: str, flag: str = "--microbatches") -> list[int]:
    """The whole numbers >= 1 that ``text`` names (see the module doc), ascending."""

    def whole(part: str) -> int:
        try:
            v = int(part)
        except ValueError:
            raise PipesimError(f"{flag} {text!r}: {part!r} is not a whole number; use {RANGE_HELP}") from None
        if not 1 <= v <= MAX_COUNT:
            raise PipesimError(f"{flag} {text!r}: values must be from 1 to {MAX_COUNT:,}, got {v}")
        return v

    text = text.strip()
    if "," in text:
        parts = [p.strip() for p in text.split(",")]
        if "" in parts:  # 4,,8 or 4,8, : a value left out, not one to drop unsaid
            raise PipesimError(f"{flag} {text!r}: an empty item (two commas together, or one at an end); give values like 4,8,16")
        given = [whole(p) for p in parts]
        if len(given) > MAX_POINTS:
            raise PipesimError(f"{flag} {text!r}: give from 1 to {MAX_POINTS:,} values")
        # a value typed twice is a slip for another one (4,8,4 for 4,8,16): "exactly these"
        # cannot say which was meant, so it is named rather than silently dropped
        seen: set[int] = set()
        twice = next((v for v in given if v in seen or seen.add(v)), None)
        if twice is not None:
            raise PipesimError(f"{flag} {text!r}: {twice} is given {given.count(twice)} times; give each value once")
        return sorted(given)
    parts = text.split(":")
    if len(parts) == 1:
        return [whole(parts[0])]
    if len(parts) > 3:
        raise PipesimError(f"{flag} {text!r}: too many ':'; use {RANGE_HELP}")
    lo, hi = whole(parts[0]), whole(parts[1])
    if lo > hi:
        raise PipesimError(f"{flag} {text!r}: the start {lo} is above the end {hi}")
    if len(parts) == 3:
        step = whole(parts[2])
        if (hi - lo) // step + 1 > MAX_POINTS:
            raise PipesimError(f"{flag} {text!r}: more than {MAX_POINTS:,} values; use a larger step")
        return list(range(lo, hi + 1, step))
    out = []
    while lo <= hi:
        out.append(lo)
        lo *= 2
    return out


# The CSV's columns, in order: the metrics of ``metrics.Report`` (maxima over ranks where
# the report has one value per rank).
COLUMNS = (
    "schedule",
    "pp",
    "microbatches",
    "makespan",
    "bubble_ratio",
    "span_bubble_ratio",
    "steady_state_utilization",
    "min_utilization",
    "peak_activations",
    "peak_activation_memory",
    "parameter_copies",
)


@dataclass(frozen=True)
class Point:
    """One simulated (schedule, pp, M): the values of ``COLUMNS``."""

    schedule: str
    pp: int
    microbatches: int
    makespan: float
    bubble_ratio: float
    span_bubble_ratio: float
    steady_state_utilization: float | None
    min_utilization: float
    peak_activations: int
    peak_activation_memory: float
    parameter_copies: float


@dataclass(frozen=True)
class Skip:
    schedule: str
    microbatches: int
    reason: str


def run_sweep(
    names: Sequence[str],
    pp: int,
    microbatches: Sequence[int],
    costs: CostModel,
    options: dict | None = None,
    costs_per: str = "chunk",
    files: dict[str, Schedule] | None = None,
    look: Callable[[Schedule], object] | None = None,
) -> tuple[list[Point], list[Skip]]:
    """Build, simulate and summarize every schedule at every M; the points that ran and
    the (schedule, M) that could not, with why. Unknown names are an error. ``costs_per``
    as in ``costs.chunk_costs``. A name in ``files`` is a schedule file, as read: one
    point, at its own M (its order is fixed; a sweep cannot rebuild it at another).
    ``look`` is called on each schedule simulated (only one is held at a time)."""
    from .costs import chunk_costs
    from .metrics import summarize
    from .schedules import build, family
    from .simulate import simulate

    options, files = options or {}, files or {}
    points, skips = [], []
    for name in names:
        if name in files:
            made = [(files[name].microbatches, files[name])]
        else:
            fam = family(name)
            opts = {k: v for k, v in options.items() if k in fam.options}
            made = ((M, _built(build, name, pp, M, opts)) for M in microbatches)  # one held at a time
        for M, s in made:
            if isinstance(s, PipesimError):
                skips.append(Skip(name, M, str(s)))
                continue
            if look:
                look(s)
            rep = summarize(s, simulate(s, chunk_costs(costs, s, costs_per)))
            points.append(
                Point(
                    schedule=name,
                    pp=pp,
                    microbatches=M,
                    makespan=rep.makespan,
                    bubble_ratio=rep.bubble_ratio,
                    span_bubble_ratio=rep.span_bubble_ratio,
                    steady_state_utilization=rep.steady_state_utilization,
                    min_utilization=min(rep.utilization),
                    peak_activations=max(rep.peak_activations),
                    peak_activation_memory=max(rep.peak_activation_memory),
                    parameter_copies=rep.parameter_copies,
                )
            )
    return points, skips


def _built(build, name: str, pp: int, M: int, opts: dict):
    """The schedule ``name`` built at (pp, M), or the error that says why it cannot be."""
    try:
        return build(name, pp, M, **opts)
    except PipesimError as e:
        return e


def skip_lines(skips: Sequence[Skip]) -> list[str]:
    """One line per schedule that skipped some M: which, and the first reason."""
    by_name: dict[str, list[Skip]] = {}
    for sk in skips:
        by_name.setdefault(sk.schedule, []).append(sk)
    return [
        f"skipped {name} at M={','.join(str(sk.microbatches) for sk in sks)}: {sks[0].reason}" for name, sks in by_name.items()
    ]


def to_csv(points: Sequence[Point]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for p in points:
        w.writerow(["" if (v := getattr(p, c)) is None else repr(v) if isinstance(v, float) else v for c in COLUMNS])
    return buf.getvalue()
