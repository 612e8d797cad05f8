"""benchmarks/peer_calculon.py: Korthikanti et al.'s runs, read from its data file, each answered
by pipesim on its published layout; without a Calculon checkout one line says so and the table
is pipesim against the measured times alone. (No timing asserts: the accuracy is the
benchmark's to print.)"""

from __future__ import annotations

import contextlib
import io
import math
import sys
from pathlib import Path

import pytest

from conftest import load_script, printed

BENCH = Path(__file__).parent.parent / "benchmarks" / "peer_calculon.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def _main(bench, argv):
    return printed(bench.main, argv)[1]


def test_the_data_file_holds_four_models_in_both_modes(bench):
    common, rows = bench.load_rows()
    assert [r["name"] for r in rows] == ["22B", "175B", "530B", "1T"]
    for r in rows:
        assert set(r["measured_s"]) == set(bench.MODES)
        lay = r["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] == r["gpus"], r["name"]
        assert r["model"]["layers"] % lay["pp"] == 0, r["name"]
    assert common["seqsel"] == {"recompute": "selective", "sequence_parallel": True}


def test_pipesim_answers_every_row_on_its_published_layout(bench):
    common, rows = bench.load_rows()
    for r in rows:
        recompute = {}
        for mode in bench.MODES:
            p = bench.run_pipesim(common, r, mode)
            cand = p.result.candidate
            lay = r["layout"]
            assert (cand.layout.tp, cand.layout.pp, cand.layout.dp, cand.layout.micro_batch) == (
                lay["tp"],
                lay["pp"],
                lay["dp"],
                lay["micro_batch"],
            ), (r["name"], mode)
            assert cand.schedule == lay["schedule"] and cand.microbatches == r["global_batch"] // lay["micro_batch"]
            assert cand.recompute == ("full" if mode == "full" else "selective")
            assert p.specs[2].sequence_parallel is (mode == "seqsel")
            assert 0 < p.result.step_time < math.inf, (r["name"], mode)
            terms = bench.pipesim_terms(p, mode)
            recompute[mode] = terms["layer recompute"]
            if mode == "full":  # the whole forward runs again
                assert terms["layer recompute"] == pytest.approx(terms["layer fwd"], rel=0.05)
        # selective recomputes the attention core alone
        assert 0 < recompute["seqsel"] < 0.5 * recompute["full"], r["name"]


def test_without_calculon_one_line_says_so_and_pipesim_stands_alone(bench):
    text = _main(bench, [])
    lines = text.splitlines()
    assert lines[0].startswith("Calculon not available (no --calculon-src given)")
    assert sum("Calculon" in line for line in lines) == 1
    header = next(line for line in lines if line.startswith("| run |"))
    assert header == "| run | mode | layout | measured | pipesim | error |"
    assert sum(line.startswith(("| 22B", "| 175B", "| 530B", "| 1T")) for line in lines) == 8
    assert any(line.startswith("pipesim:  mean |error|") for line in lines)


def test_a_directory_that_is_not_calculon_is_named(bench, tmp_path):
    text = _main(bench, ["--calculon-src", str(tmp_path)])
    assert text.splitlines()[0] == (
        f"Calculon not available ({tmp_path} is not a Calculon checkout (no calculon/llm/llm.py)): "
        "printing pipesim against the measured times only."
    )


def test_a_checkout_without_the_run_files_is_named(bench, tmp_path):
    (tmp_path / "calculon" / "llm").mkdir(parents=True)
    (tmp_path / "calculon" / "llm" / "llm.py").write_text("")
    text = _main(bench, ["--calculon-src", str(tmp_path)])
    assert text.splitlines()[0].startswith(f"Calculon not available ({tmp_path} lacks systems/a100_80g.json ")


def test_a_checkout_that_fails_to_import_leaves_nothing_behind(bench, tmp_path):
    (tmp_path / "calculon" / "llm").mkdir(parents=True)
    (tmp_path / "calculon" / "util.py").write_text("raise ImportError('needs something missing')\n")
    (tmp_path / "calculon" / "llm" / "llm.py").write_text("")
    calc, why = bench.load_calculon(tmp_path)
    assert calc is None and why.endswith("ImportError: needs something missing")
    assert not any(k == "calculon" or k.startswith("calculon.") for k in sys.modules)


def test_an_unknown_run_for_terms_is_one_line_and_exit_2(bench):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        bench.main(["--terms", "13B"])
    assert e.value.code == 2
    assert "--terms '13B': expected one of 22B, 175B, 530B, 1T" in err.getvalue()
