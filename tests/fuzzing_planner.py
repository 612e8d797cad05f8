"""Hostile planner inputs of the keys and flags added since tests/fuzzing.py was written:
cluster files with NVLink domains (``nvlink_domain``, ``domain_share``), rates typed in
the wrong unit or at their bounds, device memory; GPU counts on the NVL72 racks that are
and are not whole racks; training keys (``p2p_sync``, ``recompute_modules``,
``sliding_window_as_te_left``, ``cp_comm``, ZeRO and FSDP keys, ``tp_overlap``); pins
that break planner/runnable's rules; HuggingFace config.json files with missing or odd
fields; and cost files whose ``[memory]`` sizes a stage layer by layer.

``planner_case`` draws one such ``memory``, ``plan`` or ``simulate`` case; fuzzing.case
hands it a share of its cases. Each draw tags the case with the class it came from
(``RECENT_CLASSES``), so that a test can see every class reach the cases.
"""

from __future__ import annotations

import json
from pathlib import Path

from fuzzing import Case, Pick, _mutate_text

HF_CONFIGS = sorted((Path(__file__).resolve().parent / "data" / "hf").glob("*.json"))
RECENT_CLASSES = ("nvl72", "cluster-keys", "training-keys", "pins", "hf-config", "cost-layers")

# counts on 72-GPU domains of 4-GPU trays: whole racks (72, 1152), MLPerf's 64 of each
# rack (512, 2560), part trays (514, 1, 6), a count with no equal share (100, 520)
NVL72_GPUS = ["512", "520", "100", "514", "1152", "72", "36", "1", "64", "576", "2560", "1008", "4", "6", "68", "144"]
NVL72_HOSTILE = ["0", "-72", "9999996", "10000000", "10000004", "1e3", "72.0", "2147483648"]

# key -> (values in the key's range and unit, values out of it: the wrong unit, past a
# bound, the wrong type), as TOML text. Either may end in one line's refusal beside the
# other keys (a domain_share that does not divide gpus), and both kinds must.
CLUSTER_VALUES = {
    "nvlink_domain": (["72", "0", "8", "144", "36", "1000000"], ["70", "-72", "72.5", '"72"', "1000001", "true", "4", "2"]),
    "domain_share": (["64", "72", "0", "68", "40"], ["36", "66", "80", "-4", "3", "1000000", "64.0", '"64"']),
    "hbm_tbps": (["3.35", "8.0", "100", "0.001"], ["3350", "8000", "100.001", "1e5", "1e6", "0", "0.0009", "-1", "nan", "inf"]),
    "network_gbps": (["50", "200", "25", "0.001"], ["400", "200.5", "1600", "3200", "1e9", "0", "-50", "nan"]),
    "nvlink_gbps": (["360", "900", "1800", "720"], ["1801", "3600", "14400", "1e9", "0", "-1", "inf"]),
    "memory_mib": (["81559", "189471", "724", "1e10"], ["80", "723", "0", "1e11", "-1", "80.0", "nan", '"80GiB"']),
    "cuda_context_mib": (["723", "0"], ["1e10", "-1", "1e11"]),
    "nccl_mib_per_group": (["688", "0"], ["1e10", "-1", "1e11", "81559"]),
    "host_cpu": (['"arm"', '"intel"'], ['"ARM"', '"power"', "1"]),
    "gpus_per_node": (["4", "8", "1"], ["0", "3", "1025", "-4"]),
    "gpus": (NVL72_GPUS, NVL72_HOSTILE),
}

