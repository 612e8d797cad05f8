"""Fitting the planner's efficiencies to measurements, and the range it gives without them.

A measurement is either a component cost file (the format ``--components`` reads; ``pipesim
profile`` writes one from a trace) of one layer on a known layout, or the measured step
time of a known layout. Either is compared with what the estimate predicts for the same
layout, and the assumptions are scaled so that the prediction matches:

* compute: every compute efficiency (matrix multiplies, attention, HBM bandwidth) by one
  factor, so that the layer's predicted compute equals the measured one;
* communication: the link bandwidths by one factor, from the layer's measured
  all-to-all or tensor-parallel time (only when the file has communication).

A measured step has one number, so it fits the compute factor alone (by bisection on the run
the prediction simulated, same candidate and stage split, whose step is monotone in it). The layout is plain data: a dict with pp, dp and optionally tp, ep,
micro_batch, schedule and chunks, so that any command can pass one.

Without a measurement, ``uncertainty`` re-evaluates a result with each assumption at the
ends of its stated range and reports the step's range and the assumption that moves it most.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..components import ComponentCosts
from ..errors import PipesimError
from ..inputs import MAX_COUNT, integer
from ..schedules import REGISTRY, canonical, family
from .candidates import Candidate, Pins, schedule_variants, skipped_families
from .evaluate import evaluate
from .layer_costs import layer_costs
from .layout import Layout, layout_problem
from .programs import ProgramCache
from .results import Result
from .shared import Shared
from .specs import Cluster, Model, Training

LAYOUT_KEYS = ("pp", "dp", "tp", "ep", "cp", "etp", "micro_batch", "schedule", "chunks", "recompute")


def parse_layout(text: str) -> dict:
    """``pp16,dp128,ep64,mb1,dualpipe`` (any order; ``v2`` chunks; a schedule name; a
    recomputation ``none``/``selective``/``full``) as a layout dict."""
    out: dict = {}
    names = {"pp": "pp", "dp": "dp", "tp": "tp", "ep": "ep", "cp": "cp", "etp": "etp", "mb": "micro_batch", "v": "chunks"}
    for part in (p.strip() for p in text.replace(" ", ",").split(",")):
        if not part:
            continue
        # a schedule as --schedule reads one (any case, PyTorch's class names): 1F1B was
        # "cannot read" here alone
        if (found := canonical(part)) is not None:
            out["schedule"] = found
            continue
        if part in ("none", "selective", "full"):
            out["recompute"] = part
            continue
        key = part.rstrip("0123456789")
        digits = part[len(key) :]
        if not digits and key not in names:  # a word, so a schedule name: family's refusal, with the closest name
            try:
                family(part)
            except PipesimError as e:
                raise PipesimError(f"--measured-on: {e}") from None
        if key not in names or not digits:
            raise PipesimError(f"--measured-on: cannot read {part!r}; give e.g. pp16,dp128,tp1,ep64,mb1,dualpipe (v2 for chunks)")
        out[names[key]] = integer(digits, key, 1, MAX_COUNT, "--measured-on")  # capped before int()
    if "pp" not in out or "dp" not in out:
        raise PipesimError(f"--measured-on {text!r} needs at least pp and dp, e.g. pp16,dp128,dualpipe")
    return out


def check_layout(m: Model, c: Cluster, t: Training, lay: dict) -> Layout:
    unknown = set(lay) - set(LAYOUT_KEYS)
    if unknown:
        raise PipesimError(f"layout: unknown keys {', '.join(sorted(unknown))}; expected {', '.join(LAYOUT_KEYS)}")
    out = Layout(
        pp=lay["pp"],
        dp=lay["dp"],
        tp=lay.get("tp", 1),
        ep=lay.get("ep", 1),
        micro_batch=lay.get("micro_batch", 1),
        cp=lay.get("cp", 1),
        etp=lay.get("etp", 1),
    )
    if out.gpus != c.gpus:
        raise PipesimError(
            f"layout {out} uses {out.gpus} GPUs, the cluster has {c.gpus}: give a layout whose pp x dp x tp x cp is {c.gpus}, "
            f"or --gpus {out.gpus}"
        )
    refused = layout_problem(m, t, out)
    if refused:
        raise PipesimError(f"layout {out}: {refused}")
    if t.global_batch % (out.dp * out.micro_batch):
        raise PipesimError(
            f"{t.global_batch} sequences do not split into dp{out.dp} x micro-batches of {out.micro_batch}; "
            "change the global batch or the layout"
        )
    return out


def evaluate_layout(m: Model, c: Cluster, t: Training, lay: dict, shared: Shared | None = None) -> Result:
    """The best result on this layout over what it leaves open (micro-batch size from
    ``t.micro_batch_sizes``, schedule from every searched one, chunks, recomputation when
    ``t.recompute`` is auto), fitting ones first; the closest miss when none fits.
    ``shared`` (of the same specs) keeps the stage splits it chose (``scaled_step``)."""
    skipped = skipped_families()
    # a named schedule is the registry's (any case, PyTorch's class names), or family's one refusal
    schedules = (
        [family(lay["schedule"]).name] if "schedule" in lay else [n for n in REGISTRY if n not in skipped and n != "zb-auto"]
    )
    sizes = [lay["micro_batch"]] if "micro_batch" in lay else list(t.micro_batch_sizes)
    recomputes = (
        [lay["recompute"]] if "recompute" in lay else (["none", "selective", "full"] if t.recompute == "auto" else [t.recompute])
    )
    results, shared = [], shared or Shared(m, c, t)
    for mb in sizes:
        if t.global_batch % (lay["dp"] * mb):
            continue
        layout = check_layout(m, c, t, {**lay, "micro_batch": mb})
        M = t.global_batch // (layout.dp * mb)
        for name in schedules:
            chunk_options = [lay["chunks"]] if "chunks" in lay else [ch for _, ch in schedule_variants([name], Pins())]
            for chunks in chunk_options:
                for rc in recomputes:
                    results.append(evaluate(m, c, t, Candidate(layout, name, chunks, rc, M), shared))
    ran = [r for r in results if r.step_time < math.inf]
    if not ran:
        reason = min((r.reason for r in results), default=None) or unsplit_batch(t.global_batch, lay["dp"], sizes)
        raise PipesimError(f"the layout {layout_text(lay)} cannot run: {reason}")
    return min(ran, key=lambda r: (not r.fits, r.step_time))


def layout_text(lay: dict) -> str:
    """A layout dict as ``--measured-on`` spells it (pp2,dp4,tp8,mb3,1f1b), not as Python's dict."""
    short = {"micro_batch": "mb", "chunks": "v"}
    return ",".join(str(v) if k in ("schedule", "recompute") else f"{short.get(k, k)}{v}" for k, v in lay.items())


