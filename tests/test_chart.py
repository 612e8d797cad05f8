"""Timeline charts, read back from their SVG: a shape per op where the timeline puts it."""

from __future__ import annotations

import pytest

import svgread as sv
from pipesim import Costs, Event, Pair, PipesimError, Segment, Timeline, build, simulate, summarize
from pipesim.ir import ops_of
from pipesim.render.chart import Panel, chart_bytes
from pipesim.render.palette import fill
from pipesim.timeline import Inside


def uneven(s):
    """Uneven per-stage costs and latency, so that durations and gaps differ op to op."""
    return Costs(f=[1 + 0.25 * (i % 3) for i in range(s.placement.stages)], b=1, w=0.5, comm=0.25)


CASES = [("1f1b", {}), ("zb-h1", {}), ("dualpipe", {}), ("dualpipev", {}), ("interleaved-1f1b", {"chunks": 2})]


def svg_of(*runs, **options):
    return sv.parse(chart_bytes([Panel(s, tl) for s, tl in runs], "svg", **options))


def expected_shapes(s, tl, r):
    """What rank r's row must show, in order: (op, start, end, half) with half 'top' or
    'bottom' for the two halves of a pair."""
    out = []
    for e in tl.events[r]:
        if isinstance(e.item, Pair):
            out += [(e.item.forward, e.start, e.end, "top"), (e.item.backward, e.start, e.end, "bottom")]
        else:
            out.append((e.item, e.start, e.end, None))
    return out


@pytest.mark.parametrize("name,opts", CASES)
def test_one_box_per_op_where_the_timeline_puts_it(name, opts):
    s = build(name, 4, 8, **opts)
    tl = simulate(s, uneven(s))
    root = svg_of((s, tl))
    x = sv.time_axis(root)
    total = 0
    for r in range(s.pp):
        shapes = sv.paths(sv.group(root, f"ops:0:{r}"))
        want = expected_shapes(s, tl, r)
        assert len(shapes) == len(want) == sum(len(ops_of(e.item)) for e in tl.events[r])
        rows = []
        for path, (op, start, end, half) in zip(shapes, want):
            x0, y0, x1, y1 = sv.box(path)
            assert x0 == pytest.approx(x(start - tl.start), abs=0.02)
            assert x1 == pytest.approx(x(end - tl.start), abs=0.02)
            assert sv.fill_of(path) == fill(op.kind, op.chunk, s.placement.chunks)
            rows.append((y0, y1, half))
        full = [y1 - y0 for y0, y1, half in rows if half is None]
        for y0, y1, half in rows:
            if half is not None:  # a pair's halves are half a box each
                assert y1 - y0 == pytest.approx(full[0] / 2 if full else (y1 - y0), abs=0.02)
        total += len(shapes)
    assert total == s.num_ops


def test_a_pair_is_one_outlined_box_split_forward_over_backward():
    s = build("dualpipe", 4, 8)
    tl = simulate(s, uneven(s))
    root = svg_of((s, tl))
    x = sv.time_axis(root)
    for r in range(s.pp):
        pairs = [e for e in tl.events[r] if isinstance(e.item, Pair)]
        outlines = sv.paths(sv.group(root, f"pairs:0:{r}")) if pairs else []
        assert len(outlines) == len(pairs)
        halves = {}
        for path, (op, *_rest) in zip(sv.paths(sv.group(root, f"ops:0:{r}")), expected_shapes(s, tl, r)):
            halves[op] = sv.box(path)
        for outline, e in zip(outlines, pairs):
            ox0, oy0, ox1, oy1 = sv.box(outline)
            assert (ox0, ox1) == (pytest.approx(x(e.start)), pytest.approx(x(e.end)))
            fy0, fy1 = halves[e.item.forward][1], halves[e.item.forward][3]
            by0, by1 = halves[e.item.backward][1], halves[e.item.backward][3]
            assert fy0 == pytest.approx(oy0) and fy1 == pytest.approx(by0) and by1 == pytest.approx(oy1)


def test_microbatch_ids_sit_inside_their_boxes_when_they_fit():
    s = build("1f1b", 4, 8)
    tl = simulate(s)
    root = svg_of((s, tl))
    for r in range(s.pp):
        for path, (op, *_rest) in zip(sv.paths(sv.group(root, f"ops:0:{r}")), expected_shapes(s, tl, r)):
            x0, y0, x1, y1 = sv.box(path)
            t = sv.text_of(root, f"label:0:{r}:{op}")
            assert t is not None and t.text == str(op.mb)
            assert x0 < float(t.get("x")) < x1 and y0 < float(t.get("y")) < y1


def test_labels_that_do_not_fit_are_left_out():
    s = build("1f1b", 4, 64)
    root = svg_of((s, simulate(s)), width=18)  # 6.5 points per unit: one digit fits an F, two do not
    assert sv.text_of(root, "label:0:0:F0.63") is None
    assert sv.text_of(root, "label:0:0:F0.3") is not None  # one digit still fits


