"""The search's progress line names the best layout as the report does: experts fold over
the data-parallel GPUs, so "dp32 x ep8" (which reads as 512 GPUs on 64) must not appear."""

from __future__ import annotations

from pipesim.cli import main


def test_progress_line_writes_the_layout_as_the_report(monkeypatch, capsys, tmp_path):
    from pipesim.planner import plan_command

    monkeypatch.setattr(plan_command, "PROGRESS_EVERY", 0.0)
    out = tmp_path / "plan.md"
    argv = ["plan", "--model", "mixtral-8x22b", "--cluster", "h100", "--gpus", "64", "--seq", "1024",
            "--global-batch", "64", "--schedules", "1f1b", "--ep", "8", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0
    last = [x for x in capsys.readouterr().err.splitlines() if x.startswith("pipesim plan: searched")][-1]
    recommended = out.read_text().split("## Recommendation", 1)[1].split("**")[1]  # "1f1b on pp.. x dp.., ep8 (1 node)"
    layout = recommended.split(" on ", 1)[1]
    assert f"(1f1b, {layout})" in last and " x ep8" not in last


def test_progress_counts_what_the_plan_keeps(monkeypatch, capsys):
    # the search drops each twin without recomputation that a selective one matches (same
    # step, no less memory) once it ends: the running lines said 64 simulated that fit,
    # the last 58, as if six had been lost
    import json
    import re

    from pipesim.planner import plan_command

    monkeypatch.setattr(plan_command, "PROGRESS_EVERY", 0.0)
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--json"]) == 0
    out, err = capsys.readouterr()
    counts = [int(n) for n in re.findall(r"(\d+) simulated that fit", err)]
    assert len(counts) > 2 and counts == sorted(counts), counts  # a count that never goes back
    assert counts[-1] == json.loads(out)["fitting"]  # and ends at the plan's own count
