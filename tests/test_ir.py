from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim import REGISTRY, Op, Pair, PipesimError, Placement, build, parse_item
from pipesim.files import load_schedule, save_schedule, schedule_from_dict
from pipesim.ir import format_rank, parse_rank

ops = st.builds(Op, st.sampled_from(["F", "B", "W", "BW"]), st.integers(0, 9), st.integers(0, 999))
pairs = st.builds(
    Pair,
    st.builds(Op, st.just("F"), st.integers(0, 3), st.integers(0, 99)),
    st.builds(Op, st.sampled_from(["B", "BW"]), st.integers(0, 3), st.integers(0, 99)),
)


@given(st.lists(st.one_of(ops, pairs), max_size=30))
def test_notation_round_trips(items):
    assert parse_rank(format_rank(tuple(items))) == tuple(items)


def test_notation_examples():
    assert parse_item("F1.6&BW0.0") == Pair(Op("F", 1, 6), Op("BW", 0, 0))
    assert str(parse_item("W0.12")) == "W0.12"


@pytest.mark.parametrize("text", ["X0.1", "F0", "F.1", "F0.1&F0.2", "BW0.1&F1.1", "F0.1&B0.1&B0.2", "f0.1", ""])
def test_bad_notation_is_one_clear_error(text):
    with pytest.raises(PipesimError) as e:
        parse_item(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "name,pp,M,opts",
    [
        ("gpipe", 3, 5, {}),
        ("1f1b", 4, 8, {}),
        ("interleaved-1f1b", 4, 8, {"chunks": 3}),
        ("zb-h1", 4, 6, {}),
        ("dualpipe", 4, 10, {}),
        ("dualpipev", 3, 7, {}),
    ],
)
def test_json_round_trip(tmp_path, name, pp, M, opts):
    s = build(name, pp, M, **opts)
    path = tmp_path / "s.json"
    save_schedule(s, path)
    assert load_schedule(path) == s
    assert json.loads(path.read_text())["ranks"] == s.to_notation()


def test_custom_placement_round_trips(tmp_path):
    # two ranks, route visits rank 1 first
    pl = Placement("custom", 2, 1, (((1, 0), (0, 0)),), (0, 0))
    d = {
        "schedule": "mine",
        "pp": 2,
        "microbatches": 2,
        "placement": pl.to_dict(),
        "ranks": [["F0.0", "F0.1", "BW0.0", "BW0.1"], ["F0.0", "F0.1", "BW0.0", "BW0.1"]],
    }
    s = schedule_from_dict(d)
    assert s.placement.routes == pl.routes
    assert schedule_from_dict(s.to_dict()) == s


def test_placements_match_the_design():
    assert Placement.interleaved(4, 8, 2).stage_of(1, 1, 0) == 5  # chunk c of rank r = c*pp + r
    v = Placement.v(4, 8)
    assert v.stage_of(0, 1, 3) == 7 and v.stage_of(3, 1, 3) == 4
    d = Placement.dual(4, 8)
    assert d.stage_of(0, 0, 0) == 0 and d.stage_of(0, 1, 0) is None  # mb 0 goes down
    assert d.stage_of(3, 1, 4) == 0 and d.stage_of(0, 1, 4) == 3  # mb 4 enters at rank 3
    assert d.parameter_copies == 2 and v.parameter_copies == 1 and Placement.interleaved(4, 8, 3).parameter_copies == 1


@pytest.mark.parametrize(
    "d,msg",
    [
        ({"pp": 2}, "missing 'microbatches'"),
        ({"pp": 2, "microbatches": 2, "ranks": [["F0.0"]]}, "list of 2 op lists"),
        ({"pp": 0, "microbatches": 2, "ranks": []}, "pp must be a whole number from 1 to"),
        ({"pp": 1, "microbatches": 1, "ranks": [["F0.0", "Q0.0"]]}, "rank 0: cannot read op 'Q0.0'"),
        ({"pp": 1, "microbatches": 1, "ranks": [["F1.0"]], "schedule": "x"}, "cannot tell the placement"),
        ({"pp": 1, "microbatches": 1, "ranks": [["F0.0"]], "placement": {"kind": "zigzag"}}, "unknown placement kind"),
    ],
)
def test_malformed_schedule_dicts(d, msg):
    with pytest.raises(PipesimError, match=msg):
        schedule_from_dict(d)


def test_every_family_is_registered_with_constraints():
    for _name, fam in REGISTRY.items():
        assert fam.constraints and fam.placement in ("flat", "interleaved", "v", "dual")


def test_a_rank_table_reads_a_rank_counted_from_the_end():
    # ranks[-1] read the columns from offsets[-1] to offsets[0]: an empty rank, unless the
    # rank had been read (and cached) by its positive index first. 1F1B's last stage runs
    # each forward straight into its backward (Narayanan et al. 2021, section 2.2: no warm-up)
    s = build("1f1b", 4, 8)
    assert s.ranks[-1] == tuple(
        parse_rank("F0.0 BW0.0 F0.1 BW0.1 F0.2 BW0.2 F0.3 BW0.3 F0.4 BW0.4 F0.5 BW0.5 F0.6 BW0.6 F0.7 BW0.7")
    )
    assert s.ranks[-4] == s.ranks[0]
    with pytest.raises(IndexError):
        s.ranks[4]
