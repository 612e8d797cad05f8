"""Checks that a schedule is complete and executable.

Two checks, both linear in the number of ops:

* structure: every op lies on its micro-batch's route, and every (stage, micro-batch) is
  forwarded once and backwarded once (one BW, or one B and one W);
* order: the per-rank orders can all run to completion. If they cannot, the ranks stuck
  at their heads wait on each other in a cycle, and the error names that cycle.

``execution_order`` is the walk behind the second check: it returns the items in an
order that respects every rank's order and every dependency. The engine
(``pipesim.engine``) runs the same checks and walk on arrays and comes here only to word
what it refuses.
"""

from __future__ import annotations

from collections import Counter, deque

from .deps import Key, key_str, needs, produces
from .errors import DeadlockError, PipesimError
from .ir import Item, Op, Schedule, ops_of


def check_structure(schedule: Schedule) -> None:
    pl = schedule.placement
    M = schedule.microbatches
    problems: list[str] = []
    count: Counter = Counter()
    for r, item in schedule.items():
        for op in ops_of(item):
            if not 0 <= op.mb < M:
                problems.append(f"rank {r}: {op} names micro-batch {op.mb}, but there are {M} (0..{M - 1})")
            elif not 0 <= op.chunk < pl.chunks:
                problems.append(f"rank {r}: {op} names chunk {op.chunk}, but each rank holds {pl.chunks}")
            elif pl.stage_of(r, op.chunk, op.mb) is None:
                problems.append(
                    f"rank {r}: {op} is off micro-batch {op.mb}'s route (rank {r} chunk {op.chunk} "
                    f"holds no stage of route {pl.route_of[op.mb]} in the {pl.kind} placement)"
                )
            else:
                count[(r, op.chunk, op.mb, op.kind)] += 1
    for mb in range(M):
        for r, c in pl.routes[pl.route_of[mb]]:
            n = {k: count.get((r, c, mb, k), 0) for k in ("F", "B", "W", "BW")}
            if n["F"] != 1:
                problems.append(_times(r, Op("F", c, mb), n["F"]))
            if n["BW"] == 0 and n["B"] == 0:
                problems.append(f"rank {r}: no backward (B{c}.{mb} or BW{c}.{mb}) for micro-batch {mb}")
            elif n["BW"] and (n["B"] or n["W"]):
                problems.append(f"rank {r}: micro-batch {mb} chunk {c} has both BW and B/W; use one BW or one B and one W")
            elif n["BW"] > 1:
                problems.append(_times(r, Op("BW", c, mb), n["BW"]))
            elif n["B"]:
                if n["B"] != 1:
                    problems.append(_times(r, Op("B", c, mb), n["B"]))
                if n["W"] != 1:
                    problems.append(_times(r, Op("W", c, mb), n["W"]))
            elif n["W"]:
                problems.append(f"rank {r}: W{c}.{mb} has no B{c}.{mb} before it")
    for r, items in enumerate(schedule.ranks):
        for item in items:
            if not isinstance(item, Op) and item.forward.mb == item.backward.mb and item.forward.chunk == item.backward.chunk:
                problems.append(f"rank {r}: pair {item} overlaps a micro-batch with its own backward")
    if problems:
        extra = len(problems) - 1
        more = f" (and {extra} more problem{'' if extra == 1 else 's'})" if extra else ""
        raise PipesimError(f"invalid {schedule.name} schedule: {problems[0]}{more}")


def _times(rank: int, op: Op, n: int) -> str:
    if n == 0:
        return f"rank {rank}: {op} is missing"
    return f"rank {rank}: {op} appears {n} times, expected once"


def item_needs(schedule: Schedule, rank: int, item: Item) -> tuple[Key, ...]:
    """Keys an item waits for. A pair waits for what both halves need; a half needing the
    other half of its own pair is reported by ``check_structure``."""
    pl = schedule.placement
    if isinstance(item, Op):
        return needs(pl, rank, item)
    return needs(pl, rank, item.forward) + needs(pl, rank, item.backward)


def item_makes(rank: int, item: Item) -> tuple[Key, ...]:
    return tuple(k for op in ops_of(item) for k in produces(rank, op))


def execution_order(schedule: Schedule) -> list[tuple[int, int, tuple[Key, ...]]]:
    """Every item as (rank, index in its rank's list, keys it needs), in an order that
    respects each rank's order and every dependency.

    Each rank runs its list until its head waits for a key not yet done; it then parks on
    that key and is woken when the key is done. Every item is looked at once plus once
    per wake-up, so the walk is linear in the number of ops.
    """
    pp = schedule.pp
    ranks = schedule.ranks
    wants = [[item_needs(schedule, r, it) for it in items] for r, items in enumerate(ranks)]
    ptr = [0] * pp
    done: set[Key] = set()
    parked: dict[Key, list[int]] = {}
    ready = deque(range(pp))
    order: list[tuple[int, int, tuple[Key, ...]]] = []
    while ready:
        r = ready.popleft()
        items, rank_wants = ranks[r], wants[r]
        i = ptr[r]
        while i < len(items):
            need = rank_wants[i]
            missing = next((k for k in need if k not in done), None)
            if missing is not None:
                parked.setdefault(missing, []).append(r)
                break
            order.append((r, i, need))
            for k in item_makes(r, items[i]):
                done.add(k)
                if k in parked:
                    ready.extend(parked.pop(k))
            i += 1
        ptr[r] = i
    if len(order) != sum(len(x) for x in ranks):
        raise _deadlock(schedule, ptr, done)
    return order


def _deadlock(schedule: Schedule, ptr: list[int], done: set[Key]) -> DeadlockError:
    """Follow 'waits for' edges between stuck ranks until one repeats: that is the cycle."""
    waits: dict[int, tuple[Item, Key]] = {}
    for r in range(schedule.pp):
        if ptr[r] < len(schedule.ranks[r]):
            head = schedule.ranks[r][ptr[r]]
            key = next(k for k in item_needs(schedule, r, head) if k not in done)
            waits[r] = (head, key)
    r = next(iter(waits))
    seen: list[int] = []
    while r not in seen:
        seen.append(r)
        r = waits[r][1][1]  # the rank that must produce the awaited key
        if r not in waits:  # cannot happen once the structure check passed
            break
    cycle_ranks = seen[seen.index(r) :] if r in seen else seen
    cycle = [(q, str(waits[q][0]), key_str(waits[q][1])) for q in cycle_ranks]
    text = "; ".join(f"rank {q} waits at {head} for {awaited}" for q, head, awaited in cycle)
    return DeadlockError(f"deadlock in {schedule.name}: {text}", cycle)
