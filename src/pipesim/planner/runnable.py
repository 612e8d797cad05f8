"""What no trainer runs: schedule and layout combinations the search leaves out and the
recipe refuses, each rule written once here and worded as both say it.

Pure functions of plain values (no results, no plans), so that the search
(``candidates``) and the recipe (``megatron_flags``) can both ask them."""

from __future__ import annotations

#: combined 1F1B (Megatron's EP-overlapped 1F1B), under the names pipesim gives it
COMBINED = ("1f1b-overlap", "interleaved-1f1b-overlap")


def chunks_problem(pp: int, chunks: int) -> str | None:
    """Why ``chunks`` model chunks on each of ``pp`` pipeline ranks cannot run, or None.

    More than one chunk per rank (interleaved, V and dual placements) is a pipeline of
    virtual stages, and neither trainer pipelines one rank: Megatron-Core raises
    "pipeline-model-parallel size should be greater than 1 with interleaved schedule"
    where virtual stages are asked for at pp1 (megatron/core/parallel_state.py,
    initialize_model_parallel, NVIDIA/Megatron-LM d98e8a6), and torchtitan builds no
    pipeline schedule at pp1 (ParallelDims.pp_enabled is pp > 1; trainer.py then runs
    the micro-batches one after another as gradient accumulation: pytorch/torchtitan
    b5bcd76)."""
    if pp == 1 and chunks > 1:
        return (
            "more than one chunk per rank needs pp 2 or more: Megatron-Core refuses virtual pipeline stages at pp1 "
            "(parallel_state: pipeline-model-parallel size should be greater than 1 with interleaved schedule) "
            "and torchtitan runs no pipeline schedule there; at pp1 one-chunk schedules run (1f1b, 1f1b-overlap, "
            "gpipe, zb-h1, ...)"
        )
    return None


#: Megatron-LM's rules for combined 1F1B, by name, in the order a refusal states them
COMBINED_RULES = ("ep", "recompute", "chunks")


def combined_refusals(ep: int, recompute: str, pp: int = 1, chunks: int = 1) -> tuple[str, ...]:
    """Every rule by which Megatron-LM refuses combined 1F1B (``--overlap-moe-expert-parallel-comm``)
    at this expert degree, recomputation, pipeline depth and chunks per rank, by name
    (``COMBINED_RULES``), or () where it runs. TransformerConfig.__post_init__
    (megatron/core/transformer/transformer_config.py, d98e8a6) asserts, under that flag:

    - ``ep``: ``expert_model_parallel_size > 1`` ("only supported with expert model
      parallelism": expert tensor parallelism does not count, so ep1 x etp8 is refused);
    - ``recompute``: ``recompute_granularity != 'full'`` (with no recompute method or layer count);
    - ``chunks``: virtual pipeline stages wherever pp > 1
      (``virtual_pipeline_model_parallel_size is not None``, which megatron/training/
      arguments.py sets to None at one chunk a rank: one-chunk combined 1F1B runs at pp1 alone)."""
    broken = {"ep": ep == 1, "recompute": recompute == "full", "chunks": pp > 1 and chunks < 2}
    return tuple(rule for rule in COMBINED_RULES if broken[rule])


def combined_reason(rule: str) -> str:
    """The refusal of combined 1F1B for one of ``COMBINED_RULES``, as the search and the recipe word it."""
    if rule == "chunks":
        return (
            "Megatron-LM overlaps the expert all-to-all (combined 1F1B) only with virtual stages when pp > 1 "
            "(TransformerConfig: virtual_pipeline_model_parallel_size must be specified): use interleaved-1f1b-overlap"
        )
    why = {
        "ep": "without expert parallelism (ep1; expert tensor parallelism does not count)",
        "recompute": "with full recomputation",
    }
    return (
        f"Megatron-LM refuses --overlap-moe-expert-parallel-comm (combined 1F1B) {why[rule]}: it needs "
        "--expert-model-parallel-size above 1 and recomputation selective or none"
    )


def combined_problem(ep: int, recompute: str, pp: int = 1, chunks: int = 1) -> str | None:
    """Why Megatron-LM refuses combined 1F1B here (the first rule of ``combined_refusals``
    broken: a dense model's reason is its ep1), or None."""
    broken = combined_refusals(ep, recompute, pp, chunks)
    return combined_reason(broken[0]) if broken else None


def candidate_problem(schedule: str, chunks: int, pp: int, ep: int, recompute: str) -> str | None:
    """The first of the rules above a candidate breaks (``chunks``: its placement's chunks
    per rank), or None: what the search leaves out."""
    return chunks_problem(pp, chunks) or (combined_problem(ep, recompute, pp, chunks) if schedule in COMBINED else None)
