from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim import DeadlockError, PipesimError, Placement, Schedule, build, validate
from pipesim.ir import parse_rank


def flat(ranks: list[str], M: int, name: str = "hand") -> Schedule:
    return Schedule(name, len(ranks), M, Placement.flat(len(ranks), M), tuple(parse_rank(r) for r in ranks))


def test_valid_hand_schedule():
    validate(flat(["F0.0 F0.1 BW0.0 BW0.1", "F0.0 BW0.0 F0.1 B0.1 W0.1"], 2))


def test_backward_before_its_forward_is_a_one_rank_cycle():
    with pytest.raises(DeadlockError) as e:
        validate(flat(["F0.0 BW0.0", "BW0.0 F0.0"], 1))
    assert e.value.cycle == [(1, "BW0.0", "F0.0 on rank 1")]
    assert "rank 1 waits at BW0.0 for F0.0 on rank 1" in str(e.value)


def test_cross_rank_wait_cycle_names_both_ranks():
    s = flat(["F0.0 BW0.0 F0.1 BW0.1", "F0.1 F0.0 BW0.0 BW0.1"], 2)
    with pytest.raises(DeadlockError) as e:
        validate(s)
    cycle = {(r, head) for r, head, _ in e.value.cycle}
    assert cycle == {(0, "BW0.0"), (1, "F0.1")}
    assert "rank 0 waits at BW0.0 for B0.0 on rank 1" in str(e.value)
    assert "rank 1 waits at F0.1 for F0.1 on rank 0" in str(e.value)


def test_w_before_its_b():
    with pytest.raises(DeadlockError, match="waits at W0.0 for B0.0 on rank 0"):
        validate(flat(["F0.0 W0.0 B0.0"], 1))


def test_pair_needing_itself():
    s = Schedule("hand", 1, 2, Placement.v(1, 2), tuple([parse_rank("F0.0 F1.0&BW1.0 F0.1 F1.1 BW1.1 BW0.0 BW0.1")]))
    with pytest.raises(PipesimError, match="overlaps a micro-batch with its own backward"):
        validate(s)


@pytest.mark.parametrize(
    "ranks,msg",
    [
        (["F0.0 F0.1 BW0.0"], "no backward \\(B0.1 or BW0.1\\)"),
        (["F0.0 F0.0 BW0.0"], "F0.0 appears 2 times"),
        (["F0.0 B0.0"], "W0.0 is missing"),
        (["F0.0 BW0.0 W0.0"], "both BW and B/W"),
        (["F0.0 F1.0 BW0.0"], "names chunk 1"),
        (["F0.0 F0.5 BW0.0"], "names micro-batch 5"),
    ],
)
def test_structure_errors(ranks, msg):
    M = 2 if "F0.1" in ranks[0] else 1
    with pytest.raises(PipesimError, match=msg):
        validate(flat(ranks, M))


def test_off_route_op_in_dual_placement():
    s = build("dualpipe", 2, 4)
    rows = [" ".join(str(i) for i in r) for r in s.ranks]
    rows[0] = rows[0].replace("F0.0", "F1.0", 1)
    hand = Schedule("dualpipe", 2, 4, s.placement, tuple(parse_rank(r) for r in rows))
    with pytest.raises(PipesimError, match="F1.0 is off micro-batch 0's route"):
        validate(hand)


@given(st.data())
def test_swapping_a_forward_behind_its_backward_always_deadlocks(data):
    """Moving a rank's F after its own backward can never be executable."""
    pp = data.draw(st.integers(1, 6))
    M = data.draw(st.integers(1, 8))
    s = build("1f1b", pp, M)
    r = data.draw(st.integers(0, pp - 1))
    mb = data.draw(st.integers(0, M - 1))
    items = [str(x) for x in s.ranks[r]]
    items.remove(f"F0.{mb}")
    items.insert(items.index(f"BW0.{mb}") + 1, f"F0.{mb}")
    ranks = list(s.ranks)
    ranks[r] = parse_rank(" ".join(items))
    with pytest.raises(DeadlockError) as e:
        validate(Schedule("1f1b", pp, M, s.placement, tuple(ranks)))
    assert e.value.cycle  # names at least one waiting rank


def test_one_more_problem_is_said_in_the_singular():
    # micro-batch 1 is never run: its forward and its backward are both missing, two problems
    with pytest.raises(PipesimError) as e:
        validate(flat(["F0.0 BW0.0"], 2))
    assert str(e.value).endswith("F0.1 is missing (and 1 more problem)"), str(e.value)
    # M=2 with only F0.0: no backward for 0, and micro-batch 1's forward and backward
    with pytest.raises(PipesimError, match=r"\(and 2 more problems\)$"):
        validate(flat(["F0.0"], 2))


def test_validate_checks_on_arrays_not_by_walking_every_op(monkeypatch):
    # the per-op walk took 5.7 s for 1F1B at pp=100, M=4000 (the engine's array check
    # 0.1 s), so a schedule at the CLI's MAX_OPS took minutes; it now only words a refusal
    import sys

    walker = sys.modules["pipesim.validate"]

    def walked(*_):
        raise AssertionError("validate walked every op of a valid schedule")

    monkeypatch.setattr(walker, "check_structure", walked)
    monkeypatch.setattr(walker, "execution_order", walked)
    s = build("1f1b", 4, 8)
    assert validate(s) is s
    with pytest.raises(DeadlockError, match="rank 0 waits at BW0.0"):  # still worded, by the engine's own walk
        validate(flat(["F0.0 BW0.0 F0.1 BW0.1", "F0.1 F0.0 BW0.0 BW0.1"], 2))
