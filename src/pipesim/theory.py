"""Closed forms per schedule under uniform costs.

Each ``Form`` gives the papers' bubble and memory formulas as text (for ``pipesim
schedules``), and as functions: the makespan and each rank's peak live chunk-activations.
A function returns None outside the regime where its form is exact (``regime`` says
which); the tests check every form against the simulator over grids of (pp, M) and
random costs.

Symbols: F, B, W per chunk; BW the fused backward (B + W unless given); F&B an overlapped
pair (F + BW unless given); c the P2P latency; v chunks per rank.

Sources: GPipe and 1F1B (Narayanan et al. 2021, Megatron-LM); interleaved 1F1B (ibid.);
ZB-H1, ZB-H2 and ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"); V-Half and
V-Min (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory": memory
(pp+2)//2 and (pp+4)//3 micro-batches, bubble rates about pp/(2M) and 2pp/(3M));
Chimera (Li and Hoefler 2021: bubble (D-2)/(2N+D-2)); combined 1F1B (Megatron-LM's
warm-up and max_outstanding_backprops; the makespan is ours, checked on grids); DualPipe and DualPipeV
(DeepSeek-V3 technical report, Table 2, and the DualPipe repository's README, whose B is
the full backward, our BW).

Where a schedule's peak is a limit it is built to respect rather than an exact count
(the V family), ``peak_exact`` is False and ``peak`` gives that bound.
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
    peak_exact: bool = True  # False: ``peak`` is an upper bound the schedule respects


def _gpipe(pp, M, u):
    return (M + pp - 1) * (u.f + u.bw) + 2 * (pp - 1) * u.comm


def _1f1b(pp, M, u):
    return (M + pp - 1) * (u.f + u.bw) if u.comm == 0 else None


def _interleaved(pp, M, u, chunks=2, group_size=None):
    # Megatron's group size g moves forwards into the warm-up without changing the time
    if u.comm or M % pp and group_size is None:
        return None
    return (M * chunks + pp - 1) * (u.f + u.bw)


def _interleaved_peak(pp, M, chunks=2, group_size=None):
    # warm-up forwards plus the first steady one; a round is Megatron's group (default pp
    # when pp divides M), else PyTorch's M // max(1, M // pp)
    per_round = group_size or M // max(1, M // pp)
    return [min(M * chunks, 2 * (pp - r - 1) + (chunks - 1) * per_round + 1) for r in range(pp)]


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


def _equal_fbw(u) -> bool:
    return u.comm == 0 and u.f == u.b == u.w and u.bw == u.b + u.w


def _zb_h2(pp, M, u):
    # ZB-H2 fills 1F1B's warm-up with extra forwards: no idle time in any rank's span
    # once M >= 2pp - 1, and the ranks start (pp-1)F apart.
    if not _equal_fbw(u) or M < 2 * pp - 1:
        return None
    return 3 * M * u.f + (pp - 1) * u.f


def _zb_v(pp, M, u):
    # 2M chunk passes of F, B and W on every rank; the last rank starts (pp-1)F late.
    if not _equal_fbw(u) or M < pp:
        return None
    return 6 * M * u.f + (pp - 1) * u.f


def _chimera(pp, M, u):
    # Li and Hoefler's bubble (D-2)/(2N+D-2) assumes a backward as long as the forward:
    # each rank idles (pp-2) forwards beside its M(F+BW) of work.
    if u.comm or abs(u.bw - u.f) > 1e-9 * max(1.0, u.f) or pp % 2 or M % pp:
        return None
    return M * (u.f + u.bw) + (pp - 2) * u.f


def _chimera_peak(pp, M):
    if pp % 2 or M % pp:
        return None
    if M == pp:  # one unit: D/2+1 at the ends up to D in the middle (Chimera, section 3)
        return [min(r, pp - 1 - r) + pp // 2 + 1 for r in range(pp)]
    return [pp] * pp


def _combined(pp, M, u, chunks=1, delay_wgrad=False, group_size=None):
    # Megatron's combined 1F1B in groups of g (default pp): every rank's forwards and
    # backwards outside the pairs add up to ((v-1)g + pp)(F+BW) on the critical path, and
    # the rest are vM - (v-1)g - 1 back-to-back pairs (one per step of the last rank's
    # steady state): a larger group trades pairs for lone F+BW.
    g = group_size or pp
    if u.comm or delay_wgrad or M % pp and chunks > 1 and group_size is None:
        return None
    if not max(u.f, u.bw) <= u.pair <= u.f + u.bw:
        return None
    return ((chunks - 1) * g + pp) * (u.f + u.bw) + (chunks * M - (chunks - 1) * g - 1) * u.pair


def _combined_peak(pp, M, chunks=1, delay_wgrad=False, group_size=None):
    # Megatron's max_outstanding_backprops: the warm-up forwards plus the pair's own
    g = group_size or pp
    return [min(M * chunks, 2 * (pp - r - 1) + (chunks - 1) * g + 2) for r in range(pp)]


def _v_peak(limit):
    return lambda pp, M: [min(2 * M, limit(pp))] * pp


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
        "2(pp-r-1) + (v-1)g + 1 chunks on rank r (g: --group-size, default pp)",
        "c = 0, M divisible by pp or --group-size given (otherwise PyTorch's rounds: no form stated)",
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
    "zb-h2": Form(
        "0 in each rank's span (F = B = W, M >= 2pp-1); ranks start (pp-1)F apart",
        "2pp",
        "c = 0, F = B = W, M >= 2pp-1",
        _zb_h2,
        lambda pp, M: [min(M, 2 * pp)] * pp,
    ),
    "zb-v": Form(
        "makespan 6MF + (pp-1)F: no bubble beyond the fill (F = B = W, M >= pp)",
        "2pp chunks = pp stages (1F1B's)",
        "c = 0, F = B = W, M >= pp",
        _zb_v,
        _v_peak(lambda pp: 2 * pp),
        peak_exact=False,
    ),
    "v-half": Form(
        "about pp/(2M) of the span (F = B = W); no exact form",
        "2((pp+2)//2) chunks = (pp+2)//2 stages, about 1/2 of 1F1B",
        "no exact form",
        lambda pp, M, u: None,
        _v_peak(lambda pp: 2 * ((pp + 2) // 2)),
        peak_exact=False,
    ),
    "v-min": Form(
        "about 2pp/(3M) of the span (F = B = W); no exact form",
        "2((pp+4)//3) chunks = (pp+4)//3 stages, about 1/3 of 1F1B",
        "no exact form",
        lambda pp, M, u: None,
        _v_peak(lambda pp: 2 * ((pp + 4) // 3)),
        peak_exact=False,
    ),
    "chimera": Form(
        "(pp-2)F, i.e. (D-2)/(2N+D-2) of the time (Li and Hoefler), 2x parameters",
        "pp/2+1 .. pp for M = pp, pp beyond",
        "c = 0, BW = F, M a multiple of pp",
        _chimera,
        _chimera_peak,
    ),
    "zb-auto": Form(
        "searched: the shortest longest span found for your costs and limit",
        "at most --memory-limit (default pp)",
        "no closed form (searched)",
        lambda pp, M, u, **opts: None,
        lambda pp, M, **opts: None,
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
        "2pp+1 chunks = pp+1/2 stages (1x parameters: two half-stage chunks per rank)",
        "c = 0, F = B, W <= F, F&B >= F+B",
        _dualpipev,
        lambda pp, M: [2 * pp + 1] * pp,
    ),
    "1f1b-overlap": Form(
        "makespan pp(F+BW) + (M-1)F&B: one F+BW per rank to fill, then pairs",
        "2(pp-r) on rank r (Megatron's warm-up + 1 + the pair's forward)",
        "c = 0, fused backward, max(F, BW) <= F&B <= F+BW",
        _combined,
        _combined_peak,
    ),
    "interleaved-1f1b-overlap": Form(
        "makespan ((v-1)g + pp)(F+BW) + (vM-(v-1)g-1)F&B, g the group size (default pp)",
        "2(pp-r-1) + (v-1)g + 2 chunks on rank r",
        "c = 0, fused backward, max(F, BW) <= F&B <= F+BW",
        lambda pp, M, u, chunks=2, delay_wgrad=False, group_size=None: _combined(pp, M, u, chunks, delay_wgrad, group_size),
        lambda pp, M, chunks=2, delay_wgrad=False, group_size=None: _combined_peak(pp, M, chunks, group_size=group_size),
    ),
}


# --- PyTorch's schedules (schedules/torch_orders.py)


def _looped_bfs(pp, M, u, chunks=2):
    # Once M >= pp no rank waits between its v*M forwards (the first micro-batch is back
    # at rank 0 for the next chunk by then), nor between its v*M backwards: the fill and
    # the drain are (pp-1)F and (pp-1)BW, as GPipe's.
    if u.comm or M < pp:
        return None
    return (chunks * M + pp - 1) * (u.f + u.bw)


def _unstated(what: str) -> Form:
    """A schedule whose forms are not stated here: every question answers None."""
    return Form(f"no closed form stated ({what})", "not stated", "no closed form", _no_answer, _no_answer)


def _no_answer(*args, **options) -> None:
    return None


FORMS.update(
    {
        "looped-bfs": Form(
            "(pp-1)(F+BW), as GPipe's, over v*M chunk passes per rank",
            "v*M (every forward before any backward)",
            "c = 0, M >= pp",
            _looped_bfs,
            lambda pp, M, chunks=2: [chunks * M] * pp,
        ),
        "interleaved-zb": _unstated("PyTorch's ZB-1P on looped stages"),
        "zbv-torch": _unstated("PyTorch's ZB-V pattern"),
    }
)
# --- end of PyTorch's schedules


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
