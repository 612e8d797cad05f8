"""MosaicML's MPT rows in benchmarks/data/published_runs.toml: their shapes are llm-foundry's
v0.3.0 pretraining yamls, and the benchmark prints them as a group of their own, outside the
headline figures."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from conftest import load_script
from pipesim.planner.params import total_params
from pipesim.planner.specs import model_from_table

BENCH = Path(__file__).parent.parent / "benchmarks" / "published_runs.py"

#: NumParams of mosaicml/llm-foundry b2a43a1477 scripts/train/benchmarking/README.md, H100
#: 80GB BF16 table, by (model, seq)
NUM_PARAMS = {
    ("MPT-70B", 2048): 64_862_437_376,
    ("MPT-30B", 2048): 29_975_214_080,
    ("MPT-13B", 2048): 12_853_954_560,
    ("MPT-7B", 2048): 6_658_859_008,
    ("MPT-7B", 8192): 6_684_024_832,
    ("MPT-1B", 2048): 1_315_950_592,
}


def _mpt_rows():
    rows = tomllib.loads((BENCH.parent / "data" / "published_runs.toml").read_text())["run"]
    return [r for r in rows if r["name"].startswith("MPT-")]


def test_the_rows_are_the_tables_six_with_its_parameter_counts():
    """What pipesim counts plus what MPT has and pipesim does not model equals the table's
    count: MPT's Linear layers carry biases (Wqkv 3d, out_proj d, up_proj 4d, down_proj d)
    and its LayerNorms one each (2d a block, d the final one), where pipesim counts norm
    weights alone, and its positions are a learned seq x d table (MPTConfig's defaults at
    v0.3.0: no_bias false, learned_pos_emb true)."""
    rows = _mpt_rows()
    assert {(r["name"].split(",")[0], r["training"]["seq"]) for r in rows} == set(NUM_PARAMS)
    for r in rows:
        m = model_from_table(r["model"], r["name"])
        d, seq = m.hidden, r["training"]["seq"]
        unmodelled = m.layers * (9 * d + 2 * d) + d + seq * d
        assert total_params(m) + unmodelled == NUM_PARAMS[(r["name"].split(",")[0], seq)], r["name"]


#: the same table's (GPUs, MicroBatchSize, GradAccum, GlobalBatchSize) by (model, seq)
BATCHES = {
    ("MPT-70B", 2048): (64, 8, 4, 2048),
    ("MPT-30B", 2048): (32, 14, 3, 1344),
    ("MPT-13B", 2048): (64, 2, 1, 128),
    ("MPT-7B", 2048): (8, 6, 1, 48),
    ("MPT-7B", 8192): (8, 8, 2, 128),
    ("MPT-1B", 2048): (64, 20, 1, 1280),
}


def test_each_row_runs_the_tables_batch_on_fsdp_alone():
    for r in _mpt_rows():
        gpus, micro, accum, batch = BATCHES[(r["name"].split(",")[0], r["training"]["seq"])]
        assert (r["gpus"], r["layout"]["micro_batch"], r["training"]["global_batch"]) == (gpus, micro, batch), r["name"]
        assert batch == gpus * micro * accum  # the table's columns agree with each other
        assert r["layout"]["dp"] == gpus and r["layout"]["tp"] == r["layout"]["pp"] == 1
        assert r["training"]["zero"] == 3  # FULL_SHARD


def test_the_benchmark_prints_them_apart_from_the_headline(capsys):
    load_script(BENCH).main(["--no-search", "--only", "MPT-"])
    text = capsys.readouterr().out
    assert "rows on known hardware" not in text  # none of them is in the headline
    group = re.search(r"(\d+) rows \(marked \*\) left out of those figures: MosaicML's MPT rows", text)
    assert group and group.group(1) == "6", text
    assert len(re.findall(r"^\| MPT-.* \* \|", text, re.M)) == 6
