"""The work limit and the bounds on sizes that scale work (``inputs.MAX_OPS`` and the
caps beside it): a size past them is one line and exit 2, before any work; the fast
paths behind them give what the obvious slow code gives."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main
from pipesim.commands.pair import hidden_behind
from pipesim.components import PRESETS, ComponentCosts
from pipesim.ir import Op, Pair


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv,says",
    [
        (["pair", "--layers", 100_000], ["--layers", "10,000"]),
        (["pair", "--width", 16_000_000], ["--width", "4,000"]),
    ],
)
def test_sizes_past_their_cap_are_one_line(capsys, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert all(s in err for s in says), err


def test_hidden_behind_is_every_overlapping_compute_part():
    costs = ComponentCosts.uniform(PRESETS["ep-1to1"], 3)
    segs = costs.segments(Pair(Op("F", 0, 1), Op("BW", 1, 0)), (0, 0))
    assert any(g.stream == "comm" for g in segs)
    got = hidden_behind(segs)
    for g in segs:
        if g.stream == "comm":
            want = [h.label.split(" ")[0] for h in segs if h.stream == "compute" and h.start < g.end and h.end > g.start]
            assert got[id(g)] == want


def test_pair_table_stops_at_its_row_cap(capsys):
    _, out, _ = run(capsys, "pair", "--layers", 100, "--json")
    parts = len(json.loads(out)["segments"])
    assert parts > 400
    code, out, _ = run(capsys, "pair", "--layers", 100)
    assert code == 0 and f"the first 400 of {parts:,} parts; --json lists them all" in out
    assert out.count("ATTN(F)") + out.count("MLP(F)") < parts


def test_torch_import_is_bounded_before_pytorch_generates(capsys):
    pytest.importorskip("torch")
    for argv in (
        ["import", "--torch", "ZBVZeroBubble", "--pp", 64, "-m", 4096],
        ["import", "--torch", "Interleaved1F1B", "--stages-per-rank", 1_000_000],
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
        assert "above the limit of 100,000" in err, err


def test_summaries_read_rank_after_rank_match_a_rank_by_rank_reading():
    # the vectorised metrics against one rank at a time, as the slow code read them
    import numpy as np

    from pipesim import Costs, build, simulate, summarize
    from pipesim.metrics import running_peak

    for name in ("1f1b", "dualpipe", "zb-v", "interleaved-1f1b"):
        s = build(name, 4, 10)
        tl = simulate(s, Costs(f=1, b=2.5, w=0.7, comm=0.3))
        rep = summarize(s, tl)
        for r in range(tl.pp):
            st, en = tl.rank_slice(r)
            assert rep.busy[r] == float(np.cumsum(en - st)[-1])
            assert rep.span[r] == en[-1] - st[0]
            kind, _, _, start, end = tl.rank_ops(r)
            born, dies = kind == 0, (kind == 2) | (kind == 3)
            when = np.concatenate([start[born], end[dies]])
            delta = np.concatenate([np.ones(born.sum(), np.int64), -np.ones(dies.sum(), np.int64)])
            assert rep.peak_activations[r] == running_peak(when, delta)


@pytest.mark.parametrize(
    "argv,says",
    [
        (["ops", "-s", "v-half", "--pp", 256, "-m", 300], "above the limit of 128"),
        (["ops", "-s", "zb-v", "--pp", 512, "-m", 256], "above the limit of 128"),
        (["ops", "-s", "chimera", "--pp", 1024, "-m", 4096], "above the limit of 4,000,000"),
    ],
)
def test_searched_builders_refuse_sizes_their_search_cannot_finish(capsys, argv, says):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, err


def page_commands():
    """Each ``$ pipesim ...`` line of docs/limits.md's console blocks, with the lines
    shown under it."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "limits.md").read_text()
    out, block = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            block = line == "```console"
        elif block and line.startswith("$ pipesim "):
            out.append((line[len("$ pipesim ") :].split(), []))
        elif block and out:
            out[-1][1].append(line)
    return out


