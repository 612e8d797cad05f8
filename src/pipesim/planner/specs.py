"""Model, cluster and training specs: TOML files, validated, with shipped presets.

A spec is a name of a preset (``deepseek-v3``, ``h800-2048``, ...) or a path to a TOML
file of the same shape (see ``presets/``). Every field is checked on load; a missing,
unknown or negative field is one clear ``PipesimError`` naming the file and the field.
Every assumption the planner makes is a field of ``Training``, printed in the report.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, replace
from functools import cached_property
from pathlib import Path
from typing import get_type_hints

from ..errors import PipesimError
from ..inputs import MAX_COUNT, did_you_mean, known_keys, load_toml, number, shorten
from . import hf_config
from .attention_window import layer_chunk, layer_window, read_layer_types
from .cluster_checks import MAX_HBM_TBPS, MAX_NETWORK_GBPS, MAX_NVLINK_GBPS, check_cluster, check_rates, check_required
from .domains import job_share, neighbours, placement_problem
from .model_checks import MAX_MODEL_LAYERS, check_model, check_model_keys, swapped_file
from .moe_layers import read_moe_layers

# the run's fields live in training.py; specs is where callers import them from
from .training import (  # noqa: F401
    ATTENTION_BLOCK_ORDERS,
    CP_COMMS,
    FP8_CASTS,
    FP8_SCALINGS,
    FUSED_KERNELS,
    MOE_EXPERT_GEMMS,
    NORM_KERNELS,
    OPTIMIZER_STEPS,
    TP_OVERLAPS,
    Training,
    hashed_once,
)
from .training_checks import check_training  # noqa: F401

PRESETS = Path(__file__).parent / "presets"

#: the host CPUs NCCL's tuner tells apart (planner/nccl.py HOSTS) and the all-reduce
#: algorithms pipesim prices of NCCL's (its NCCL_ALGO names)
HOST_CPUS = ("intel", "amd", "arm")
NCCL_ALGORITHMS = ("ring", "tree")

#: The accepted range of each numeric field (smallest, largest; a count no model or run
#: can be without starts at 1, so that a wrong-typed one is told the range that holds);
#: others take 0 to MAX_COUNT (whole numbers) or 0 to 1e18. Past these no real model or cluster lies, and
#: the estimate's products would overflow or its loops over layers and GPUs never end.
BOUNDS = {
    "layers": (1, MAX_MODEL_LAYERS),
    "dense_layers": (0, MAX_MODEL_LAYERS),
    "mtp_layers": (0, MAX_MODEL_LAYERS),
    "hidden": (1, 10_000_000),
    "heads": (1, 1_000_000),
    "vocab": (1, 100_000_000),
    "dense_ffn": (0, 10_000_000),
    "expert_ffn": (0, 10_000_000),
    "experts": (0, 1_000_000),
    "top_k": (0, 1_000_000),
    "gpus": (1, 10_000_000),
    "gpus_per_node": (1, 1024),
    # rates and shares that times divide by: strictly positive, with a floor so that a
    # denormal (1e-300) cannot turn a step time into inf or nan
    "sms": (1, 100_000),
    "nvlink_domain": (0, 1_000_000),
    "domain_share": (0, 1_000_000),
    "comm_sms": (0, 100_000),
    "seq": (1, 100_000_000),
    "global_batch": (1, MAX_COUNT),
    # the run's tokens only scale its GPU-hours (a product, never summed over ops); 1e18 is
    # some ten thousand times the largest published run (Llama 3: 15.6e12, arXiv 2407.21783)
    "tokens": (0, 1e18),
    "sliding_window": (0, 100_000_000),  # as long as a sequence may be
    "attention_chunk": (0, 100_000_000),
    "bf16_tflops": (0.01, 1e7),
    "fp8_tflops": (0, 1e7),
    "hbm_gb": (0, 1e7),
    "memory_mib": (0, 1e10),
    "cuda_context_mib": (0, 1e10),
    "dp_overlap": (0, 1),
    "nccl_mib_per_group": (0, 1e10),
    # per GPU, in the units the names end in; the tops are past any GPU's (cluster_checks.py)
    "nvlink_gbps": (0.001, MAX_NVLINK_GBPS),
    "network_gbps": (0.001, MAX_NETWORK_GBPS),
    "hbm_tbps": (0.001, MAX_HBM_TBPS),
    "gemm_efficiency": (0.01, 1),
    "fp8_gemm_efficiency": (0.01, 1),
    "fp8_tensor_gemm_efficiency": (0.01, 1),
    "gemm_tile_fill_us": (0, 1e3),
    "attention_tile_rows": (1, 1_000_000),
    "attention_efficiency": (0.01, 1),
    "hbm_efficiency": (0.01, 1),
    "compute_efficiency": (0, 1),  # 0: the cluster's gemm_efficiency (its FP8 ones for FP8)
    "param_bytes": (0, 64),
    "grad_bytes": (0, 64),
    "grad_reduce_bytes": (0, 64),
    "optimizer_bytes": (0, 64),
    "p2p_latency_us": (0, 1e9),
    "zb_max_pending_backward": (0, 1_000_000),
    "nccl_base_us": (0, 1e6),
    "nvlink_hop_us": (0, 1e6),
    "network_hop_us": (0, 1e6),
    "network_share": (0, 1),
    "network_alltoall_share": (0, 1),
    "grad_accumulation_bytes": (0, 64),
    "logit_bytes": (0, 1024),
    "loss_forward_share": (0, 1),
    "loss_backward_copies": (0, 16),
    "kernel_floor_us": (0, 1e6),
    "host_us_per_kernel": (0, 1e6),
    "moe_layer_issue_ms": (0, 1e6),
}


@dataclass(frozen=True)
class Attention:
    kind: str = "gqa"  # "gqa" (MHA when kv_heads == heads) or "mla"
    kv_heads: int = 0  # gqa: key/value heads (0: as many as query heads)
    head_dim: int = 0  # gqa: per-head size (0: hidden / heads)
    q_lora_rank: int = 0  # mla: query down-projection rank
    kv_lora_rank: int = 0  # mla: key/value down-projection rank
    qk_rope_dim: int = 0  # mla: rotary part of each query/key head
    qk_nope_dim: int = 0  # mla: non-rotary part
    v_head_dim: int = 0  # mla: value head size


@dataclass(frozen=True)
class MoE:
    experts: int  # routed experts per MoE layer
    expert_ffn: int
    top_k: int
    shared_experts: int = 0
    max_nodes: int = 0  # node-limited routing: nodes a token may reach (0: no limit)


@hashed_once
@dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    heads: int
    vocab: int
    attention: Attention
    # the indices (from 0) of the MoE layers, ascending; the others have a dense MLP. A
    # model file gives them as [mlp] dense_layers (a prefix of dense layers) or Megatron's
    # moe_layer_freq (moe_layers.py); ask is_moe_layer, not this
    moe_layers: tuple[int, ...]
    dense_ffn: int
    moe: MoE | None = None
    tied_embeddings: bool = False
    activation: str = "swiglu"  # MLP: "swiglu" (3 matrices of hidden x ffn) or "gelu" (2, GPT-style)
    mtp_layers: int = 0  # multi-token prediction modules on the last stage (DeepSeek-V3: 1)
    rotary: bool = True  # rotary position embeddings on q and k; false: learned or ALiBi positions (GPT, BLOOM)
    # ALiBi: a per-head linear bias added to the attention scores instead of position
    # embeddings (BLOOM); its cost is the unfused attention's (compute.ALIBI_SCORE_BYTES)
    alibi: bool = False
    # tokens a query attends back over (Mistral 7B v0.1: 4096; 0: the whole sequence), on the
    # layers layer_types names "sliding_attention" (none given: all); attention_window.py
    sliding_window: int = 0
    layer_types: tuple[str, ...] = ()
    # tokens a chunk of chunked attention holds (Llama 4's attention_chunk_size: a query
    # sees only its own chunk's keys, up to itself; 0: none), on the layers layer_types
    # names "chunked_attention" (none given: all); attention_window.py
    attention_chunk: int = 0
    biases: bool = False  # every projection adds a bias (gpt-oss): counted, priced in its multiply
    # a learned sink logit a head on every layer, one more column of each softmax (gpt-oss;
    # Megatron-Core's softmax_type "learnable"): counted as parameters; the attention kernel
    # that takes them (Transformer Engine's cuDNN fused attention) is priced as without them
    attention_sinks: bool = False
    # whether the maker's published "activated parameters" count the input embedding, a row
    # lookup with no multiply (params.published_active_params): Mistral's and Qwen's do,
    # DeepSeek's do not (only without it do V2's 21B and V3's 37B come out)
    active_counts_embedding: bool = True

    def is_moe_layer(self, i: int) -> bool:
        """Whether decoder layer ``i`` (from 0) has experts."""
        return i in self.moe_layers

    def window(self, i: int) -> int:
        return layer_window(self.sliding_window, self.layer_types, i)

    def chunk(self, i: int) -> int:
        return layer_chunk(self.attention_chunk, self.layer_types, i)


@hashed_once
@dataclass(frozen=True)
class Cluster:
    name: str
    gpu: str
    gpus: int
    gpus_per_node: int
    bf16_tflops: float  # dense peak per GPU
    fp8_tflops: float  # dense peak per GPU (0: no FP8)
    hbm_gb: float  # device memory in decimal GB; a cluster file gives memory_mib, from which this is set
    nvlink_gbps: float  # GB/s (gigabytes) NCCL reaches per GPU, one direction, inside an NVLink domain
    network_gbps: float  # GB/s (gigabytes, not gigabits) of the NIC's line rate per GPU, one direction, between domains
    sms: int = 132
    hbm_tbps: float = 3.35  # HBM bandwidth per GPU, TB/s (data sheet)
    gemm_efficiency: float = 0.75  # achieved share of BF16 dense peak on large matrix multiplies
    fp8_gemm_efficiency: float = 0.6  # the same for FP8 (block-scaled, as in training)
    # the same for per-tensor scaled FP8 (Transformer Engine's current or delayed scaling,
    # torchao's tensorwise Float8): one scale per operand, cuBLAS's FP8 kernels
    fp8_tensor_gemm_efficiency: float = 0.7
    # fixed time each output tile of a BF16 multiply pays besides its k loop (pipeline fill,
    # epilogue), us; gemm_efficiency is then the share a tile's k loop runs at (compute.py
    # names the measurement). 0: every shape at gemm_efficiency
    gemm_tile_fill_us: float = 0.0
    # query rows one thread block of the fused attention forward holds (attention_grid.attention_grid_fill):
    # 128 in FlashAttention-2 on Ampere (kBlockM, flash_fwd_launch_template.h) and
    # FlashAttention-3 on Hopper; Blackwell's kernels hold two 128-row query tiles a block
    # (FlashAttention-4's flash_fwd_sm100.py, q_stage 2; CUTLASS example 77_blackwell_fmha)
    attention_tile_rows: int = 128
    memory_mib: float = 0.0  # device memory as nvidia-smi reports it (memory.total, MiB)
    cuda_context_mib: float = 723  # held by the CUDA context (device_memory.py gives the source)
    nccl_mib_per_group: float = 688  # NCCL buffers per communicator a rank uses (device_memory.py)
    gpu_speed_sd: float = 0.012  # spread of one SKU's GPU speeds, a share of the median (stragglers.py; 0: all equal)
    # NCCL's collectives by message size (nccl.py names the sources): a collective's base
    # latency and one hop a ring step or all-to-all peer (NCCL's LL ring constants, us), and
    # the share of network_gbps NCCL reaches on large rings and send/recv, and on an
    # all-to-all. Latencies 0, shares 1 and nccl_protocols false: bandwidth only
    nccl_base_us: float = 6.6
    nvlink_hop_us: float = 0.6
    network_hop_us: float = 2.7
    network_share: float = 0.96
    network_alltoall_share: float = 0.92
    # price each ring collective under NCCL's LL, LL128 and Simple protocols (tuning.cc's
    # latencies and bandwidth shares, nccl.py) and take the fastest, as NCCL's tuner does;
    # false: LL's latencies with the full bandwidth (the lower envelope)
    nccl_protocols: bool = True
    # the algorithms NCCL's tuner weighs for an all-reduce, as NCCL_ALGO names them: the
    # faster of Ring and Tree by message size (nccl.py); ["ring"]: the ring alone
    nccl_algorithms: tuple[str, ...] = ("ring", "tree")
    # the nodes' host CPU, one of HOST_CPUS: sets NCCL's network posting overhead and LL's
    # bandwidth cap between nodes (tuning.cc, nccl.py); "arm" (Grace) prices as "intel"
    host_cpu: str = "intel"
    # GPUs one NVLink fabric reaches (0: a node's): 72 on a GB200/GB300 NVL72 rack, whose
    # nodes (compute trays) hold 4; network_gbps is the link between domains
    nvlink_domain: int = 0
    # the job's GPUs in each NVLink domain it spans, whole nodes (0: the largest equal share
    # above half a domain that the GPU count allows, domains.py): 64 as NVIDIA's MLPerf
    # GB200 jobs run, 16 of each rack's 18 trays (sbatch --segment 16)
    domain_share: int = 0

    @property
    def nodes(self) -> int:
        return max(1, self.gpus // self.gpus_per_node)

    @cached_property  # read for every group priced; kept in the instance, not a field
    def domain(self) -> int:
        """The job's GPUs in each NVLink domain it uses, consecutive ranks filling one
        before the next: a node's without a larger fabric; on NVL72 racks the job's
        equal share of each (domains.job_share: 512 GPUs sit 64 a rack)."""
        if not self.nvlink_domain:
            return self.gpus_per_node
        return job_share(self.gpus, self.gpus_per_node, self.nvlink_domain, self.domain_share) or self.nvlink_domain

    def resized(self, gpus: int) -> Cluster:
        if gpus < 1:
            raise PipesimError(f"--gpus must be >= 1, got {gpus}")
        if gpus > self.gpus_per_node and gpus % self.gpus_per_node:
            near = " or ".join(map(str, neighbours(gpus, self.gpus_per_node, self.nvlink_domain, self.domain_share)))
            raise PipesimError(f"--gpus must be a multiple of the {self.gpus_per_node} GPUs per node (e.g. {near}), got {gpus}")
        problem = placement_problem(gpus, self.gpus_per_node, self.nvlink_domain, self.domain_share)
        if problem:
            raise PipesimError(f"--gpus {gpus} on {self.name}: {problem}")
        name = self.name if gpus == self.gpus else f"{self.name.split('-')[0]}-{gpus}"
        return replace(self, name=name, gpus=gpus)


# --------------------------------------------------------------------------------------
# loading


def preset_names(kind: str) -> list[str]:
    """The shipped presets of a kind ("model" or "cluster"): the files in presets/<kind>s/."""
    return sorted(x.stem for x in (PRESETS / f"{kind}s").glob("*.toml"))


def _read(kind: str, name_or_path: str) -> tuple[dict, str]:
    """The TOML table of a file path, or of a preset in presets/<kind>s/; a model may
    also be a HuggingFace config.json, read into the same table by ``hf_config``."""
    if kind == "model" and hf_config.is_hf_config(name_or_path):
        return hf_config.model_table(name_or_path, BOUNDS), name_or_path
    p = Path(name_or_path)
    if kind == "model" and p.is_dir():  # a folder is a model only as downloaded weights
        raise PipesimError(
            f"model {name_or_path!r} is a folder without config.json: give a model TOML file, a HuggingFace "
            "config.json or the folder holding it"
        )
    if p.suffix != ".toml" and not p.exists():
        p = PRESETS / f"{kind}s" / f"{name_or_path}.toml"
        if not p.exists():
            names = preset_names(kind)
            hint = did_you_mean(name_or_path, names)
            files = "a TOML file, a HuggingFace config.json" if kind == "model" else "a TOML file"
            raise PipesimError(f"unknown {kind} {name_or_path!r}{hint}: give {files} or one of {', '.join(names)}")
    return load_toml(p, f"{kind} spec"), str(p)


def _fill(cls, table: dict, where: str, required: tuple[str, ...] = ()):
    """Build ``cls`` from ``table``: known fields only, each of its declared type, numbers
    not negative, the ``required`` ones present."""
    if not isinstance(table, dict):
        header = f": write {where.rsplit(' ', 1)[-1]} on a line of its own, its keys below it" if where.endswith("]") else ""
        raise PipesimError(f"{where} must be a table, got {shorten(table)}{header}")
    hints = get_type_hints(cls)
    known_keys(table, hints, where)
    needed = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    for key in dict.fromkeys((*required, *needed)):
        if key not in table:
            raise PipesimError(f"{where}: missing field {key!r}")
    out = {}
    for key, value in table.items():
        want = hints[key]
        if want is bool:
            ok = isinstance(value, bool)
            what = "true or false"
        elif want is str:
            ok = isinstance(value, str)
            what = "a string"
        elif want == tuple[int, ...] and not isinstance(value, tuple):  # a tuple: read by the caller (moe_layers)
            ok = (
                isinstance(value, list)
                and bool(value)
                and len(value) <= 64
                and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_COUNT for x in value)
            )
            what = f"a list of up to 64 whole numbers from 1 to {MAX_COUNT:,}"
            value = tuple(value) if ok else value
        elif want in (int, float):
            lo, hi = BOUNDS.get(key, (0, MAX_COUNT if want is int else 1e18))
            value, ok = number(value, key, lo, hi, integer=want is int, where=where), True
        else:  # nested tables are filled by the caller
            ok, what = True, ""
        if not ok:
            raise PipesimError(f"{where}: {key} must be {what}, got {shorten(value)}")
        out[key] = value
    return cls(**out)


#: the keys of a model file's [mlp] table (moe_layers.py reads the first two)
MLP_KEYS = ("dense_layers", "moe_layer_freq", "dense_ffn", "activation")


def load_model(name_or_path: str) -> Model:
    return model_from_table(*_read("model", name_or_path))


def model_from_table(data: dict, where: str) -> Model:
    """A model from a table of a model file's shape (``where`` names it in errors)."""
    swapped_file(data, where, "model")
    data = dict(data)
    data.pop("training", None)
    data.pop("published", None)
    att = _fill(Attention, data.pop("attention", {}), f"{where} [attention]")
    mlp = data.pop("mlp", {})
    moe_t = data.pop("moe", None)
    check_model_keys(moe_t, ("experts", "expert_ffn", "top_k"), f"{where} [moe]")
    moe = _fill(MoE, moe_t, f"{where} [moe]", ("experts", "expert_ffn", "top_k")) if moe_t is not None else None
    if not isinstance(mlp, dict) or any(k not in MLP_KEYS for k in mlp):
        raise PipesimError(f"{where} [mlp]: expected {', '.join(MLP_KEYS[:-1])} and {MLP_KEYS[-1]}")
    for key in MLP_KEYS:
        if key in data:
            raise PipesimError(f"{where}: {key} belongs in the [mlp] table (under an [mlp] header)")
    known_keys(data, [k for k in get_type_hints(Model) if k not in ("attention", "moe", "moe_layers", *MLP_KEYS)], where)
    check_model_keys(data, ("name", "layers", "hidden", "heads", "vocab"), where)
    layers = number(data["layers"], "layers", *BOUNDS["layers"], integer=True, where=where)
    moe_layers = read_moe_layers(mlp, layers, moe is not None, where)
    dense_ffn = mlp.get("dense_ffn", 0)
    fields_ = {**data, "attention": att, "moe": moe, "moe_layers": moe_layers, "dense_ffn": dense_ffn}
    if "layer_types" in data:
        fields_["layer_types"] = read_layer_types(data["layer_types"], layers, where)
    if "activation" in mlp:
        fields_["activation"] = mlp["activation"]
    m = _fill(Model, fields_, where)
    check_model(m, where)
    return m