TRAINING_VALUES = {
    "p2p_sync": (['"none"', '"megatron-core"', '"megatron-2021"'], ['"megatron"', '""', "1", "true", '"Megatron-Core"']),
    "recompute_modules": (
        ['["layernorm"]', '["moe_act"]', '["layernorm", "moe_act"]', "[]"],
        ['["layernorm", "layernorm"]', '["core_attn"]', '"layernorm"', "[1]", "[[]]", '["LAYERNORM"]', "{a = 1}"],
    ),
    "sliding_window_as_te_left": (["true", "false"], ["1", '"yes"']),
    "cp_comm": (['"p2p"', '"all_gather"', '"a2a"', '"a2a+p2p"'], ['"ring"', "2", '"a2a+a2a"']),
    "zero": (["0", "1", "2", "3"], ["4", "-1", "1.5", '"1"']),
    "zero1_allreduce": (["true", "false"], ["2", '"true"']),
    "fsdp_reshard": (['"default"', '"always"', '"never"'], ['"sometimes"', "true"]),
    "fsdp_stream_pools": (["true", "false"], ['"x"']),
    "tp_overlap": (['"none"', '"backward"', '"all"', '"micro_pipeline"', "true", "false"], ['"yes"', "1", '"ALL"', "[]"]),
    "ub_fprop_rs": (['"none"', '"ring_exchange"', '"pipeline"'], ['"ring"']),
    "torch_context_parallel": (["true", "false"], ['"p2p"']),
    "fused_kernels": (['"te"', '"inductor"', '"megatron-jit"'], ['"triton"']),
    "stage_split": (
        ['"balanced"', '"even"', '"Et|(tt|)*15mL"'],
        ['"Et|(tt|)*99999999mL"', '"E|t*9999999|L"', '"(((t)*9)*9"', '"Et"', "1"],
    ),
    "micro_batch_sizes": (["[1, 2]", "[4]"], ["[]", "[0]", "[-1]", "[16000001]", '["1"]', "2"]),
    "moe_dispatcher": (['"deepep"', '"alltoall"'], ['"a2a"']),
    "moe_pad_to_capacity": (["false", "true"], ["1"]),
    "recompute": (['"selective"', '"full"', '"none"', '"every-2"', '"op"'], ['"every-0"', '"every-x"', '"auto2"']),
}

MODELS = ["llama3-8b", "mixtral-8x22b", "deepseek-v3"]
# the schedules whose rules planner/runnable states (multi-chunk, combined 1F1B) and their neighbours
PIN_SCHEDULES = ["1f1b", "interleaved-1f1b", "1f1b-overlap", "interleaved-1f1b-overlap", "dualpipe", "dualpipev", "zb-v", "v-half", "gpipe"]  # fmt: skip
# pins that break a runnable rule: virtual stages at pp1, combined 1F1B at ep1, with full
# recomputation, or with one chunk at pp > 1
VIOLATIONS = [
    ["--pp", "1", "--chunks", "2", "@interleaved-1f1b"],
    ["--pp", "1", "@dualpipev"],
    ["--pp", "1", "--chunks", "4", "@interleaved-1f1b-overlap"],
    ["--ep", "1", "@1f1b-overlap"],
    ["--ep", "1", "--etp", "8", "@interleaved-1f1b-overlap"],
    ["--ep", "8", "--recompute", "full", "@1f1b-overlap"],
    ["--pp", "2", "--chunks", "1", "--ep", "8", "@1f1b-overlap"],
    ["--pp", "1", "--ep", "8", "@1f1b-overlap"],
]


def _tag(pick: Pick, kind: str) -> None:
    pick.tags.add(kind)


def _keyed(pick: Pick, keys: dict[str, str], values: dict, tame: bool) -> None:
    """Set one to three keys of ``values``: in-range values in a tame case, else mostly out-of-range ones."""
    for _ in range(1 + pick.chance(0.5) + pick.chance(0.25)):
        key = pick.one(list(values))
        good, bad = values[key]
        keys[key] = pick.one(good if tame or not bad or pick.chance(0.3) else bad)


def _toml(keys: dict[str, str]) -> bytes:
    return "".join(f"{k} = {v}\n" for k, v in keys.items()).encode()


def cluster_file(pick: Pick) -> bytes:
    """A cluster file, an NVL72 rack's (4-GPU trays, 72-GPU domains) or a node's, its new
    keys set to in-range or out-of-range values, sometimes with one hostile change more."""
    rack = pick.chance(0.6)
    keys = {
        "name": '"c"', "gpu": '"G"', "gpus": pick.one(NVL72_GPUS) if rack else "8", "gpus_per_node": "4" if rack else "8",
        "bf16_tflops": "2500", "fp8_tflops": "5000", "memory_mib": "189471", "nvlink_gbps": "720", "network_gbps": "50",
        "hbm_tbps": "8.0",
    }  # fmt: skip
    if rack:
        keys["nvlink_domain"] = "72"
        if pick.chance(0.4):
            keys["domain_share"] = pick.one(["64", "72", "68", "36", "60"])
    _keyed(pick, keys, CLUSTER_VALUES, pick.tame)
    if not pick.tame and pick.chance(0.15):
        del keys[pick.one(list(keys))]
    _tag(pick, "cluster-keys")
    text = _toml(keys)
    return text if pick.tame or pick.chance(0.7) else _mutate_text(pick, text.decode())


