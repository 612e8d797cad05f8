"""What a deferred weight gradient keeps from its B to its W, against counts from outside
pipesim: the Zero Bubble fork's ``WeightGradStore.put`` calls counted by hand (the paper's
M_W = 32h), and the same count under tensor and sequence parallelism.
(tests/test_weight_grad_saved_torch.py runs PyTorch's own split backward on real blocks.)"""

from __future__ import annotations

import pytest

from pipesim.planner.activations import layer_activation
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training
from pipesim.planner.weight_grad_saved import layer_w_saved

h, a, s = 12288, 96, 2048  # GPT-3 175B's layer
GPT = Model("gpt3", 96, h, a, 51200, Attention(), (), 4 * h, activation="gelu", rotary=False)


def gpt_training(**kw):
    return Training(seq=s, flash_attention=False, hidden_dropout=True, **kw)


def test_gpt_layer_keeps_the_papers_32h():
    """The fork (sail-sg/zero-bubble-pipeline-parallelism 77b9eed9, layers.py) puts one
    (input, output gradient) pair per linear layer: qkv (h, 3h), the output projection
    (h, h), fc1 (h, 4h), fc2 (4h, h): 16h bf16 elements, 32h bytes a token (Qi et al.
    2023, section 2, M_W = 32h)."""
    kept = layer_w_saved(GPT, 0, gpt_training(sequence_parallel=False))
    assert sum(kept.values()) == 32 * h


@pytest.mark.parametrize("tp", [2, 8])
def test_tensor_and_sequence_parallel_count(tp):
    """Under tp with Megatron's sequence parallelism, per token of the sequence: each
    column-parallel input is the sequence shard the forward saved (h/tp for qkv and fc1;
    the fork's head gathers it again in the W), the row-parallel inputs are local (h/tp,
    4h/tp), the column-parallel gradients local (3h/tp, 4h/tp) and the row-parallel
    gradients whole (h each: the reduce-scatter's gradient is an all-gather, kept as it
    arrives): 14h/tp + 2h elements. Against Korthikanti et al.'s selective activation
    34sbh/tp that is above 1 from tp 2 on: the B adds memory."""
    t = gpt_training(sequence_parallel=True)
    kept = sum(layer_w_saved(GPT, 0, t, tp, "selective").values())
    assert kept == pytest.approx(2 * (14 * h / tp + 2 * h))
    _, share = layer_activation(GPT, 0, t, Layout(1, 1, tp=tp, micro_batch=1), "selective")
    assert share == pytest.approx((28 / tp + 4) / (34 / tp), rel=0.01)
    # DTensor's sequence parallelism saves the gathered input of qkv and fc1 instead
    gathered = sum(layer_w_saved(GPT, 0, Training(seq=s, sp_saves_gathered=True, flash_attention=False), tp).values())
    assert gathered == pytest.approx(kept + 2 * 2 * h * (1 - 1 / tp))


@pytest.mark.parametrize("w_share", [0.6, 1.7])
def test_zb_auto_built_for_the_planner_holds_its_room(w_share):
    """The planner hands zb-auto a cap of ``room`` bytes; whatever the W share, above 1
    too (a B that adds memory), the order it builds keeps every rank's activations, as
    ``pipesim.memory`` counts them on the simulated timeline, within that room."""
    from pipesim import build, simulate
    from pipesim.costs import Costs
    from pipesim.memory import MemoryModel, memory
    from pipesim.planner.candidates import Candidate
    from pipesim.planner.evaluate import builder_options

    pp, M, act = 4, 16, 1e9
    costs = Costs(f=1.0, b=1.1, w=0.6, comm=0.05)
    mm = MemoryModel(params=0.0, activation=act, w_share=w_share)
    room = 5.5 * act  # between pp and 2pp activations: the cap binds
    cand = Candidate(Layout(pp, 1), "zb-auto", None, "selective", M)
    opts = builder_options(cand, costs, mm, room, pp)
    s = build("zb-auto", pp, M, **opts)
    peaks = memory(s, simulate(s, costs), mm, curves=False).activation_peak
    assert max(peaks) <= room * (1 + 1e-9)


@pytest.mark.parametrize("pp,M", [(2, 32), (4, 16)])
def test_zb_auto_built_for_the_planner_is_capped_at_the_real_bytes(pp, M):
    """W share 1.7 and room for pp + 0.7 activations: by hand, 1F1B with each W right
    after its B fits (rank 0 holds pp forwards, its B adds 0.7, its W frees 1.7) and runs
    as 1F1B with a fused BW of B + W. zb-auto's cap is those bytes, so it is no slower;
    a cap counted in activations of 1.7 times the bytes held one forward at a time at
    pp2 and left a 42% bubble, as it did on llama3-70b's pp2 x tp8."""
    from pipesim import build, simulate, summarize
    from pipesim.costs import Costs
    from pipesim.memory import MemoryModel, memory
    from pipesim.planner.candidates import Candidate
    from pipesim.planner.evaluate import builder_options

    act, f, b, w = 1e9, 1.0, 1.1, 0.6
    costs = Costs(f=f, b=b, w=w, comm=0.05)
    mm = MemoryModel(params=0.0, activation=act, w_share=1.7)
    room = (pp + 0.7) * act
    opts = builder_options(Candidate(Layout(pp, 1), "zb-auto", None, "selective", M), costs, mm, room, pp)
    s = build("zb-auto", pp, M, **opts)
    one_f_one_b = build("1f1b", pp, M)
    fused = Costs(f=f, b=b, w=w, bw=b + w, comm=0.05)
    assert max(summarize(s, simulate(s, costs)).span) <= max(summarize(one_f_one_b, simulate(one_f_one_b, fused)).span) + 1e-9
    assert max(memory(s, simulate(s, costs), mm, curves=False).activation_peak) <= room * (1 + 1e-9)


def test_a_pinned_pending_count_below_one_micro_batch_is_refused_by_name():
    """llama3-70b at pp2 x tp8 with sequence parallelism: the W keeps more than the
    activation (w_share above 1), so one micro-batch holds more than one activation after
    its B. A pin of one pending backward, counted as the fork counts it (one F's bytes),
    cannot hold it: the refusal names the pin, not a want of room."""
    from pipesim.planner.candidates import Candidate
    from pipesim.planner.evaluate import evaluate
    from pipesim.planner.specs import load_cluster, load_model

    m, c = load_model("llama3-70b"), load_cluster("h100", gpus=64)
    t = Training(seq=8192, global_batch=2048, zb_max_pending_backward=1, recompute="selective")
    r = evaluate(m, c, t, Candidate(Layout(2, 4, tp=8, micro_batch=1), "zb-auto", None, "selective", 512))
    assert not r.fits and r.reason.startswith("zb_max_pending_backward 1 caps a rank at")
