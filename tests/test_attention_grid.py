"""Issue 20: fused attention's share falls where its grid of thread blocks cannot fill the
SMs (attention_grid.attention_grid_fill). The expected values here come from the kernel's grid
worked by hand or from a list schedule of its blocks simulated in the test, not from the
term's formula; benchmarks/attention_grid.py holds it to SimuMax's measured kernels."""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import load_script, printed
from pipesim.planner.assumptions import assumptions
from pipesim.planner.attention_grid import attention_grid_fill
from pipesim.planner.compute import FLASH_BACKWARD_TILE_ROWS, attention_core
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, load_cluster, load_model, load_training
from test_hardening import one_line, run

H100 = load_cluster("h100")
ROOT = Path(__file__).resolve().parents[1]
CLUSTERS = ROOT / "src" / "pipesim" / "planner" / "presets" / "clusters"


def model(heads: int, head_dim: int = 128) -> Model:
    return Model("m", 1, heads * head_dim, heads, 32000, Attention(head_dim=head_dim), (), 4 * heads * head_dim)


def forward(c, heads: int, seq: int, micro_batch: int = 1, waves: bool = True, tp: int = 1, cp: int = 1) -> float:
    t = load_training(base={"seq": seq, "attention_waves": waves})
    return attention_core(model(heads), c, t, Layout(pp=1, dp=1, tp=tp, cp=cp, micro_batch=micro_batch), 0)[0]


def test_a_grid_of_exactly_as_many_equal_blocks_as_sms_keeps_the_share():
    # 128 tokens fill one 128-row block: one block a sequence, every block the same work
    assert forward(H100, 1, 128, micro_batch=132) == forward(H100, 1, 128, micro_batch=132, waves=False)


def test_one_block_more_than_the_sms_takes_a_second_wave():
    # 133 equal blocks on 132 SMs: two waves, each as long as one block, for 133/132 of
    # the work: the forward takes 2 x 132 / 133 times its flat price
    on, off = forward(H100, 1, 128, micro_batch=133), forward(H100, 1, 128, micro_batch=133, waves=False)
    assert on / off == pytest.approx(2 * 132 / 133)


def test_half_the_sms_with_one_block_each_takes_twice_as_long():
    on, off = forward(H100, 1, 128, micro_batch=66), forward(H100, 1, 128, micro_batch=66, waves=False)
    assert on / off == pytest.approx(2.0)


def test_a_long_causal_block_bounds_the_kernel():
    # one head of 4096 tokens: 32 blocks reading 128, 256, ... 4096 keys (528 x 128 rows
    # of keys in all) on 132 SMs; the last block alone reads 4096 keys, 32 x 128
    on, off = forward(H100, 1, 4096), forward(H100, 1, 4096, waves=False)
    assert on / off == pytest.approx(132 * 32 / 528)


@pytest.mark.parametrize("heads,seq,micro_batch", [(64, 4096, 1), (32, 8192, 2), (128, 2048, 1)])
def test_large_grids_keep_todays_share(heads, seq, micro_batch):
    assert forward(H100, heads, seq, micro_batch) == forward(H100, heads, seq, micro_batch, waves=False)


def test_the_backward_takes_its_own_grid_of_key_blocks():
    # Blackwell's forward holds 256 query rows a block, its backward 128 key rows: 8 heads
    # of 4096 tokens are 128 blocks forward and 256 backward on 148 SMs
    b200 = load_cluster("b200")
    t = load_training(base={"seq": 4096, "attention_waves": True})
    lay = Layout(pp=1, dp=1)
    fwd, bwd = (attention_grid_fill(b200, t, lay, 8, r) for r in (b200.attention_tile_rows, FLASH_BACKWARD_TILE_ROWS))
    # forward: 16 blocks a head reading 256, 512, ... 4096 keys (sum 34,816), the last 4096
    assert fwd == pytest.approx(8 * 34816 / (148 * 4096))
    # backward: 32 blocks a head reading 128 ... 4096 (sum 67,584); 8 x 67,584 / 148 is more than 4096
    assert bwd == pytest.approx(1.0 * 8 * 67584 / 148 / max(4096, 8 * 67584 / 148))
    assert fwd < bwd <= 1


