"""Searched builders store their orders in the user's cache directory, once per (pp, M)."""

from __future__ import annotations

import json

import pytest

from pipesim import build, kernel
from pipesim.schedules import REGISTRY, cache, v_shape


@pytest.fixture
def home(tmp_path, monkeypatch):
    # the C engine is built into the same cache directory the first time it is asked for:
    # built (or found) under the real one first, it leaves the test's directory to the orders
    kernel.compiled()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PIPESIM_CACHE", raising=False)
    return tmp_path / "pipesim"


def files(d):
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_first_build_searches_and_stores_then_reads(home, monkeypatch):
    first = build("zb-v", 3, 4)  # M < 2pp - 1: searched
    (path,) = home.iterdir()
    assert path.name == f"zb-v-pp3-m4-{cache.version_key()}.json"
    assert json.loads(path.read_text())["version"] == cache.version_key()

    def no_search(pp, M):
        raise AssertionError("searched again")

    monkeypatch.setattr(v_shape.zb_v_searched, "search", no_search)
    again = v_shape.zb_v(3, 4)
    assert again == first and again.ranks == first.ranks
    path.unlink()  # without the file it searches again
    with pytest.raises(AssertionError, match="searched again"):
        v_shape.zb_v(3, 4)


def test_orders_built_directly_are_not_stored(home):
    # from M = 2pp - 1 on, ZB-V and ZB-H2 are built in one pass: nothing to keep
    build("zb-v", 3, 5)
    build("zb-h2", 3, 5)
    assert files(home) == []


def test_corrupt_or_foreign_files_are_ignored_and_rewritten(home):
    good = build("v-half", 2, 4)
    path = cache.path_of("v-half", 2, 4)
    for bad in ("{not json", json.dumps({"version": "old", "schedule": "v-half", "pp": 2, "microbatches": 4})):
        path.write_text(bad)
        assert build("v-half", 2, 4).ranks == good.ranks
        assert json.loads(path.read_text())["version"] == cache.version_key()
    assert files(home) == [path.name]  # no temporary file left behind


def test_off_switch_and_unwritable_directory(home, monkeypatch):
    monkeypatch.setenv("PIPESIM_CACHE", "off")
    build("v-min", 2, 3)
    assert files(home) == []
    monkeypatch.delenv("PIPESIM_CACHE")
    blocked = home.parent / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # no directory can be made there
    assert build("v-min", 2, 3).pp == 2
    assert blocked.read_text() == ""


def test_repeated_v_orders_keep_only_their_short_plan(home, monkeypatch):
    # large V-Half and V-Min are built by repeating the steady state of a short plan: the
    # plan's orders are kept (one file per pp and search), never the order at M
    v_shape.forget()
    first = build("v-min", 8, 420)
    (kept,) = files(home)
    assert kept.startswith("v-short-pp8-") and "420" not in kept

    def no_search(*args):
        raise AssertionError("searched again")

    v_shape.forget()
    monkeypatch.setattr(v_shape, "_block_plans", no_search)
    again = build("v-min", 8, 400)  # another M at the same pp: the same short plan, repeated less
    assert [tuple(r) for r in build("v-min", 8, 420).ranks] == [tuple(r) for r in first.ranks]
    assert again.microbatches == 400 and all(len(r) == 6 * 400 for r in again.ranks)


def test_short_plans_of_other_limits_or_blocks_do_not_share_a_file(home):
    v_shape.forget()
    half, low = build("v-half", 8, 100), build("v-min", 8, 100)
    assert len(files(home)) == 2  # V-Half's and V-Min's: other limits and blocks
    v_shape.forget()
    assert [tuple(r) for r in build("v-half", 8, 100).ranks] == [tuple(r) for r in half.ranks]
    assert [tuple(r) for r in build("v-min", 8, 100).ranks] == [tuple(r) for r in low.ranks]
    assert [tuple(r) for r in half.ranks] != [tuple(r) for r in low.ranks]


