"""A HuggingFace config's fields as the family readers (``hf_families``, ``hf_llama4``)
take them: each a whole number in its range, a flag, or a default where the family's
configuration class gives one, refused in one line naming the config's own key. Below
``hf_config``, which finds a config's reader, so that the readers need not reach back up
into it."""

from __future__ import annotations

from ..errors import PipesimError
from ..inputs import MAX_COUNT, number

#: config.json key -> the model file's field it becomes, for that field's bounds
SPEC_FIELD = {
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "vocab_size": "vocab",
    "intermediate_size": "dense_ffn",
    "moe_intermediate_size": "expert_ffn",
    "num_local_experts": "experts",
    "num_experts": "experts",
    "n_routed_experts": "experts",
    "num_experts_per_tok": "top_k",
    "first_k_dense_replace": "dense_layers",
    "num_nextn_predict_layers": "mtp_layers",
}


class Fields:
    """A config's fields, each read as a whole number in a stated range or refused in
    one line naming it."""

    def __init__(self, config: dict, where: str, bounds: dict):
        self.config, self.where, self.bounds = config, where, bounds

    def int(self, key: str, lo: int = 1, hi: int = MAX_COUNT) -> int:
        if key not in self.config:
            raise PipesimError(f"{self.where}: missing field {key!r} (a {self.config['model_type']} config has it)")
        hi = min(hi, int(self.bounds.get(SPEC_FIELD.get(key), (0, hi))[1]))
        return number(self.config[key], key, lo, hi, integer=True, where=self.where)

    def refuse(self, text: str) -> PipesimError:
        return PipesimError(f"{self.where}: {text}")

    def get(self, key: str, default: int, lo: int = 0, required: bool = False) -> int:
        """A field whose null (or, unless ``required``, absence) means ``default``, the
        value the family's configuration class gives it."""
        if required and key not in self.config:
            self.int(key)  # refused by name
        return default if self.config.get(key) is None else self.int(key, lo)

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if not isinstance(value, bool):
            raise PipesimError(f"{self.where}: {key} must be true or false, got {value!r}")
        return value
