"""What a user of pipesim as a library met calling its public names with odd values:
an AttributeError, IndexError or KeyError deep inside, or an answer that was wrong and
said nothing. Each call now gets pipesim's own error (a ValueError) naming the value and
what would be accepted."""

from __future__ import annotations

import math

import pytest

import pipesim
from pipesim import Costs, Op, Pair, PipesimError, Placement, Schedule, build, parse_item, simulate, summarize, validate
from pipesim.files import load_schedule, save_schedule
from pipesim.ir import parse_rank


def _one(ranks: list[str], M: int = 1, placement: Placement | None = None, name: str = "hand") -> Schedule:
    pp = len(ranks)
    return Schedule(name, pp, M, placement or Placement.flat(pp, M), tuple(parse_rank(r) for r in ranks))


@pytest.mark.parametrize("call", [pipesim.validate, pipesim.simulate, lambda s: pipesim.summarize(s, None)])
@pytest.mark.parametrize("value", [None, "1f1b", {"pp": 1}])
def test_a_public_function_given_no_schedule_says_what_it_takes(call, value):
    # each met an AttributeError ('str' object has no attribute 'placement')
    with pytest.raises(PipesimError, match="takes a pipesim.Schedule") as e:
        call(value)
    if value == "1f1b":
        assert "pipesim.build('1f1b', pp, microbatches)" in str(e.value)


def test_simulate_refuses_what_is_not_a_cost_model():
    s = build("1f1b", 2, 2)
    for costs in (3, {"f": 1}):  # AttributeError: ... has no attribute 'p2p_time'
        with pytest.raises(PipesimError, match=r"costs must be a cost model such as pipesim.Costs\(f=1, b=1, w=1\)"):
            simulate(s, costs)


