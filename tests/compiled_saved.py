"""Bytes a torch.compile'd torchtitan block keeps for its backward, counted in torch.

torchtitan compiles each TransformerBlock on its own (9dec370 ``apply_compile``:
``torch.compile(block, fullgraph=True)``), after wrapping it in its activation
checkpoint; here tests/torch_blocks.py's ``TitanBlock``, or ``OpCheckpointed`` under
torchtitan's selective op checkpointing, compiled the same way, bf16, Inductor on the CPU
(tests/inductor_bytes.py counts the same compiled blocks' kernel bytes). AOTAutograd's compiled function hands what its partitioner chose to
``save_for_backward``, so ``saved_tensors_hooks`` see exactly those tensors (torch 2.13);
``torch_blocks.measure`` counts their distinct storages, parameters and buffers left out,
as it counts the eager blocks.
"""

from __future__ import annotations

import torch

from torch_blocks import DT, TitanBlock, measure, titan_policy


def _op_context():
    """torchtitan's selective op policy, fresh for every forward as its context_fn builds
    it (a plain function: the compiled checkpoint calls it with no arguments); the CPU
    flash kernel stands in for CUDA's."""
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    cpu_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    return create_selective_checkpoint_contexts(titan_policy((cpu_flash,)))


class OpCheckpointed(TitanBlock):
    """The block under torchtitan's selective op checkpointing (``recompute = "op"``),
    wrapped before it is compiled, as torchtitan applies AC and then compile."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.layer, x, use_reentrant=False, context_fn=_op_context)


def compiled_saved(h: int, heads: int, kv_heads: int, ffn: int, batch: int, seq: int, ac: str = "none") -> int:
    """Bytes one forward of the compiled block on [batch, seq, h] keeps for its backward;
    ``ac`` "none" or "op"."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    block = (OpCheckpointed if ac == "op" else TitanBlock)(h, heads, kv_heads, ffn)
    try:
        return measure(torch.compile(block, fullgraph=True), torch.randn(batch, seq, h, dtype=DT))
    finally:
        torch._dynamo.reset()
