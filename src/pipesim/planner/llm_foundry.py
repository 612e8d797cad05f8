"""What MosaicML's MPT block, as llm-foundry v0.3.0 writes it, moves in its backward beyond
the eager rows of ``elementwise.elementwise_terms`` (``eager_block = "llm-foundry"``).

The block (llm-foundry 54cbb8bd10, the v0.3.0 its benchmark scripts at b2a43a1477
installed): llmfoundry/models/layers/blocks.py ``MPTBlock``, attention.py
``GroupedQueryAttention`` with ``attn_impl = "triton"`` (``triton_flash_attn_fn``), ffn.py
``MPTMLP``, with MPTConfig's default ``no_bias = False``. tests/mpt_block.py writes it in
torch and tests/test_mpt_bytes.py holds these rows to torch's own count of it."""

from __future__ import annotations

from .layout import Layout
from .params import attention_dims
from .specs import Model, Training


def llm_foundry_terms(m: Model, layer: int, t: Training, lay: Layout) -> list[tuple[str, str, float, float]]:
    """(block, term, forward, backward) rows in elements of 2 bytes per token:

    - "attention layout": ``qkv.split`` into q, k and v is a view forward; backward autograd
      joins their three gradients into the Wqkv output's (``split_with_sizes``'s backward
      is a ``cat``): read and write q, k and v. (torchtitan's separate wq, wk and wv have
      no join but add their input gradients, which ``elementwise_terms`` drops for this
      block: one Wqkv, one up_proj.)
    - "bias gradients": every Linear has a bias (Wqkv, out_proj, up_proj, down_proj); the
      forward adds it inside the multiply (``addmm``), the backward sums the output's
      gradient over the tokens for it, a read of that gradient (torch's ``sum`` of
      addmm's bias gradient: 3h + h + ffn + h for MHA).
    - "attention backward passes": llm-foundry's Triton kernel
      (llmfoundry/models/layers/flash_attn_triton.py, ``_flash_attn_backward``) accumulates
      dq in an fp32 buffer that its autotuned configs zero before the kernel
      (``pre_hook=init_to_zero('DQ')``: write 4 bytes a q element), runs
      ``_bwd_preprocess_do_o_dot`` over the output and its gradient first (read both), and
      copies the fp32 dq into the bf16 one after (``dq.copy_(dq_accum)``: read 4, write
      2): 2 + 2 + 3 q-sized elements. The kernel's own reads and writes are the attention
      core's (``compute.attention_core``).

    Grouped-query or multi-head attention with a GELU MLP is what the MPT block is; MLA
    and MoE layers get no rows."""
    if m.attention.kind == "mla" or m.is_moe_layer(layer):
        return []
    tp = lay.tp
    qk, v = attention_dims(m)
    kv_heads = m.attention.kv_heads or m.heads
    q, o = m.heads * qk / tp, m.heads * v / tp
    qkv = (m.heads * qk + kv_heads * qk + kv_heads * v) / tp
    h, ffn = m.hidden, m.dense_ffn / tp
    return [
        ("attention", "attention layout", 0.0, 2 * qkv),
        ("attention", "bias gradients", 0.0, qkv + h),
        ("attention", "attention backward passes", 0.0, 2 * q + 2 * o + 3 * q),
        ("mlp", "bias gradients", 0.0, ffn + h),
    ]
