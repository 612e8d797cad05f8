"""Closed forms per schedule under uniform costs.

Each ``Form`` gives the papers' bubble and memory formulas as text (for ``pipesim
schedules``), and as functions: the makespan and each rank's peak live chunk-activations.
A function returns None outside the regime where its form is exact (``regime`` says
which); the tests check every form against the simulator over grids of (pp, M) and
random costs.

Symbols: F, B, W per chunk; BW the fused backward (B + W unless given); F&B an overlapped
pair (F + BW unless given); c the P2P latency; v chunks per rank.

Sources: GPipe and 1F1B (Narayanan et al. 2021, Megatron-LM); interleaved 1F1B (ibid.);
ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 3); DualPipe and
DualPipeV (DeepSeek-V3 technical report, Table 2, and the DualPipe repository's README,
whose B is the full backward, our BW).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .costs import Costs


@dataclass(frozen=True)
class Uniform:
    """Scalar costs read off a uniform ``Costs``."""

    f: float
    b: float
    w: float
    bw: float
    pair: float
    comm: float

    @classmethod
    def of(cls, costs) -> Uniform | None:
        """Scalars of a uniform ``Costs``; None for per-stage or component costs."""
        if not isinstance(costs, Costs) or not costs.uniform:
            return None
        bw = costs.bw if costs.bw is not None else costs.b + costs.w
        pair = costs.pair if costs.pair is not None else costs.f + bw
        return cls(float(costs.f), float(costs.b), float(costs.w), float(bw), float(pair), float(costs.comm))


@dataclass(frozen=True)
class Form:
    bubble: str  # idle time per rank, as the papers write it
    activations: str  # peak live activations per rank
    regime: str  # where the makespan form is exact
    makespan: Callable[..., float | None]  # (pp, M, Uniform, **options)
    peak: Callable[..., list[int] | None]  # (pp, M, **options)


def _gpipe(pp, M, u):
    return (M + pp - 1) * (u.f + u.bw) + 2 * (pp - 1) * u.comm


def _1f1b(pp, M, u):
    return (M + pp - 1) * (u.f + u.bw) if u.comm == 0 else None


def _interleaved(pp, M, u, chunks=2):
    if u.comm or M % pp:
        return None
    return (M * chunks + pp - 1) * (u.f + u.bw)


def _interleaved_peak(pp, M, chunks=2):
    return [min(M * chunks, 2 * (pp - r - 1) + (chunks - 1) * pp + 1) for r in range(pp)]


def _zb_h1(pp, M, u):
    if u.comm or M < pp or u.w > min(u.f, u.b):
        return None
    return M * (u.f + u.b + u.w) + (pp - 1) * (u.f + u.b - u.w)


def _dual_regime(u) -> bool:
    return u.comm == 0 and u.f == u.b and u.w <= u.f and u.pair >= u.f + u.b


def _dualpipe(pp, M, u):
    # Every rank does M forwards and M backwards; the rank with the most overlapped pairs
    # (M - pp - 1 of them) is the least busy, and it idles (pp/2 - 1)(F&B + BW - 3W).
    if not _dual_regime(u):
        return None
    work = M * (u.f + u.bw) - (M - pp - 1) * (u.f + u.bw - u.pair)
    return work + (pp // 2 - 1) * (u.pair + u.bw - 3 * u.w)


def _dualpipev(pp, M, u):
    # DualPipeV on pp ranks is DualPipe's formula with PP = 2pp stages: 2M chunk passes
    # per rank, 2M - 2pp - 1 pairs on the least busy rank.
    if not _dual_regime(u):
        return None
    work = 2 * M * (u.f + u.bw) - (2 * M - 2 * pp - 1) * (u.f + u.bw - u.pair)
    return work + (pp - 1) * (u.pair + u.bw - 3 * u.w)


FORMS: dict[str, Form] = {
    "gpipe": Form(
        "(pp-1)(F+BW) + 2(pp-1)c",
        "M",
        "any uniform costs",
        _gpipe,
        lambda pp, M: [M] * pp,
    ),
    "1f1b": Form(
        "(pp-1)(F+BW)",
        "pp-r on rank r",
        "c = 0",
        _1f1b,
        lambda pp, M: [min(pp - r, M) for r in range(pp)],
    ),
    "interleaved-1f1b": Form(
        "(pp-1)(F+BW) per chunk, i.e. 1/v of 1F1B's",
        "2(pp-r-1) + (v-1)pp + 1 chunks on rank r",
        "c = 0, M divisible by pp",
        _interleaved,
        _interleaved_peak,
    ),
    "zb-h1": Form(
        "(pp-1)(F+B-W)",
        "pp",
        "c = 0, M >= pp, W <= min(F, B)",
        _zb_h1,
        lambda pp, M: [min(pp, M)] * pp,
    ),
    "dualpipe": Form(
        "(pp/2-1)(F&B+BW-3W)",
        "pp+1 (2x parameters)",
        "c = 0, F = B, W <= F, F&B >= F+B",
        _dualpipe,
        lambda pp, M: [pp + 1] * pp,
    ),
    "dualpipev": Form(
        "(pp-1)(F&B+BW-3W)",
        "2pp+1 chunks = pp+1/2 stages (2x parameters)",
        "c = 0, F = B, W <= F, F&B >= F+B",
        _dualpipev,
        lambda pp, M: [2 * pp + 1] * pp,
    ),
}


def makespan(name: str, pp: int, microbatches: int, costs: Costs, **options) -> float | None:
    """The closed-form makespan, or None where the schedule has no exact form."""
    form = FORMS.get(name)
    u = Uniform.of(costs)
    if form is None or u is None:
        return None
    return form.makespan(pp, microbatches, u, **options)


def peak_activations(name: str, pp: int, microbatches: int, **options) -> list[int] | None:
    form = FORMS.get(name)
    return None if form is None else form.peak(pp, microbatches, **options)