@pytest.mark.parametrize(
    "kw, said",
    [
        (dict(f=math.nan), "Costs f must be a number from 0 to 1e+15, got nan"),
        (dict(f=math.inf), "Costs f must be a number from 0 to 1e+15, got inf"),
        (dict(comm=math.nan), "Costs comm must be a number"),
        (dict(comm=math.inf), "Costs comm must be a number"),
        (dict(f=(1, 1, math.nan, 1)), "Costs f must be a number"),
        (dict(f=1e308, b=1e308, w=1e308), "got 1e+308"),
        (dict(f=True), "Costs f must be a number from 0 to 1e+15, got true (bool)"),  # a Python bool, said as one
        (dict(w=None), "Costs w must be a number from 0 to 1e+15, got None"),
        (dict(comm=None), "got None"),
        (dict(f="1"), "Costs f must be a number from 0 to 1e+15, got '1' (str)"),
        (dict(b=[1, "2"]), "Costs b must be a number from 0 to 1e+15, got '2' (str)"),
        (dict(bw=-1), "Costs bw must be a number from 0 to 1e+15, got -1"),
        (dict(pair=math.nan), "Costs pair must be a number"),
        (dict(f=()), "Costs f lists no values; give one number, or one per stage"),
    ],
)
def test_costs_that_are_not_finite_numbers_are_refused_when_made(kw, said):
    # 1F1B at pp=4, M=8 with F=B=W=1 runs (M + pp - 1)(F + B + W) = 33 (Narayanan et al.
    # 2021, section 2.2: the bubble is (pp - 1) of them); a NaN comm ran in 24, a NaN f
    # gave a NaN makespan beside a 0.0 bubble, 1e308 an inf makespan and a NaN bubble,
    # and f="1" met a TypeError inside Costs. Costs refuses them when made, so neither
    # simulate nor a builder that takes costs (zb-auto) meets them
    s = build("1f1b", 4, 8)
    assert summarize(s, simulate(s, Costs())).makespan == 33
    with pytest.raises(PipesimError, match=said.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        Costs(**kw)


def test_costs_take_numpy_numbers():
    # a per-stage list may be an array's values: 1F1B's 33 (above) with F = 1 on every stage
    import numpy as np

    s = build("1f1b", 4, 8)
    costs = Costs(f=np.ones(4), b=np.int64(1), w=np.float32(1))
    assert costs.f == (1.0, 1.0, 1.0, 1.0)
    assert summarize(s, simulate(s, costs)).makespan == 33


def test_simulate_refuses_a_per_stage_list_of_another_length():
    # five values for 1F1B's four stages ran with the fifth unseen
    s = build("1f1b", 4, 8)
    with pytest.raises(PipesimError, match="--f lists 5 values, but 1f1b has 4 stages"):
        simulate(s, Costs(f=(1, 2, 3, 4, 5)))


def test_summarize_refuses_another_schedules_timeline():
    # gpipe's report came out with 1F1B's makespan under gpipe's name, unsaid
    one = build("1f1b", 4, 8)
    tl = simulate(one)
    for other in (build("gpipe", 4, 8), build("1f1b", 4, 4), build("1f1b", 2, 8)):
        with pytest.raises(PipesimError, match=f"not a run of this {other.name} schedule"):
            summarize(other, tl)
    with pytest.raises(PipesimError, match="takes the Timeline that pipesim.simulate returns, got a Schedule"):
        summarize(one, one)
    # the same schedule built again (another table of the same items) is its run
    assert summarize(build("1f1b", 4, 8), tl).makespan == 33


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda: Schedule("x", 0, 1, Placement.flat(1, 1), ()), "x schedule pp must be a whole number from 1 to 100,000, got 0"),
        (
            lambda: Schedule("x", True, 1, Placement.flat(1, 1), (parse_rank("F0.0 BW0.0"),)),
            "pp must be a whole number .* got true",
        ),
        (
            lambda: Schedule("x", 1, 1.5, Placement.flat(1, 1), (parse_rank("F0.0 BW0.0"),)),
            "microbatches must be a whole number .* got 1.5",
        ),
        (lambda: Schedule(None, 1, 1, Placement.flat(1, 1), (parse_rank("F0.0 BW0.0"),)), "name must be a string, got None"),
        (lambda: Schedule("x", 1, 1, None, (parse_rank("F0.0 BW0.0"),)), "placement must be a pipesim.Placement"),
        (lambda: _one(["F0.0 BW0.0", "F0.0 BW0.0"], placement=Placement.flat(3, 1)), "placement is for pp=3, M=1"),
        (lambda: Schedule("x", 1, 1, Placement.flat(1, 1), "F0.0 BW0.0"), "ranks must be one list of items per rank"),
        (lambda: Placement.flat(0, 1), "placement pp must be a whole number from 1"),
        (lambda: Placement.flat(2, 0), "placement microbatches must be a whole number from 1 to 16,000,000, got 0"),
        (lambda: Placement("custom", 1, 1, (((0, 0),),), ()), "at least one micro-batch"),
    ],
)
def test_a_hand_made_schedule_or_placement_of_odd_fields_is_refused(make, said):
    # each ran into the engine: an IndexError (pp=0, a placement of 3 ranks for 2), a
    # TypeError (M=1.5, pp=True), or a report named None
    with pytest.raises(PipesimError, match=said):
        make()


@pytest.mark.parametrize(
    "items, said",
    [
        (["F0.0", "BW0.0"], r"rank 0 item 0: expected pipesim.Op or pipesim.Pair items .* got 'F0.0' \(str\)"),
        ([("F", 0, 0)], r"rank 0 item 0: expected pipesim.Op or pipesim.Pair"),
        ([Op("F", 0, 0), Op("Q", 0, 0)], r"rank 0 item 1: op kind 'Q' \(str\) is not one of F, B, W, BW"),
        ([Op("F", 0.5, 0), Op("BW", 0, 0)], r"rank 0 item 0: op F's chunk must be a whole number .* got 0.5"),
        ([Op("F", 0, 2**32), Op("BW", 0, 0)], r"op F's mb must be a whole number"),
        ([Pair("F0.0", "BW0.0")], r"a pair's halves must be Ops, got 'F0.0' \(str\)"),
        (
            [Op("F", 0, 0), Pair(Op("BW", 0, 0), Op("F", 0, 1)), Op("BW", 0, 1)],
            r"pair BW0.0&F0.1 must be a forward then a backward",
        ),
    ],
)
def test_a_hand_made_schedules_items_that_are_not_ops_are_named(items, said):
    # a str met AttributeError ('str' object has no attribute 'kind'), Q a KeyError; chunk
    # 0.5 ran as chunk 0, micro-batch 2**32 wrapped to 0 in the int32 columns, and a pair
    # of a backward then a forward ran as if it were the other way round
    s = Schedule("x", 1, 2, Placement.flat(1, 2), (tuple(items),))
    for call in (validate, simulate):
        with pytest.raises(PipesimError, match=said):
            call(s)