def test_a_torn_short_plan_is_searched_again(home):
    v_shape.forget()
    searched = build("v-half", 4, 60)
    (path,) = home.iterdir()
    d = json.loads(path.read_text())
    for bad in ({**d, "orders": d["orders"][:-1]}, {**d, "orders": ["0 0 0"] * len(d["orders"])}):
        path.write_text(json.dumps(bad))  # a rank missing; ranks missing ops
        v_shape.forget()
        assert [tuple(r) for r in build("v-half", 4, 60).ranks] == [tuple(r) for r in searched.ranks]
        assert json.loads(path.read_text())["orders"] == d["orders"]


def test_chimera_is_searched_once_per_size_and_sizes_do_not_share(home, monkeypatch):
    # the list scheduler's order depends on (pp, M) alone: one file per size, read back as built
    small, large = build("chimera", 4, 8), build("chimera", 4, 12)
    assert files(home) == sorted(p.name for p in (cache.path_of("chimera", 4, 8), cache.path_of("chimera", 4, 12)))

    def no_search(pp, M):
        raise AssertionError("searched again")

    monkeypatch.setattr(REGISTRY["chimera"].builder, "search", no_search)
    again_small, again_large = build("chimera", 4, 8), build("chimera", 4, 12)
    assert again_small.ranks == small.ranks and again_large.ranks == large.ranks
    assert again_small.placement == small.placement and again_large.microbatches == 12
    # every micro-batch's forward and fused backward on every rank, each once
    assert sorted(str(op) for op in again_large.ranks[0]) == sorted(
        f"{k}{c}.{m}" for k in ("F", "BW") for c, m in [(0, m) for m in range(6)] + [(1, m) for m in range(6, 12)]
    )


def test_a_file_naming_an_op_the_schedule_cannot_hold_is_searched_again(home):
    good = build("zb-v", 3, 4)
    path = cache.path_of("zb-v", 3, 4)
    d = json.loads(path.read_text())
    for bad in ("0 0 99", "7 0 0", "0 5 0", "0 0", "0 x 0"):  # mb past M, no such kind or chunk, torn, not a number
        path.write_text(json.dumps({**d, "ranks": [bad, *d["ranks"][1:]]}))
        assert build("zb-v", 3, 4).ranks == good.ranks
        assert json.loads(path.read_text())["ranks"] == d["ranks"]


def test_orders_searched_for_costs_are_kept_by_every_option(home, monkeypatch):
    """zb-auto's order, searched for a candidate's own costs, is kept by all of its
    options: the planner's second ask reads it, and a change to any one option (a
    stage's F, the latency, the memory limit, the W share) is a search of its own whose
    order is what ``build`` gives for it."""
    from pipesim.planner import programs
    from pipesim.planner.programs import ProgramCache

    base = {"f": (1.0, 1.2, 1.0), "b": (1.0, 1.0, 2.0), "w": (0.5, 0.5, 1.5), "comm": 0.1, "memory_limit": 3.0, "w_memory": 0.5}
    changed = [
        {**base, "f": (2.0, 1.0, 1.0)},
        {**base, "comm": 0.7},
        {**base, "memory_limit": 4.5},
        {**base, "w_memory": 0.2},
    ]
    orders = {}
    for opts in (base, *changed):
        s = ProgramCache()._entry("zb-auto", 3, 6, opts)[0]
        assert s.ranks == build("zb-auto", 3, 6, **opts).ranks
        orders[repr(opts)] = s.ranks
    assert len(files(home)) == 5
    assert all(orders[repr(o)] != orders[repr(base)] for o in changed)  # each option changes the order here
    with monkeypatch.context() as m:
        m.setattr(programs, "build", lambda *a, **k: pytest.fail("searched again"))
        for opts in (base, *changed):  # read back, each its own
            assert ProgramCache()._entry("zb-auto", 3, 6, opts)[0].ranks == orders[repr(opts)]
    exact = ProgramCache()._entry("zb-auto", 3, 6, {**base, "exact": True, "time_limit": 1.0})[0]
    assert exact.info["method"] and len(files(home)) == 5  # a run against the clock is not kept
