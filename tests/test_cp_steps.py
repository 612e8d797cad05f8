"""Issue 19 item 2 / issue 20: context parallelism priced step by step as Transformer Engine
2.7 and PyTorch's ring run it (planner/cp_steps.py). The expected values are worked by hand
here from the sources' shapes: a step's grid of thread blocks, a merge pass's bytes, the
kernels a layer launches."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.attention_grid import grid_fill
from pipesim.planner.collectives import cp_exchange, torch_ring_exposed
from pipesim.planner.compute import FLASH_BACKWARD_SHARE, attention_core
from pipesim.planner.cp_steps import Kernel, extra_kernels, pass_bytes
from pipesim.planner.layer_costs import layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training

H100 = load_cluster("h100")  # 132 SMs, 989 BF16 TFLOP/s
L405 = load_model("llama3-405b")  # 128 heads, 8 kv heads, head dim 128
L8 = load_model("llama3-8b")  # 32 heads, 8 kv heads, head dim 128


def training(**kw):
    return load_training(base=kw)


def test_a_ring_steps_kernels_have_their_own_grids():
    # TE's remote step: all 1024 queries against the first 512 arriving keys, no mask:
    # 8 query blocks of 128, each reading all 512 keys; backward 4 key blocks of 1024 rows
    assert Kernel(1024, 512, False).blocks(128, False) == (512,) * 8
    assert Kernel(1024, 512, False).blocks(128, True) == (1024,) * 4
    # the all-gather's last chunk: 512 queries at the end of an 8192-key sequence, causal
    assert Kernel(512, 8192, True).blocks(128, False) == (7808, 7936, 8064, 8192)
    assert Kernel(512, 8192, True).blocks(128, True)[:61] == (512,) * 61  # keys before the chunk: every row
    assert Kernel(512, 8192, True).blocks(128, True)[-2:] == (256, 128)
    # the local causal square: the usual staircase
    assert Kernel(512, 512, True).blocks(128, False) == (128, 256, 384, 512)
    assert Kernel(512, 512, True).pairs() == 512 * 512 / 2
    assert Kernel(512, 8192, True).pairs() == 512 * 8192 - 512 * 512 / 2


def test_a_grid_smaller_than_the_sms_leaves_the_rest_idle():
    square = (Kernel(512, 512, False),)  # four blocks of 128 query rows, each reading 512 keys
    assert grid_fill(square, 128, False, 16, 132, False) == pytest.approx(64 / 132)
    assert grid_fill(square, 128, False, 16, 132, True) == pytest.approx(64 / 132)
    assert grid_fill(square, 128, False, 33, 132, False) == 1.0  # exactly one full wave
    # one long block among short ones sets the span: 4 short (128) and one long (1024)
    mixed = (Kernel(512, 128, False), Kernel(128, 1024, False))
    assert grid_fill(mixed, 128, False, 1, 132, False) == pytest.approx(1536 / (132 * 1024))


def test_te_ring_backward_at_8k_tokens_cp8_tp8_by_hand():
    # Llama 3 405B, seq 8192, cp 8, tp 8: 1024 rows a rank, 16 heads a GPU, micro-batch 1.
    # Backward over key blocks of 128, one stream, each step at its slower kind of rank.
    t = training(seq=8192, cp_comm="p2p")
    lay = Layout(pp=1, dp=1, tp=8, cp=8)
    rate = 989e12 * 0.5 * FLASH_BACKWARD_SHARE / 2.5
    per_pair = 2 * 256 * 16  # FLOPs per query-key product over (qk + v) = 256 and 16 heads
    # step 0: causal 1024 x 1024: 8 key blocks reading 1024, 896, ... 128 rows; 128 blocks
    # on 132 SMs, one wave, the longest (1024) sets it
    fill0 = 16 * sum(range(128, 1025, 128)) / (132 * 1024)
    step0 = 1024 * 1024 / 2 * per_pair / (rate * fill0)
    # later steps: 1024 queries x 512 keys (4 key blocks a head: 64 blocks, 64/132 busy) or
    # 512 x 1024 (8 blocks a head: 128 blocks, 128/132); the first is slower
    step = 1024 * 512 * per_pair / (rate * 64 / 132)
    assert attention_core(L405, H100, t, lay, 0)[1] == pytest.approx(step0 + 7 * step)
    # twice the ideal: the per-step grids of a short sequence over many tensor ranks
    ideal = attention_core(L405, H100, replace(t, attention_waves=False), lay, 0)[1]
    assert attention_core(L405, H100, t, lay, 0)[1] > 1.9 * ideal


def test_te_forward_shares_the_gpu_between_two_steps():
    # TE's forward alternates its steps over two streams: a remote step's 64 blocks (512
    # queries x 1024 keys, 4 blocks of 128 a head) share the SMs with the next step's
    t = training(seq=8192, cp_comm="p2p")
    lay = Layout(pp=1, dp=1, tp=8, cp=8)
    rate, per_pair = 989e12 * 0.5, 2 * 256 * 16
    # step 0's 256 causal blocks (8 a head, two steps' worth) pair long with short: the
    # longest (1024 keys) sets no more than the work over the SMs, 32 x 4608 > 132 x 1024
    assert 32 * sum(range(128, 1025, 128)) > 132 * 1024
    step0 = 1024 * 1024 / 2 * per_pair / rate
    step = 1024 * 512 * per_pair / (rate * 128 / 132)  # 2 x 64 blocks of 512 queries' half
    assert attention_core(L405, H100, t, lay, 0)[0] == pytest.approx(step0 + 7 * step)


def test_the_all_gather_runs_two_chunks_at_once_and_ulysses_one_sequence():
    # all-gather at seq 8192, cp 16: rank 0's chunks of 256 rows reach keys 256 and 8192,
    # two causal kernels together: 2 + 2 blocks a head, 64 blocks, the 8192 one the longest
    t = training(seq=8192, cp_comm="all_gather")
    lay = Layout(pp=1, dp=1, tp=8, cp=16)
    rate, per_pair = 989e12 * 0.5, 2 * 256 * 16
    work = 16 * (128 + 256 + 8064 + 8192)
    pairs = 256 * 256 / 2 + 256 * 8192 - 256 * 256 / 2
    assert attention_core(L405, H100, t, lay, 0)[0] == pytest.approx(pairs * per_pair / (rate * work / (132 * 8192)))
    # Ulysses at cp 8: the whole 8192-token sequence, 16 / 8 = 2 heads a GPU: 64 causal
    # blocks a head, 128 in all, one wave whose longest block reads 8192 keys
    t = training(seq=8192, cp_comm="a2a")
    lay = Layout(pp=1, dp=1, tp=8, cp=8)
    fill = 2 * sum(range(128, 8193, 128)) / (132 * 8192)
    assert attention_core(L405, H100, t, lay, 0)[0] == pytest.approx(8192 * 8192 / 2 * 2 * 256 * 2 / (rate * fill))


def test_long_sequences_keep_the_share():
    t = training(seq=262144, cp_comm="p2p")
    lay = Layout(pp=1, dp=1, tp=8, cp=8)
    on = attention_core(L405, H100, t, lay, 0)
    off = attention_core(L405, H100, replace(t, attention_waves=False), lay, 0)
    # only the last wave's quantization stays: the slower remote step's 16384 queries x
    # 32768 keys run 128 blocks a head, 4096 in all (two steps together: 2 x 2048)
    assert on[0] / off[0] < 4224 / 4096 + 1e-9
    assert on[1] == pytest.approx(off[1], rel=0.04)


def test_te_ring_passes_bytes_by_hand():
    # Llama 3 8B at cp 4, seq 131072, tp 1: 32768 tokens a rank; 32 x 128 query and output
    # elements a token, 2 x 8 x 128 key and value ones
    t = training(seq=131072, cp_comm="p2p")
    lay = Layout(pp=1, dp=1, cp=4)
    T = 32768
    q = o = T * 32 * 128
    kv = T * 2 * 8 * 128
    # forward: k, v into the send buffer (read 2, write 2); the output's first correction
    # (4) and three more (read out and the step's, write out: 6)
    forward = 4 * kv + (4 + 3 * 6) * o
    # backward: k, v into the ring buffer; dq and dk, dv copied once and added three times
    backward = 4 * kv + (4 + 3 * 6) * (q + kv)
    assert pass_bytes(L8, H100, t, lay) == pytest.approx((forward, backward))


def test_torch_ring_merges_and_accumulates_in_fp32():
    t = training(seq=65536, cp_comm="all_gather", torch_context_parallel=True)
    lay = Layout(pp=1, dp=1, cp=2)
    T = 32768
    o = q = T * 32 * 128
    kv = T * 2 * 8 * 128
    # forward: the cat for the all-gather (4), the first output upcast (read 2, write 4), one
    # merge (read 4 and 2, write 4), the cast back (read 4, write 2)
    forward = 4 * kv + (6 + 10 + 6) * o
    backward = 4 * kv + (6 + 10 + 6) * (q + kv)
    assert pass_bytes(L8, H100, t, lay) == pytest.approx((forward, backward))


def test_the_kernels_a_cp_layer_launches():
    te = training(cp_comm="p2p")
    # cp 2: cat, 1 more kernel, 2 output corrections, the lse clone, one batched send/recv;
    # backward: the ring buffer's copy, 1 more kernel, 2 dq and 2 dk/dv accumulations, 2
    # batched send/recv steps
    assert extra_kernels(L405, H100, te, Layout(pp=1, dp=1, tp=8, cp=2)) == (1 + 1 + 2 + 1 + 1, 1 + 1 + 4 + 2)
    # cp 8: sends and receives apart: 7 steps x 2 forward, 8 x 2 backward
    assert extra_kernels(L405, H100, te, Layout(pp=1, dp=1, tp=8, cp=8)) == (1 + 7 + 8 + 7 + 14, 1 + 7 + 16 + 16)
    torch_ring = training(cp_comm="all_gather", torch_context_parallel=True)
    assert extra_kernels(L8, H100, torch_ring, Layout(pp=1, dp=1, cp=4)) == (2 * 4 + 2, 4 * 4 + 3)
    assert extra_kernels(L405, H100, training(cp_comm="all_gather"), Layout(pp=1, dp=1, tp=8, cp=4)) == (9, 19)
    assert extra_kernels(L405, H100, training(cp_comm="a2a"), Layout(pp=1, dp=1, tp=8, cp=4)) == (12, 15)


def test_the_layer_launches_them_and_the_floor_sees_them():
    # a tiny sequence over cp 8: every kernel at its floor, so the CP layer's forward costs
    # at least its extra launches' floors more than the plain layer's
    t = training(seq=256, cp_comm="p2p")
    plain = layer_costs(L8, 0, H100, t, Layout(pp=1, dp=1, cp=1), "none")
    cp = layer_costs(L8, 0, H100, t, Layout(pp=1, dp=1, cp=8), "none")
    extra_f = extra_kernels(L8, H100, t, Layout(pp=1, dp=1, cp=8))[0]
    assert cp.attn_f + cp.mlp_f >= (extra_f + 14) * 3.4e-6  # 14: the layer's fused forward kernels
    assert cp.attn_f + cp.mlp_f > plain.attn_f + plain.mlp_f


@pytest.mark.parametrize(
    "kw",
    [
        {"cp_comm": "p2p"},
        {"cp_comm": "all_gather"},
        {"cp_comm": "a2a"},
        {"cp_comm": "all_gather", "torch_context_parallel": True},
    ],
)
def test_cp_1_is_unchanged(kw):
    lay = Layout(pp=1, dp=1, tp=8, cp=1)
    base = training(seq=8192)
    t = training(seq=8192, **kw)
    assert pass_bytes(L405, H100, t, lay) == (0.0, 0.0)
    assert extra_kernels(L405, H100, t, lay) == (0, 0)
    assert layer_costs(L405, 0, H100, t, lay, "none") == layer_costs(L405, 0, H100, base, lay, "none")
    # the one causal kernel of 8192 rows: 64 blocks x 16 heads, 1024 blocks, longest first
    f = 8192 * 8192 / 2 * 2 * 256 * 16 / (989e12 * 0.5)
    assert attention_core(L405, H100, t, lay, 0)[0] >= f


def test_torch_ring_exposure_by_hand():
    # allgather rotation: gather 1 ms under step 0's 2 ms forward: nothing shows; backward
    # the gather again under 4 ms, then dk, dv in fp32 (2 x 1 MB at 1 GB/s: 2 ms) under
    # each of the 3 later steps' 4 ms, and the last after the loop: 2 ms plus its latency
    f, b = torch_ring_exposed(1e6, 4, 1e9, 1e-3, 8e-3, 16e-3, 1e-5)
    assert f == 0.0
    assert b == pytest.approx(2e-3 + 1e-5)
    # alltoall rotation: each step's keys (1 ms) and the previous dk, dv (2 ms) against 1 ms
    f, b = torch_ring_exposed(1e6, 4, 1e9, None, 4e-3, 4e-3, 0.0)
    assert f == 0.0
    assert b == pytest.approx(3 * (3e-3 - 1e-3) + 2e-3)


def test_te_all_gather_backward_gathers_again_and_reduce_scatters():
    t = training(seq=131072, cp_comm="all_gather")
    lay = Layout(pp=16, dp=8, tp=8, cp=16)
    f, b = cp_exchange(L405, H100, t, lay, 1.0, 1.0)
    assert b > 1.9 * f > 0


def test_torch_ring_takes_only_its_own_rotations():
    with pytest.raises(PipesimError) as e:
        load_training(base={"torch_context_parallel": True, "cp_comm": "a2a"})
    assert "\n" not in str(e.value) and "p2p" in str(e.value) and "all_gather" in str(e.value)


def test_heads_share_under_hierarchical_cp():
    # a2a+p2p on 8 ranks of Llama 3 8B at tp 4 (8 query and 2 key/value heads a GPU): the
    # all-to-all over 2, the ring over 4; the ring's kernels run half the heads on twice
    # the tokens, the same FLOPs as the plain ring's
    t = training(seq=65536, cp_comm="a2a+p2p")
    lay = Layout(pp=1, dp=1, tp=4, cp=8)
    off = replace(t, attention_waves=False)
    ring = attention_core(L8, H100, replace(off, cp_comm="p2p"), lay, 0)
    assert attention_core(L8, H100, off, lay, 0) == pytest.approx(ring)
    assert math.isfinite(attention_core(L8, H100, t, lay, 0)[0])
