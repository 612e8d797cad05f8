"""Chimera's constraints and its two model copies."""

from __future__ import annotations

import pytest

from pipesim import PipesimError, build, simulate, summarize, validate


@pytest.mark.parametrize(
    "pp,M,needle",
    [(3, 6, "chimera needs an even --pp"), (4, 6, "chimera needs --microbatches a multiple of --pp=4 .*, got 6")],
)
def test_constraints(pp, M, needle):
    with pytest.raises(PipesimError, match=needle):
        build("chimera", pp, M)


@pytest.mark.parametrize("pp,M", [(2, 2), (4, 4), (4, 12), (6, 6), (8, 16), (10, 20)])
def test_two_pipelines_in_opposite_directions(pp, M):
    """Half the micro-batches enter at rank 0 and half at rank pp-1; each rank holds a stage
    of each copy (2x parameters) and both of its chunks do work."""
    s = validate(build("chimera", pp, M))
    assert s.placement.kind == "dual" and s.placement.parameter_copies == 2
    first = [op for op in s.ranks[0] if op.kind == "F"]
    assert {op.chunk for op in first} == {0, 1}
    assert s.ranks[0][0].chunk == 0 and s.ranks[-1][0].chunk == 1  # each end starts its pipeline
    rep = summarize(s, simulate(s))
    assert rep.busy == [3.0 * M] * pp  # one F and one BW per micro-batch per rank
