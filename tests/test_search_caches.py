"""The caches the planner's search shares between candidates: each must answer what a
fresh computation answers, and inputs that differ in any one field must not share an
answer (a key that forgot a field would hand the first caller's answer to the second)."""

from __future__ import annotations

import random

import pytest

from pipesim.components import ComponentCosts, LayerCosts, lone_plan, pair_plan, run_streams, serial_time, serial_times
from pipesim.ir import Op
from pipesim.planner import split
from pipesim.planner.split import balanced_partition
from pipesim.streams import serial_parts


def _layers(rng: random.Random, n: int) -> tuple[LayerCosts, ...]:
    def t():
        return rng.choice([0, 0.0, rng.random() * 1e-3, rng.randint(1, 5), rng.random()])

    return tuple(LayerCosts(t(), t(), t(), t(), *[rng.choice([None, 0.0, rng.random()]) for _ in range(6)]) for _ in range(n))


@pytest.mark.parametrize("kind", ["F", "B", "W", "BW"])
def test_a_lone_op_part_after_part_is_timed_as_the_two_streams_time_it(kind):
    """A lone op without half micro-batches runs its parts one after another: each part's
    start and end, and the op's length, are the same floats ``run_streams`` gives, for any
    layers and SM share."""
    rng = random.Random(kind)
    for _ in range(300):
        layers = _layers(rng, rng.randint(1, 12))
        tasks, orders = lone_plan(Op(kind, 0, 0), layers, split=False)
        streams = run_streams(tasks, orders, rng.choice([0.0, 20 / 132, 0.5]))
        assert serial_times(tasks) == streams
        assert serial_time(kind, layers) == max(b for _, b in streams)


@pytest.mark.parametrize("kind", ["F", "B", "W", "BW"])
def test_a_lone_ops_parts_are_its_tasks_timed_one_after_another(kind):
    """``serial_parts`` gives the parts that take time of a lone op without half
    micro-batches, with the start and end ``serial_times`` gives its tasks, and its end."""
    rng = random.Random("parts" + kind)
    for _ in range(300):
        layers = _layers(rng, rng.randint(1, 12))
        tasks, _ = lone_plan(Op(kind, 0, 0), layers, split=False)
        times = serial_times(tasks)
        kept = [(t.stream, t.part, t.layer, a, b) for t, (a, b) in zip(tasks, times) if b > a]
        assert serial_parts(kind, layers) == (max((b for _, b in times), default=0.0), kept)


@pytest.mark.parametrize("plan", ["pair B", "pair BW", "split F", "split B", "split BW"])
def test_a_compute_and_a_comm_stream_time_as_any_streams_do(plan):
    """``run_streams`` times the compute and communication streams of a pair or of a lone
    op's half micro-batches in a loop written for the two; given the same streams in
    another order it runs its loop over any streams: the same starts and ends, for any
    layers, SM share and holding of the SMs."""
    rng = random.Random(plan)
    for _ in range(200):
        f_layers, b_layers = _layers(rng, rng.randint(1, 8)), _layers(rng, rng.randint(1, 8))
        if plan.startswith("pair"):
            tasks, orders = pair_plan(f_layers, b_layers, plan.endswith("BW"))
        else:
            tasks, orders = lone_plan(Op(plan.split()[1], 0, 0), f_layers, split=True)
        assert list(orders) == ["compute", "comm"]
        share, held = rng.choice([0.0, 20 / 132, 0.5]), rng.choice([False, True])
        other = {"comm": orders["comm"], "compute": orders["compute"]}
        assert run_streams(tasks, orders, share, held) == run_streams(tasks, other, share, held)


def test_a_component_models_pass_times_are_its_op_times():
    """``pass_times`` gives each stage's forward and shorter backward as ``op_time`` gives
    them, on any layers; and leaves them to ``op_time`` where lone ops overlap halves."""
    rng = random.Random("passes")
    for _ in range(100):
        stages = tuple(_layers(rng, rng.randint(1, 6)) for _ in range(rng.randint(1, 5)))
        model = ComponentCosts(stages)
        fwd = [model.op_time(Op("F", 0, 0), s) for s in range(len(stages))]
        bwd = [min(model.op_time(Op("B", 0, 0), s), model.op_time(Op("BW", 0, 0), s)) for s in range(len(stages))]
        assert ComponentCosts(stages).pass_times(len(stages)) == (fwd, bwd)  # a fresh model: nothing kept yet
        assert ComponentCosts(stages, lone_overlap=True).pass_times(len(stages)) is None


