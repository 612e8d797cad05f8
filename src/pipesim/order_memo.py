"""What depends on a schedule's order alone (its ``RankTable``), kept per table.

The planner simulates each compiled program under many cost models (DeepSeek-V2 on b200:
2775 timelines of 185 tables), and the memory and parameter-gather pricing of each
timeline would otherwise work out again which op runs which stage on which rank."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

#: tables kept (each entry holds its table, so its id is not reused while kept)
KEPT = 64

_KEPT: OrderedDict[tuple[int, Hashable], tuple[object, object]] = OrderedDict()


def per_table(table: object, what: Hashable, make: Callable[[], T]) -> T:
    """``make()``, worked out once per ``table`` (by identity) and ``what``; the last
    ``KEPT`` kept. What ``make`` returns is shared: callers must not change it."""
    key = (id(table), what)
    hit = _KEPT.get(key)
    if hit is not None and hit[0] is table:
        _KEPT.move_to_end(key)
        return hit[1]
    value = make()
    _KEPT[key] = (table, value)
    if len(_KEPT) > KEPT:
        _KEPT.popitem(last=False)
    return value