@pytest.mark.parametrize("preset", ["a100", "h100", "b200", "gb300-nvl72"])
def test_the_term_never_raises_the_share(preset):
    c = load_cluster(preset)
    for heads in (1, 3, 8, 40, 128):
        for seq in (64, 1000, 4096, 32768):
            for mb in (1, 2, 5):
                for tp, cp in ((1, 1), (8, 1), (1, 4), (8, 8)):
                    if heads % tp:
                        continue
                    on = forward(c, heads, seq, mb, tp=tp, cp=cp)
                    assert on >= forward(c, heads, seq, mb, waves=False, tp=tp, cp=cp)


def _list_schedule(work: list[float], sms: int) -> float:
    """Makespan of the blocks run longest first, each on the SM that frees first."""
    free = [0.0] * sms
    for w in sorted(work, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


@pytest.mark.parametrize("sms,rows", [(108, 128), (132, 128), (148, 256)])
def test_longest_first_scheduling_comes_close_to_the_grid_term_and_never_beats_it(sms, rows):
    """The fill is a bound no schedule beats, and a longest-first schedule of the causal
    blocks (FlashAttention-3/4's SingleTileLPTScheduler) reaches it within 15% (its
    worst here: 0.857 of it, 64 sequences of 1024 rows in 256-row blocks on 148 SMs)."""
    c = replace(H100, sms=sms)
    worst = 1.0
    for seq in (128, 256, 1000, 1024, 4096, 8192):
        for copies in (1, 2, 3, 4, 8, 16, 24, 32, 40, 64, 128, 133):
            t = load_training(base={"seq": seq, "attention_waves": True})
            fill = attention_grid_fill(c, t, Layout(pp=1, dp=1, micro_batch=copies), 1, rows)
            blocks = [min(seq, (i + 1) * rows) for i in range(math.ceil(seq / rows))] * copies
            reached = sum(blocks) / (sms * _list_schedule(blocks, sms))
            assert reached <= fill + 1e-12
            worst = min(worst, reached / fill)
    assert worst >= 0.85


def test_launch_order_hands_each_block_to_the_first_free_sm():
    """FlashAttention-2 (attention_block_order = "launch"): 384 tokens in 128-row blocks
    reading 128, 256 and 384 keys, on 2 SMs: the first two blocks start together, the
    third goes to the SM free first (at 128) and ends at 512, where longest first ends at
    384; 768 keys of work over 2 x 512 is a fill of 0.75 against 1. The backward's key
    blocks come largest first (384, 256, 128): 384 and 256 start together, 128 follows
    256, and the span is 384 again."""
    c = replace(H100, sms=2)
    lay = Layout(pp=1, dp=1)
    lpt = load_training(base={"seq": 384})
    launch = replace(lpt, attention_block_order="launch")
    assert attention_grid_fill(c, lpt, lay, 1, 128) == pytest.approx(1.0)
    assert attention_grid_fill(c, launch, lay, 1, 128) == pytest.approx(768 / (2 * 512))
    assert attention_grid_fill(c, launch, lay, 1, 128, backward=True) == pytest.approx(1.0)


def test_launch_order_never_beats_longest_first():
    lay = Layout(pp=1, dp=1)
    for seq in (256, 1024, 4096, 8192):
        for copies in (1, 2, 4, 8, 16, 32, 64, 128):
            lpt = load_training(base={"seq": seq})
            launch = replace(lpt, attention_block_order="launch")
            for backward in (False, True):
                assert (
                    attention_grid_fill(H100, launch, lay, copies, 128, backward)
                    <= attention_grid_fill(H100, lpt, lay, copies, 128, backward) + 1e-12
                )


def test_context_parallelism_shrinks_the_grid():
    # 8192 tokens over cp 8: 1024 rows a GPU, 8 blocks a head
    assert forward(H100, 16, 8192, cp=8) > forward(H100, 16, 8192, cp=8, waves=False)
    assert forward(H100, 16, 8192) == forward(H100, 16, 8192, waves=False)


def test_the_assumptions_say_it_and_the_switch_removes_it():
    from pipesim.planner.search import Plan

    def line(waves: bool) -> str:
        plan = Plan(load_model("llama3-8b"), load_cluster("h100", 16), load_training(attention_waves=waves))
        return dict(assumptions(plan))["attention"]

    assert "share of the 132 SMs its causal grid keeps busy (128-row query blocks" in line(True)
    assert "attention_waves" not in line(False)


@pytest.mark.parametrize(
    "name,text,needle",
    [
        (
            "c.toml",
            (CLUSTERS / "h100.toml").read_text() + "attention_tile_rows = 0\n",
            "attention_tile_rows must be a whole number from 1",
        ),
        ("c.toml", (CLUSTERS / "h100.toml").read_text() + "attention_tile_rows = 1.5\n", "attention_tile_rows"),
        ("t.toml", 'seq = 1024\nglobal_batch = 64\nattention_waves = "yes"\n', "attention_waves"),
        (
            "t.toml",
            'seq = 1024\nglobal_batch = 64\nattention_block_order = "lpt"\n',
            'attention_block_order must be "longest-first"',
        ),
    ],
)
def test_bad_values_are_one_line_exit_2(capsys, tmp_path, monkeypatch, name, text, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(text)
    argv = ["plan", "--model", "llama3-8b", "--gpus", "8"]
    argv += ["--cluster", "c.toml"] if name == "c.toml" else ["--cluster", "h100", "--training", "t.toml"]
    code, _, err = run(capsys, *argv)
    one_line(code, err, needle)


def test_a_training_file_turns_it_on_and_off(tmp_path):
    lay = Layout(pp=1, dp=1, tp=8)  # Llama 3 70B's 64 heads over tp 8: 8 heads a GPU, 4096 tokens
    m = load_model("llama3-70b")
    times = {}
    for waves in ("true", "false"):
        (tmp_path / f"{waves}.toml").write_text(f"seq = 4096\nglobal_batch = 64\nattention_waves = {waves}\n")
        times[waves] = attention_core(m, load_cluster("b200"), load_training(str(tmp_path / f"{waves}.toml")), lay, 0)
    # forward: 8 heads x 16 blocks of 256 rows on 148 SMs keep 8 x 34,816 / (148 x 4096) of them busy
    assert times["true"][0] / times["false"][0] == pytest.approx(148 * 4096 / (8 * 34816))
    assert times["true"][1] > times["false"][1]


BENCH = ROOT / "benchmarks" / "attention_grid.py"


def _system(tmp_path: Path, name: str, tflops: float, shapes: dict) -> None:
    """A SimuMax-style system file holding only the attention tables (made up here)."""
    op = {k: {"tflops": tflops, "accurate_efficient_factor": shapes} for k in ("sdp_fwd", "sdp_bwd")}
    path = tmp_path / "configs" / "system" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"accelerator": {"op": op}}))


