"""The report's advice speaks only of what the search looked at and of the memory the fit
was judged against."""

from __future__ import annotations

import re

from pipesim.planner.advice import advice
from pipesim.planner.parallelism import batch_note
from pipesim.planner.search import search
from pipesim.planner.specs import load_cluster, load_model, load_training


def _advice(model: str, gpus: int, schedules: list[str], **training) -> list[str]:
    m, c = load_model(model), load_cluster("h100", gpus)
    return advice(search(m, c, load_training(base=None, **training), schedules))


def test_dualpipe_left_out_by_schedules_gets_no_verdict():
    # --schedules 1f1b: DualPipe was never tried, so "runs at no layout searched" would be false
    dense = _advice("llama3-8b", 16, ["1f1b"], seq=4096, global_batch=64)
    assert any(line.startswith("DualPipe and DualPipeV were not searched (--schedules)") for line in dense)
    assert not any("overkill" in line or "runs at any layout" in line for line in dense)
    moe = _advice("mixtral-8x22b", 64, ["1f1b"], seq=4096, global_batch=64)
    assert any(line.startswith("DualPipe and DualPipeV were not searched") and "all-to-all" in line for line in moe)
    assert any("Combined 1F1B" in line and "it was not searched (--schedules)" in line for line in moe)
    assert not any("(not searched)" in line for line in dense + moe)


def test_tight_memory_is_stated_against_the_usable_memory():
    # DeepSeek-V3 on 2048 H800s fills 75 of the 79.9 GB left usable; the card holds 85.5
    m, c = load_model("deepseek-v3"), load_cluster("h800-2048")
    lines = advice(search(m, c, load_training(base=None, seq=4096, global_batch=15360, precision="fp8"), ["dualpipe"]))
    tight = [x for x in lines if x.startswith("Memory is tight")]
    assert tight
    used, usable, card = map(float, re.search(r"([\d.]+) GB of the ([\d.]+) GB usable per GPU \(the card's ([\d.]+) GB\)", tight[0]).groups())
    assert used <= usable < card == 85.5


def test_a_batch_too_small_for_the_gpus_says_what_would_feed_them():
    """2048 sequences of 8192 tokens on 131072 GPUs: 2048 x 8192 / 131072 = 128 tokens a
    GPU. At tp t and pipeline depth pp there are 131072 / (t pp) pipelines, each wanting
    2pp micro-batches of one sequence: 2 x 131072 / t sequences whatever pp, 32,768 at tp8
    and 65,536 at tp4 (by hand, not from the planner)."""
    c = load_cluster("h100", 131072)
    for tp, need in ((8, "32,768"), (4, "65,536")):
        note = batch_note(c, load_training(seq=8192, global_batch=2048), 126, tp)
        assert "are 128 tokens per GPU per step" in note and f"(at tp{tp})" in note
        assert f"A global batch of {need} sequences or more" in note
    assert batch_note(c, load_training(seq=8192, global_batch=32768), 126, 8) is None  # fed at pp16: 16 x 2 x 1024
    assert batch_note(c, load_training(seq=16384, global_batch=2048), 126, 8) is None  # long: CP's case, not the batch
