"""The experts' output bias as Megatron-Core's TEGroupedMLP adds it (moe_bias.py), against
the kernels and bytes PyTorch itself runs for the same expression, and its place on top of
the MoE layer's issue floor.

``_apply_bias`` (megatron/core/transformer/moe/experts.py at 0d8e0714c) splits the experts'
output and the routing weights by expert, adds ``bias * weight`` to each slice and joins
them with ``cat``; written here from that description, bf16 on the CPU, the routing
weights and the biases requiring gradients as in training.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from pipesim.planner.layer_costs import layer_costs  # noqa: E402
from pipesim.planner.layout import Layout  # noqa: E402
from pipesim.planner.moe_bias import apply_bias_kernels, bias_bytes, bias_kernels  # noqa: E402
from pipesim.planner.specs import load_cluster, load_model, load_training  # noqa: E402
from torch_bytes import kind  # noqa: E402

HF = "tests/data/hf"


class Kernels(TorchDispatchMode):
    """Counts the forward's and the backward's non-view aten ops and the bytes of their
    tensors (every input and output, as a kernel reads and writes them)."""

    def __init__(self):
        super().__init__()
        self.phase = "forward"
        self.count = {"forward": 0, "backward": 0}
        self.bytes = {"forward": 0, "backward": 0}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if kind(func, ins, outs) != "view":
            self.count[self.phase] += 1
            self.bytes[self.phase] += sum(t.numel() * t.element_size() for t in ins + outs)
        return out


def run_apply_bias(tokens: list[int], hidden: int) -> Kernels:
    n = sum(tokens)
    out = torch.randn(n, hidden, dtype=torch.bfloat16, requires_grad=True)
    weights = torch.rand(n, 1, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(hidden, dtype=torch.bfloat16, requires_grad=True) for _ in tokens]
    grad = torch.randn(n, hidden, dtype=torch.bfloat16)
    log = Kernels()
    with log:
        pieces = zip(torch.split(out, tokens), biases, torch.split(weights, tokens))
        y = torch.cat([t + b * p for t, b, p in pieces]).view(out.shape).to(out.dtype)
        log.phase = "backward"
        y.backward(grad)
    return log


@pytest.mark.parametrize("tokens", [[7], [5, 3, 4], [6] * 16])
def test_apply_bias_kernels_are_torchs(tokens):
    """2 kernels an expert and a cat forward; 4 an expert and two cats backward."""
    log = run_apply_bias(tokens, 16)
    assert apply_bias_kernels(len(tokens)) == (log.count["forward"], log.count["backward"])


def test_apply_bias_bytes_are_torchs():
    """6 and 8 hidden-sized bf16 elements a routed copy, forward and backward; the biases,
    weights and per-token sums torch also moves are under 1% here (hidden 512, 400 copies
    an expert)."""
    m = load_model(f"{HF}/gpt-oss-120b.json")
    t = load_training(seq=400, moe_expert_gemms="per_expert")
    lay = Layout(pp=1, dp=32, ep=32)  # 4 local experts; 400 tokens x top 4 received, balanced
    hidden = 512
    log = run_apply_bias([400] * 4, hidden)
    forward, backward = (x * hidden / m.hidden for x in bias_bytes(m, 0, t, lay))
    assert forward == pytest.approx(log.bytes["forward"], rel=0.01)
    assert backward == pytest.approx(log.bytes["backward"], rel=0.01)


def test_only_biased_per_expert_experts_pay():
    """gpt-oss has expert biases; Qwen3 has none; grouped kernels are not TE's per-expert
    list. Backward adds the data-parallel hook's main_grad.add_ of each local expert's two
    biases (distributed_data_parallel.py at 0d8e0714c): 4 E + 2 + 2 E."""
    oss = load_model(f"{HF}/gpt-oss-120b.json")
    per_expert = load_training(moe_expert_gemms="per_expert")
    assert bias_kernels(oss, 0, per_expert, 16) == (33, 98)
    assert bias_kernels(oss, 0, load_training(), 16) == (0, 0)
    assert bias_kernels(replace(oss, biases=False), 0, per_expert, 16) == (0, 0)


def test_bias_kernels_issue_on_top_of_the_floor():
    """The layer's issue floor was measured on bias-free experts (moe_perf builds its layer
    with add_bias_linear=False), so the bias kernels add host_us_per_kernel each to it: 33
    forward, 98 backward at 16 local experts, where the floor binds."""
    m = load_model(f"{HF}/gpt-oss-120b.json")
    c = load_cluster("h100").resized(64)
    t = load_training(
        seq=4096, moe_dispatcher="alltoall", moe_expert_gemms="per_expert", moe_layer_issue_ms=12.4, recompute="none"
    )
    lay = Layout(pp=4, dp=16, ep=8)
    biased = layer_costs(m, 1, c, t, lay, "none")
    plain = layer_costs(replace(m, biases=False), 1, c, t, lay, "none")
    host = t.host_us_per_kernel * 1e-6

    def passes(lc):
        return lc.mlp_f + lc.dispatch_f + lc.combine_f, lc.attn_b + lc.mlp_b + lc.dispatch_b + lc.combine_b + lc.attn_w + lc.mlp_w

    (fb, bb), (fp, bp) = passes(biased), passes(plain)
    assert fb - fp == pytest.approx(33 * host, rel=1e-6)
    assert bb - bp == pytest.approx(98 * host, rel=1e-6)
