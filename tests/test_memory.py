"""The memory model against DeepSeek-V3 Table 2 and hand-worked timelines."""

from __future__ import annotations

import pytest

from pipesim import Placement, Schedule, Timeline, build, simulate
from pipesim.errors import PipesimError
from pipesim.ir import parse_item
from pipesim.memory import MemoryModel, layer_activation, memory
from pipesim.metrics import peak_live
from pipesim.timeline import Event

# A stated shape: GPT with hidden 4096, 32 heads, sequence 4096, micro-batch 1, 32
# layers on pp=8 (4 layers a stage), 12 h^2 parameters a layer.
H, A, S, LAYERS, PP = 4096, 32, 4096, 32, 8
PER_STAGE = LAYERS // PP


def test_layer_activation_is_korthikanti_eq1():
    act, w_share = layer_activation(H, A, S, micro_batch=2)
    assert act == S * 2 * H * (34 + 5 * A * S / H)  # s b h (34 + 5 a s / h) bytes
    assert w_share == pytest.approx(32 / (34 + 5 * A * S / H))
    assert layer_activation(H, A, S, flash_attention=True)[0] == S * H * 34


def model(scale=1.0, **kw):
    act, w_share = layer_activation(H, A, S)
    return MemoryModel(params=PER_STAGE * 12 * H * H * scale, activation=PER_STAGE * act * scale, w_share=w_share, **kw)


def test_table2_dualpipe_twice_the_parameters_and_pp_plus_one_activations():
    mm = model()
    one = memory(build("1f1b", PP, 16), simulate(build("1f1b", PP, 16)), mm)
    dual = memory(build("dualpipe", PP, 16), simulate(build("dualpipe", PP, 16)), mm)
    stage_static = sum(mm.stage_bytes(0))
    act = mm.activation_bytes(0)
    # 1F1B: 1x parameters (with gradients and optimizer states), pp activations on rank 0
    assert one.static == [stage_static] * PP
    assert one.peak[0] == pytest.approx(stage_static + PP * act)
    # DualPipe: 2x parameters and pp+1 activations on every rank
    assert dual.static == [2 * stage_static] * PP
    assert dual.peak == pytest.approx([2 * stage_static + (PP + 1) * act] * PP)


def test_dualpipev_holds_one_copy_in_two_half_stages():
    mm = model(scale=0.5)  # a V chunk is half a 1F1B stage
    rep = memory(build("dualpipev", PP, 16), simulate(build("dualpipev", PP, 16)), mm)
    assert rep.static == pytest.approx([sum(model().stage_bytes(0))] * PP)
    assert rep.activation_peak == pytest.approx([(PP + 0.5) * model().activation_bytes(0)] * PP)


def test_zero_shards_optimizer_then_gradients_then_parameters():
    n = PER_STAGE * 12 * H * H
    for zero, expect in ((0, (2, 4, 12)), (1, (2, 4, 12 / 8)), (2, (2, 4 / 8, 12 / 8)), (3, (2 / 8, 4 / 8, 12 / 8))):
        assert model(zero=zero, dp=8).stage_bytes(0) == pytest.approx(tuple(n * x for x in expect))


def test_b_frees_all_but_the_weight_share_by_hand():
    """F0 F1 B0 F2 W0 ... on one rank: after B0 only w_share of micro-batch 0 is left."""
    evs = tuple(
        Event(0, parse_item(t), a, b)
        for t, a, b in [
            ("F0.0", 0, 1),
            ("F0.1", 1, 2),
            ("B0.0", 2, 3),
            ("F0.2", 3, 4),
            ("W0.0", 4, 5),
            ("B0.1", 5, 6),
            ("W0.1", 6, 7),
            ("B0.2", 7, 8),
            ("W0.2", 8, 9),
        ]
    )
    s = Schedule("hand", 1, 3, Placement.flat(1, 3), (tuple(e.item for e in evs),))
    mm = MemoryModel(params=0, activation=100.0, w_share=0.25)
    rep = memory(s, Timeline(1, (evs,)), mm)
    assert rep.activation_peak == [pytest.approx(100 + 100 + 25)]  # at F2: mb 1, mb 2, and mb 0's W share
    assert rep.timeline[0][-1] == (9, pytest.approx(0.0))
    # with w_share = 1 bytes follow the activation count exactly
    full = memory(s, Timeline(1, (evs,)), MemoryModel(params=0, activation=100.0, w_share=1.0))
    assert full.activation_peak == [100 * peak_live(evs)]


