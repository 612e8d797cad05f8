"""What each op waits for, derived from the placement alone.

A dependency is named by a key ``(phase, rank, chunk, mb)``: phase ``"F"`` is done when
that forward ends, ``"B"`` when the input gradient is ready (its B or BW ends) and ``"W"``
when the weight gradient is (its W or BW ends). Keys let a B on one rank wait for the next
stage's backward without knowing whether that rank split it into B and W.
"""

from __future__ import annotations

from .ir import Op, Placement

Key = tuple[str, int, int, int]

_PRODUCES = {"F": ("F",), "B": ("B",), "W": ("W",), "BW": ("B", "W")}


def produces(rank: int, op: Op) -> tuple[Key, ...]:
    """The keys that become done when ``op`` on ``rank`` ends."""
    return tuple((phase, rank, op.chunk, op.mb) for phase in _PRODUCES[op.kind])


def needs(placement: Placement, rank: int, op: Op) -> tuple[Key, ...]:
    """The keys that must be done before ``op`` on ``rank`` can start.

    F waits for the previous stage's forward; a backward (B or BW) for its own forward and
    the next stage's input gradient (the last stage's backward starts from the loss, right
    after its own forward); W for its own B. Assumes the op lies on its micro-batch's route
    (``validate.check_structure`` reports ops that do not).
    """
    stage = placement.stage_of(rank, op.chunk, op.mb)
    assert stage is not None, f"{op} on rank {rank} is off its route"
    if op.kind == "F":
        if stage == 0:
            return ()
        r, c = placement.position(op.mb, stage - 1)
        return (("F", r, c, op.mb),)
    if op.kind == "W":
        return (("B", rank, op.chunk, op.mb),)
    own = ("F", rank, op.chunk, op.mb)
    if stage == placement.stages - 1:
        return (own,)
    r, c = placement.position(op.mb, stage + 1)
    return (own, ("B", r, c, op.mb))


def key_str(key: Key) -> str:
    phase, rank, chunk, mb = key
    return f"{phase}{chunk}.{mb} on rank {rank}"
