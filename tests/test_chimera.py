"""Chimera's constraints and its two model copies."""

from __future__ import annotations

import importlib

import pytest

from pipesim import Costs, PipesimError, build, simulate, summarize, validate


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


@pytest.mark.parametrize("pp", [2, 4, 6, 8, 10, 12, 14, 16])
def test_longer_chimeras_repeat_the_list_schedulers_steady_state(pp):
    """Past SHORT_UNITS units of pp micro-batches Chimera repeats the steady state of its
    order at SHORT_UNITS units: op for op the list scheduler's order at M itself (each
    size searched whole here, with no cache)."""
    mod = importlib.import_module("pipesim.schedules.chimera")
    for units in range(mod.SHORT_UNITS + 1, mod.SHORT_UNITS + 5):
        M = units * pp
        assert mod.repeated(pp, M) is not None, M  # built by repeating, not searched again
        got = mod.chimera.search(pp, M)  # the builder, without the disk cache
        want = mod.searched(pp, M).schedule("chimera")
        assert got.table == want.table, M


def test_chimeras_order_at_any_length_keeps_its_bubble():
    """The repeated order still reaches Chimera's bound at F = BW = 1: every rank idles
    pp - 2 slots inside a makespan of 2M + pp - 2."""
    pp, M = 8, 96  # 12 units: 7 repeated
    s = build("chimera", pp, M)
    tl = simulate(s, Costs(f=1, b=1, w=0))  # the fused backward as long as the forward
    assert tl.end - tl.start == 2 * M + pp - 2
    assert summarize(s, tl).busy == [2.0 * M] * pp
