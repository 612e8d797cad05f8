"""A hand-edited measured timeline (what ``profile --timeline`` writes and ``draw
--measured`` reads) whose segments name a stream no timeline has is refused in one line:
it was drawn and counted as communication. Items that overlap on a rank are what a GPU
trace measures where an item's communication outlives it, and draw."""

from __future__ import annotations

import json

from pipesim import build
from pipesim.cli import main
from pipesim.files import timeline_to_dict
from pipesim.timeline import Event, Timeline

# 1F1B at pp=2, M=1 in seconds, by hand: F 20 ms on each rank, then BW 40 ms back
TIMES = {(0, "F0.0"): (0.0, 0.02), (1, "F0.0"): (0.02, 0.04), (1, "BW0.0"): (0.04, 0.08), (0, "BW0.0"): (0.08, 0.12)}


def _file(tmp_path, edit=None):
    s = build("1f1b", 2, 1)
    events = tuple(tuple(Event(r, it, *TIMES[(r, str(it))]) for it in s.ranks[r]) for r in range(2))
    d = timeline_to_dict(s, Timeline(2, events, (), source="measured"))
    if edit:
        edit(d["timeline"]["events"])
    path = tmp_path / "tl.json"
    path.write_text(json.dumps(d))
    return path


def _draw(capsys, tmp_path, path):
    code = main(["draw", "--measured", str(path), "-o", str(tmp_path / "x.svg")])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_hand_made_timeline_draws(capsys, tmp_path):
    code, _, err = _draw(capsys, tmp_path, _file(tmp_path))
    assert code == 0, err
    assert (tmp_path / "x.svg").exists()


def test_items_that_overlap_on_a_rank_draw(capsys, tmp_path):
    # a GPU trace times an item by its kernels on every stream: an item's send still runs
    # when the next item's compute starts, and profile --timeline writes what it measured
    def overlap(events):
        events[1][1][1] = 0.03  # rank 1's BW0.0 at 30 ms, while its F0.0 runs to 40 ms

    assert _draw(capsys, tmp_path, _file(tmp_path, overlap))[0] == 0


def test_a_segment_on_an_unknown_stream_is_refused(capsys, tmp_path):
    def stream(events):
        events[0][0][3] = [["compute", "ATTN(F) 0", 0.0, 0.01], ["gpu", "MLP(F) 0", 0.01, 0.02]]

    code, out, err = _draw(capsys, tmp_path, _file(tmp_path, stream))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "rank 0: F0.0: segment stream 'gpu' is unknown; a segment runs on 'compute' or 'comm'" in err
    assert not (tmp_path / "x.svg").exists()


def test_segments_on_both_known_streams_draw(capsys, tmp_path):
    def streams(events):
        events[0][0][3] = [["compute", "ATTN(F) 0", 0.0, 0.01], ["comm", "DISPATCH(F) 0", 0.01, 0.02]]

    code, _, err = _draw(capsys, tmp_path, _file(tmp_path, streams))
    assert code == 0, err
