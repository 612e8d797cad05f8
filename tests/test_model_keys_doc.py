"""docs/models.md's table of model-file keys lists exactly the keys the loader accepts.

The accepted keys are the loader's own: each table's list, as ``model_from_table`` names
it when refusing an unknown key (a did-you-mean over every key it knows). The doc's keys
are read from the markdown table. Either drifting fails the test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.specs import model_from_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"
SMALLEST = {"name": "m", "layers": 1, "hidden": 8, "heads": 1, "vocab": 8, "mlp": {"dense_ffn": 8}}


def _refused(table: dict) -> str:
    with pytest.raises(PipesimError) as e:
        model_from_table(table, "m.toml")
    return str(e.value)


def _accepted() -> dict[str, set[str]]:
    """Per table ('' for the file's top), the keys the loader takes, from its refusals."""
    odd = "zz_not_a_key"

    def listed(msg: str) -> set[str]:
        return set(re.search(r"expected one of (.+)$", msg).group(1).split(", "))

    moe = {"experts": 2, "expert_ffn": 8, "top_k": 1}
    mlp = re.search(r"expected (.+)$", _refused({**SMALLEST, "mlp": {odd: 1}})).group(1)
    return {
        "": listed(_refused({**SMALLEST, odd: 1})),
        "[attention]": listed(_refused({**SMALLEST, "attention": {odd: 1}})),
        "[mlp]": set(re.split(r", | and ", mlp)),
        "[moe]": listed(_refused({**SMALLEST, "moe": {**moe, odd: 1}})),
    }


def _documented() -> dict[str, set[str]]:
    """Per table, the keys docs/models.md's model-file table lists."""
    text = DOC.read_text()
    section = text.split("## A model file (TOML)", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        m = re.match(r"^\| *(`\[\w+\]`)? *\| `(\w+)` \|", line)
        if m:
            out.setdefault((m.group(1) or "").strip("`"), set()).add(m.group(2))
    return out


def test_the_model_file_table_lists_exactly_the_keys_the_loader_takes():
    got, want = _documented(), _accepted()
    assert got == want
    # the loader's own list holds more than the doc could copy by accident
    assert {"name", "layers", "sliding_window"} <= want[""] and {"kv_lora_rank"} <= want["[attention]"]


def test_the_tables_read_apart_are_named():
    section = DOC.read_text().split("## A model file (TOML)", 1)[1].split("\n## ", 1)[0]
    assert "`[training]`" in section and "`[published]`" in section
    # [published]'s keys the loader requires (specs.model_published) and the report reads
    assert all(f"`{k}`" in section for k in ("gpu", "gpu_hours_per_trillion_tokens", "source", "schedule", "pp", "ep"))
