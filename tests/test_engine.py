"""The array engine against the reference simulator (tests/oracle.py): the same start and
end of every item, and the same transfers, for registry schedules and schedule files
under uniform, per-stage, straggler, P2P-latency and component costs; its C and Python
loops agree; it refuses what validate refuses, with the same words."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REFERENCE, shapes
from oracle import reference_times
from pipesim import Costs, PipesimError, Schedule, build, simulate, summarize
from pipesim.components import ComponentCosts, LayerCosts
from pipesim.engine import compile, validate
from pipesim.files import load_schedule
from pipesim.inputs import MAX_OPS
from pipesim.ir import RankTable, parse_rank

time = st.floats(0.0, 5.0, allow_nan=False)


@st.composite
def cost_models(d, stages: int):
    """Uniform, per-stage (one straggler or all random), with latency, fused or paired
    overrides, or per-layer component costs."""
    kind = d(st.sampled_from(["uniform", "per-stage", "straggler", "components"]))
    comm = d(st.sampled_from([0.0, 0.25, d(time)]))
    if kind == "components":
        layer = LayerCosts(
            attn_f=d(time), mlp_f=d(time), dispatch_f=d(time), combine_f=d(time), attn_w=d(time), dispatch_b=d(time)
        )
        per_stage = d(st.booleans())
        layers = d(st.integers(1, 2))
        if per_stage:
            return ComponentCosts(
                tuple((layer,) * layers if s % 2 else (LayerCosts(),) * layers for s in range(stages)), p2p=comm
            )
        return ComponentCosts.uniform(layer, layers, p2p=comm, lone_overlap=d(st.booleans()))
    if kind == "uniform":
        f, b, w = d(time), d(time), d(time)
    elif kind == "per-stage":
        f, b, w = ([d(time) for _ in range(stages)] for _ in range(3))
    else:
        slow = d(st.integers(0, stages - 1))
        f = [3.5 if s == slow else 1.0 for s in range(stages)]
        b, w = [2 * x for x in f], 1.0
    bw = d(st.sampled_from([None, d(time)]))
    pair = d(st.sampled_from([None, d(time)]))
    return Costs(f=f, b=b, w=w, comm=comm, bw=bw, pair=pair)


def assert_same_as_reference(s: Schedule, costs) -> None:
    want, want_transfers = reference_times(s, costs)
    tl = simulate(s, costs)
    assert [[(e.start, e.end) for e in evs] for evs in tl.events] == want  # exactly, not approximately
    assert sorted((t.src, t.dst, str(t.op), t.start, t.end) for t in tl.transfers) == sorted(want_transfers)


@settings(max_examples=80)
@given(shapes(), st.data())
def test_registry_schedules_time_as_the_reference(shape, data):
    name, pp, M, opts = shape
    s = build(name, pp, M, **opts)
    assert_same_as_reference(s, data.draw(cost_models(s.placement.stages)))


@pytest.mark.parametrize("path", sorted(REFERENCE.glob("*_pp*_m*.json")), ids=lambda p: p.stem)
def test_schedule_files_time_as_the_reference(path):
    s = load_schedule(path)
    stages = s.placement.stages
    for costs in (
        Costs(f=1.3, b=1.1, w=0.6, comm=0.05),
        Costs(f=[1 + 0.1 * i for i in range(stages)], b=0.7, w=[0.3] * stages, comm=0.2),
        ComponentCosts.uniform(LayerCosts(attn_f=1, mlp_f=1, dispatch_f=1, combine_f=0.5), 2, p2p=0.1),
    ):
        assert_same_as_reference(s, costs)


@settings(max_examples=25)
@given(shapes(), st.data())
def test_python_loops_equal_the_compiled_ones(shape, data):
    name, pp, M, opts = shape
    s = build(name, pp, M, **opts)
    costs = data.draw(cost_models(s.placement.stages))
    fast = simulate(s, costs)
    with pytest.MonkeyPatch.context() as m:
        m.setenv("PIPESIM_KERNEL", "python")
        slow = simulate(s, costs)
    assert fast.starts.tolist() == slow.starts.tolist() and fast.ends.tolist() == slow.ends.tolist()
    assert fast.transfers == slow.transfers


def test_the_c_loops_are_built_here():
    """The machine running the suite has a compiler, so the fast loops must be in use."""
    from pipesim import kernel

    assert kernel.compiled() is not None


def test_one_program_many_costs():
    """A compiled program re-timed under other costs equals a fresh simulation."""
    s = build("dualpipev", 4, 10)
    prog = compile(s)
    for costs in (Costs(), Costs(f=2, b=1, w=0.5, comm=0.3), ComponentCosts.uniform(LayerCosts(dispatch_f=1), 1)):
        a, b = simulate(prog, costs), simulate(s, costs)
        assert a.starts.tolist() == b.starts.tolist() and a.ends.tolist() == b.ends.tolist()


@dataclass(frozen=True)
class RankPairLatency(Costs):
    """Uniform op costs with a P2P latency that differs by the pair of ranks (none of
    pipesim's own cost models has one: ``edge_latency`` gathers it edge by edge)."""

    def p2p_time(self, src: int, dst: int) -> float:
        return 0.1 + 0.07 * src + 0.013 * dst


@pytest.mark.parametrize(
    "name, pp, M, opts", [("interleaved-1f1b", 4, 8, {"chunks": 2}), ("dualpipev", 4, 10, {}), ("zb-v", 3, 6, {})]
)
def test_a_latency_by_rank_pair_times_as_the_reference(name, pp, M, opts):
    """A program timed first under one latency for every pair (which ``edge_latency``
    spreads over the crossing edges at once) and then under one that differs by pair
    times every item as the reference simulator does under each."""
    s = build(name, pp, M, **opts)
    prog = compile(s)
    for costs in (Costs(f=1.3, b=1.1, w=0.6, comm=0.3), RankPairLatency(f=1.3, b=1.1, w=0.6)):
        want, _ = reference_times(s, costs)
        assert [[(e.start, e.end) for e in evs] for evs in simulate(prog, costs).events] == want


def test_array_schedule_equals_its_objects():
    """A schedule stored as arrays reads as the same items, and simulates the same."""
    s = build("zb-h1", 3, 5)
    arrays = Schedule(s.name, s.pp, s.microbatches, s.placement, RankTable.of(s.ranks))
    assert arrays == s and arrays.ranks == s.ranks and arrays.to_notation() == s.to_notation()
    assert summarize(arrays, simulate(arrays)) == summarize(s, simulate(s))


def flat(rows: list[str], M: int) -> Schedule:
    from pipesim import Placement

    return Schedule("hand", len(rows), M, Placement.flat(len(rows), M), tuple(parse_rank(r) for r in rows))


@pytest.mark.parametrize(
    "rows,M",
    [
        (["F0.0 BW0.0", "BW0.0 F0.0"], 1),  # deadlocks: the engine's walk finds them
        (["F0.0 BW0.0 F0.1 BW0.1", "F0.1 F0.0 BW0.0 BW0.1"], 2),
        (["F0.0 W0.0 B0.0"], 1),
        (["F0.0 F0.1 BW0.0"], 2),  # incomplete or off-placement: its vectorised check does
        (["F0.0 F0.0 BW0.0"], 1),
        (["F0.0 F1.0 BW0.0"], 1),
        (["F0.0 B0.0 BW0.0 W0.0"], 1),
    ],
)
def test_refusals_read_as_validate_words_them(rows, M):
    s = flat(rows, M)
    with pytest.raises(PipesimError) as want:
        validate(s)
    with pytest.raises(PipesimError) as got:
        simulate(s)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
    assert getattr(got.value, "cycle", None) == getattr(want.value, "cycle", None)


def test_sizes_beyond_the_limit_are_refused_before_building():
    M = MAX_OPS // 3 + 1
    with pytest.raises(PipesimError, match=f"above the limit of {MAX_OPS:,}"):
        build("1f1b", 1, M)


def test_the_cli_refuses_a_size_beyond_the_limit_in_one_line(capsys):
    from pipesim.cli import main

    assert main(["simulate", "--schedule", "dualpipev", "--pp", "64", "-m", "1000000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipesim: error: dualpipev too large: pp=64, M=1000000") and err.count("\n") == 1
    assert f"above the limit of {MAX_OPS:,}" in err


def test_a_file_claiming_ten_million_micro_batches_is_refused_before_reading_it(tmp_path, capsys):
    import json

    from pipesim.cli import main

    p = tmp_path / "huge.json"
    p.write_text(json.dumps({"pp": 2, "microbatches": 10**7, "ranks": [["F0.0"], ["F0.0"]]}))
    with pytest.raises(PipesimError, match="too large"):
        load_schedule(p)
    assert main(["simulate", "--schedule", str(p)]) == 2
    assert "above the limit of" in capsys.readouterr().err