def test_a_w_share_above_one_is_a_b_that_adds_memory():
    """A W that keeps more than the forward's activation (its multiplies' gathered output
    gradients under tp with sequence parallelism): F +100, B +(1.5 - 1) x 100, W -150."""
    evs = tuple(Event(0, parse_item(t), a, b) for t, a, b in [("F0.0", 0, 1), ("B0.0", 1, 2), ("W0.0", 2, 3)])
    s = Schedule("hand", 1, 1, Placement.flat(1, 1), (tuple(e.item for e in evs),))
    rep = memory(s, Timeline(1, (evs,)), MemoryModel(params=0, activation=100.0, w_share=1.5))
    assert rep.activation_peak == [pytest.approx(150.0)]
    assert [x for _, x in rep.timeline[0]] == pytest.approx([100.0, 150.0, 0.0])
    with pytest.raises(PipesimError, match="w_share"):
        MemoryModel(params=0, activation=100.0, w_share=-0.1)


def _one_rank(items: list[str], chunks: int, M: int) -> tuple[Schedule, Timeline]:
    """One rank running ``items`` back to back, a unit of time each."""
    evs = tuple(Event(0, parse_item(t), i, i + 1) for i, t in enumerate(items))
    place = Placement.interleaved(1, M, chunks) if chunks > 1 else Placement.flat(1, M)
    return Schedule("hand", 1, M, place, (tuple(e.item for e in evs),)), Timeline(1, (evs,))


def test_gradients_held_from_a_stages_first_backward_to_its_last_by_hand():
    """``grads_in_backward`` (FSDP2 keeping stages gathered under pipelining): each
    stage's gradients come at the end of its first backward and go at the end of its
    last, so a rank whose second chunk finishes its backwards before the first chunk's
    begin never holds both. By hand, activations 100 a micro-batch on each chunk,
    gradients 250 (chunk 0) and 300 (chunk 1): four forwards make 400; BW1.0 leaves 300
    and brings 300 (600, the peak); BW1.1 leaves 200 and drops chunk 1's; BW0.0 leaves
    100 and brings 250 (350). Held all step instead: 400 + 550."""
    s, tl = _one_rank(["F0.0", "F0.1", "F1.0", "F1.1", "BW1.0", "BW1.1", "BW0.0", "BW0.1"], 2, 2)
    sized = dict(params=(250.0, 300.0), activation=100.0, param_bytes=0.0, grad_bytes=1.0, optimizer_bytes=0.0, zero=0)
    assert memory(s, tl, MemoryModel(**sized, grads_in_backward=True)).peak == [pytest.approx(600.0)]
    held = memory(s, tl, MemoryModel(**sized))
    assert held.peak == [pytest.approx(950.0)] and held.activation_peak == [pytest.approx(400.0)]


def test_one_backward_holds_its_gradients_before_they_go():
    """A stage's only backward is both its first and its last: its gradients are whole at
    its end, before the reduce-scatter drops them, with its activation gone (FSDP2 runs
    the post_backward after the backward): the peak is the larger of the two, 150."""
    s, tl = _one_rank(["F0.0", "BW0.0"], 1, 1)
    mm = MemoryModel(
        params=150.0, activation=100.0, param_bytes=0.0, grad_bytes=1.0, optimizer_bytes=0.0, zero=0, grads_in_backward=True
    )
    assert memory(s, tl, mm).peak == [pytest.approx(150.0)]
