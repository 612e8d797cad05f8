"""A cluster file's checks past each key's type and range: rates in units that are easy to
mistype, device memory, shares, whole nodes and NVLink domains. Each refusal is one line
naming the file, the key, what is wrong and what would be right.

The three rates are per GPU in the units their names end in, and a value past what any
GPU has is refused as the slip it most likely is:

- ``hbm_tbps``: HBM bandwidth in TB/s. The fastest GPU memory announced is Rubin's HBM4
  at 22 TB/s (NVIDIA, 2026; B200/GB200/GB300 8, H100 SXM 3.35), so above ``MAX_HBM_TBPS``
  = 100 a figure is GB/s typed into a TB/s key (an H100's "3350 GB/s").
- ``network_gbps``: the NIC's line rate in GB/s (gigabytes), one direction. The most
  scale-out bandwidth any system gives a GPU is Vera Rubin's 1.6 Tb/s (two 800 Gb/s
  ConnectX-9 a GPU, NVIDIA GTC DC 2025) = 200 GB/s, so above ``MAX_NETWORK_GBPS`` = 200 a
  figure is a NIC's gigabits (400 Gb/s NDR, 800 Gb/s XDR, 3200 Gb/s a node) typed into a
  gigabyte key. Gigabits of 200 Gb/s or less cannot be told from gigabytes and pass.
- ``nvlink_gbps``: what NCCL reaches inside an NVLink domain, in GB/s, one direction. The
  fastest NVLink is NVLink 6 (Rubin: 3.6 TB/s a GPU both ways, 1,800 GB/s one), so above
  ``MAX_NVLINK_GBPS`` = 1,800 a figure is gigabits (NVLink 4's 450 GB/s is 3,600 Gb/s).
"""

from __future__ import annotations

from ..errors import PipesimError
from .domains import placement_problem

MAX_HBM_TBPS = 100
MAX_NETWORK_GBPS = 200
MAX_NVLINK_GBPS = 1800

#: key -> (its unit in words, an example, the largest value taken)
RATES = {
    "hbm_tbps": ("TB/s (terabytes a second) of HBM bandwidth a GPU", "H100 SXM: 3.35", MAX_HBM_TBPS),
    "network_gbps": (
        "GB/s (gigabytes, not gigabits, a second) of NIC line rate a GPU, one direction",
        "a 400 Gb/s NIC: 50",
        MAX_NETWORK_GBPS,
    ),
    "nvlink_gbps": (
        "GB/s (gigabytes a second) NCCL reaches a GPU, one direction, inside an NVLink domain",
        "H100: 360",
        MAX_NVLINK_GBPS,
    ),
}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_rates(data: dict, where: str) -> None:
    """Refuse a rate that is not above 0, or past any GPU's (see the module docstring),
    naming its unit. Values that are not numbers are left to the type check."""
    for key, (unit, example, top) in RATES.items():
        value = data.get(key)
        if not _number(value) or value != value:  # nan is the range check's
            continue
        if value <= 0:
            raise PipesimError(f"{where}: {key} must be above 0, in {unit} ({example}), got {value:g}")
        if value <= top:
            continue
        if key == "hbm_tbps" and value <= 1000 * top:
            raise PipesimError(
                f"{where}: hbm_tbps = {value:g} looks like GB/s; this key is TB/s ({example}): give {value / 1000:g}"
            )
        if key != "hbm_tbps" and value / 8 <= top:
            bits = f"{value:g} Gb/s would be {value / 8:g}"
            raise PipesimError(
                f"{where}: {key} = {value:g} looks like gigabits; this key is {unit} ({example}; {bits}), at most {top:,}"
            )
        raise PipesimError(
            f"{where}: {key} = {value:g} is more than any GPU has; this key is {unit} ({example}), at most {top:,}"
        )


