"""The reference simulator the engine is tested against: small and obviously correct.

Repeatedly sweep the ranks; run a rank's next item as soon as every key it needs is done
(``deps.needs``), starting when the rank is free and each needed key is done, plus the
P2P latency when it comes from another rank. Slow (a sweep per step of progress), so
for small schedules only.
"""

from __future__ import annotations

from pipesim.deps import needs, produces
from pipesim.ir import Pair, Schedule, ops_of


def reference_times(schedule: Schedule, costs) -> tuple[list[list[tuple[float, float]]], list[tuple]]:
    """Per rank, (start, end) of each item; and every transfer as (src, dst, op, sent, arrived)."""
    pl = schedule.placement
    done: dict = {}  # key -> (end, op that made it)
    free = [0.0] * schedule.pp
    head = [0] * schedule.pp
    times: list[list[tuple[float, float]]] = [[] for _ in range(schedule.pp)]
    transfers = []
    progress = True
    while progress:
        progress = False
        for r, items in enumerate(schedule.ranks):
            while head[r] < len(items):
                item = items[head[r]]
                keys = [k for op in ops_of(item) for k in needs(pl, r, op)]
                if any(k not in done for k in keys):
                    break
                start = free[r]
                for k in keys:
                    end, op = done[k]
                    if k[1] != r:
                        arrive = end + costs.p2p_time(k[1], r)
                        transfers.append((k[1], r, str(op), end, arrive))
                        end = arrive
                    start = max(start, end)
                stages = [pl.stage_of(r, op.chunk, op.mb) for op in ops_of(item)]
                if isinstance(item, Pair):
                    dur = costs.pair_time(item, stages[0], stages[1])
                else:
                    dur = costs.op_time(item, stages[0])
                finish = start + dur
                for op in ops_of(item):
                    for k in produces(r, op):
                        done[k] = (finish, op)
                times[r].append((start, finish))
                free[r] = finish
                head[r] += 1
                progress = True
    assert all(h == len(items) for h, items in zip(head, schedule.ranks)), "the reference simulator found a deadlock"
    return times, transfers