def unsplit_batch(global_batch: int, dp: int, sizes: list[int]) -> str:
    """Why no micro-batch size of ``sizes`` splits the step's sequences over ``dp``
    replicas, and which sizes would: each replica takes global_batch / dp sequences in
    micro-batches of one size, so the size must divide that share."""
    tried = " or ".join(map(str, sizes))
    said = f"{global_batch} sequences a step do not split into dp{dp} x micro-batches of {tried}"
    if global_batch % dp:
        return f"{said}: dp{dp} does not divide {global_batch}; give the measured run's --global-batch, a multiple of dp{dp}"
    share = global_batch // dp
    divide = [f"mb{d}" for d in itertools.islice((d for d in range(1, share + 1) if share % d == 0), 6)]
    which = f"{', '.join(divide[:-1])} or {divide[-1]}" if len(divide) > 1 else divide[0]
    return f"{said}: each replica takes {share}, which {which} divides"


# --------------------------------------------------------------------------------------
# scaling the assumptions

#: the links one factor scales (the other scales every compute efficiency)
LINKS = ("nvlink_gbps", "network_gbps")


def scaled(c: Cluster, t: Training, compute: float = 1.0, links: float = 1.0) -> tuple[Cluster, Training]:
    """The specs with every compute rate times ``compute`` and every link times ``links``
    (efficiencies capped at 1: a fit past peak means the measurement is not of this model)."""
    cap = 1.0
    c2 = replace(
        c,
        gemm_efficiency=min(cap, c.gemm_efficiency * compute),
        fp8_gemm_efficiency=min(cap, c.fp8_gemm_efficiency * compute),
        fp8_tensor_gemm_efficiency=min(cap, c.fp8_tensor_gemm_efficiency * compute),
        nvlink_gbps=c.nvlink_gbps * links,
        network_gbps=c.network_gbps * links,
    )
    t2 = replace(
        t,
        compute_efficiency=min(cap, t.compute_efficiency * compute),
        attention_efficiency=min(cap, t.attention_efficiency * compute),
        hbm_efficiency=min(cap, t.hbm_efficiency * compute),
    )
    return c2, t2


