"""benchmarks/peer_simumax.py: measured_b200.toml's cases, pipesim's terms beside SimuMax's;
without a SimuMax checkout one line says so and pipesim's column stands alone. (No accuracy
asserts: the comparison is the benchmark's to print.)"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from conftest import load_script, printed

BENCH = Path(__file__).parent.parent / "benchmarks" / "peer_simumax.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def _main(bench, argv):
    code, text = printed(bench.main, argv)
    assert code == 0
    return text


def test_without_simumax_one_line_says_so_and_pipesims_terms_stand_alone(bench):
    lines = _main(bench, []).splitlines()
    assert lines[0] == "SimuMax not available (no --simumax-src given): printing pipesim's terms only."
    cases = [line for line in lines if line.startswith("## ")]
    assert [c.split(":")[0] for c in cases] == [
        "## llama3_70b_l12_tp8_pp1_dp1_mbc4_cef",
        "## deepseekv3_l4_tp1_ep8_pp1_dp8_mbc4_cef",
    ]
    assert "measured step 280.9 ms" in cases[0] and "measured step 603.2 ms" in cases[1]
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| term")]
    assert len(rows) == 2 * (len(bench.TERMS) + 3)
    # the tp8 Llama has tensor-parallel collectives and no all-to-all; DeepSeek-V3 at tp1 the reverse
    tp = [r for r in rows if r.startswith("| tensor-parallel")]
    a2a = [r for r in rows if r.startswith("| expert all-to-all")]
    assert tp[0].split("|")[3].strip() != "0.00 / 0.00" and tp[1].split("|")[3].strip() == "0.00 / 0.00"
    assert a2a[0].split("|")[3].strip() == "" and a2a[1].split("|")[3].strip() != ""


def test_a_directory_that_is_not_simumax_is_named(bench, tmp_path):
    first = _main(bench, ["--simumax-src", str(tmp_path), "--case", "llama3_70b_l12_tp4_pp1_dp2_mbc4_cef"]).splitlines()[0]
    assert first.startswith(f"SimuMax not available ({tmp_path} is not a SimuMax checkout")


def test_a_checkout_that_fails_to_import_leaves_nothing_behind(bench, tmp_path):
    (tmp_path / "simumax" / "core").mkdir(parents=True)
    (tmp_path / "simumax" / "__init__.py").write_text("")
    (tmp_path / "simumax" / "core" / "__init__.py").write_text("")
    (tmp_path / "simumax" / "core" / "perf_llm.py").write_text("raise ImportError('needs something missing')\n")
    (tmp_path / "configs" / "system").mkdir(parents=True)
    (tmp_path / bench.SYSTEM).write_text("{}")
    cls, why = bench.load_simumax(tmp_path)
    assert cls is None and why.endswith("ImportError: needs something missing")
    assert not any(k == "simumax" or k.startswith("simumax.") for k in sys.modules)
    assert str(tmp_path) not in sys.path


def test_an_unknown_case_is_one_line_and_exit_2(bench):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as e:
        bench.main(["--case", "gpt3_tp8"])
    assert e.value.code == 2
    assert "--case 'gpt3_tp8': not a case of measured_b200.toml" in err.getvalue()