def load_cluster(name_or_path: str, gpus: int | None = None) -> Cluster:
    return cluster_from_table(*_read("cluster", name_or_path), gpus=gpus)


#: bytes of a MiB, the unit nvidia-smi reports device memory in
MIB = 2**20


def cluster_from_table(data: dict, where: str, gpus: int | None = None) -> Cluster:
    """A cluster from a table of a cluster file's shape, resized to ``gpus`` if given.

    Device memory is ``memory_mib``, as ``nvidia-smi --query-gpu=memory.total`` reports
    it; ``hbm_gb`` is refused as ambiguous (an "80 GB" H100 holds 80 GiB: 81,559 MiB)."""
    if isinstance(data, dict) and "hbm_gb" in data:
        raise PipesimError(
            f"{where}: hbm_gb is ambiguous (an '80 GB' card holds 80 GiB, 85.5e9 bytes); give memory_mib as "
            "nvidia-smi --query-gpu=memory.total reports it, e.g. memory_mib = 81559 for an H100 80GB"
        )
    for key in ("network_share", "network_alltoall_share"):  # shares NCCL reaches of line rate (nccl.py)
        value = data.get(key, 1) if isinstance(data, dict) else 1
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not 0 < value <= 1:
            raise PipesimError(f"{where}: {key} must be above 0 and at most 1 (a share of line rate), got {value}")
    _share_below_one(data, "gpu_speed_sd", where)
    if isinstance(data, dict):
        check_rates(data, where)
    required = ("name", "gpu", "gpus", "gpus_per_node", "bf16_tflops", "memory_mib", "nvlink_gbps", "network_gbps")
    if isinstance(data, dict) and "nccl_algorithms" in data:
        data = {**data, "nccl_algorithms": _nccl_algorithms(data["nccl_algorithms"], where)}
    swapped_file(data, where, "cluster")
    if isinstance(data, dict):  # hbm_gb is set from memory_mib, never read: not offered as a key
        _misplaced(data, Training, "a training setting: put it in the --training file", where)
        known_keys(data, [k for k in get_type_hints(Cluster) if k != "hbm_gb"], where)
    check_required(data, where)  # after unknown keys: a typo is named as one, with the key it is near
    c = _fill(Cluster, {**data, "hbm_gb": 0.0} if isinstance(data, dict) else data, where, required)
    if c.host_cpu not in HOST_CPUS:
        raise PipesimError(f"{where}: host_cpu must be one of {', '.join(map(repr, HOST_CPUS))}, got {c.host_cpu!r}")
    c = replace(c, hbm_gb=c.memory_mib * MIB / 1e9)
    for key in ("gpus", "gpus_per_node", "bf16_tflops", "memory_mib"):
        if getattr(c, key) <= 0:
            raise PipesimError(f"{where}: {key} must be > 0, got {getattr(c, key)}")
    check_cluster(c, where)
    return c.resized(gpus) if gpus is not None else c


