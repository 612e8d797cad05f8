"""ZB-V, V-Half and V-Min against the Zero Bubble authors' generators: never a longer
makespan, a longer longest span or more peak memory, at the sizes recorded in
data/reference/v_family_grid.json (numbers from sail-sg's generators; see its source).
The whole grid is in benchmarks/v_family_vs_reference.py; here a spread of it."""

from __future__ import annotations

import json

import pytest

from conftest import REFERENCE
from pipesim import Costs, build, simulate, summarize

GRID = json.loads((REFERENCE / "v_family_grid.json").read_text())["rows"]


def spread(pp: int, M: int) -> bool:
    return pp <= 3 or M in (1, pp - 1, pp, pp + 1, 2 * pp - 1, 2 * pp, 3 * pp, 4 * pp) or (pp, M) == (8, 9)


CASES = [row for row in GRID if spread(row[1], row[2])]


def measure(name: str, pp: int, M: int) -> tuple[float, float, int]:
    s = build(name, pp, M)
    rep = summarize(s, simulate(s, Costs()))
    return rep.makespan, max(rep.span), max(rep.peak_activations)


@pytest.mark.parametrize("name,pp,M,makespan,span,peak", CASES)
def test_at_least_as_good_as_the_authors_generators(name, pp, M, makespan, span, peak):
    got = measure(name, pp, M)
    assert got[0] <= makespan and got[1] <= span and got[2] <= peak, f"pipesim {got} vs reference {(makespan, span, peak)}"


@pytest.mark.parametrize("pp", [*range(1, 9), 12, 16, 24])
def test_zb_v_has_no_span_bubble_from_2pp_minus_1(pp):
    # the reference's ZB-V keeps every rank busy for its whole span (6M unit ops) once
    # M >= 2pp - 1 (data/reference/v_family_grid.json); so does pipesim's, beyond that grid too
    for M in sorted({max(1, 2 * pp - 1), 2 * pp, 3 * pp + 1, 5 * pp}):
        makespan, span, _ = measure("zb-v", pp, M)
        assert span == 6 * M, (pp, M, span)
        assert makespan == 6 * M + pp - 1