def check_cluster(c, where: str) -> None:
    """The checks of a filled Cluster ``c``: memory above the CUDA context and above one
    communicator's NCCL buffers, efficiencies, whole nodes, and a GPU count its NVLink
    domains can hold."""
    if c.memory_mib <= c.cuda_context_mib:
        # the CUDA context alone takes cuda_context_mib: a smaller figure is GB or GiB written as MiB
        raise PipesimError(
            f"{where}: memory_mib = {c.memory_mib:g} is not more than cuda_context_mib = {c.cuda_context_mib:g}, the "
            "CUDA context alone; give the device memory in MiB as nvidia-smi --query-gpu=memory.total reports it, "
            "e.g. memory_mib = 81559 for an H100 80GB, and a context below it"
        )
    if c.nccl_mib_per_group >= c.memory_mib:
        # one communicator's buffers as large as the device is MiB mistyped (bytes, KiB):
        # every layout's usable memory would read negative and every plan be refused
        raise PipesimError(
            f"{where}: nccl_mib_per_group = {c.nccl_mib_per_group:g} is not less than memory_mib = {c.memory_mib:g}, "
            "the whole device; give NCCL's buffers for one communicator in MiB (688 on A100s with NVLink, "
            "NVIDIA/nccl#964; device_memory.py)"
        )
    for key in ("gemm_efficiency", "fp8_gemm_efficiency", "fp8_tensor_gemm_efficiency"):
        if not 0 < getattr(c, key) <= 1:
            raise PipesimError(f"{where}: {key} must be above 0 and at most 1, got {getattr(c, key)}")
    if c.gpus > c.gpus_per_node and c.gpus % c.gpus_per_node:  # as --gpus is held (Cluster.resized)
        whole = [n * c.gpus_per_node for n in (c.gpus // c.gpus_per_node, c.gpus // c.gpus_per_node + 1)]
        raise PipesimError(
            f"{where}: gpus = {c.gpus} is not a whole number of {c.gpus_per_node}-GPU nodes (gpus_per_node); "
            f"give {' or '.join(map(str, whole))}, or fewer GPUs than one node"
        )
    d = c.nvlink_domain
    if d and d % c.gpus_per_node:
        whole = [n * c.gpus_per_node for n in (d // c.gpus_per_node, d // c.gpus_per_node + 1) if n]
        raise PipesimError(
            f"{where}: nvlink_domain {d} must be a multiple of gpus_per_node {c.gpus_per_node} (a domain holds whole nodes): "
            f"give {' or '.join(map(str, whole))}"
        )
    if c.domain_share and not d:
        raise PipesimError(f"{where}: domain_share is the job's GPUs in each NVLink domain; give nvlink_domain too, or drop it")
    if c.domain_share % c.gpus_per_node or c.domain_share > d:
        raise PipesimError(
            f"{where}: domain_share {c.domain_share} must be whole {c.gpus_per_node}-GPU nodes (gpus_per_node), at most "
            f"nvlink_domain {d} (NVIDIA's MLPerf GB200 jobs take 64 of 72)"
        )
    problem = placement_problem(c.gpus, c.gpus_per_node, d, c.domain_share)
    if problem:
        raise PipesimError(f"{where}: gpus = {c.gpus} with nvlink_domain {d}: {problem}")


#: what each key a cluster file must give holds, with the h100 preset's value as the
#: example (presets/clusters/h100.toml, whose comments give the sources)
REQUIRED = {
    "name": 'the cluster\'s name in reports, e.g. name = "my-h100"',
    "gpu": 'the GPU\'s name, e.g. gpu = "H100"',
    "gpus": "GPUs in all, e.g. gpus = 64",
    "gpus_per_node": "GPUs a node, e.g. gpus_per_node = 8",
    "bf16_tflops": "dense BF16 peak a GPU in TFLOP/s, e.g. bf16_tflops = 989 (H100 SXM)",
    "fp8_tflops": "dense FP8 peak a GPU in TFLOP/s, e.g. fp8_tflops = 1979 (H100 SXM; 0: no FP8)",
    "memory_mib": "device memory in MiB as nvidia-smi --query-gpu=memory.total reports it, e.g. memory_mib = 81559 (H100 80GB)",
    "nvlink_gbps": "GB/s NCCL reaches a GPU one way inside an NVLink domain, e.g. nvlink_gbps = 360 (H100)",
    "network_gbps": "the NIC's line rate a GPU one way in GB/s, e.g. network_gbps = 50 (a 400 Gb/s NIC)",
}


def check_required(table, where: str) -> None:
    """Refuse a cluster file that leaves out a key it must give, saying what the key holds
    ("missing field 'memory_mib'" alone left the unit to guess, and memory_mib's is easy
    to get wrong)."""
    if not isinstance(table, dict):
        return
    for key, what in REQUIRED.items():
        if key not in table:
            raise PipesimError(f"{where}: missing key {key!r}: give {what}")