def _nccl_algorithms(value, where: str) -> tuple[str, ...]:
    """A cluster file's ``nccl_algorithms``: a list of NCCL_ALGO names pipesim prices,
    the ring among them (NCCL's only one here for all-gathers and reduce-scatters)."""
    ok = isinstance(value, list) and all(isinstance(x, str) and x.lower() in NCCL_ALGORITHMS for x in value)
    if not ok or "ring" not in [x.lower() for x in value]:
        raise PipesimError(
            f'{where}: nccl_algorithms must be a list of {" and ".join(map(repr, NCCL_ALGORITHMS))} holding "ring" '
            f'(e.g. ["ring", "tree"], or ["ring"] for the ring alone), got {shorten(value)}'
        )
    return tuple(dict.fromkeys(x.lower() for x in value))


def model_training(name_or_path: str) -> dict:
    """The ``[training]`` table a model preset may carry: the set-up it was trained with."""
    data, _ = _read("model", name_or_path)
    return dict(data.get("training", {}))


def model_published(name_or_path: str) -> dict | None:
    """The ``[published]`` table a model preset may carry: what its training cost, with
    ``gpu``, ``gpu_hours_per_trillion_tokens`` and ``source``."""
    data, where = _read("model", name_or_path)
    ref = data.get("published")
    if ref is None:
        return None
    if not isinstance(ref, dict) or not {"gpu", "gpu_hours_per_trillion_tokens", "source"} <= ref.keys():
        raise PipesimError(f"{where} [published]: needs gpu, gpu_hours_per_trillion_tokens and source")
    return ref


