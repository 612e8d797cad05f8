"""What torch.distributed.pipelining keeps of the tensors that cross a stage boundary.

A stage's input arrives into a receive buffer and its output leaves as the tensor its
last layer made. stage.py (PyTorch 1963fc8, December 2024, the commit torchtitan's
published runs used; and 2.13) holds them so:

- ``_prepare_forward_infra`` allocates a receive buffer per micro-batch for the input of
  every stage but the first, once, kept across steps; ``_retrieve_recv_activations``
  hands that buffer itself to the stage's module, so the first layer's saved input *is*
  the buffer: a micro-batch in flight holds it once, not twice;
- ``forward_one_chunk`` stores the stage's output in ``fwd_cache`` until
  ``backward_one_chunk`` pops it (for a split backward ``backward_state`` holds it until
  the W); before pytorch/pytorch#153383 (May 2025) it also appended every stage's output
  to ``output_chunks``, cleared only when the next step starts (``clear_runtime_states``),
  so each stage but the last held all of its step's outputs (``pp_keeps_stage_outputs``);
  since then only the last stage does (its logits, ``device_memory.pipeline_buffers``).

So one micro-batch's activation on a stage (``stage_boundary_pairs``) is its layers' saved
tensors less the receive buffer the first of them saves (on every stage but the first),
plus its output while it waits for the backward (every stage but the last, unless
``output_chunks`` keeps it to the step's end, which ``pipeline_buffers`` then counts).
On a middle stage the two cancel, as they did before these terms; the first stage gains
its outputs in flight, the last loses its receive buffers counted twice.
"""

from __future__ import annotations

BF16 = 2  # bytes of an element crossing the boundary (the blocks' bf16 hidden states)


def boundary(m, t, lay) -> float:
    """Bytes of one micro-batch's stage boundary on one GPU: [micro-batch, local
    sequence, hidden] in bf16, sequence-sharded under tensor parallelism with sequence
    parallelism (torchtitan's blocks return local Shard(1) tensors)."""
    shard = lay.tp if t.sequence_parallel and lay.tp > 1 else 1
    return BF16 * m.hidden / shard * lay.tokens(t.seq)


def stage_boundary_pairs(m, t, lay, stage: int, stages: int, first_share: float | None) -> list[tuple[float, float]]:
    """(bytes, share the W keeps) to add to one micro-batch's activation of model stage
    ``stage`` of ``stages`` under torch.distributed.pipelining (``pp_keeps_outputs``; the
    module docstring has the code): less the receive buffer its first layer saves
    (``first_share`` that layer's W share; None for a stage without layers, whose input
    no layer saves), plus its output held from its F to its backward (until the W of a
    split backward: share 1) unless ``output_chunks`` keeps it to the step's end."""
    if lay.pp == 1 or not t.pp_keeps_outputs:
        return []
    b = boundary(m, t, lay)
    pairs = []
    if stage > 0 and first_share is not None:
        pairs.append((-b, first_share))
    if stage < stages - 1 and not t.pp_keeps_stage_outputs:
        pairs.append((b, 1.0))
    return pairs
