"""The plan's stage split on torchtitan's command line, which cannot carry
``module_fqns_per_model_part``: tyro reads every value after that flag as one inner list
(a list of lists takes no second one), so the command line gives the split as the settings
torchtitan generates a split from instead, where they make the plan's.

Read from pytorch/torchtitan at b5bcd76 (2026-08-21), torchtitan/distributed/
pipeline_parallel.py: without ``module_fqns_per_model_part``, ``_get_pipeline_metadata``
takes ``pipeline_parallel_layers_per_stage`` L to make ceil((layers + first + last) / L)
stages (first and last: ``pipeline_parallel_first_stage_less_layers`` and
``..._last_stage_less_layers``, default 1 each), or without L one stage a rank for a
single-stage schedule and two for any other; ``_generate_llm_fqn_per_model_part`` then
deals layers + first + last "effective layers" out evenly, the remainder one each to the
first stages, the first stage's share less ``first`` and the last's less ``last``.
"""

from __future__ import annotations

import math

from .plan_stages import Part

#: torchtitan's defaults for the two weights (ParallelismConfig at b5bcd76)
DEFAULT_LESS = 1


def generated(stages: int, layers: int, first: int, last: int) -> list[int] | None:
    """Layers per stage as ``_generate_llm_fqn_per_model_part`` deals them, or None where
    it raises (a stage left empty, or a weight above the least share)."""
    effective = layers + first + last
    if stages < 2 or stages > effective:
        return None
    share, extra = divmod(effective, stages)
    if share == 0 or first > share or last > share:
        return None
    counts, left = [], layers
    for i in range(stages):
        want = share + (i < extra) - (first if i == 0 else last if i == stages - 1 else 0)
        take = max(0, min(want, left))
        counts.append(take)
        left -= take
    return counts


def stage_count(layers: int, first: int, last: int, per_stage: int | None, pp: int, one_stage: bool) -> int:
    """How many stages torchtitan makes (``_get_pipeline_metadata``)."""
    if per_stage is None:
        return pp * (1 if one_stage else 2)
    return math.ceil((layers + first + last) / per_stage)


def command_line_split(parts: list[Part], layers: int, pp: int, one_stage: bool) -> tuple[dict, str | None]:
    """(the ``parallelism`` settings that make torchtitan generate the plan's split, a note
    where none do). Tries the weights from the defaults outward, and
    ``pipeline_parallel_layers_per_stage`` only where the stage count needs it."""
    counts = [len(p.layers) for p in parts]
    stages = len(counts)
    # a weight is at most the least share, which a middle stage's count bounds where one is
    most = layers if stages == 2 else max(counts[1:-1]) + 1
    weights = sorted(
        ((f, la) for f in range(most + 1) for la in range(most + 1)),
        key=lambda w: (abs(w[0] - DEFAULT_LESS) + abs(w[1] - DEFAULT_LESS), w),
    )
    # the weights at which torchtitan makes this many stages without refusing them
    fits = [w for w in weights if _settings(w, stages, layers, pp, one_stage) is not None]
    exact = next((w for w in fits if generated(stages, layers, *w) == counts), None)
    if exact is not None:
        return _settings(exact, stages, layers, pp, one_stage), None
    # no weights give the split: the stage count at least, where some give that
    count = stages if fits else stage_count(layers, DEFAULT_LESS, DEFAULT_LESS, None, pp, one_stage)
    return (_settings(fits[0], stages, layers, pp, one_stage) if fits else {}), (
        f"the command line cannot carry the plan's split (module_fqns_per_model_part: tyro reads the flag's values "
        f"as one list), and no pipeline_parallel_first_stage_less_layers or _last_stage_less_layers makes torchtitan "
        f"generate its {stages} stages of {', '.join(map(str, counts))} layers: the command-line form runs "
        f"torchtitan's own split into {count} stages, the configuration function and the TOML form the plan's"
    )


def _settings(weights: tuple[int, int], stages: int, layers: int, pp: int, one_stage: bool) -> dict | None:
    """The settings that make torchtitan generate ``stages`` stages at these weights (the
    first and last stages' less layers), or None where no layers-per-stage does."""
    first, last = weights
    if generated(stages, layers, first, last) is None:
        return None
    settings = {}
    if stage_count(layers, first, last, None, pp, one_stage) != stages:
        per_stage = _per_stage(layers + first + last, stages)
        if per_stage is None:
            return None
        settings["pipeline_parallel_layers_per_stage"] = per_stage
    if first != DEFAULT_LESS:
        settings["pipeline_parallel_first_stage_less_layers"] = first
    if last != DEFAULT_LESS:
        settings["pipeline_parallel_last_stage_less_layers"] = last
    return settings


def _per_stage(effective: int, stages: int) -> int | None:
    """A ``pipeline_parallel_layers_per_stage`` that makes ``stages`` stages of
    ``effective`` layers, if one does."""
    per_stage = math.ceil(effective / stages)
    return per_stage if math.ceil(effective / per_stage) == stages else None