def test_op_times_are_kept_by_kind_and_stage():
    """A cost model keeps each op's time by its kind and stage, and cost models share them
    by kind and layers: stages holding other layers, and other kinds of op on the same
    layers, get their own; a lone op that overlaps half micro-batches is simulated, not
    summed."""
    a = (LayerCosts(attn_f=1, mlp_f=2, dispatch_f=0.5, combine_f=0.25),)
    b = (LayerCosts(attn_f=3, mlp_f=2, dispatch_f=0.5, combine_f=0.25),)
    model = ComponentCosts((b, a))
    assert model.op_time(Op("F", 0, 0), 0) == 3 + 0.5 + 2 + 0.25
    assert model.op_time(Op("F", 0, 0), 1) == 1 + 0.5 + 2 + 0.25  # other layers, other stage
    assert model.op_time(Op("B", 0, 0), 1) == 0.25 + 2 + 0.5 + 1  # other kind, same layers
    assert model.op_time(Op("W", 0, 0), 1) == 2 + 1
    assert model.op_time(Op("BW", 0, 0), 1) == 0.25 + 2 + 2 + 0.5 + 1 + 1
    assert model.op_time(Op("F", 0, 0), 0) == 3 + 0.5 + 2 + 0.25  # read back
    # kept beside them, each op's compute alone (the floor of a pair holding it)
    assert model.compute_time("F", 1) == 1 + 2 and model.compute_time("F", 0) == 3 + 2
    assert model.compute_time("B", 1) == 1 + 2 and model.compute_time("BW", 1) == 1 + 2 + 1 + 2
    # times shared between cost models: by the layers, not the stage's index
    assert ComponentCosts((a,)).op_time(Op("F", 0, 0), 0) == 1 + 0.5 + 2 + 0.25
    twin = (LayerCosts(attn_f=3, mlp_f=2, dispatch_f=0.5, combine_f=0.25),)  # b's values, another object
    assert ComponentCosts((twin, a)).op_time(Op("B", 0, 0), 0) == 0.25 + 2 + 0.5 + 3
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


@pytest.mark.parametrize(
    ("name", "pp", "M", "options"),
    [
        ("1f1b", 4, 12, {}),
        ("interleaved-1f1b", 4, 16, {"chunks": 2}),
        ("zb-h2", 4, 12, {}),
        ("dualpipev", 4, 16, {}),
        ("chimera", 4, 8, {}),
        ("zb-v", 3, 9, {}),
    ],
)
def test_activation_peaks_from_the_order_are_the_simulated_peaks(name, pp, M, options):
    """What a shape keeps once for every memory model (each row's stages, the ranks with
    rows) gives each rank's activation peak as ``pipesim.memory`` measures it on the
    simulated timeline, for stages of unequal sizes and any W share, above 1 too (a B
    that adds memory: the peak may fall where a B ends)."""
    from pipesim import build, simulate
    from pipesim.costs import Costs
    from pipesim.memory import MemoryModel, memory
    from pipesim.planner.programs import activation_peaks, shape

    s = build(name, pp, M, **options)
    sh = shape(s)
    tl = simulate(s, Costs(f=1.0, b=1.3, w=0.7))
    rng = random.Random(name)
    for _ in range(5):
        sizes = tuple(rng.choice([1e5, 3e5, 7e5]) for _ in range(s.placement.stages))
        w = rng.random() * (1 if _ % 2 else 3)
        mm = MemoryModel(params=1.0, activation=sizes, w_share=w)
        assert activation_peaks(sh, mm) == pytest.approx(memory(s, tl, mm, curves=False).activation_peak, rel=1e-12)


def test_stages_held_per_placement_are_kept_by_its_routes():
    """``memory`` reads each rank's held stages from a table kept by (pp, chunks,
    routes): placements of every shape, one after another in one cache, get what
    ``Placement.model_stage`` says of each chunk a route passes through."""
    from pipesim import build
    from pipesim.memory import _held

    seen = set()
    for name, pp, M, options in [
        ("1f1b", 4, 8, {}),
        ("interleaved-1f1b", 4, 8, {"chunks": 2}),
        ("dualpipe", 4, 8, {}),
        ("dualpipev", 4, 8, {}),
        ("chimera", 4, 8, {}),
        ("zb-v", 4, 8, {}),
        ("1f1b", 2, 4, {}),
    ]:
        pl = build(name, pp, M, **options).placement
        want = tuple(
            tuple(pl.model_stage(r, c) for c in range(pl.chunks) if any((r, c) in route for route in pl.routes))
            for r in range(pp)
        )
        assert _held(pl.pp, pl.chunks, pl.routes) == want, name
        seen.add(want)
    assert len(seen) >= 5  # the placements do hold different stages


