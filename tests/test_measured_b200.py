"""benchmarks/data/measured_b200.toml: every transcribed case says what its name says and
runs on the b200 preset (the benchmark prints the comparison; no accuracy is asserted here)."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

from conftest import load_script

BENCH = Path(__file__).parent.parent / "benchmarks" / "measured_b200.py"


def _bench():
    return load_script(BENCH)


def test_each_case_is_the_layout_its_name_gives_on_eight_gpus():
    data = tomllib.loads((BENCH.parent / "data" / "measured_b200.toml").read_text())
    assert len(data["case"]) == 43
    for case in data["case"]:
        name, lay = case["name"], case["layout"]
        for key in ("tp", "pp", "dp", "cp", "ep"):
            found = re.search(rf"_{key}(\d+)", name)
            assert lay.get(key, 1) == (int(found.group(1)) if found else 1), name
        assert lay["tp"] * lay["pp"] * lay["dp"] * lay.get("cp", 1) == data["gpus"], name
        assert f"_l{case['layers']}_" in name + "_" and f"_mbc{case['micro_batches']}_" in name, name
        seq = re.search(r"_seq(\d+)", name)
        assert case["seq"] == (int(seq.group(1)) if seq else 4096), name  # the sweep's seq_len_list: 4096


def test_every_case_runs_on_the_b200_preset():
    bench = _bench()
    data = tomllib.loads(bench.DATA.read_text())
    for case in data["case"][::6]:  # a spread of models and layouts, to keep the test short
        r = bench.predict(data, case)
        assert 0 < r.step_time < math.inf and r.memory_gb > 0, case["name"]
