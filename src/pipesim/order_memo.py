"""What depends on a schedule's order alone (its ``RankTable``), kept per table.

The planner simulates each compiled program under many cost models (DeepSeek-V2 on b200:
2775 timelines of 185 tables), and the memory and parameter-gather pricing of each
timeline would otherwise work out again which op runs which stage on which rank. What is
kept lives as long as its table (a weak reference): no search's orders outlive it here."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

# id(table) -> (a weak reference to it, {what: value}); by identity, not by the table's
# own (content) hash and equality, which would spell out every op
_KEPT: dict[int, tuple[weakref.ref, dict]] = {}


def per_table(table: object, what: Hashable, make: Callable[[], T]) -> T:
    """``make()``, worked out once per ``table`` (by identity) and ``what``, kept while the
    table lives. What ``make`` returns is shared: callers must not change it."""
    key = id(table)
    hit = _KEPT.get(key)
    if hit is None or hit[0]() is not table:
        hit = _KEPT[key] = (weakref.ref(table, lambda ref, key=key: _drop(key, ref)), {})
    kept = hit[1]
    if what not in kept:
        kept[what] = make()
    return kept[what]


def _drop(key: int, ref: weakref.ref) -> None:
    """A table has gone: its entry too (unless its id already names a newer table's)."""
    hit = _KEPT.get(key)
    if hit is not None and hit[0] is ref:
        del _KEPT[key]
