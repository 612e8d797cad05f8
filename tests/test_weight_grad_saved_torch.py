"""What a deferred weight gradient keeps from its B to its W, against PyTorch's own split
backward: torch.distributed.pipelining's ``stage_backward_input`` run on real blocks
(tests/torch_blocks.py, bf16, CPU), then the tensors its ``stage_backward_weight`` would
read, and those its retained graph holds, counted by storage."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pipesim.planner.activations import layer_activation  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.specs import Attention, Model, MoE, Training  # noqa: E402
from pipesim.planner.weight_grad_saved import layer_w_saved  # noqa: E402
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
    m = Model("llama", 1, H, 8, 1000, Attention(kv_heads=2), (), 688)
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


def test_torch_moe_block_w_set_is_pipesims():
    """Top-2 of 8 SwiGLU experts behind the attention: each routed copy's gate/up and
    down projections keep their input (the dispatched copy, one storage for all experts)
    and output gradient; the router's weight is left to the B, as Megatron-Core's is."""
    torch.manual_seed(0)
    m = Model("moe", 1, H, 8, 1000, Attention(kv_heads=2), (0,), 0, moe=MoE(experts=8, expert_ffn=128, top_k=2))
    blk = LlamaBlock(H, 8, 2, 0, False, moe=(8, 128, 2))
    weights = [blk.attn.wqkv.weight, blk.attn.wo.weight] + [p for e in blk.mlp.experts for p in (e.w13.weight, e.w2.weight)]
    read, _, _ = w_read(blk, torch.randn(B, S, H, dtype=DT), weights)
    predicted = sum(layer_w_saved(m, 0, Training(seq=S, fused_elementwise=False), 1).values()) * B * S
    assert abs(predicted / read - 1) <= 0.02, f"pipesim {predicted:.0f} B, the W read {read} B"