@dataclass(frozen=True)
class Calibration:
    compute: float  # factor on every compute rate
    links: float  # factor on every link bandwidth
    source: str
    predicted: float  # what the estimate said before, in the measurement's unit
    measured: float

    def changes(self, c: Cluster, t: Training) -> list[str]:
        """What the fit changed, one line per assumption."""
        c2, t2 = scaled(c, t, self.compute, self.links)
        out = []
        for old, new, names in (
            (c, c2, ("gemm_efficiency", "fp8_gemm_efficiency", "fp8_tensor_gemm_efficiency") + LINKS),
            (t, t2, ("compute_efficiency", "attention_efficiency", "hbm_efficiency")),
        ):
            for name in names:
                a, b = getattr(old, name), getattr(new, name)
                if abs(a - b) > 1e-6 * abs(a):  # the bisection's last step is 4e-9 of the factor, not a change
                    out.append(f"{name} {a:g} -> {b:.3g}")
        return out

    def text(self, c: Cluster, t: Training) -> str:
        what = ", ".join(self.changes(c, t)) or "nothing (the estimate already matched)"
        return (
            f"calibrated on {self.source}: predicted {self.predicted:.4g} s, measured {self.measured:.4g} s; "
            f"compute rates x{self.compute:.3f}, links x{self.links:.3f}: {what}"
        )


def from_components(m: Model, c: Cluster, t: Training, lay: dict, costs: ComponentCosts, source: str) -> Calibration:
    """Fit to a measured layer: the mean over the file's layers of compute (F, B and W
    parts) and of communication, against one of the model's MoE layers (its last one; a
    dense model's last layer) predicted on the same layout."""
    layout = check_layout(m, c, t, lay)
    measured = [x for stage in costs.stages for x in stage]
    n = len(measured)
    mc = sum(x.forward_compute + x.backward_compute + x.weight_compute for x in measured) / n
    mm = sum(x.forward_comm + x.backward_comm for x in measured) / n
    last = m.moe_layers[-1] if m.moe_layers else m.layers - 1  # an interleaved model's last layer may be dense
    pred = layer_costs(m, last, c, t, layout, lay.get("recompute", "selective" if t.recompute == "auto" else t.recompute))
    pc = pred.forward_compute + pred.backward_compute + pred.weight_compute
    pm = pred.forward_comm + pred.backward_comm
    if mc <= 0:
        raise PipesimError(f"{source}: the cost file has no compute time to calibrate against")
    links = pm / mm if mm > 0 and pm > 0 else 1.0
    return Calibration(compute=pc / mc, links=links, source=source, predicted=pc + pm, measured=mc + mm)


def scaled_step(m: Model, c: Cluster, t: Training, lay: dict) -> tuple[Result, Callable[[float], float]]:
    """The layout's prediction, and the step time of that very run with every compute rate
    times a factor (``scaled``): the candidate the prediction chose (schedule, chunks,
    micro-batch size, recomputation) with the layers split over the stages as it split them.

    Left free, the split is chosen again at each factor, and with every layer's work scaled
    alike the balancer's choice among splits it scores equal turns on rounding: llama3-8b
    pp2 x dp8 interleaved v4 on 16 H100s took 90.81 s at x1, 90.19 s at x0.9995 and
    91.34 s at x0.994 (other splits), so the step was not monotone in the factor and a
    bisection on it landed anywhere on the ridges (the predicted step itself fitted to
    x0.997). On one split and one candidate every item's time only grows as the factor
    falls, so the step does too."""
    base = Shared(m, c, t)
    predicted = evaluate_layout(m, c, t, lay, base)

    def step(k: float) -> float:
        c2, t2 = scaled(c, t, k)
        shared = Shared(m, c2, t2, programs=base.programs)
        shared.splits.update(base.splits)  # the prediction's stage splits, not ones chosen again at k
        return evaluate(m, c2, t2, predicted.candidate, shared).step_time

    return predicted, step


