"""What a deferred weight gradient keeps from its B to its W, against counts from outside
pipesim: the Zero Bubble fork's ``WeightGradStore.put`` calls counted by hand (the paper's
M_W = 32h), the same count under tensor and sequence parallelism, and PyTorch's own split
backward (torch.distributed.pipelining's ``stage_backward_input``) run on real blocks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.planner.activations import layer_activation
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Attention, Model, Training
from pipesim.planner.weight_grad_saved import layer_w_saved

h, a, s = 12288, 96, 2048  # GPT-3 175B's layer
GPT = Model("gpt3", 96, h, a, 51200, Attention(), 96, 4 * h, activation="gelu", rotary=False)


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


def test_full_recomputation_keeps_no_w_set():
    assert layer_w_saved(GPT, 0, gpt_training(), 1, "full") == {}


# --------------------------------------------------------------------------------------
# PyTorch's split backward on real blocks

torch = pytest.importorskip("torch")

from torch_blocks import DT, GPTBlock, LlamaBlock, measure  # noqa: E402

S, B, H = 128, 2, 256


def w_read(block, x, weights) -> tuple[int, int, int]:
    """(bytes the W reads, bytes the retained graph holds, bytes of the stored output
    gradients) after torch.distributed.pipelining's
    ``stage_backward_input`` on ``block``, parameters left out, storages counted once.

    What the W reads: the output gradients ``stage_backward_input`` stores per weight
    node (``param_groups[i]["grads"]``) and the tensors saved by the nodes on the paths
    from those nodes to the weights, which ``stage_backward_weight`` runs. What the graph
    holds: every saved tensor of every node still reachable from them."""
    from torch.distributed.pipelining._backward import stage_backward_input

    x = x.detach().requires_grad_(True)
    y = block(x)
    _, groups = stage_backward_input([y], [torch.randn_like(y)], [x], iter(weights))
    owned = {p.untyped_storage().data_ptr() for p in (*block.parameters(), *block.buffers())}

    def saved(node) -> list:
        out = []
        for name in dir(node):
            if name.startswith("_saved_"):
                v = getattr(node, name, None)
                out += [t for t in (v if isinstance(v, (tuple, list)) else [v]) if isinstance(t, torch.Tensor)]
        return out

    def walk(node, accs, seen) -> bool:  # whether a path leads from node to one of accs
        if node is None:
            return False
        if node not in seen:
            seen[node] = False
            seen[node] = node in accs or any([walk(n, accs, seen) for n, _ in node.next_functions])
        return seen[node]

    w_tensors, held, grads = [], [], []
    for g in groups:  # each group's W runs the paths from its intermediates to its own weights
        stored = [t for tup in g["grads"] for t in tup if t is not None]
        grads += stored
        w_tensors += stored
        on_path: dict = {}
        for n in g["intermediates"]:
            walk(n, set(g["params"]), on_path)
        w_tensors += [t for node, on in on_path.items() if on for t in saved(node)]
        held += [t for node in on_path for t in saved(node)]

    def size(ts):
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}
        return sum(v for k, v in storages.items() if k not in owned)

    return size(w_tensors), size(held + grads), size(grads)


def test_torch_gpt_block_w_reads_the_papers_32h():
    """Megatron-LM 2021's GPT layer in bf16: the W of its four linears reads 32h a token."""
    torch.manual_seed(0)
    blk = GPTBlock(H, 8, 4 * H)
    read, _, _ = w_read(blk, torch.randn(S, B, H, dtype=DT), [m.weight for m in (blk.qkv, blk.proj, blk.fc1, blk.fc2)])
    assert read == pytest.approx(32 * H * S * B, rel=0.01)


@pytest.mark.parametrize("tp", [1, 2])
def test_torch_llama_block_w_set_is_pipesims(tp):
    """An eager Llama block (GQA, rotary, SDPA, SwiGLU) on one tensor rank, no sequence
    parallelism: what the W reads is pipesim's W set within 2%."""
    torch.manual_seed(0)
    m = Model("llama", 1, H, 8, 1000, Attention(kv_heads=2), 1, 688)
    blk = LlamaBlock(H, 8 // tp, 2 // tp, 688 // tp, fused=False, head_dim=H // 8)
    weights = [blk.attn.wqkv.weight, blk.attn.wo.weight, blk.mlp.w13.weight, blk.mlp.w2.weight]
    x = torch.randn(B, S, H, dtype=DT)
    read, held, grads = w_read(blk, x, weights)
    t = Training(seq=S, fused_elementwise=False, sequence_parallel=False)
    predicted = sum(layer_w_saved(m, 0, t, tp).values()) * B * S
    assert abs(predicted / read - 1) <= 0.02, f"pipesim {predicted:.0f} B, the W read {read} B"
    # PyTorch's own path holds more: stage_backward_input retains the graph, so every
    # tensor the forward saved stays until stage_backward_weight, besides the gradients
    assert held == pytest.approx(measure(blk, x) + grads, rel=0.01)
    total, share = layer_activation(m, 0, replace(t, w_keeps_graph=True), Layout(1, 1, tp=tp, micro_batch=B), "none")
    assert abs(total * share / held - 1) <= 0.02, f"pipesim {total * share:.0f} B, the graph held {held} B"


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