def load_training(name_or_path: str | None = None, base: dict | None = None, **overrides) -> Training:
    """Training from defaults, a model's ``[training]``, a file or preset, then flags."""
    table: dict = dict(base or {})
    where = "training"
    if name_or_path:
        data, where = _read("training", name_or_path)
        data.pop("name", None)
        if isinstance(data.get("training"), dict):  # a model file's [training] table copied whole
            raise PipesimError(f"{where}: a training file holds its keys at the top level; drop the [training] header")
        _misplaced(data, Cluster, "a cluster setting: put it in the --cluster file", where)
        table.update(data)
    table.update({k: v for k, v in overrides.items() if v is not None})
    overlap = table.get("tp_overlap", Training.tp_overlap)
    if isinstance(overlap, bool):  # the files written when it was a switch
        table["tp_overlap"] = "all" if overlap else "none"
    elif overlap not in TP_OVERLAPS:
        raise PipesimError(
            f"{where}: tp_overlap must be one of {', '.join(TP_OVERLAPS)} (true: all, false: none), got {shorten(overlap)}"
        )
    _share_below_one(table, "allocator_fragmentation", where)
    t = _fill(Training, table, where)
    return check_training(t, where)


def _misplaced(table: dict, other, what: str, where: str) -> None:
    """Refuse a key that belongs to the other file (the memory a device holds back is
    split: the CUDA context and NCCL buffers in the cluster file, the allocator's
    fragmentation in the training file), naming where it goes."""
    own = Training if other is Cluster else Cluster
    for key in table:
        if key in get_type_hints(other) and key not in get_type_hints(own) and key != "hbm_gb":
            raise PipesimError(f"{where}: {key} is {what}")


def _share_below_one(table, key: str, where: str) -> None:
    """Refuse a share that must lie in [0, 1) with one message for every wrong value
    (negative, 1 or more, not a number), before the generic range check speaks of 1e18."""
    value = table.get(key, 0.0) if isinstance(table, dict) else 0.0
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1):
        raise PipesimError(f"{where}: {key} must be a share from 0 up to (not including) 1, got {shorten(value)}")