def from_step(m: Model, c: Cluster, t: Training, lay: dict, seconds: float) -> Calibration:
    """Fit the compute factor so that the layout's predicted step is the measured one
    (``scaled_step``: on the run the prediction simulated)."""
    if not seconds > 0:
        raise PipesimError(f"--measured-step must be > 0 seconds, got {seconds}")
    predicted, step = scaled_step(m, c, t, lay)
    before = predicted.step_time
    lo, hi = 0.05, 4.0
    if step(hi) > seconds:
        raise PipesimError(
            f"--measured-step {seconds:g} s is faster than this layout can run even at 4x the assumed efficiencies "
            f"(predicted {before:.3g} s); check the layout or the figure"
        )
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if step(mid) <= seconds else (mid, hi)
    prefix = {"pp": "pp", "dp": "dp", "tp": "tp", "ep": "ep", "micro_batch": "mb", "chunks": "v"}
    layout_text = ",".join(f"{prefix[k]}{v}" if k in prefix else str(v) for k, v in lay.items())
    return Calibration(compute=hi, links=1.0, source=f"a measured step on {layout_text}", predicted=before, measured=seconds)


# --------------------------------------------------------------------------------------
# the range without calibration

#: each uncertain assumption and the factors at the ends of its stated range: GEMM shares
#: vary by shape and clock (power caps); attention kernels by head size and generation;
#: memory-bound kernels by fusion; achieved links by topology and congestion
RANGES = {
    "matrix-multiply efficiency": ("gemm", 0.85, 1.1),
    "attention efficiency": ("attention", 0.7, 1.3),
    "HBM efficiency (memory-bound kernels)": ("hbm", 0.7, 1.15),
    "link bandwidth": ("links", 0.7, 1.2),
}


def _vary(c: Cluster, t: Training, what: str, k: float) -> tuple[Cluster, Training]:
    if what == "gemm":
        return (
            replace(
                c,
                gemm_efficiency=min(1.0, c.gemm_efficiency * k),
                fp8_gemm_efficiency=min(1.0, c.fp8_gemm_efficiency * k),
                fp8_tensor_gemm_efficiency=min(1.0, c.fp8_tensor_gemm_efficiency * k),
            ),
            replace(t, compute_efficiency=min(1.0, t.compute_efficiency * k)),
        )
    if what == "attention":
        return c, replace(t, attention_efficiency=min(1.0, t.attention_efficiency * k))
    if what == "hbm":
        return c, replace(t, hbm_efficiency=min(1.0, t.hbm_efficiency * k))
    return replace(c, nvlink_gbps=c.nvlink_gbps * k, network_gbps=c.network_gbps * k), t


@dataclass(frozen=True)
class Uncertainty:
    low: float  # step seconds with every assumption at its favourable end
    high: float  # ... at its unfavourable end
    spans: dict[str, tuple[float, float]]  # per assumption, the step at its two ends
    biggest: str  # the assumption that moves the step most


def uncertainty(m: Model, c: Cluster, t: Training, r: Result) -> Uncertainty:
    """Re-simulate ``r``'s candidate with each assumption at the ends of ``RANGES``, and
    with all at once (the range)."""
    cand = r.candidate
    programs = ProgramCache()  # one build and compile of the candidate's schedule serves every variation

    def step(c2: Cluster, t2: Training) -> float:
        return evaluate(m, c2, t2, cand, Shared(m, c2, t2, programs=programs)).step_time

    spans = {}
    for name, (what, lo, hi) in RANGES.items():
        spans[name] = (step(*_vary(c, t, what, hi)), step(*_vary(c, t, what, lo)))
    fast, slow = (c, t), (c, t)
    for what, lo, hi in RANGES.values():
        fast, slow = _vary(*fast, what, hi), _vary(*slow, what, lo)
    biggest = max(spans, key=lambda k: spans[k][1] - spans[k][0])
    return Uncertainty(step(*fast), step(*slow), spans, biggest)