def training_file(pick: Pick) -> bytes:
    keys = {"seq": "1024", "global_batch": "64"}
    _keyed(pick, keys, TRAINING_VALUES, pick.tame)
    _tag(pick, "training-keys")
    return _toml(keys)


def hf_config(pick: Pick) -> bytes:
    """A HuggingFace config.json of a family pipesim reads, with a field dropped or made
    odd, an unknown or wrapped model_type, or its form broken."""
    d = json.loads(pick.one(HF_CONFIGS).read_text())
    _tag(pick, "hf-config")
    if pick.tame:
        return json.dumps(d).encode()
    how = pick.one(["drop", "drop", "value", "value", "type", "type", "windows", "form"])
    key = pick.one(sorted(d))
    if how == "drop":
        d.pop(pick.one([k for k in ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size", "intermediate_size", "num_key_value_heads", "head_dim", "num_experts", "moe_intermediate_size", "n_routed_experts", "kv_lora_rank", "q_lora_rank", "first_k_dense_replace", "num_local_experts", "num_experts_per_tok", "n_shared_experts", "shared_expert_intermediate_size", "model_type") if k in d] or [key]))  # fmt: skip
    elif how == "value":
        text = json.dumps({**d, key: "@@"})
        odd = pick.one(["null", "0", "-1", "1.5", '"x"', "true", "[]", "{}", "1" + "0" * 30, "2147483648", "1e308", "9" * 5000, "NaN", "Infinity", "-0"])  # fmt: skip
        return text.replace('"@@"', odd, 1).encode()
    elif how == "type":
        d["model_type"] = pick.one(["bert", "gpt2", "", None, 5, [], "LLAMA", "gemma3", "llama4", "qwen3_next", "deepseek_v32"])
        if d["model_type"] == "gemma3" or pick.chance(0.2):
            d["text_config"] = pick.one(
                [{"model_type": "gemma3_text"}, {"model_type": 5}, "x", {**d, "model_type": "llama"}, None]
            )
    elif how == "windows":
        n = d.get("num_hidden_layers", 4) if isinstance(d.get("num_hidden_layers"), int) else 4
        field_, value = pick.one(
            [
                ("layer_types", ["sliding_attention"] * n),
                ("layer_types", ["sliding_attention"] * (n + 1)),
                ("layer_types", ["local"] * n),
                ("layer_types", "sliding_attention"),
                ("sliding_window", None),
                ("sliding_window", -1),
                ("use_sliding_window", "yes"),
                ("mlp_only_layers", [0, "1"]),
                ("mlp_only_layers", [n + 5]),
                ("mlp_only_layers", list(range(1, n, 2))),
                ("decoder_sparse_step", 0),
                ("sliding_window_pattern", 0),
                ("max_window_layers", -1),
                ("topk_group", 10**6),
                ("moe_layer_freq", 2),
            ]
        )
        d[field_] = value
    else:
        return pick.one([b"", b"[]", b"5", b'"x"', b"null", b"{", b"\xff\xfe", b"[" * 100_000, json.dumps(d).encode()[:-30]])
    return json.dumps(d).encode()


def cost_file(pick: Pick) -> bytes:
    """A cost file with ``[memory]``, whose sizes an overlapped pair takes layer by layer
    (as many layers as the top-level ``layers``): many layers, a list where a count goes,
    or a per-layer ``layers`` list in ``[memory]`` (too long, negative, not numbers)."""
    layers = pick.one(
        ["1", "2", "8", "61"] if pick.tame else ["1", "2", "8", "61", "1000", "10000", "10001", "0", "[1, 2]", "2.5"]
    )
    text = f"layers = {layers}\np2p = 0.05\n[layer]\nattn_f = 1.0\nmlp_f = 1.0\ndispatch_f = 0.5\ncombine_f = 0.5\n"
    text += "[memory]\nhidden = 4096\nheads = 32\nseq = 4096\ndp = 2\nzero = 1\n"
    if not pick.tame and pick.chance(0.5):
        sizes = pick.one(["[1e9, 1e9]", "[1e30, 1]", "[-1, 2]", '["x", 1]', "[]", "[[1, 2], [3]]", "[1e9]", "5", "[nan, 1]"])
        text += f"layers = {sizes}\n"
    if not pick.tame and pick.chance(0.3):
        text += pick.one(["micro_batch = 16000000\n", "params = 1e18\n", "flash_attention = true\n", "seq = 100000000\n"])
    _tag(pick, "cost-layers")
    return text.encode()


def _pins(pick: Pick, argv: list[str], command: str) -> None:
    """--pp, --tp, --cp, --ep, --etp, --chunks and a schedule, or a combination a runnable
    rule refuses."""
    schedule = pick.one(PIN_SCHEDULES)
    if pick.chance(0.35):
        chosen = pick.one(VIOLATIONS)
        schedule = chosen[-1][1:]
        argv += chosen[:-1]
    for flag, values in (("--tp", ["1", "2", "4", "8"]), ("--cp", ["1", "2", "4"]), ("--ep", ["1", "2", "8", "64"]), ("--etp", ["1", "2", "4"]), ("--chunks", ["1", "2", "4"])):  # fmt: skip
        if flag not in argv and pick.chance(0.3):
            argv += [flag, pick.one(values)]
    if command == "memory":
        if "--pp" not in argv:
            argv += ["--pp", pick.one(["1", "2", "4", "8"])]
        argv += ["--schedule", schedule]
    else:
        if "--pp" not in argv and pick.chance(0.6):
            argv += ["--pp", pick.one(["1", "2", "4", "8"])]
        argv += ["--schedules", schedule if pick.chance(0.7) else f"{schedule},{pick.one(PIN_SCHEDULES)}"]
    _tag(pick, "pins")


def planner_case(pick: Pick) -> Case:
    """A memory, plan or simulate case over the recent inputs."""
    files: dict[str, bytes] = {}
    outs: list[str] = []
    if pick.chance(0.2):
        m = pick.one(["1", "2", "4"])
        argv = ["simulate", "-s", pick.one(["dualpipev", "dualpipe", "1f1b-overlap", "1f1b"]), "--pp", pick.one(["2", "4"])]
        argv += ["-m", pick.one(["8", "16"]), "--components", "c.toml", "--json"] + (
            ["--memory-limit", m] if pick.chance(0.1) else []
        )
        files["c.toml"] = cost_file(pick)
        return Case(argv, files, (), tuple(sorted(pick.tags)))
    command = pick.one(["memory", "memory", "plan"])
    argv = [command]
    if pick.chance(0.3):
        name = pick.one(["cfg.json", "m/config.json", "m"])
        files["m/config.json" if name == "m" else name] = hf_config(pick)
        argv += ["--model", name]
    else:
        argv += ["--model", pick.one(MODELS)]
    if pick.chance(0.5):
        files["cluster.toml"] = cluster_file(pick)
        argv += ["--cluster", "cluster.toml"]
        if pick.chance(0.3):  # resized: the file's nodes and domains, another count
            argv += ["--gpus", pick.one(NVL72_GPUS)]
    else:
        argv += ["--cluster", pick.one(["gb200-nvl72", "gb300-nvl72"] * 3 + ["h100", "h800-2048"])]
        if argv[-1].endswith("nvl72") or pick.chance(0.3):
            argv += ["--gpus", pick.one(NVL72_GPUS if pick.tame or pick.chance(0.85) else NVL72_HOSTILE)]
            _tag(pick, "nvl72")
    if pick.chance(0.4):
        files["t.toml"] = training_file(pick)
        argv += ["--training", "t.toml"]
    if pick.chance(0.7):
        _pins(pick, argv, command)
    elif command == "memory":
        argv += ["--pp", pick.one(["1", "2", "4"])]
    if command == "plan" and pick.chance(0.3):
        argv += ["-o", pick.one(["out.md", "out.json"])]
        outs.append(argv[-1])
    if pick.chance(0.5) and "-o" not in argv:
        argv.append("--json")
    return Case(argv, files, tuple(outs), tuple(sorted(pick.tags)))
