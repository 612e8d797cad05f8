"""The stage split does not turn on rounding: splits that load the ranks alike are equal
in exact arithmetic and differ by about 1e-16 of the total once costs are scaled, and
``plan --measured-step`` scales every layer's cost by one factor. Before ties were compared
within a tolerance, llama3-8b pp2 x dp8 interleaved v4 took another split at x0.9995 than
at x1, and the calibrated plan showed the measured layout at 98.90 s for a 100 s step."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipesim.cli import main
from pipesim.planner.calibrate import scaled
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
from pipesim.planner.split import balanced_partition
from pipesim.planner.stages import stage_parts
from pipesim.schedules import REGISTRY

# each preset model on a layout it runs on (tensor and expert groups as its runs use them)
PRESETS = {
    "llama3-8b": ("h100", dict(dp=8)),
    "llama3-70b": ("h100", dict(dp=4, tp=8)),
    "llama3-405b": ("h100", dict(dp=8, tp=8)),
    "mixtral-8x22b": ("h100", dict(dp=8, tp=4, ep=8)),
    "deepseek-v3": ("h800-2048", dict(dp=64, ep=64)),
}
# one stage a rank, a loop (v = 2 and 4), a V, and DualPipe's two ends on one rank
PLACEMENTS = [("1f1b", None), ("interleaved-1f1b", 2), ("interleaved-1f1b", 4), ("zb-v", None), ("dualpipe", None)]


def held(schedule: str, pp: int, chunks: int | None) -> tuple[int, tuple]:
    """The stage count and the stages each rank holds, as the planner reads them."""
    options = {"chunks": chunks} if chunks else {}
    pl = REGISTRY[schedule].placement_of(pp, 4 * pp, **options)
    return pl.stages, pl.held()


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_split_is_the_same_under_a_uniform_scaling_of_the_costs(model):
    """At compute factors x (as ``--measured-step`` fits) and x (1 +- 1e-3), every preset
    model on every placement kind: one split. On the old comparison llama3-8b's loops
    and V changed split between x and x (1 +- 1e-3) at several x."""
    m = load_model(model)
    cluster, dims = PRESETS[model]
    t = load_training(base=model_training(model))
    changed = []
    for pp in (2, 4, 8):
        lay = Layout(pp=pp, **dims)
        c = load_cluster(cluster, gpus=lay.gpus)
        for schedule, chunks in PLACEMENTS:
            stages, ranks = held(schedule, pp, chunks)
            if stages > m.layers:
                continue
            for x in np.geomspace(0.5, 1.0, 7):
                split = {}
                for k in (x, x * (1 - 1e-3), x * (1 + 1e-3)):
                    c2, t2 = scaled(c, t, k)
                    split[k] = [len(r) for r in stage_parts(m, c2, t2, lay, stages, "selective", ranks)]
                if len({tuple(s) for s in split.values()}) > 1:
                    changed.append((pp, schedule, chunks, round(x, 4), split))
    assert not changed, changed


@pytest.mark.parametrize("n, stages, ranks", [(32, 8, ((0, 2, 4, 6), (1, 3, 5, 7))), (61, 16, None), (126, 32, None)])
def test_tied_splits_resolve_by_the_stated_rule(n, stages, ranks):
    """Layers of equal work, one factor apart by ulps, and the end stages each carrying a
    share of a layer: the same split at every factor, whatever the rounding (the rule: of
    equal splits the fewest layers on the first stage, then on the last)."""
    base = balanced_partition((1.0,) * n, 0.01, 1.8, stages, ranks)
    for x in (0.1, 0.3, 0.7, 0.9081, 0.9995, 1.7, 1e-3, 1e3):
        assert balanced_partition((x,) * n, 0.01 * x, 1.8 * x, stages, ranks) == base, x


@pytest.mark.parametrize("measured", [100.0, 130.0])
def test_calibrated_plan_shows_the_measured_layout_at_the_measured_step(capsys, measured):
    """After ``--measured-step``, the re-ranked plan simulates the measured layout at the
    fitted rates; its row is the measured step (it was 98.90 s for 100 s, a split chosen
    again by rounding)."""
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--json"]
    code = main([*argv, "--measured-step", str(measured), "--measured-on", "pp2,dp8,interleaved-1f1b,v4"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    rows = [out["recommendation"], *out["runners_up"]]
    mine = [r["step_seconds"] for r in rows if (r["pp"], r["dp"], r["schedule"], r["chunks"]) == (2, 8, "interleaved-1f1b", 4)]
    assert mine, [(r["layout"], r["schedule"], r["chunks"]) for r in rows]
    assert min(mine) == pytest.approx(measured, rel=1e-3)
