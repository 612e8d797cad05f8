"""benchmarks/published_layouts.py's reason beside a published layout not in the top 3."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import load_script

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "published_layouts.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def _result(mb: int, schedule: str, recompute: str, makespan: float, bubble: float, dp_sync: float, chunks=None):
    layout = SimpleNamespace(tp=1, cp=1, pp=4, dp=16, ep=8, etp=1, micro_batch=mb)
    cand = SimpleNamespace(layout=layout, schedule=schedule, chunks=chunks, recompute=recompute)
    return SimpleNamespace(
        candidate=cand, fits=True, makespan=makespan, bubble=bubble, dp_sync=dp_sync, step_time=makespan + dp_sync
    )


def test_the_same_layout_says_what_else_differs_and_where_the_gap_is(bench):
    # GPT-OSS 120B's row read "same layout" beside a 2 s gap: the pick ran tp1 pp4 dp16 ep8
    # too, at mb2 on v-half. By hand: bubble 5.0 x 18% - 3.0 x 17% = 0.90 - 0.51 = 0.39 s;
    # sync 0.36 - 0.27 = 0.09 s; busy (5.0 - 3.0) - 0.39 = 1.61 s, the largest, of a
    # 5.36 - 3.27 = 2.09 s gap
    pub = _result(1, "1f1b", "none", 5.0, 0.18, 0.36)
    top = _result(2, "v-half", "none", 3.0, 0.17, 0.27)
    assert bench.reason(pub, top) == (
        "same layout, mb1 vs mb2, 1f1b vs v-half; busy time per GPU (compute and exposed comm): "
        "+1.61 s of the 2.09 s gap (bubble 18% vs 17%)"
    )
    # chunks and recomputation are choices too
    pub = _result(2, "interleaved-1f1b", "full", 5.0, 0.18, 0.36, chunks=2)
    top = _result(2, "interleaved-1f1b", "selective", 3.0, 0.17, 0.27, chunks=4)
    assert bench.reason(pub, top).startswith("same layout, interleaved-1f1b v2 vs interleaved-1f1b v4, full vs selective; ")