def test_parse_item_says_what_it_reads():
    for value in (None, 3):  # AttributeError / TypeError inside
        with pytest.raises(PipesimError, match="expected a string such as F0.3"):
            parse_item(value)
    for text in ("F0.0&", "&BW0.0"):  # said "cannot read op ''"
        with pytest.raises(PipesimError, match=f"cannot read pair '{text}': a pair joins exactly two ops"):
            parse_item(text)


def test_schedule_files_name_what_is_not_a_path_or_a_schedule(tmp_path):
    with pytest.raises(PipesimError, match=r"schedule file: expected a path .* got None \(NoneType\)"):
        load_schedule(None)
    with pytest.raises(PipesimError, match="save_schedule takes a pipesim.Schedule"):
        save_schedule(None, tmp_path / "s.json")
    assert list(tmp_path.iterdir()) == []


def test_the_library_examples_of_the_docs_run(capsys):
    # docs/files-and-limits.md's "As a library" block prints what its last comment says
    # (55.15 and 13.0% are what `pipesim simulate -s dualpipe --pp 8 -m 16 --comm 0.05`
    # prints), and the package docstring's example runs as written
    import doctest
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "files-and-limits.md").read_text()
    block = re.search(r"## As a library\n\n```python\n(.*?)```", doc, re.S).group(1)
    exec(compile(block, "files-and-limits.md", "exec"), {})
    said = re.search(r"# (.*)\n$", block).group(1)  # what the block says it prints
    assert capsys.readouterr().out == said + "\n"
    result = doctest.testmod(pipesim, extraglobs={"pipesim": pipesim})
    assert result.attempted == 3 and result.failed == 0  # import, build, summarize


@pytest.mark.parametrize("start, end", [(math.nan, 1.0), (5.0, 1.0), (0.0, math.inf)])
def test_summarize_refuses_a_hand_made_timeline_of_times_that_cannot_be(start, end):
    # a NaN start gave a NaN makespan, an end before its start a makespan of -4
    from pipesim import Event, Timeline

    s = build("1f1b", 1, 1)
    events = [[Event(0, s.ranks[0][0], start, end), Event(0, s.ranks[0][1], 6.0, 7.0)]]
    with pytest.raises(PipesimError, match=f"rank 0's F0.0 runs from {start} to {end}: times must be finite"):
        summarize(s, Timeline(1, events))
    # the same events in order run 0 to 7: F then BW, no idle time
    ok = summarize(s, Timeline(1, [[Event(0, s.ranks[0][0], 0.0, 1.0), Event(0, s.ranks[0][1], 1.0, 7.0)]]))
    assert (ok.makespan, ok.bubble_ratio) == (7.0, 0.0)


def test_component_costs_refuse_times_that_are_not_finite_and_stage_lists_of_another_length():
    from pipesim.components import ComponentCosts
    from pipesim.layer import LayerCosts

    s = build("1f1b", 4, 8)
    # a layer of attention 1 and MLP 1 in each of F, B and W: 2 + 2 + 2 per chunk, and
    # 1F1B runs (M + pp - 1) of them (Narayanan et al. 2021, section 2.2): 11 x 6
    assert summarize(s, simulate(s, ComponentCosts.uniform(LayerCosts()))).makespan == 66
    for kw, said in (
        (dict(attn_f=math.inf), r"attn-f must be a number from 0 to 1e\+15, got inf"),
        (dict(mlp_f=True), "got true"),
    ):
        with pytest.raises(PipesimError, match=said):  # inf gave inf times, True ran as 1
            LayerCosts(**kw)
    for kw in (dict(p2p=math.nan), dict(p2p=math.inf), dict(total_sms=math.inf)):  # NaN p2p ran in 48
        with pytest.raises(PipesimError, match="must be a number from"):
            ComponentCosts.uniform(LayerCosts(), **kw)
    five = ComponentCosts(tuple((LayerCosts(),) for _ in range(5)))  # the fifth stage ran unseen
    with pytest.raises(PipesimError, match="component costs give 5 stages, but 1f1b has 4: give one, or one per stage"):
        simulate(s, five)


