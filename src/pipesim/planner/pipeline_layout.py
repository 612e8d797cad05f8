"""A pipeline split as Megatron-Core's ``--pipeline-model-parallel-layout`` writes it, read
into layers per model stage.

The string lists the model's stages in order (virtual stage v of rank r is stage
v x pp + r, as Megatron-Core indexes its layout), separated by ``|``: ``E`` the
embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction module, ``L`` the
output head and loss. ``(...)*n`` repeats a group and ``x*n`` one letter; commas are only
for reading. DeepSeek-V3 on H100 in Megatron-Bridge 25.09 runs ``Et|(tt|)*30mL``
(scripts/performance/run_script.py): the embedding and one layer, thirty stages of two,
then a stage with the MTP module and the loss and no layer at all.

Megatron-Core (megatron/core/transformer/pipeline_parallel_layer_layout.py) wants the
embedding first, the loss last, each once, and the MTP modules after every layer. pipesim
keeps the embedding on the first stage and the MTP modules and the head on the last, so a
layout that puts them elsewhere is refused here rather than simulated as something else.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import PipesimError

LETTERS = {"E": "the embedding", "t": "a transformer layer", "m": "an MTP module", "L": "the head and loss"}
_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_LETTER = re.compile(r"(.)\*(\d+)")


def is_layout(text: str) -> bool:
    """Whether a ``stage_split`` value is a layout string rather than a rule's name."""
    return text not in ("balanced", "even")


#: the most letters a layout may unroll to: far past any model's layers, short of a repeat
#: count that would fill memory ("(t|)*999999999")
MOST_LETTERS = 100_000


def expand(text: str) -> list[str]:
    """The layout's stages, each the string of its letters, repeats unrolled."""
    flat = text.replace(",", "").replace(" ", "")

    def repeat(g: re.Match) -> str:
        if len(g.group(1)) * int(g.group(2)) > MOST_LETTERS:
            raise PipesimError(
                f"stage_split {text!r}: {g.group(0)!r} repeats to more than {MOST_LETTERS:,} letters; "
                "a layout names one stage per pipeline stage"
            )
        return g.group(1) * int(g.group(2))

    while True:  # groups may hold groups: unroll the innermost until none is left
        unrolled = _GROUP.sub(repeat, flat)
        if unrolled == flat:
            break
        if len(unrolled) > MOST_LETTERS:
            raise PipesimError(f"stage_split {text!r} unrolls to more than {MOST_LETTERS:,} letters")
        flat = unrolled
    flat = _LETTER.sub(repeat, flat)
    if len(flat) > MOST_LETTERS:
        raise PipesimError(f"stage_split {text!r} unrolls to more than {MOST_LETTERS:,} letters")
    bad = sorted(set(flat) - set(LETTERS) - {"|"})
    if bad:
        known = ", ".join(f"{k} ({v})" for k, v in LETTERS.items())
        raise PipesimError(
            f"stage_split {text!r}: {''.join(bad)!r} is not a layout letter; a Megatron layout uses {known}, "
            "'|' between stages and (...)*n or t*n to repeat"
        )
    return flat.split("|")


def check_syntax(text: str) -> None:
    """Refuse a layout string that no model could take: wrong letters, the embedding not
    opening it or the loss not closing it, each once, an MTP module before a layer, or the
    embedding, MTP modules and loss off the end stages where pipesim keeps them."""
    stages = expand(text)
    flat = "".join(stages)
    where = f"stage_split {text!r}"
    if flat.count("E") != 1 or not flat.startswith("E"):
        raise PipesimError(f"{where}: the embedding (E) opens the first stage, once")
    if flat.count("L") != 1 or not flat.endswith("L"):
        raise PipesimError(f"{where}: the head and loss (L) close the last stage, once")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise PipesimError(f"{where}: MTP modules (m) come after every transformer layer (t)")
    if "m" in "".join(stages[:-1]):
        raise PipesimError(f"{where}: pipesim keeps the MTP modules (m) on the last stage, with the loss")


def layout_sizes(text: str, layers: int, mtp_layers: int, stages: int) -> list[int]:
    """Transformer layers per model stage (zero where a stage holds only the MTP modules
    and the loss, or only the embedding), checked against the model and the candidate's
    stage count."""
    check_syntax(text)
    parts = expand(text)
    where = f"stage_split {text!r}"
    if len(parts) != stages:
        raise PipesimError(f"{where} names {len(parts)} stages; this layout has {stages} (pp x chunks per rank)")
    sizes = [p.count("t") for p in parts]
    if sum(sizes) != layers:
        raise PipesimError(f"{where} places {sum(sizes)} transformer layers (t); the model has {layers}")
    if parts[-1].count("m") != mtp_layers:
        raise PipesimError(f"{where} places {parts[-1].count('m')} MTP modules (m); the model has {mtp_layers}")
    return sizes


@lru_cache(maxsize=64)
def stage_count(text: str) -> int:
    """The stages a layout names (a candidate with another count cannot take it). Kept by
    its text: the search asks it of every candidate it prepares."""
    return len(expand(text))


def split_text(stage_split: str, simulated: bool = False) -> str:
    """How the layers were split over the stages, for the report's assumptions
    (``simulated``: for the recipe, which lists the stages as the plan ran them)."""
    if stage_split == "even":
        return "the same number of layers on every stage (stage_split = even, as Megatron-LM 2021 and DeepSpeed split them)"
    if is_layout(stage_split):
        return f"the layers split as stage_split gives them (Megatron layout {stage_split})"
    if simulated:
        return "the stages the plan simulated, their layers balanced over what each rank runs"
    return "layers split so that the busiest rank carries the least"
