"""order_memo.per_table: work kept per rank table, by identity, as long as the table lives."""

import gc

from pipesim import order_memo
from pipesim.ir import RankTable


def _table() -> RankTable:
    return RankTable([0, 1], [0], [0], [0])


def test_made_once_per_table_and_question():
    made = []
    t, u = _table(), _table()  # equal tables, two objects: each its own entry
    for table, what in ((t, "a"), (t, "a"), (t, "b"), (u, "a"), (t, "a")):
        order_memo.per_table(table, what, lambda table=table, what=what: made.append((id(table), what)) or len(made))
    assert made == [(id(t), "a"), (id(t), "b"), (id(u), "a")]
    assert order_memo.per_table(t, "a", lambda: None) == 1  # the value first made, shared


def test_dropped_with_its_table():
    t = _table()
    key = id(t)
    order_memo.per_table(t, "x", lambda: [1])
    assert key in order_memo._KEPT
    del t
    gc.collect()
    assert key not in order_memo._KEPT
