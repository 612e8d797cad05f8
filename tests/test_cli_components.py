"""Component costs and memory on the command line."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main

COSTS = """
layers = 2
p2p = 0.1

[layer]
attn_f = 1.0
mlp_f = 1.0
dispatch_f = 1.0
combine_f = 1.0

[memory]
hidden = 1024
heads = 16
seq = 2048
dp = 4
"""


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_pair_json(capsys):
    code, out, _ = run(capsys, "pair", "--preset", "ep-1to1", "--layers", "2", "--json")
    d = json.loads(out)
    assert code == 0 and d["pair_time"] < d["lone_time"]
    parts = {g["part"].split(" ")[0] for g in d["segments"]}
    assert parts == {
        "ATTN(F)",
        "MLP(F)",
        "DISPATCH(F)",
        "COMBINE(F)",
        "MLP(B)",
        "MLP(W)",
        "ATTN(B)",
        "ATTN(W)",
        "DISPATCH(B)",
        "COMBINE(B)",
    }


def test_pair_flags_change_the_pair_plain_pair_shows(capsys):
    # plain `pipesim pair` shows ep-1to1 (dispatch and combine as long as the compute), but
    # `pair --layers 2` started from zero communication: a pair with nothing to hide
    code, out, _ = run(capsys, "pair", "--layers", "2", "--json")
    layers = json.loads(out)
    code2, out, _ = run(capsys, "pair", "--preset", "ep-1to1", "--layers", "2", "--json")
    assert code == code2 == 0 and layers == json.loads(out)
    assert any(g["part"].startswith("DISPATCH(F)") and g["end"] > g["start"] for g in layers["segments"])


def test_pair_text_names_what_hides_what(capsys):
    code, out, _ = run(capsys, "pair", "--preset", "ep-1to1")
    assert code == 0 and "hides behind" in out and "compute │" in out


def test_cost_file_with_memory(capsys, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(COSTS)
    code, out, _ = run(capsys, "simulate", "-s", "dualpipe", "--pp", "4", "-m", "8", "--components", str(f), "--json")
    d = json.loads(out)
    assert code == 0 and d["costs"]["layers"] == 2 and d["costs"]["p2p"] == 0.1
    mem = d["memory_bytes"]
    params = 2 * 12 * 1024**2  # 2 layers of 12 h^2, per stage
    assert mem["params"] == [2 * params * 2] * 4  # two copies, bf16
    assert mem["optimizer"] == [2 * params * 12 / 4] * 4  # ZeRO-1 over dp=4
    assert d["compute_utilization"] is not None


def test_flags_override_the_preset(capsys):
    code, out, _ = run(
        capsys,
        "simulate",
        "-s",
        "1f1b",
        "--pp",
        "2",
        "-m",
        "2",
        "--preset",
        "ep-1to1",
        "--dispatch",
        "0",
        "--combine",
        "0",
        "--json",
    )
    d = json.loads(out)
    # no communication left: (M + pp - 1)(F + BW) with F = 2, BW = 4
    assert code == 0 and d["makespan"] == 3 * 6


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["simulate", "-s", "1f1b", "--preset", "ep-1to1", "--f", "2"], "--f describes per-chunk costs"),
        (["simulate", "-s", "1f1b", "--preset", "nope"], "invalid choice: 'nope'"),
        (["simulate", "-s", "1f1b", "--attn", "-1"], "--attn: expected a number from 0 to 1e+15"),
        (
            ["simulate", "-s", "1f1b", "--preset", "ep-1to1", "--comm-sms", "200"],
            "--comm-sms must be >= 0 and below --total-sms=132",
        ),
        (["simulate", "-s", "1f1b", "--components", "missing.toml"], "cannot read cost file"),
        (["pair", "--backward", "W"], "invalid choice: 'W'"),
    ],
)
def test_bad_component_input(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        ("[layer]\nattn_f = 'x'\n", "layer.attn_f must be a number"),
        ("[layer]\nattn_f = 1\nbogus = 2\n", "[layer]: unknown key 'bogus'"),
        ("layers = 2\n", "missing [layer] table"),
        ("[layer\n", "not valid TOML"),
        ("[layer]\nattn_f = -1\n", "layer.attn_f must be a number from 0 to 1e+15, got -1"),
        ("[layer]\nattn_f = 1\n[memory]\nhidden = 8\n", "[memory] needs heads"),
    ],
)
def test_bad_cost_files(capsys, tmp_path, text, needle):
    f = tmp_path / "c.toml"
    f.write_text(text)
    code, _, err = run(capsys, "simulate", "-s", "1f1b", "--components", str(f))
    assert code == 2 and needle in err and err.count("\n") == 1


def test_pair_chart_names_every_part(capsys, tmp_path):
    """The pair view as a chart: one labelled box per part of the pair, nothing else written."""
    import xml.etree.ElementTree as ET

    out = tmp_path / "pair.svg"
    code, _, _ = run(capsys, "pair", "--preset", "ep-1to1", "--layers", "2", "-o", str(out))
    assert code == 0 and list(tmp_path.iterdir()) == [out]
    texts = [t.text or "" for t in ET.parse(out).getroot().iter("{http://www.w3.org/2000/svg}text")]
    code, js, _ = run(capsys, "pair", "--preset", "ep-1to1", "--layers", "2", "--json")
    parts = json.loads(js)["segments"]
    for g in parts:
        part = g["part"].split(" ")[0]
        assert sum(part in t for t in texts) >= sum(p["part"].split(" ")[0] == part for p in parts)


def test_one_layer_per_chunk_is_singular(capsys):
    # the header read "1 layers per chunk"; English wants the singular for one
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", "2", "-m", "2", "--preset", "ep-1to1", "--no-timeline")
    assert code == 0 and "; 1 layer per chunk;" in out
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", "2", "-m", "2", "--preset", "ep-1to1", "--layers", "3")
    assert code == 0 and "; 3 layers per chunk;" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "-s", "1f1b", "--no-timeline"],
        ["compare", "--pp", "2", "-m", "4"],
        ["sweep", "--pp", "2", "-m", "4,8", "--schedules", "1f1b"],
        ["draw", "-s", "1f1b", "--pp", "2", "-m", "4", "-o", "OUT.svg"],
        ["report", "--pp", "2", "-m", "4", "--schedules", "1f1b", "-o", "OUT.html"],
    ],
)
@pytest.mark.parametrize("lone", [["--layers", "3"], ["--p2p", "5"], ["--attn-b", "2"], ["--comm-sms", "10"], ["--lone-overlap"]])
def test_a_lone_component_adjustment_is_refused(argv, lone, capsys, tmp_path):
    # `simulate --layers 3` switched the whole model to default component layers with zero
    # dispatch and combine, unsaid: plain `simulate` prices F=B=W=1 per chunk
    argv = [str(tmp_path / a) if a.startswith("OUT") else a for a in argv]
    code, out, err = run(capsys, *argv, *lone)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{lone[0]} adjusts a component cost model" in err and "--preset, --components" in err
    assert list(tmp_path.iterdir()) == []
    # with a base that makes the model, the same flag is taken
    assert run(capsys, *argv, *lone, "--attn", "1")[0] == 0


@pytest.mark.parametrize("flag", [["--layers", "3"], ["--f", "1"], ["--lone-overlap"]])
def test_compare_with_a_model_names_its_own_costs_for_any_cost_flag(flag, capsys):
    # a lone --layers beside --model asked for --preset, which --model then refused; and
    # --f 1 (the default's value) passed unsaid, compared equal to no flag at all
    code, out, err = run(capsys, "compare", "--model", "llama3-8b", "--cluster", "h100", "--pp", "4", *flag)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--model brings its own costs; drop the cost flags" in err


def test_compare_with_a_model_names_the_pp_that_divide_the_cluster(capsys):
    # the h100 preset is 1024 GPUs (2^10: eleven divisors, the two nearest 3 named); the
    # refusal said only that --pp 3 does not divide them
    code, out, err = run(capsys, "compare", "--model", "llama3-8b", "--cluster", "h100", "--pp", "3")
    assert code == 2 and out == ""
    assert err == "pipesim: error: --pp 3 must divide the cluster's 1024 GPUs: give --pp a divisor of 1024, such as 2 or 4\n"