def test_side_by_side_shares_one_time_axis():
    a, b = build("1f1b", 4, 8), build("dualpipe", 4, 8)
    ta, tb = simulate(a), simulate(b)
    assert ta.end != tb.end
    root = svg_of((a, ta), (b, tb))
    xa, xb = sv.time_axis(root, 1), sv.time_axis(root, 2)
    for t in (0, 10, 30):
        assert xa(t) == pytest.approx(xb(t))
    ends_a = max(sv.box(p)[2] for r in range(4) for p in sv.paths(sv.group(root, f"ops:0:{r}")))
    ends_b = max(sv.box(p)[2] for r in range(4) for p in sv.paths(sv.group(root, f"ops:1:{r}")))
    assert ends_a == pytest.approx(xa(ta.end)) and ends_b == pytest.approx(xb(tb.end))
    titles = [t.text for t in root.iter(sv.NS + "text") if t.text and "bubble" in t.text]
    assert len(titles) == 2
    assert f"bubble {summarize(a, ta).bubble_ratio:.1%}" in titles[0] and "pp=4" in titles[0] and "M=8" in titles[0]


def test_utilization_is_written_at_each_rows_end():
    s = build("zb-h1", 4, 8)
    tl = simulate(s, uneven(s))
    root = svg_of((s, tl))
    texts = [t.text for t in root.iter(sv.NS + "text")]
    for u in summarize(s, tl).utilization:
        assert f"{u:.0%}" in texts


def test_comm_segments_are_drawn_under_their_row():
    s = build("1f1b", 2, 1)
    seg = Segment("comm", "DISPATCH(F) 0", 0.25, 0.75)
    tl = Timeline(
        2,
        (
            (
                Event(0, s.ranks[0][0], 0, 1, Inside.of((Segment("compute", "ATTN(F) 0", 0, 0.25), seg))),
                Event(0, s.ranks[0][1], 4, 6),
            ),
            (Event(1, s.ranks[1][0], 1, 2), Event(1, s.ranks[1][1], 2, 4)),
        ),
    )
    root = svg_of((s, tl))
    x = sv.time_axis(root)
    strips = sv.paths(sv.group(root, "comm:0:0"))
    assert len(strips) == 1
    x0, y0, x1, _ = sv.box(strips[0])
    assert (x0, x1) == (pytest.approx(x(0.25)), pytest.approx(x(0.75)))
    assert y0 >= max(sv.box(p)[3] for p in sv.paths(sv.group(root, "ops:0:0"))) - 0.01  # under the boxes
    assert sv.group(root, "comm:0:1") is None


@pytest.mark.parametrize("fmt,magic", [("png", b"\x89PNG\r\n\x1a\n"), ("pdf", b"%PDF")])
def test_png_and_pdf(fmt, magic):
    s = build("dualpipe", 4, 8)
    assert chart_bytes([Panel(s, simulate(s))], fmt).startswith(magic)


def test_bad_format_and_nothing_to_draw():
    s = build("1f1b", 2, 2)
    with pytest.raises(PipesimError, match="use one of png, svg, pdf"):
        chart_bytes([Panel(s, simulate(s))], "jpg")
    with pytest.raises(PipesimError, match="at least one schedule"):
        chart_bytes([], "svg")


def test_a_measured_timeline_is_drawn_from_its_first_start():
    """Measured timelines start at a wall-clock time; the chart's axis starts at 0."""
    s = build("zb-h1", 2, 4)
    tl = simulate(s, uneven(s))
    shifted = Timeline(
        tl.pp,
        tuple(tuple(Event(e.rank, e.item, e.start + 1000.5, e.end + 1000.5) for e in evs) for evs in tl.events),
        source="measured",
    )
    a, b = svg_of((s, tl)), svg_of((s, shifted))
    for r in range(2):
        assert [sv.box(p) for p in sv.paths(sv.group(a, f"ops:0:{r}"))] == [
            sv.box(p) for p in sv.paths(sv.group(b, f"ops:0:{r}"))
        ]
    assert any(t.text and t.text.endswith("(measured)") for t in b.iter(sv.NS + "text"))


def test_the_legend_says_what_each_chunk_means_for_the_schedules_shown():
    runs = [(s, simulate(s)) for s in (build("1f1b", 4, 8), build("dualpipe", 4, 8), build("dualpipev", 4, 8))]
    texts = " ".join(t.text or "" for t in svg_of(*runs).iter(sv.NS + "text"))
    assert "dualpipe: chunk 0: forward direction, model copy 1 (micro-batches 0-3 enter at rank 0)" in texts
    assert "chunk 1: reverse direction, model copy 2 (micro-batches 4-7 enter at rank 3)" in texts
    assert "dualpipev: chunk 0: the V's way down (rank r runs stage r of 8); chunk 1: the V's return leg" in texts
    assert "1f1b:" not in texts  # one chunk: nothing to explain


def test_the_terminal_legend_names_the_chunks():
    from pipesim.render.terminal import legend

    assert "lower case = chunk 1" in legend(build("dualpipe", 4, 8)) and "reverse direction" in legend(build("dualpipe", 4, 8))
    assert "return leg" in legend(build("zb-v", 4, 8))
    inter = legend(build("interleaved-1f1b", 4, 8, chunks=3))
    assert "chunk 2: virtual stage 2 (rank r runs stage 8+r of 12)" in inter and "lower case" not in inter
    assert "chunk" not in legend(build("1f1b", 4, 8))