def test_a_search_reads_each_placement_once_by_identity():
    """``Shared.placement`` keeps, per placement object, the stages each rank holds and
    runs: placements of several shapes and sizes asked in turn (and again) each get
    their own, and a placement whose micro-batches use one of two routes runs fewer
    stages than it holds."""
    from pipesim.planner.bounds import rank_stages
    from pipesim.planner.shared import Shared
    from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
    from pipesim.schedules import REGISTRY

    shared = Shared(load_model("llama3-8b"), load_cluster("h100", None), load_training(None, base=model_training("llama3-8b")))
    placements = [
        REGISTRY[name].placement_of(pp, M, **options)
        for name, pp, M, options in [
            ("1f1b", 4, 8, {}),
            ("1f1b", 2, 8, {}),
            ("interleaved-1f1b", 4, 8, {"chunks": 2}),
            ("zb-v", 4, 8, {}),
            ("dualpipe", 4, 8, {}),
            ("dualpipe", 4, 1, {}),  # one micro-batch: one of the two routes
        ]
    ]
    want = [(pl.held(), tuple(map(frozenset, rank_stages(pl)))) for pl in placements]
    assert [shared.placement(pl) for pl in placements + placements[::-1]] == want + want[::-1]
    held, runs = want[-1]
    assert sum(map(len, runs)) < sum(map(len, held))


def test_a_search_runs_without_the_cycle_collector_and_gives_it_back(monkeypatch):
    """The search turns the cycle collector off (its caches are long-lived and it makes
    almost no cycles) and turns it back on after, also when it fails; a caller that had
    it off keeps it off."""
    import gc

    from pipesim.errors import PipesimError
    from pipesim.planner import search as search_mod
    from pipesim.planner.specs import Training, load_cluster, load_model

    seen = []
    real = search_mod._search
    monkeypatch.setattr(search_mod, "_search", lambda *a: seen.append(gc.isenabled()) or real(*a))
    was = gc.isenabled()
    try:
        gc.enable()
        m, c = load_model("llama3-8b"), load_cluster("h100", gpus=8)
        t = Training(seq=1024, global_batch=32, recompute="selective")
        assert search_mod.search(m, c, t, pins=search_mod.Pins(pp=2, tp=2)).best is not None
        assert seen == [False] and gc.isenabled()
        with pytest.raises(PipesimError):
            search_mod.search(m, c, t, pins=search_mod.Pins(pp=3))  # 8 GPUs: no pp of 3
        assert seen == [False, False] and gc.isenabled()
        gc.disable()
        search_mod.search(m, c, t, pins=search_mod.Pins(pp=2, tp=2))
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_a_search_leaves_no_cycles_and_freezes_what_it_kept_until_the_next(monkeypatch):
    """What a search keeps alive is frozen on its way out (no young collection walks it
    as the collector comes back on, nor the last one at exit), and given back to the
    collector when the next search starts; objects someone else froze are left as they
    are. The search itself makes no cycles (a Prepared's deferred bound once closed over
    the Prepared): the collector finds none of its objects to free."""
    import gc

    from pipesim.planner import evaluate
    from pipesim.planner import search as search_mod
    from pipesim.planner.specs import Training, load_cluster, load_model

    m, c = load_model("llama3-8b"), load_cluster("h100", gpus=8)
    t = Training(seq=1024, global_batch=32, recompute="selective")
    during = []
    real = search_mod._search
    monkeypatch.setattr(search_mod, "_search", lambda *a: during.append(gc.get_freeze_count()) or real(*a))
    was = gc.isenabled()
    gc.unfreeze()
    search_mod._FROZEN[0] = False
    try:
        gc.enable()
        search_mod.search(m, c, t)
        assert gc.get_freeze_count() > 0 and gc.isenabled()
        gc.collect()  # what earlier tests left unreachable is not this search's
        gc.garbage.clear()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable, kept to look at
        gc.disable()
        search_mod.search(m, c, t)
        assert during == [0, 0]  # the first search's objects were given back before the second ran
        gc.collect()
        # type(), not isinstance: the garbage holds other tests' weak proxies, whose referents
        # may be gone (isinstance looks through a proxy and raises ReferenceError)
        assert not [x for x in gc.garbage if type(x) is evaluate.Prepared]
        gc.set_debug(0)
        gc.garbage.clear()
        # a caller's own frozen objects: the search neither freezes more nor thaws them
        gc.unfreeze()
        search_mod._FROZEN[0] = False
        gc.enable()
        keep = [object() for _ in range(3)]
        gc.freeze()
        frozen = gc.get_freeze_count()
        search_mod.search(m, c, t)
        assert gc.get_freeze_count() == frozen and keep
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.unfreeze()
        search_mod._FROZEN[0] = False
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize(
    ("name", "pp", "M", "options"), [("1f1b", 4, 12, {}), ("interleaved-1f1b", 4, 16, {"chunks": 2}), ("zb-h2", 4, 12, {})]
)
def test_memory_peaks_floor_the_simulated_peak_under_gradients_in_backward(name, pp, M, options):
    """The planner refuses a candidate on ``bounds.static_bytes`` plus ``programs.memory_peaks``
    before simulating it: with a stage's gradients held from its first backward to its
    last only (``grads_in_backward``), that sum must not pass the peak ``pipesim.memory``
    finds on the simulated timeline, or a candidate that fits would be refused; without
    it, they are the same."""
    from pipesim import build, simulate
    from pipesim.costs import Costs
    from pipesim.memory import MemoryModel, memory
    from pipesim.planner.bounds import static_bytes
    from pipesim.planner.programs import memory_peaks, shape

    s = build(name, pp, M, **options)
    sh, held = shape(s), s.placement.held()
    tl = simulate(s, Costs(f=1.0, b=1.3, w=0.7))
    rng = random.Random(name)
    for _ in range(5):
        sizes = tuple(rng.choice([1e5, 3e5, 7e5]) for _ in range(s.placement.stages))
        params = tuple(rng.choice([1e4, 1e5, 1e6]) for _ in range(s.placement.stages))
        for lives in (True, False):
            mm = MemoryModel(params=params, activation=sizes, w_share=rng.random(), grads_in_backward=lives)
            floor = [x + a for x, a in zip(static_bytes(held, mm), memory_peaks(sh, mm))]
            peak = memory(s, tl, mm, curves=False).peak
            if lives:
                assert all(f <= p * (1 + 1e-12) for f, p in zip(floor, peak))
            else:
                assert floor == pytest.approx(peak, rel=1e-12)


