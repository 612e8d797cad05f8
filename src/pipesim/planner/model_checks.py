"""A model file's cross-field checks: what specs.model_from_table refuses once every
field has its type and range."""

from __future__ import annotations

from ..errors import PipesimError
from ..inputs import MAX_LAYERS
from .attention_window import check_windows

#: Most layers and MTP modules, together, of a model the planner takes (specs bounds each
#: field by it too): its search prices every layout's stage splits over the layers, and
#: its time grows faster than the layers do (about as their square). Llama 3 8B's shape
#: on 1024 H100s, PIPESIM_CACHE=off, took 10 s of CPU at 250 layers, 36-38 s at 500 and
#: 158 s at 1,000 (docs/limits.md): 500 keeps a plan under about a minute. The largest
#: public models have about 130 layers (Llama 3 405B: 126).
MAX_MODEL_LAYERS = min(MAX_LAYERS, 500)


#: what each key a model file must give holds, with a published model's value as the
#: example: Llama 3 8B's shape (Meta 2024, "The Llama 3 Herd of Models", Table 3; the
#: llama3-8b preset) and DeepSeek-V3's experts (arXiv 2412.19437, section 4.2: 256 routed
#: experts 2048 wide, 8 of them a token). "missing field 'hidden'" alone left the user to
#: find which width it is.
REQUIRED = {
    "name": 'the model\'s name in reports, e.g. name = "my-llama"',
    "layers": "transformer layers, e.g. layers = 32 (Llama 3 8B)",
    "hidden": "the model width (d_model), e.g. hidden = 4096 (Llama 3 8B)",
    "heads": "attention (query) heads a layer, e.g. heads = 32 (Llama 3 8B)",
    "vocab": "the vocabulary's tokens, e.g. vocab = 128256 (Llama 3 8B)",
    "experts": "routed experts a MoE layer, e.g. experts = 256 (DeepSeek-V3)",
    "expert_ffn": "an expert's inner width, e.g. expert_ffn = 2048 (DeepSeek-V3)",
    "top_k": "routed experts a token goes to, e.g. top_k = 8 (DeepSeek-V3)",
}


def check_model_keys(table, keys: tuple[str, ...], where: str) -> None:
    """Refuse a model file's table that leaves out one of ``keys``, saying what it holds."""
    if not isinstance(table, dict):
        return
    for key in keys:
        if key not in table:
            raise PipesimError(f"{where}: missing field {key!r}: give {REQUIRED[key]}")


def check_model(m, where: str) -> None:
    """Refuse, in one line naming the file and the key, a model (a ``specs.Model``, which
    specs hands here once built: this module does not import specs back) whose fields do
    not fit together (each field's own type and range are checked as it is read)."""
    for key in ("layers", "hidden", "heads", "vocab"):
        if getattr(m, key) < 1:
            raise PipesimError(f"{where}: {key} must be >= 1, got {getattr(m, key)}")
    if m.layers + m.mtp_layers > MAX_MODEL_LAYERS:  # each MTP module is priced as one more layer (layer_costs.mtp_costs)
        raise PipesimError(
            f"{where}: layers {m.layers} and mtp_layers {m.mtp_layers} make {m.layers + m.mtp_layers} modules, above the "
            f"planner's limit of {MAX_MODEL_LAYERS} together; give fewer layers or MTP modules"
        )
    if m.attention.kind not in ("gqa", "mla"):
        raise PipesimError(f'{where} [attention]: kind must be "gqa" or "mla", got {m.attention.kind!r}')
    if m.attention.kind == "gqa" and not m.attention.head_dim and m.hidden < m.heads:
        # the per-head size defaults to hidden / heads: fewer than one unit per head is no model
        raise PipesimError(
            f"{where}: hidden {m.hidden} is smaller than heads {m.heads}; give hidden >= heads (or [attention] head_dim)"
        )
    kv = m.attention.kv_heads
    if m.attention.kind == "gqa" and kv and (kv > m.heads or m.heads % kv):
        # grouped-query attention shares each key/value head among heads / kv_heads query heads
        raise PipesimError(f"{where} [attention]: kv_heads must divide heads = {m.heads} (from 1 to {m.heads}), got {kv}")
    if m.attention.kind == "mla" and not (
        m.attention.kv_lora_rank and m.attention.v_head_dim and m.attention.qk_nope_dim + m.attention.qk_rope_dim
    ):
        raise PipesimError(f"{where} [attention]: mla needs kv_lora_rank, qk_nope_dim, qk_rope_dim and v_head_dim")
    if m.alibi and (m.rotary or m.attention.kind == "mla"):
        # one position scheme per model: ALiBi biases the scores, rotary turns q and k
        raise PipesimError(f"{where}: alibi = true needs rotary = false and gqa attention (ALiBi replaces rotary positions)")
    if m.activation not in ("swiglu", "gelu"):
        raise PipesimError(f'{where}: activation must be "swiglu" or "gelu", got {m.activation!r}')
    check_windows(m.layers, m.sliding_window, m.attention_chunk, m.layer_types, where)
    moe = m.moe_layers
    if list(moe) != sorted(set(moe)) or (moe and not 0 <= moe[0] <= moe[-1] < m.layers):
        # files are read into this shape (moe_layers.read_moe_layers); a Model built in Python may not be
        raise PipesimError(f"{where}: moe_layers must be distinct layer indices from 0 to {m.layers - 1}, ascending")
    if len(moe) < m.layers and not m.dense_ffn:
        which = f"{m.layers - len(moe)} of its {m.layers} layers are" if moe else "every layer is"
        raise PipesimError(f"{where} [mlp]: {which} dense, so give dense_ffn = <width>, the dense MLP's inner width in elements")
    if m.moe is None and moe:
        raise PipesimError(f"{where}: MoE layers need a [moe] table")
    if m.moe is not None and not (1 <= m.moe.top_k <= m.moe.experts):
        raise PipesimError(f"{where} [moe]: top_k must be between 1 and experts={m.moe.experts}, got {m.moe.top_k}")
    if m.moe is not None and not moe:
        # experts no layer runs would still be planned for (expert parallelism, all-to-alls)
        raise PipesimError(f"{where}: [moe] is given but no layer is an MoE layer; drop [moe] for a dense model")
    if m.moe is not None and m.moe.expert_ffn < 1:  # an expert of no width holds and computes nothing
        raise PipesimError(f"{where} [moe]: expert_ffn must be >= 1 (each expert's inner width), got {m.moe.expert_ffn}")


#: keys only a model file has, and keys only a cluster file has: either in the other file
#: means the two paths were swapped (--model h100.toml), which "unknown key" left unsaid
MODEL_ONLY = ("layers", "hidden", "heads", "vocab")
CLUSTER_ONLY = ("gpus", "gpus_per_node", "bf16_tflops", "memory_mib")


def swapped_file(table, where: str, given_as: str) -> None:
    """Refuse a cluster file given to --model, or a model file given to --cluster, in one
    line saying which flag takes it (``given_as``: "model" or "cluster")."""
    if not isinstance(table, dict):
        return
    other, flag = (CLUSTER_ONLY, "--cluster") if given_as == "model" else (MODEL_ONLY, "--model")
    found = [k for k in other if k in table]
    if found:
        kind = "cluster" if given_as == "model" else "model"
        raise PipesimError(f"{where} is a {kind} file ({', '.join(found)}), given to --{given_as}: give it to {flag}")
