"""Each HuggingFace family's reader: which ``config.json`` fields set the shapes the planner
prices, and the defaults its transformers configuration class gives the absent ones
(``hf_config`` reads the file, dispatches on ``model_type`` and checks each field). The
field meanings are those of the families' configuration classes in HuggingFace
transformers (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig,
Qwen3Config, Qwen3MoeConfig, GptOssConfig, Gemma3TextConfig, Glm4MoeConfig) and of
DeepSeek's own DeepseekV2Config / DeepseekV3Config published with the weights.

Left out on purpose, each far below the published precision of the parameter counts:
Qwen2's q/k/v biases (0.8M of Qwen2.5-72B's 72.7B), Qwen3's and Gemma 3's per-head q/k
norms, the MLA down-projections' norms, Qwen2-MoE's one-output shared-expert gate,
DeepSeek-V3's per-expert routing bias (gpt-oss's biases are not below it, and are
counted, as are its attention sinks, real parameters however few). Which layers attend over a sliding window, and how wide,
is read as each family's class sets it (``_windows``) and priced (``attention_window``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import PipesimError
from ..inputs import MAX_LAYERS
from .attention_window import FULL, SLIDING, read_layer_types

if TYPE_CHECKING:
    from .hf_fields import Fields


def _common(f: Fields) -> dict:
    # tie_word_embeddings defaults to false in every family read here but Gemma 3's (true)
    return {
        "layers": f.int("num_hidden_layers", hi=MAX_LAYERS),
        "hidden": f.int("hidden_size"),
        "heads": f.int("num_attention_heads"),
        "vocab": f.int("vocab_size"),
        "tied_embeddings": f.flag("tie_word_embeddings", f.config["model_type"] == "gemma3_text"),
    }


def gqa(f: Fields, head_dim_given: bool = False) -> dict:
    """Grouped-query attention. Llama, Mistral and Qwen2 derive the head size as
    hidden / heads unless ``head_dim`` is given (a null one too: configs saved by newer
    transformers write it out); Qwen3 always gives it (Qwen3-32B:
    128, not 5120 / 64 = 80), so its readers require it."""
    out = _common(f)
    if head_dim_given or f.config.get("head_dim") is not None:  # null: derived, as their classes do
        head_dim = f.int("head_dim")
    elif out["hidden"] % out["heads"]:
        raise PipesimError(
            f"{f.where}: hidden_size {out['hidden']} is not a multiple of num_attention_heads {out['heads']}; give head_dim"
        )
    else:
        head_dim = out["hidden"] // out["heads"]
    # num_key_value_heads null is multi-head attention: every family's class sets it to
    # num_attention_heads then ("for backward compatibility": Llama 1/2-era configs), and so
    # does an absent one where the class's default is None (LlamaConfig); the others take
    # their class's default (KV_DEFAULTS)
    kind = f.config["model_type"]
    absent = "num_key_value_heads" not in f.config and kind in KV_DEFAULTS
    kv = KV_DEFAULTS[kind] if absent else f.get("num_key_value_heads", out["heads"], lo=1)
    if out["heads"] % kv:  # each key/value head serves heads / kv query heads
        shares = [n for n in range(1, out["heads"] + 1) if out["heads"] % n == 0]
        raise f.refuse(
            f"num_key_value_heads {kv}{f' (absent: its {kind} class default)' if absent else ''} must divide "
            f"num_attention_heads {out['heads']} ({', '.join(map(str, shares[:12]))}{' ...' if len(shares) > 12 else ''})"
        )
    out["attention"] = {"kind": "gqa", "kv_heads": kv, "head_dim": head_dim}
    out.update(_windows(f, out["layers"]))
    return out


def _windows(f: Fields, layers: int) -> dict:
    """``sliding_window`` and, where only some layers use it, ``layer_types``, as each
    family's configuration class sets them (transformers, src/transformers/models/*/
    configuration_*.py). Mistral and Mixtral attend over sliding_window tokens on every
    layer when it is set (null: the whole sequence; MistralConfig's default 4096,
    MixtralConfig's None; MistralConfig ignores a layer_types, with a warning). Qwen's
    window applies only with use_sliding_window (default false), and then on the layers
    its layer_types names, or by the class's rule: Qwen2Config and Qwen3Config the layers
    from max_window_layers (default 28) on, Qwen2MoeConfig the even-numbered layers below
    it; Qwen3MoeConfig has no layer_types and Qwen3MoeAttention takes sliding_window on
    every layer (modular_qwen3_moe.py). GptOssConfig: sliding_window 128,
    layer_types alternating from a sliding layer. Gemma3TextConfig: sliding_window 4096,
    every layer but each sliding_window_pattern-th (default 6: five local, one global).
    Only the layers named
    "sliding_attention" attend over the window, and only when it is set."""
    kind = f.config["model_type"]
    if not f.flag("use_sliding_window", not kind.startswith("qwen")):
        return {}
    if "sliding_window" not in f.config:  # absent: the class's default
        window = WINDOW_DEFAULTS.get(kind, 0)
    else:  # null: no window (each class then attends over the whole sequence)
        window = f.get("sliding_window", 0)
    if not window:
        return {}
    given = f.config.get("layer_types")
    if given is not None and kind not in ("mistral", "mixtral", "qwen3_moe"):
        types = list(read_layer_types(given, layers, f.where))
    elif kind in ("qwen2", "qwen3"):
        first = f.get("max_window_layers", 28)
        types = [SLIDING if i >= first else FULL for i in range(layers)]
    elif kind == "qwen2_moe":
        below = f.get("max_window_layers", 28)
        types = [SLIDING if (i + 1) % 2 and i < below else FULL for i in range(layers)]
    elif kind == "gpt_oss":
        types = [SLIDING if (i + 1) % 2 else FULL for i in range(layers)]
    elif kind == "gemma3_text":
        every = f.get("sliding_window_pattern", 6, lo=1)
        types = [SLIDING if (i + 1) % every else FULL for i in range(layers)]
    else:
        types = [SLIDING] * layers
    if SLIDING not in types:
        return {}
    return {"sliding_window": window} if set(types) == {SLIDING} else {"sliding_window": window, "layer_types": types}


def _dense(f: Fields, head_dim_given: bool = False) -> dict:
    # every family here has a gated MLP (gate, up and down: three hidden x ffn matrices)
    out = gqa(f, head_dim_given)
    out["mlp"] = {"dense_ffn": f.int("intermediate_size"), "activation": "swiglu"}
    return out


def routed(f: Fields, experts_key: str, ffn_key: str) -> dict:
    """The ``[moe]`` table's routed experts: how many, how wide, and how many a token reaches."""
    experts, top_k = f.int(experts_key), f.int("num_experts_per_tok")
    if top_k > experts:
        raise f.refuse(
            f"num_experts_per_tok {top_k} exceeds {experts_key} {experts}; a token reaches at most every routed expert"
        )
    return {"experts": experts, "expert_ffn": f.int(ffn_key), "top_k": top_k}


def some_moe(f: Fields, moe: list[bool], why: str, fix: str) -> None:
    """Refuse a MoE config whose every layer is dense: its experts would be planned for
    (expert parallelism, all-to-alls) though no layer runs them."""
    if not any(moe):
        raise f.refuse(f"{why} leaves none of its {len(moe)} layers an MoE layer; {fix}")


def moe_mlp(f: Fields, moe: list[bool], dense_key: str) -> dict:
    """The ``[mlp]`` table of a config whose layers ``moe`` marks MoE: the pattern as
    Megatron's per-layer moe_layer_freq list (moe_layers.py), and the dense layers' width
    from ``dense_key`` where some layer is dense."""
    out = {"moe_layer_freq": [int(x) for x in moe], "activation": "swiglu"}
    if not all(moe):
        out["dense_ffn"] = f.int(dense_key)
    return out


def _mixtral(f: Fields) -> dict:
    out = gqa(f)
    out["mlp"] = {"dense_layers": 0, "activation": "swiglu"}
    # Mixtral's experts are full-size MLPs: intermediate_size is each expert's width
    out["moe"] = routed(f, "num_local_experts", "intermediate_size")
    return out


def _qwen_moe_layers(f: Fields, layers: int) -> list[bool]:
    """Which layers of a Qwen MoE are MoE layers: Qwen2MoeDecoderLayer and
    Qwen3MoeDecoderLayer (transformers' modeling_qwen2_moe.py, modeling_qwen3_moe.py) make
    layer i one when i is not in ``mlp_only_layers`` and (i + 1) % ``decoder_sparse_step``
    == 0 (step 2: layers 1, 3, 5, ...); the others are dense, intermediate_size wide."""
    step = f.get("decoder_sparse_step", 1, lo=1)
    only = f.config.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise PipesimError(f"{f.where}: mlp_only_layers must be a list of layer numbers, got {only!r}")
    listed = set(only)
    return [i not in listed and (i + 1) % step == 0 for i in range(layers)]


def _qwen_moe(f: Fields, shared: bool) -> dict:
    out = gqa(f, head_dim_given=not shared)  # qwen3_moe gives head_dim; qwen2_moe derives it
    moe = _qwen_moe_layers(f, out["layers"])
    dense_type = "qwen2" if shared else "qwen3"
    some_moe(
        f, moe, f"mlp_only_layers with decoder_sparse_step {f.get('decoder_sparse_step', 1, lo=1)}",
        f"for the dense model it describes give model_type {dense_type!r} (intermediate_size is its width)",
    )  # fmt: skip
    out["mlp"] = moe_mlp(f, moe, "intermediate_size")
    out["moe"] = routed(f, "num_experts", "moe_intermediate_size")
    ffn = out["moe"]["expert_ffn"]
    if shared:
        # Qwen2-MoE's one shared expert is shared_expert_intermediate_size wide; pipesim
        # counts shared experts of the routed width (Qwen2-57B-A14B: 20480 = 8 x 2560)
        width = f.int("shared_expert_intermediate_size", lo=0)
        if width % ffn:
            raise PipesimError(
                f"{f.where}: shared_expert_intermediate_size {width} is not a multiple of moe_intermediate_size {ffn}; "
                "pipesim counts shared experts of the routed experts' width"
            )
        out["moe"]["shared_experts"] = width // ffn
    return out


def _deepseek(f: Fields) -> dict:
    out = _common(f)
    out["attention"] = {
        "kind": "mla",
        "q_lora_rank": f.get("q_lora_rank", 0, required=True),  # null: no query compression (V2-Lite)
        "kv_lora_rank": f.int("kv_lora_rank"),
        "qk_rope_dim": f.int("qk_rope_head_dim"),
        "qk_nope_dim": f.int("qk_nope_head_dim"),
        "v_head_dim": f.int("v_head_dim"),
    }
    out.update(_deepseek_moe(f, out["layers"], "DeepSeek-V2 and V3: 1 and 3"))
    return out


def _deepseek_moe(f: Fields, layers: int, example: str) -> dict:
    """DeepSeek's MoE stack, which GLM-4.5 (Glm4MoeMoE, Glm4MoeTopkRouter) repeats: the
    first first_k_dense_replace layers dense of intermediate_size, the rest n_routed_experts
    of moe_intermediate_size reached by num_experts_per_tok, with n_shared_experts every
    token passes through (one MLP moe_intermediate_size x n_shared_experts wide in both
    families: the weights and multiplies of that many experts), group-limited routing and
    num_nextn_predict_layers MTP modules. ``example`` names the family's dense prefixes.

    Layer i is an MoE layer when i >= first_k_dense_replace and i % moe_layer_freq == 0, as
    DeepSeek's own modeling code shipped with the weights builds it and vLLM reads it
    (vllm-project/vllm, vllm/model_executor/models/deepseek_v2.py, DeepseekV2DecoderLayer);
    transformers' DeepseekV2DecoderLayer (modular_deepseek_v2.py) and Glm4MoeDecoderLayer
    test first_k_dense_replace alone: the same layers wherever moe_layer_freq is 1 or
    absent, as in the DeepSeek-V2/V3, Kimi K2 (1) and GLM-4.5 (absent) configs in tests/data/hf."""
    kind = f.config["model_type"]
    given = MOE_DEFAULTS.get(kind, {})

    def count(key: str) -> int:  # absent or null: the class's default where pipesim takes it; DeepSeek's must be given
        return f.get(key, given[key]) if key in given else f.int(key, lo=0)

    dense, freq = count("first_k_dense_replace"), f.get("moe_layer_freq", 1, lo=1)
    moe = [i >= dense and i % freq == 0 for i in range(layers)]
    some_moe(
        f, moe, f"first_k_dense_replace {dense}" + (f" with moe_layer_freq {freq}" if freq != 1 else ""),
        f"give first_k_dense_replace below num_hidden_layers {layers} ({example})",
    )  # fmt: skip
    out = {"mlp": moe_mlp(f, moe, "intermediate_size")}
    out["moe"] = {**routed(f, "n_routed_experts", "moe_intermediate_size"), "shared_experts": count("n_shared_experts")}
    # Group-limited routing: the routed experts form n_group groups and a token reaches
    # experts of topk_group of them. DeepSeek-V2 (section 2.2.2, "device-limited
    # routing", M = 3) and V3 (section 2.1.2, "node-limited routing", M = 4) state the
    # groups as devices and nodes; a token on at most M devices reaches at most M nodes,
    # which is what max_nodes prices (the deepseek-v3 preset: 4). "greedy" ignores groups.
    # Absent fields take their class's defaults (GROUP_DEFAULTS, TOPK_METHOD_DEFAULTS).
    groups, reach = (f.get(k, GROUP_DEFAULTS[kind][i], lo=1) for i, k in enumerate(("n_group", "topk_group")))
    if reach > groups:  # DeepSeek's gate takes topk_group of the n_group group scores
        raise f.refuse(
            f"topk_group {reach} exceeds n_group {groups}; a token reaches at most every group (topk_group <= n_group)"
        )
    if f.config.get("topk_method", TOPK_METHOD_DEFAULTS[kind]) != "greedy" and reach < groups:
        out["moe"]["max_nodes"] = reach
    # multi-token prediction modules (V3: 1), trained with the model, on the last stage
    out["mtp_layers"] = f.get("num_nextn_predict_layers", 0)
    out["active_counts_embedding"] = False  # DeepSeek's activated counts leave the input embedding out
    return out


def _glm4_moe(f: Fields) -> dict:
    """Zhipu's GLM-4.5, GLM-4.5-Air and GLM-4.6 (transformers' Glm4MoeConfig and
    modeling_glm4_moe.py): grouped-query attention (Glm4MoeAttention: head_dim as given,
    else hidden / heads; GLM-4.5: 96 heads of 128 on a 5120 model) over DeepSeek-V3's MoE
    stack (``_deepseek_moe``; Glm4MoeTopkRouter is DeepSeek-V3's sigmoid router with its
    groups), and num_nextn_predict_layers MTP modules, which Glm4MoeConfig does not name
    (transformers skips their weights) and the checkpoint holds: GLM-4.5 technical report
    (arXiv 2508.06471, Table 1), one MTP layer in both models.

    Priced as without them, each a share of a memory-bound kernel or below a count's
    published digits: partial_rotary_factor (0.5 in both: rotary on half of each head;
    TransformerEngine's fused rope copies the unrotated tail into its output, fused_rope.cu
    "handle the tail", so q and k are read and written whole as ``elementwise`` prices
    them); use_qk_norm's per-head q and k norms (GLM-4.5: 256 weights a layer) and
    attention_bias's q, k and v biases (Glm4MoeAttention: no o bias; 14,336 a layer), left
    out of the count as Qwen3's norms and Qwen2's biases are (1.3M of GLM-4.5's 352.8B),
    and the router's e_score_correction_bias (a buffer). GLM-4.5 comes to 352.80B without
    its MTP layer (the checkpoint's 358.34B holds it and its own copy of the embedding and
    head) and 32.85B active as DeepSeek count it, without the input embedding."""
    out = gqa(f)
    out.update(_deepseek_moe(f, out["layers"], "GLM-4.5 and GLM-4.5-Air: 3 and 1"))
    return out


def _gpt_oss(f: Fields) -> dict:
    """OpenAI's gpt-oss (transformers' GptOssConfig and modeling_gpt_oss.py): grouped-query
    attention with head_dim given, q, k, v and o biases (attention_bias, default true) and
    a learned sink logit a head; every layer an MoE of num_local_experts experts, each a
    gated MLP intermediate_size wide with biases on both its projections
    (gate_up_proj_bias, down_proj_bias), reached by num_experts_per_tok a token through a
    router with a bias; untied embeddings. The biases are counted (39.8M of gpt-oss-120b's
    116.83B are its experts'), and the sinks (GptOssAttention's ``sinks``, one a head: 2,304
    in gpt-oss-120b, 1,536 in gpt-oss-20b), which keep both totals at the model card's.
    The experts' clamped SwiGLU (swiglu_limit, swiglu_alpha) moves the bytes a SwiGLU does.
    Active parameters: OpenAI's 5.13B (gpt-oss-120b) and 3.61B (gpt-oss-20b; model card,
    arXiv 2508.10925, Table 1) hold only with the unembedding and without the input
    embedding, as DeepSeek count (4.55B and 3.03B without either, 5.71B and 4.19B with both)."""
    out = gqa(f, head_dim_given=True)
    if not f.flag("attention_bias", True):
        raise f.refuse("attention_bias false: pipesim counts gpt-oss's biases on every projection; give true")
    out["biases"] = True
    out["attention_sinks"] = True
    out["mlp"] = {"dense_layers": 0, "activation": "swiglu"}
    out["moe"] = routed(f, "num_local_experts", "intermediate_size")
    out["active_counts_embedding"] = False
    return out


def _gemma3_text(f: Fields) -> dict:
    """Gemma 3's text model (transformers' Gemma3TextConfig; ``gemma3_text``: Gemma 3 1B,
    and the text_config inside the larger models' ``gemma3`` configs, which this reader
    does not open): grouped-query attention with head_dim given (256 in Gemma 3 1B, not
    1152 / 4), a gated GELU MLP (gate, up and down: the three multiplies and the bytes of
    pipesim's gated "swiglu"; the tanh GELU's arithmetic is the memory-bound kernel's),
    tied embeddings, five sliding-window layers to one global (``_windows``). Left out of
    the count: the per-head q/k norms and the two norms a layer beyond pipesim's two (73K
    in Gemma 3 1B). Gemma 3 1B comes to 302M embedding and 698M other parameters, as the
    Gemma 3 technical report (arXiv 2503.19786, Table 1) gives them."""
    return _dense(f, head_dim_given=True)


#: model_type -> (n_group, topk_group) when absent or null: DeepseekV3Config's 8 and 4 (Kimi
#: K2's kimi_k2 too: its config.json's auto_map names DeepseekV3Config);
#: DeepseekV2Config's None, one group reached of one; Glm4MoeConfig's 1 and 1
GROUP_DEFAULTS = {"deepseek_v2": (1, 1), "deepseek_v3": (8, 4), "kimi_k2": (8, 4), "glm4_moe": (1, 1)}

#: model_type -> topk_method when absent: DeepseekV2Config's "greedy"; DeepseekV3Config has
#: none (DeepseekV3TopkRouter always routes within topk_group of n_group groups), nor has
#: Glm4MoeConfig (Glm4MoeTopkRouter, the same router)
TOPK_METHOD_DEFAULTS = {"deepseek_v2": "greedy", "deepseek_v3": "noaux_tc", "kimi_k2": "noaux_tc", "glm4_moe": "noaux_tc"}

#: model_type -> its class's first_k_dense_replace and n_shared_experts when absent or null
#: (Glm4MoeConfig: 1 and 1); DeepSeek's configs must give both
MOE_DEFAULTS = {"glm4_moe": {"first_k_dense_replace": 1, "n_shared_experts": 1}}

#: model_type -> key/value heads when num_key_value_heads is absent (its class's default in
#: transformers: MistralConfig, MixtralConfig, GptOssConfig, Glm4MoeConfig and Llama4TextConfig 8, Gemma3TextConfig and
#: Qwen3MoeConfig 4, Qwen2Config and Qwen3Config 32, Qwen2MoeConfig 16; LlamaConfig's is
#: None, read as num_attention_heads)
KV_DEFAULTS = {
    "mistral": 8, "mixtral": 8, "gpt_oss": 8, "glm4_moe": 8, "llama4_text": 8, "gemma3_text": 4, "qwen3_moe": 4, "qwen2": 32,
    "qwen3": 32, "qwen2_moe": 16,
}  # fmt: skip

#: model_type -> sliding_window when absent (its class's default; null is no window):
#: MistralConfig, Gemma3TextConfig and the Qwen classes 4096 (Qwen's used only with
#: use_sliding_window), GptOssConfig 128; MixtralConfig's and LlamaConfig's none
WINDOW_DEFAULTS = {
    "mistral": 4096, "gpt_oss": 128, "gemma3_text": 4096, "qwen2": 4096, "qwen3": 4096, "qwen2_moe": 4096, "qwen3_moe": 4096,
}  # fmt: skip


#: model_type -> its reader, in the order the refusal lists them.
READERS = {
    "llama": _dense,
    "mistral": _dense,
    "mixtral": _mixtral,
    "qwen2": _dense,
    "qwen2_moe": lambda f: _qwen_moe(f, shared=True),
    "qwen3": lambda f: _dense(f, head_dim_given=True),
    "qwen3_moe": lambda f: _qwen_moe(f, shared=False),
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    # Moonshot's Kimi K2 (1.04T): DeepSeek-V3's architecture (its config.json names
    # DeepseekV3ForCausalLM) with 384 experts and 64 heads, under a model_type of its own so
    # that engines can tell it apart; Moonshot's deploy guidance (docs/deploy_guidance.md)
    # has frameworks without it rename model_type to deepseek_v3, which is what this reads
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "gemma3_text": _gemma3_text,
    "glm4_moe": _glm4_moe,
}