def test_kept_stage_sync_terms_answer_what_fresh_ones_answer():
    """``step.stage_terms`` is kept across placements and searches (``layout_terms``):
    after the cache has seen other clusters, trainings, layouts and parameter counts, each
    answer is the one computed afresh (a key that forgot an input would hand back
    another's)."""
    from pipesim.planner.layout import Layout
    from pipesim.planner.specs import load_cluster, load_training
    from pipesim.planner.step import layout_terms, stage_terms

    rng = random.Random(7)
    clusters = [load_cluster(name) for name in ("h800-2048", "h100", "b200")]
    trainings = [load_training(zero=z, zero1_allreduce=z == 1 and a) for z in (0, 1, 2, 3) for a in (False, True)]
    layouts = [Layout(pp=8, dp=32, tp=2, cp=4, ep=32), Layout(pp=4, dp=16, tp=8, ep=8), Layout(pp=2, dp=64)]
    asked = []
    for _ in range(300):
        args = (rng.choice(clusters), rng.choice(trainings), rng.choice(layouts))
        dense, experts = rng.choice([0.0, 1e8, 3.5e9]), rng.choice([0.0, 2e9, 7.25e9])
        asked.append((*args, dense, experts, rng.choice([0.0, dense / 2])))
    for args in asked + asked[::-1]:
        assert layout_terms(*args[:3])[args[3:]] == stage_terms(*args)
    assert len({stage_terms(*a) for a in asked}) > 50  # the inputs do change the answer


def test_placements_with_one_split_share_its_models_and_get_fresh_ones():
    """``Shared.models`` hands placements that split the layers alike one cost and memory
    model: each is what ``component_costs`` and ``memory_model`` make afresh for that split."""
    from pipesim.planner.footprint import memory_model
    from pipesim.planner.layout import Layout
    from pipesim.planner.shared import Shared
    from pipesim.planner.specs import load_cluster, load_model, load_training
    from pipesim.planner.stages import component_costs, stage_parts

    m, c, t = load_model("deepseek-v3"), load_cluster("h800-2048"), load_training()
    shared = Shared(m, c, t)
    lay = Layout(pp=8, dp=32, tp=2, ep=64)
    for stages, held in [(8, None), (16, tuple((r, 15 - r) for r in range(8))), (16, tuple((r, r + 8) for r in range(8)))]:
        for recompute in ("none", "full"):
            for even_out in (True, False):
                parts = stage_parts(m, c, t, lay, stages, recompute, held, even_out)
                costs, mm = shared.models(lay, stages, recompute, parts)
                assert mm == memory_model(m, t, lay, stages, recompute, parts)
                fresh = component_costs(m, c, t, lay, stages, recompute, parts)
                for kind in ("F", "B", "W", "BW"):
                    op = Op(kind, 0, 0)
                    assert [costs.op_time(op, s) for s in range(stages)] == [fresh.op_time(op, s) for s in range(stages)]
