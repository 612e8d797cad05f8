"""What "chunk" means for a schedule, in words for legends, captions and tooltips.

The IR numbers a rank's model pieces 0, 1, ...; what that number says depends on the
placement: DualPipe's chunk 1 is the second model copy that micro-batches cross in the
reverse direction, a V's chunk 1 is the return leg, an interleaved chunk is a virtual
stage. Every picture names it the same way, from here.
"""

from __future__ import annotations

from ..ir import Placement


def chunk_meanings(pl: Placement) -> list[str]:
    """One phrase per chunk of ``pl``, ``"chunk 1: ..."``."""
    pp, M = pl.pp, pl.microbatches
    if pl.kind == "flat" and pl.chunks == 1:
        return [f"chunk 0: the only one (rank r runs stage r of {pp})"]
    if pl.kind == "dual":
        half = M // 2
        return [
            f"chunk 0: forward direction, model copy 1 (micro-batches 0-{half - 1} enter at rank 0)",
            f"chunk 1: reverse direction, model copy 2 (micro-batches {half}-{M - 1} enter at rank {pp - 1})",
        ]
    if pl.kind == "v":
        return [
            f"chunk 0: the V's way down (rank r runs stage r of {2 * pp})",
            f"chunk 1: the V's return leg (rank r runs stage {2 * pp - 1}-r)",
        ]
    if pl.kind == "interleaved":
        return [f"chunk {c}: virtual stage {c} (rank r runs stage {c * pp}+r of {pl.stages})" for c in range(pl.chunks)]
    return [f"chunk {c}: a model piece of this placement ({pl.kind}; see its routes)" for c in range(pl.chunks)]


def chunk_caption(pl: Placement) -> str:
    """The meanings in one line, ``"; "``-joined."""
    return "; ".join(chunk_meanings(pl))
