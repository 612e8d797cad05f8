"""An overlapped F&B pair's activation peak, layer by layer, against hand derivations from
the order Megatron-Core runs it in (NVIDIA/Megatron-LM d98e8a6: combined_1f1b.py runs the
backward's loss first, then model_chunk_schedule_plan.py's
``TransformerModelChunkSchedulePlan.run``: for i = 0, 1, ... the forward's layer i beside
the backward's layer L-1-i, then the chunk with layers left, then the forward's
post-process), and the planner's peaks from the order alone against the simulated ones."""

from __future__ import annotations

import random

import pytest

from pipesim import Placement, Schedule, Timeline, build, simulate
from pipesim.costs import Costs
from pipesim.ir import parse_item
from pipesim.memory import MemoryModel, memory
from pipesim.timeline import Event

# two stages on one rank: stage 0 of four layers of distinct sizes, stage 1 (the last)
# of two layers and a head of 7 made after them
LAYERS = ((1.0, 10.0, 12.0, 2.0), (3.0, 5.0))
SIZES = (25.0, 15.0)


def _one_rank(items: list[str], M: int) -> tuple[Schedule, Timeline]:
    """One rank with both stages (chunk c is stage c) running ``items`` a unit each."""
    evs = tuple(Event(0, parse_item(t), i, i + 1) for i, t in enumerate(items))
    return Schedule("hand", 1, M, Placement.interleaved(1, M, 2), (tuple(e.item for e in evs),)), Timeline(1, (evs,))


ORDER = ["F0.0", "F1.0", "F0.1&BW1.0", "F1.1&BW0.0", "BW1.1", "BW0.1"]


def test_pairs_peak_where_the_layer_by_layer_order_puts_it():
    """By hand, in Megatron-Core's order. F0.0, F1.0: 25 + 15 = 40 live.
    F0.1&BW1.0: the loss's backward frees stage 1's head, 40 - 7 = 33; step 0: forward
    layer 0 +1 (34), backward layer 1 -5 (29); step 1: +10 (39), -3 (36); the forward's
    layers left: +12 (48), +2 (50). F1.1&BW0.0 from 50: step 0 +3 (53), backward layer 3
    -2 (51); step 1 +5 (56: the forward's layers 0-1 of 8, the backward's 0-2 of 23, and
    micro-batch 1's 25 on stage 0), -12 (44); the backward's layers left -10, -1 (33);
    the forward's head +7 (40). The peak, 56; the forward made whole before the backward
    frees anything, 40 + 25 = 65 at the first pair."""
    s, tl = _one_rank(ORDER, 2)
    by_layer = memory(s, tl, MemoryModel(params=0.0, activation=SIZES, layer_bytes=LAYERS))
    assert by_layer.activation_peak == [pytest.approx(56.0)]
    # the curve: each pair at its peak from its start, its net change at its end (50 after
    # the first, 40 after the second)
    curve = [(0, 25.0), (1, 40.0), (2, 50.0), (3, 50.0), (3, 56.0), (4, 40.0), (5, 25.0), (6, 0.0)]
    assert by_layer.timeline[0] == [(t, pytest.approx(x)) for t, x in curve]
    whole = memory(s, tl, MemoryModel(params=0.0, activation=SIZES))
    assert whole.activation_peak == [pytest.approx(65.0)]


def test_a_pairs_split_backward_leaves_the_w_share_of_each_layer():
    """F0.1&B1.0 with w_share 0.5: each backward layer frees half. From 40: the head
    -3.5 (36.5); +1 (37.5), -2.5 (35); +10 (45), -1.5 (43.5); +12 (55.5), +2 (57.5), the
    peak, and W1.0 then frees the 7.5 left (50)."""
    s, tl = _one_rank(["F0.0", "F1.0", "F0.1&B1.0", "W1.0", "BW1.1", "BW0.0", "BW0.1"], 2)
    rep = memory(s, tl, MemoryModel(params=0.0, activation=SIZES, w_share=0.5, layer_bytes=LAYERS))
    assert rep.activation_peak == [pytest.approx(57.5)]
    assert dict(rep.timeline[0])[4] == pytest.approx(50.0)


def test_combined_1f1b_holds_one_layer_of_its_backward_beside_its_forward():
    """1f1b-overlap on rank r keeps 2(pp-r) micro-batches alive at once, a pair's two among
    them (docs/schedules.md). Layer by layer, with L equal layers of a/L each, a pair holds
    at worst its forward's whole chunk and one layer of the backward's (step L-1: the
    forward's layers 0..L-1, the backward's layer 0), or the mirror at step 0: a + a/L,
    not 2a. So the peak is (2(pp-r) - 1) a + a/L."""
    pp, L, a = 4, 4, 8.0
    s = build("1f1b-overlap", pp, 8)
    rep = memory(s, simulate(s), MemoryModel(params=0.0, activation=a, layer_bytes=((a / L,) * L,) * pp))
    assert rep.activation_peak == pytest.approx([(2 * (pp - r) - 1) * a + a / L for r in range(pp)])


