"""The V blocks' passes and the as-soon-as-possible timing in C (``_vblocks.c``) against
their Python loops (``PIPESIM_KERNEL=python``): the same orders op for op, the same times
to the bit, the same deadlocks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim import Costs, Placement, kernel
from pipesim.autoschedule.blocks import Block, block_variants, v_half_blocks, v_min_block, zb_v_block
from pipesim.autoschedule.evaluate import Index, timed
from pipesim.autoschedule.greedy import Policy, list_schedule
from pipesim.autoschedule.problem import Problem

pytestmark = pytest.mark.skipif(kernel.compiled() is None, reason="no C compiler: only the Python loops run")


def _python(f, *args):
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PIPESIM_KERNEL", "python")
        return f(*args)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 12), st.integers(1, 48), st.integers(0, 3), st.booleans())
def test_the_compiled_block_passes_are_the_python_ones(pp, M, which, paired):
    """Every block the V families build from (ZB-V's, V-Half's two, V-Min's), kept in V
    order or not, plain and squeezed: the C passes give the Python's orders, and they
    did run (none fell back for want of room)."""
    block = (zb_v_block(pp), *v_half_blocks(pp), v_min_block(pp))[which]
    times = block.times(pp)
    if times is None:
        return
    assert kernel.block_variants(pp, M, *times, paired, (False, True)) is not None
    assert block_variants(pp, M, block, paired, (False, True)) == _python(block_variants, pp, M, block, paired, (False, True))


def test_a_colliding_block_is_none_either_way():
    block = Block(leg1=6)  # every leg 6 slots apart: a rank's passes meet mod 6
    assert block.times(4) is None
    assert block_variants(4, 8, block, False, (False, True)) == [None, None]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["flat", "v", "dual"]),
    st.integers(1, 6),
    st.integers(1, 12),
    st.lists(st.floats(0.25, 3.0), min_size=3, max_size=3),
    st.sampled_from([0.0, 0.3]),
    st.integers(0, 2**31),
)
def test_the_compiled_timing_is_the_python_one(kind, pp, M, fbw, comm, seed):
    """A list schedule's orders, and the same with neighbouring ops swapped on a rank
    (often an order that deadlocks): the same plan and ends table, or None for both."""
    if kind == "dual":
        pp, M = 2 * ((pp + 1) // 2), 2 * ((pp + 1) // 2) * (1 + M % 3)
    pl = {"flat": Placement.flat, "v": Placement.v, "dual": Placement.dual}[kind](pp, M)
    f, b, w = fbw
    costs = Costs(f=[f * (1 + 0.1 * s) for s in range(pl.stages)], b=b, w=w, comm=comm)
    prob = Problem.of(pl, costs, split=kind != "dual")
    plan = list_schedule(prob, Policy(), float("inf"))
    assert plan is not None
    orders = [[op[:3] for op in ops] for ops in plan.ranks]
    rng = random.Random(seed)
    for r in range(pp):
        if len(orders[r]) > 1 and rng.random() < 0.5:
            k = rng.randrange(len(orders[r]) - 1)
            orders[r][k], orders[r][k + 1] = orders[r][k + 1], orders[r][k]
    index = Index(prob)
    fast, slow = timed(index, orders), _python(timed, index, orders)
    assert (fast is None) == (slow is None)
    if fast is not None:
        assert fast[0] == slow[0] and list(fast[1]) == list(slow[1])