def test_a_hand_made_timeline_of_odd_events_is_refused():
    from pipesim import Event, Timeline

    for args, said in (
        ((2, [[]]), "a Timeline of pp=2 needs 2 lists of events, one per rank; got 1"),  # taken whole
        ((1, [[None]]), r"rank 0 must be a list of pipesim.Event, got None \(NoneType\) among them"),  # AttributeError
        ((1, 3), "events must be one list of pipesim.Event per rank, got 3"),  # TypeError
        (("2",), r"Timeline pp must be a whole number from 1 to 100,000, got '2' \(str\)"),  # TypeError
        ((1, [[Event(0, "F0.0", 0.0, 1.0)]]), r"rank 0 item 0: expected pipesim.Op or pipesim.Pair .* got 'F0.0' \(str\)"),
    ):
        with pytest.raises(PipesimError, match=said):
            Timeline(*args)


@pytest.mark.parametrize(
    "make, said",
    [
        (lambda: Placement.flat(2.0, 2), "placement pp must be a whole number from 1 to 100,000, got 2.0"),
        (lambda: Placement.interleaved(2, 2, 2.5), "placement chunks must be a whole number .* got 2.5"),
        (lambda: Placement.dual(2, None), r"placement microbatches must be a whole number .* got None \(NoneType\)"),
        (lambda: Placement.flat(10**9, 1), "placement pp must be a whole number from 1 to 100,000, got 1000000000"),
        (lambda: Placement.interleaved(100_000, 2, 1000), r"placement stages \(pp=100000 x chunks\) must be .* got 100000000"),
    ],
)
def test_a_standard_placement_is_sized_before_it_is_built(make, said):
    # a float met a TypeError in range(); pp=10**9 built a route of 10**9 positions until
    # the process was killed for its memory
    with pytest.raises(PipesimError, match=said):
        make()


@pytest.mark.parametrize(
    "args, said",
    [
        ((None, 4, 8), r"a schedule name must be a string such as '1f1b' \(pipesim.REGISTRY lists them\), got None \(NoneType\)"),
        # a number in place of a name is said with its type: "got 1" read like a name that was 1
        ((1, 4, 8), r"a schedule name must be a string .* got 1 \(int\)$"),
        ((1.5, 4, 8), r"a schedule name must be a string .* got 1.5 \(float\)$"),
        (("1f1b", "4", 8), r"^--pp must be an integer >= 1, got '4' \(str\)$"),
        (("1f1b", True, 8), r"^--pp must be an integer >= 1, got true \(bool\)$"),
        (("1f1b", 4, "8"), r"^--microbatches must be an integer >= 1, got '8' \(str\)$"),
        (("1f1b", 4, 8.0), r"^--microbatches must be an integer >= 1, got 8.0$"),
        (("interleaved-1f1b", 4, 8, {"chunks": True}), r"needs --chunks >= 1, got true \(bool\)$"),
        # a group of True ran as a group of 1 at pp=1, and '4' was said as 4
        (
            ("interleaved-1f1b", 1, 4, {"group_size": True}),
            r"needs --group-size a whole number from --pp=1 to --microbatches=4, got true \(bool\)$",
        ),
        (
            ("interleaved-1f1b", 4, 8, {"group_size": "4"}),
            r"needs --group-size a whole number from --pp=4 to --microbatches=8, got '4' \(str\)$",
        ),
        (("interleaved-1f1b-overlap", 1, 4, {"group_size": True}), r"needs --group-size a whole number .* got true \(bool\)$"),
    ],
)
def test_build_names_a_name_or_size_of_the_wrong_type(args, said):
    # a name of None or 1 met an AttributeError in canonical (no .lower()); the string
    # '4' was said as 4, and pp=True or chunks=True built as 1
    name, pp, M, *options = args
    with pytest.raises(PipesimError, match=said):
        build(name, pp, M, **(options[0] if options else {}))


def test_build_takes_numpy_integers_as_sizes():
    # the planner's sizes are numpy integers: they build what Python's build
    import numpy as np

    s = build("1f1b", np.int64(4), np.int32(8))
    assert (type(s.pp), type(s.microbatches)) == (int, int)
    assert summarize(s, simulate(s)).makespan == 33  # (M + pp - 1)(F + B + W), Narayanan et al. 2021, 2.2