@pytest.mark.parametrize(
    "argv,shown", page_commands(), ids=lambda x: " ".join(x) if isinstance(x, list) and x and "error" not in x[0] else None
)
def test_the_limits_page_shows_what_the_commands_print(capsys, argv, shown):
    if "--torch" in argv:
        pytest.importorskip("torch")
    code, out, err = run(capsys, *argv)
    printed = (out + err).splitlines()
    assert code == (2 if shown[0].startswith("pipesim: error:") else 0)
    for line in shown:
        assert line in printed, f"docs/limits.md shows {line!r}; pipesim printed {printed[:3]}"


def test_a_file_claiming_a_million_ranks_is_refused_by_its_rank_count(capsys, tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"schedule": "x", "pp": 10**6, "microbatches": 1, "ranks": [["F0.0", "BW0.0"]] * 10**6}))
    code, out, err = run(capsys, "validate", "-s", path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "pp=1,000,000 is above the limit of 100,000 ranks" in err, err


# 501 layers: one past the bound (a 1,000-layer plan took 158 s of CPU, docs/limits.md)
@pytest.mark.parametrize("field,value", [("layers", 501), ("layers", 10_000), ("mtp_layers", 5_000), ("mtp_layers", 16_000_000)])
def test_the_planner_refuses_models_its_search_cannot_price_in_time(capsys, tmp_path, field, value):
    from pathlib import Path

    preset = Path(__file__).resolve().parents[1] / "src/pipesim/planner/presets/models/deepseek-v3.toml"
    text = preset.read_text()
    start = text.index(f"\n{field} = ") + 1
    end = text.index("\n", start)
    model = tmp_path / "m.toml"
    model.write_text(text[:start] + f"{field} = {value}" + text[end:])
    code, out, err = run(capsys, "plan", "--model", model, "--cluster", "h800-2048")
    assert code == 2 and len(err.strip().splitlines()) == 1
    least = 1 if field == "layers" else 0  # a model has a layer; MTP modules are optional
    assert f"{field} must be a whole number from {least} to 500, got {value}" in err, err


@pytest.mark.parametrize("big", ["stage", "rank"])
def test_a_trace_naming_a_stage_or_rank_in_the_billions_is_refused_at_once(tmp_path, big):
    import resource

    from pipesim import build
    from pipesim.errors import PipesimError
    from test_profile import action_traces, profile, torch_label

    s = build("1f1b", 2, 4)
    last = s.ranks[1][-1]

    def label(item, r, stages):
        if big == "stage" and item == last:  # the largest stage a label may name (a million is not one)
            return torch_label(item, 999_999)
        return torch_label(item, stages[0])

    folder = action_traces(tmp_path, s, label)
    if big == "rank":  # rank 1's trace says it is rank 10**9
        text = (folder / "rank1.json").read_text().replace('"rank": 1', f'"rank": {10**9}')
        (folder / "rank1.json").write_text(text)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(PipesimError, match="no op of micro-batch|none of rank 1"):
        profile(folder)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KB: nothing of the named size


def test_the_planner_bounds_layers_and_mtp_modules_together(capsys, tmp_path):
    # 400 layers and 400 MTP modules passed each field's bound of 500, and the planner
    # priced 800 modules: each MTP module is one more layer to price
    from pathlib import Path

    preset = Path(__file__).resolve().parents[1] / "src/pipesim/planner/presets/models/deepseek-v3.toml"
    text = preset.read_text().replace("\nlayers = 61\n", "\nlayers = 400\n").replace("\nmtp_layers = 1 ", "\nmtp_layers = 400 ")
    model = tmp_path / "m.toml"
    assert "layers = 400\n" in text and "mtp_layers = 400 " in text
    model.write_text(text)
    code, out, err = run(capsys, "memory", "--model", model, "--cluster", "h800-2048", "--pp", "16")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "layers 400 and mtp_layers 400 make 800 modules, above the planner's limit of 500 together" in err, err
