"""``plan --compare A,B`` in words: the GPU-hours B saves (or costs) to three significant
figures, never rounded to 0.000 or printed negative after "recovers"."""

from __future__ import annotations

import json
import re

from pipesim.cli import main


def _compare(capsys, pair: str) -> tuple[str, dict]:
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--compare", pair]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    return text, json.loads(capsys.readouterr().out)["compare"]


def test_compare_line_keeps_three_figures_and_its_sign(capsys):
    for pair in ("zb-h1,1f1b", "1f1b,zb-h1"):
        text, d = _compare(capsys, pair)
        a, b = pair.split(",")
        saved = d["gpu_hours_recovered_per_million_tokens"]
        m = re.search(rf"{b} (recovers|costs) \*\*([\d.]+) GPU-hours per million tokens\*\* \(([\d.]+)% of {a}'s", text)
        assert m, text
        assert m.group(1) == ("recovers" if saved >= 0 else "costs")
        shown = float(m.group(2))
        assert shown > 0 and abs(shown - abs(saved)) <= 0.005 * abs(saved)  # three significant figures
        share = abs(saved) * 1e6 / d[a]["gpu_hours_per_trillion_tokens"]
        assert abs(float(m.group(3)) / 100 - share) < 0.0006