def test_the_benchmark_without_simumax_says_so_in_one_line():
    code, text = printed(load_script(BENCH).main, [])
    assert code == 0 and text.strip().splitlines() == [
        "SimuMax's measured attention tables not available (no --simumax-src given): nothing to compare."
    ]


def test_the_benchmark_turns_simumax_efficiencies_back_into_measured_times(tmp_path):
    key = "batch=1, seq_len=4096, head_num={h}, kv_head_num=1, qk_head_dim=128, v_head_dim=128, qkv_contiguous={c}"
    shapes = {key.format(h=8, c=True): 0.5, key.format(h=8, c=False): 0.1, key.format(h=64, c=True): 1.0}
    _system(tmp_path, "b200_bf16_ceperm.json", 2250, shapes)
    _system(tmp_path, "a100_pcie.json", 312, shapes)
    code, text = printed(load_script(BENCH).main, ["--simumax-src", str(tmp_path)])
    assert code == 0
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| 4096 |")]
    assert len(rows) == 4  # two shapes a device; the non-contiguous layout is not the training's
    # SimuMax's convention: forward 2 b s^2 h (qk + v) FLOPs at efficiency x peak; backward 5/2 of them
    fwd_us = 2 * 4096**2 * 8 * 256 / (0.5 * 2250e12) * 1e6
    b200_8 = next(r for r in rows if r[1] == "8")
    assert float(b200_8[4]) == pytest.approx(fwd_us, abs=0.5)
    assert float(b200_8[8]) == pytest.approx(2.5 * fwd_us, abs=0.5)
    # the largest grid there runs at twice the rate per head: 8 heads are at 0.50 of its rate
    assert b200_8[7].startswith("0.50 / ")
    assert "b200 forward, grid term on: 2 shapes" in text and "a100 backward, grid term off: 2 shapes" in text
