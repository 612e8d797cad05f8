"""Models from HuggingFace ``config.json`` files.

``--model path/config.json`` (or any ``*.json``) is read here into the table a model
TOML file holds (see ``presets/models/``), which ``specs.model_from_table`` then checks
like any other model file. Only the fields that set the shapes the planner prices are
read; each family's reader (``hf_families``, ``hf_llama4``) names the fields it needs, and a missing
one is refused by name; this module finds the reader by ``model_type`` and reads each
field as a whole number in its range, or refuses it in one line.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import PipesimError
from ..inputs import load_json
from . import hf_families, hf_llama4
from .hf_fields import Fields

#: model_type -> its reader, in the order a refusal lists them
READERS = {**hf_families.READERS, **hf_llama4.READERS}


def is_hf_config(name_or_path: str) -> bool:
    """Whether ``--model`` names a HuggingFace config rather than a preset or TOML file:
    a ``.json`` file, or a folder of downloaded weights holding ``config.json``."""
    p = Path(name_or_path)
    return p.suffix == ".json" or p.name == "config.json" or (p / "config.json").is_file()


def model_table(path: str, bounds: dict[str, tuple[float, float]] | None = None) -> dict:
    """The model-file table of the HuggingFace config at ``path`` (or in the folder
    ``path``), named after the file (``qwen3-32b.json``: ``qwen3-32b``) or, for a
    ``config.json``, its folder (``Llama-3.1-8B/config.json``: ``Llama-3.1-8B``).
    ``bounds`` are the model file's limits by its field names (specs.BOUNDS), applied
    here to the config's fields so that a refusal names the key the user wrote."""
    p = Path(path)
    if p.is_dir():
        p = path = p / "config.json"
    config = load_json(path, "model config")
    name = (p.resolve().parent.name or "model") if p.name == "config.json" else p.stem
    return table_from_config(config, name, str(path), bounds)


def table_from_config(config: object, name: str, where: str, bounds: dict | None = None) -> dict:
    """A model-file table (``name``, dimensions, ``[attention]``, ``[mlp]``, ``[moe]``)
    from a parsed HuggingFace config; ``where`` names the file in errors. The reader
    checks what the model file's checks would (bounds, head and expert counts that fit
    together), so that every refusal of a config.json names its keys, not pipesim's."""
    if not isinstance(config, dict):
        raise PipesimError(f"{where}: a HuggingFace config is a JSON object, got {type(config).__name__}")
    kind = config.get("model_type")
    read = READERS.get(kind) if isinstance(kind, str) else None
    if read is None:
        supported = ", ".join(READERS)
        if kind is None:
            raise PipesimError(f"{where}: missing field 'model_type' (one of {supported})")
        text = config.get("text_config")
        inner = text.get("model_type") if isinstance(text, dict) else None
        if isinstance(inner, str) and inner in READERS:
            # an image-and-text model (Gemma 3 4B-27B's "gemma3") wraps a text model pipesim reads
            raise PipesimError(
                f"{where}: model_type {kind!r} is not a family pipesim reads, but its text_config is ({inner!r}): "
                "save text_config as a config.json of its own and give that"
            )
        raise PipesimError(f"{where}: model_type {kind!r} is not a family pipesim reads; supported: {supported}")
    return {"name": name, **read(Fields(config, where, bounds or {}))}
