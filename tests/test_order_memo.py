"""order_memo.per_table: work kept per rank table, by identity, the oldest dropped."""

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


def test_oldest_dropped_past_kept(monkeypatch):
    monkeypatch.setattr(order_memo, "KEPT", 2)
    monkeypatch.setattr(order_memo, "_KEPT", type(order_memo._KEPT)())
    tables = [_table() for _ in range(3)]
    for i, t in enumerate(tables):
        order_memo.per_table(t, "x", lambda i=i: i)
    assert order_memo.per_table(tables[0], "x", lambda: "again") == "again"  # dropped: made anew
    assert order_memo.per_table(tables[2], "x", lambda: "again") == 2  # kept
