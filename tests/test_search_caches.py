"""The caches the planner's search shares between candidates: each must answer what a
fresh computation answers, and inputs that differ in any one field must not share an
answer (a key that forgot a field would hand the first caller's answer to the second)."""

from __future__ import annotations

import random

import pytest

from pipesim import components
from pipesim.components import ComponentCosts, LayerCosts, serial_time
from pipesim.ir import Op
from pipesim.planner import split
from pipesim.planner.split import balanced_partition


def _layers(rng: random.Random, n: int) -> tuple[LayerCosts, ...]:
    def t():
        return rng.choice([0, 0.0, rng.random() * 1e-3, rng.randint(1, 5), rng.random()])

    return tuple(LayerCosts(t(), t(), t(), t(), *[rng.choice([None, 0.0, rng.random()]) for _ in range(6)]) for _ in range(n))


@pytest.mark.parametrize("kind", ["F", "B", "W", "BW"])
def test_serial_time_is_the_two_stream_simulation_of_a_lone_op(kind):
    """A lone op without half micro-batches runs its parts one after another: its time is
    the same float ``run_streams`` ends at, for any layers and SM share."""
    rng = random.Random(kind)
    for _ in range(300):
        layers = _layers(rng, rng.randint(1, 12))
        model = ComponentCosts((layers,), comm_sms=rng.choice([0, 20, 66]))
        assert serial_time(kind, layers) == model._run_plan((kind, 0))[0]


def test_serial_times_are_kept_by_kind_and_layers():
    """Two cost models whose stage 0 holds other layers, and two kinds of op on the same
    layers, never share a kept time; a lone op that overlaps half micro-batches is
    simulated, not summed."""
    components._SERIAL.clear()
    a = (LayerCosts(attn_f=1, mlp_f=2, dispatch_f=0.5, combine_f=0.25),)
    b = (LayerCosts(attn_f=3, mlp_f=2, dispatch_f=0.5, combine_f=0.25),)
    ma, mb = ComponentCosts((a,)), ComponentCosts((b, a))
    assert ma.op_time(Op("F", 0, 0), 0) == 1 + 0.5 + 2 + 0.25
    assert mb.op_time(Op("F", 0, 0), 0) == 3 + 0.5 + 2 + 0.25  # other layers, same stage index
    assert mb.op_time(Op("F", 0, 0), 1) == 1 + 0.5 + 2 + 0.25  # the same layers at another stage
    assert ma.op_time(Op("B", 0, 0), 0) == 0.25 + 2 + 0.5 + 1  # other kind, same layers
    assert ma.op_time(Op("W", 0, 0), 0) == 2 + 1
    assert ma.op_time(Op("BW", 0, 0), 0) == 0.25 + 2 + 2 + 0.5 + 1 + 1
    split_halves = ComponentCosts((a,), lone_overlap=True, comm_sms=0)
    assert split_halves.op_time(Op("F", 0, 0), 0) < 1 + 0.5 + 2 + 0.25  # halves hide communication


def test_kept_splits_answer_what_a_fresh_split_answers():
    """Each call after the first differs from the one it is checked against in one input
    (layer times, the first and last stage's extra work, the stage count, which stages
    each rank holds, evening out or not) and gets the split a cleared cache computes for
    it; the inputs are chosen so those splits differ."""
    work = (2.0, 3.0, 1.0, 2.0, 1.0, 3.0, 1.0, 3.0, 5.0, 1.0, 1.0, 1.0)
    base = (work, 0.0, 0.5, 4, None, True)
    loop = ((0, 3), (1, 2))
    calls = [
        base,
        (work[::-1], 0.0, 0.5, 4, None, True),
        (work, 1.0, 0.5, 4, None, True),
        (work, 0.0, 0.0, 4, None, True),
        (work, 0.0, 0.5, 3, None, True),
        (work, 0.0, 0.5, 4, loop, True),
        (work, 0.0, 0.5, 4, loop, False),  # against the call before it
    ]

    def sizes(call):
        return [len(r) for r in balanced_partition(*call)]

    def fresh(call):
        for f in (split._end_sizes, split._evened, split._options, split._moves):
            f.cache_clear()
        return sizes(call)

    answers = [fresh(call) for call in calls]
    assert all(x != answers[0] for x in answers[1:-1]) and answers[-1] != answers[-2], answers
    assert [sizes(call) for call in calls] == answers  # one cache, filled in this order
    assert [sizes(call) for call in reversed(calls)] == answers[::-1]  # and read back
