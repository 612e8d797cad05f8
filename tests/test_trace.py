"""Chrome traces: an event per item, transfers on the comm track, a flow per transfer."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipesim import Costs, Event, Pair, PipesimError, Segment, Timeline, build, simulate
from pipesim.deps import needs, produces
from pipesim.ir import Op, ops_of
from pipesim.render.trace import trace_document, trace_events, trace_json
from pipesim.timeline import Inside


def uneven(s, comm=0.25):
    return Costs(f=[1 + 0.25 * (i % 3) for i in range(s.placement.stages)], b=1, w=0.5, comm=comm)


def threads(events):
    """(pid, tid) -> thread name."""
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


def items_of(events):
    names = threads(events)
    return [e for e in events if e["ph"] == "X" and names[(e["pid"], e["tid"])] == "compute" and e["cat"] != "segment"]


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "dualpipe", "dualpipev", "interleaved-1f1b"])
def test_one_event_per_item_in_reference_notation(name):
    s = build(name, 4, 8)
    tl = simulate(s, uneven(s))
    events = trace_events(s, tl)
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(procs.values()) == [f"rank {r}" for r in range(4)]
    rank_of = {pid: int(n.split()[-1]) for pid, n in procs.items()}
    tracks = set(threads(events).values())
    # a pair sends its two outputs at once: concurrent sends take a second comm track
    assert tracks == ({"compute", "comm", "comm 2"} if s.placement.kind in ("dual", "v") else {"compute", "comm"})
    got = sorted((rank_of[e["pid"]], e["name"], e["ts"], e["dur"]) for e in items_of(events))
    want = sorted((ev.rank, str(ev.item), ev.start, ev.end - ev.start) for ev in tl.all_events())
    assert len(got) == len(want) == sum(len(evs) for evs in s.ranks)
    for g, w in zip(got, want):
        assert g[:2] == w[:2] and g[2] == pytest.approx(w[2]) and g[3] == pytest.approx(w[3])
    pl = s.placement
    for e in items_of(events):
        r = rank_of[e["pid"]]
        if "&" in e["name"]:
            f, b = e["name"].split("&")
            for half, text in (("forward", f), ("backward", b)):
                kind, chunk, mb = _parse(text)
                assert e["args"][half] == {"kind": kind, "chunk": chunk, "microbatch": mb, "stage": pl.stage_of(r, chunk, mb)}
        else:
            kind, chunk, mb = _parse(e["name"])
            assert e["args"] == {"kind": kind, "chunk": chunk, "microbatch": mb, "stage": pl.stage_of(r, chunk, mb)}


def _parse(text):
    kind = text.rstrip("0123456789.")
    chunk, mb = text[len(kind) :].split(".")
    return kind, int(chunk), int(mb)


def test_pair_args_hold_both_halves():
    s = build("dualpipe", 4, 8)
    tl = simulate(s)
    pair = next(e for e in tl.all_events() if isinstance(e.item, Pair))
    ev = next(e for e in items_of(trace_events(s, tl)) if e["name"] == str(pair.item) and e["pid"] == pair.rank + 1)
    f, b = pair.item.forward, pair.item.backward
    assert ev["args"]["kind"] == f"F&{b.kind}"
    assert ev["args"]["forward"] == {
        "kind": "F",
        "chunk": f.chunk,
        "microbatch": f.mb,
        "stage": s.placement.stage_of(pair.rank, f.chunk, f.mb),
    }
    assert ev["args"]["backward"]["microbatch"] == b.mb and ev["args"]["backward"]["chunk"] == b.chunk


@pytest.mark.parametrize("name", ["1f1b", "dualpipe", "dualpipev"])
def test_a_flow_per_transfer_from_producer_to_the_item_that_waited(name):
    s = build(name, 4, 8)
    tl = simulate(s, uneven(s))
    events = trace_events(s, tl)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == len(tl.transfers) > 0
    assert starts.keys() == ends.keys()
    # each flow end lies strictly inside an item on its rank: the producer, the consumer
    item_at = {}
    for e in items_of(events):
        item_at.setdefault(e["pid"], []).append(e)

    def inside(ev):
        (hit,) = [e for e in item_at[ev["pid"]] if e["ts"] < ev["ts"] < e["ts"] + e["dur"]]
        return hit

    pl = s.placement
    seen = Counter()
    for fid, st in starts.items():
        fin = ends[fid]
        assert fin["bp"] == "e"
        src, dst = st["pid"] - 1, fin["pid"] - 1
        producer, consumer = inside(st), inside(fin)
        op = next(o for o in _ops(producer["name"]) if str(o) == st["name"])
        assert any(k in needs(pl, dst, o) for o in _ops(consumer["name"]) for k in produces(src, op))
        seen[(src, dst, str(op))] += 1
    assert seen == Counter((t.src, t.dst, str(t.op)) for t in tl.transfers)


def _ops(name):
    return [Op(*_parse(part)) for part in name.split("&")]


def test_transfers_on_the_senders_comm_track_without_overlap():
    s = build("dualpipe", 4, 8)
    tl = simulate(s, uneven(s, comm=3.0))  # latency longer than the ops: sends overlap
    events = trace_events(s, tl)
    names = threads(events)
    comm = [e for e in events if e["ph"] == "X" and names[(e["pid"], e["tid"])].startswith("comm")]
    assert sorted((e["pid"] - 1, e["args"]["dst"], e["args"]["op"], e["ts"], e["dur"]) for e in comm) == sorted(
        (t.src, t.dst, str(t.op), t.start, t.end - t.start) for t in tl.transfers
    )
    assert any(n == "comm 2" for n in names.values())  # overlapping sends spilled onto a second track
    by_thread = {}
    for e in comm:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def test_segments_nest_in_compute_and_go_to_comm():
    s = build("1f1b", 1, 1)
    f, bw = s.ranks[0]
    segs = (
        Segment("compute", "ATTN(F) 0", 0, 0.5),
        Segment("comm", "DISPATCH(F) 0", 0.5, 0.75),
        Segment("compute", "MLP(F) 0", 0.75, 1),
    )
    tl = Timeline(1, ((Event(0, f, 0, 1, Inside.of(segs)), Event(0, bw, 1, 3)),))
    events = trace_events(s, tl)
    names = threads(events)
    seg_events = [e for e in events if e["ph"] == "X" and e["name"] in {sg.label for sg in segs}]
    where = {e["name"]: (names[(e["pid"], e["tid"])], e["ts"], e["dur"]) for e in seg_events}
    assert where == {"ATTN(F) 0": ("compute", 0, 0.5), "DISPATCH(F) 0": ("comm", 0.5, 0.25), "MLP(F) 0": ("compute", 0.75, 0.25)}
    assert [e["name"] for e in items_of(events)] == ["F0.0", "BW0.0"]


def test_time_unit_scales_to_microseconds():
    s = build("1f1b", 2, 2)
    tl = simulate(s, Costs(f=1, b=1, w=1, comm=0.5))
    us = {(e["pid"], e["name"]): (e["ts"], e["dur"]) for e in items_of(trace_events(s, tl))}
    ms = {(e["pid"], e["name"]): (e["ts"], e["dur"]) for e in items_of(trace_events(s, tl, time_unit="ms"))}
    assert ms == {k: (ts * 1000, d * 1000) for k, (ts, d) in us.items()}
    with pytest.raises(PipesimError, match="use one of ns, us, ms, s"):
        trace_events(s, tl, time_unit="hours")


def test_document_of_several_schedules():
    a, b = build("1f1b", 2, 4), build("zb-h1", 2, 4)
    doc = json.loads(trace_json([(a, simulate(a)), (b, simulate(b))], settings={"pp": 2}))
    procs = sorted(e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name")
    assert procs == ["1f1b rank 0", "1f1b rank 1", "zb-h1 rank 0", "zb-h1 rank 1"]
    assert doc["otherData"]["pp"] == 2 and "1 us" in doc["otherData"]["time_unit"]
    ids = [e["id"] for e in doc["traceEvents"] if e["ph"] == "s"]
    assert len(ids) == len(set(ids)) == len(simulate(a).transfers) + len(simulate(b).transfers)
    assert trace_document([(a, simulate(a))])["traceEvents"][0]["args"]["name"] == "rank 0"


def test_every_op_appears_once_on_its_rank():
    s = build("dualpipev", 4, 8)
    events = items_of(trace_events(s, simulate(s)))
    named = Counter((e["pid"] - 1, op) for e in events for op in e["name"].split("&"))
    assert named == Counter((r, str(op)) for r, it in s.items() for op in ops_of(it))
    assert set(named.values()) == {1}