@pytest.mark.parametrize(
    ("name", "pp", "M", "options"),
    [
        ("1f1b-overlap", 4, 8, {}),
        ("interleaved-1f1b-overlap", 4, 8, {"chunks": 2}),
        ("dualpipe", 4, 8, {}),
        ("dualpipev", 4, 12, {}),
    ],
)
def test_the_planners_pair_peaks_are_the_simulated_ones(name, pp, M, options):
    """The planner's peaks from the order alone (``programs.activation_peaks``) equal what
    ``memory`` measures on the timeline, pairs run layer by layer, for stages of unequal
    layers and W shares below and above 1."""
    from pipesim.planner.programs import activation_peaks, shape

    s = build(name, pp, M, **options)
    sh, tl = shape(s), simulate(s, Costs(f=1.0, b=1.3, w=0.7))
    rng = random.Random(name)
    for trial in range(4):
        layers = tuple(tuple(rng.choice([1e4, 3e4, 7e4]) for _ in range(rng.randint(1, 4))) for _ in range(s.placement.stages))
        head = [rng.choice([0.0, 5e4]) for _ in layers]
        mm = MemoryModel(
            params=1.0,
            activation=tuple(sum(x) + h for x, h in zip(layers, head)),
            w_share=rng.random() * (1 if trial % 2 else 3),
            layer_bytes=layers,
        )
        simulated = memory(s, tl, mm, curves=False).activation_peak
        assert activation_peaks(sh, mm) == pytest.approx(simulated, rel=1e-12)


def test_the_planner_lists_each_stages_layers_in_forward_order():
    """The planner's memory model gives ``pair_peak`` each stage's layers as the forward
    runs them, DeepSeek-V3's multi-token prediction module after the decoder's on the last
    stage (Megatron-Core's schedule plan appends ``model.mtp``'s layers to the chunk's),
    and leaves the head for after them; under torch.distributed.pipelining, which runs a
    pair's forward and then its backward, none (the stage one piece)."""
    from dataclasses import replace

    from pipesim.planner.activations import head_activation, layer_activation
    from pipesim.planner.footprint import memory_model
    from pipesim.planner.layout import Layout
    from pipesim.planner.specs import Training, load_model
    from pipesim.planner.split import partition

    m, lay, t = load_model("deepseek-v3"), Layout(4, 8, ep=8), Training(seq=4096)
    mm = memory_model(m, t, lay, 4, "selective")
    for s, rng in enumerate(partition(m.layers, 4)):
        mtp = [m.layers - 1] * m.mtp_layers if s == 3 else []
        assert mm.layer_bytes[s] == tuple(layer_activation(m, i, t, lay, "selective")[0] for i in [*rng, *mtp])
        head = head_activation(m, t, lay) if s == 3 else 0.0
        assert mm.activation_bytes(s) - sum(mm.layer_bytes[s]) == pytest.approx(head)
    assert m.mtp_layers == 1 and len(mm.layer_bytes[3]) == len(partition(m.layers, 4)[3]) + 1
    assert memory_model(m, replace(t, pp_keeps_outputs=True), lay, 4, "selective").layer_bytes == ()


def test_dualpipes_worst_rank_keeps_table_2s_pp_plus_one():
    """DeepSeek-V3 Table 2: DualPipe holds pp+1 activations a device. Its middle ranks run
    their first F and B apart, not as a pair (deepseek-ai/DualPipe 3da1bbe, dualpipe.py
    step 4: "We don't overlap these two chunks"), so with the pairs run layer by layer
    the worst rank still holds pp+1 whole stages."""
    pp, a = 8, 8.0
    s = build("dualpipe", pp, 16)
    rep = memory(s, simulate(s), MemoryModel(params=0.0, activation=a, layer_bytes=(a / 4,) * 4))
    assert max(rep.activation_peak) == pytest.approx((pp + 1) * a)


def test_layers_larger_than_the_stage_are_refused_in_one_line():
    from pipesim.errors import PipesimError
    from pipesim.memory import pair_peak

    with pytest.raises(PipesimError, match="stage 0's layers hold 12 bytes, more than its activation of 10"):
        pair_peak(MemoryModel(params=0.0, activation=10.0, layer_bytes=(6.0, 6.0)), 0, 0, 0.0)


def test_a_cost_files_pairs_run_its_layers_one_by_one():
    """A cost file's [memory] sizes each of its ``layers`` by Korthikanti et al.'s eq. 1,
    s h (34 + 5 a s / h) bytes, and a pair runs them one by one: 1f1b-overlap's rank r
    peaks at 2(pp-r) - 1 stages and one layer."""
    from pipesim.costfile import parse_costs

    h, heads, seq, layers, pp = 1024, 8, 2048, 3, 4
    _, mm = parse_costs({"layers": layers, "layer": {"attn_f": 1.0}, "memory": {"hidden": h, "heads": heads, "seq": seq}})
    layer = seq * h * (34 + 5 * heads * seq / h)
    s = build("1f1b-overlap", pp, 8)
    peaks = memory(s, simulate(s), mm).activation_peak
    assert peaks == pytest.approx([(2 * (pp - r) - 1) * layers * layer + layer for r in range(pp)])


def test_pair_peaks_kept_per_backward_kind_and_model_equality_unchanged():
    """A model keeps each pair's peak once worked out: by its backward's kind too, and
    without changing what equal models compare and hash as (they key the planner's
    caches). By hand, layers of 1 and 2 bytes and 1 made after them (activation 4), W
    keeping half: under a B the pair starts at -0.5 (half the head's byte freed), then
    +1, -1, +2, -0.5 and the forward's head +1: 2.0 at the end; under a BW it starts at
    -1, then +1, -2, +2, -1 and +1: never above 0."""
    from pipesim.ir import KINDS
    from pipesim.memory import pair_peak_of

    kept = MemoryModel(params=0.0, activation=4.0, w_share=0.5, layer_bytes=(1.0, 2.0))
    fresh = MemoryModel(params=0.0, activation=4.0, w_share=0.5, layer_bytes=(1.0, 2.0))
    b, bw = KINDS.index("B"), KINDS.index("BW")
    assert [pair_peak_of(kept, 0, 0, k) for k in (b, bw, b, bw)] == [2.0, 0.0, 2.0, 0.0]
    assert kept == fresh and hash(kept) == hash(fresh) and repr(kept) == repr(fresh)
