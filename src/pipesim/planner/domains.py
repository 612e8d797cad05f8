"""Where a job's GPUs sit on NVLink domains larger than a node (GB200 and GB300 NVL72
racks: 72 GPUs in 18 trays of 4), for GPU counts that are not whole racks.

A job on such racks takes an equal, whole-tray share of each rack it uses, as Slurm's
topology/block plugin places it: ``sbatch --segment S`` splits the job's nodes into
segments of S nodes, each inside one block (one NVL72 rack). NVIDIA's MLPerf Training
v5.1 submission launches every GB200/GB300 job with a segment (mlcommons/
training_results_v5.1 at 441d65f4, NVIDIA/README.md: ``sbatch -N $DGXNNODES --segment
$SEGMENT run.sub``), its multi-rack LLM runs with one segment of 16 trays a rack:

- Llama 3.1 405B on 512 GB200 GPUs, ``DGXNNODES=128``, ``DGXNGPU=4``, ``SEGMENT`` = tp x
  pp x cp / 4 = 4 x 8 x 2 / 4 = 16 trays (llama31_405b/.../theia_ngpu512_ngc25.09_nemo/
  config_GB200_128x4x144xtp4pp8cp2_cg.sh), on the system "Tyche (8x NVIDIA GB200 NVL72)"
  (NVIDIA/systems/tyche_ngpu512_ngc25.09_nemo.json, 128 nodes): 8 racks of 64 of 72 GPUs;
- the same at 2560 GPUs on 640 trays, "40x NVIDIA GB200 NVL72" (hsg_ngpu2560): 40 x 64;
- one rack's jobs take it whole, ``DGXNNODES=18``, ``SEGMENT=18`` (config_GB200_18x04x32.sh).

NVIDIA's blog "Unlock Exascale Performance on NVIDIA GB200 NVL72 with Slurm Topology-Aware
Job Scheduling" recommends segments of 16 trays for large jobs: a rack then still takes a
segment with two of its trays down.

The planner reads the job's share of each domain from the GPU count alone: the largest
whole number of nodes' GPUs, up to the domain, that divides the count, and above half the
domain, so that one share fills each domain it uses (with half a domain or less, two of
the job's shares could sit in one rack, and the count would not say where they sit;
such counts are refused). 512 GPUs: 8 domains of 64; 1152: 16 whole racks. MLPerf's
1152-GPU Flux run took 18 racks of 64 instead (``SEGMENT=16``, "Tyche-hsg (18x NVIDIA
GB200 NVL72)", flux1/.../config_GB200_288x04x08xtp4.sh), a placement the count alone does
not choose: a cluster file's ``domain_share = 64`` pins it. Consecutive ranks fill a
share before the next, so layout.span prices each group by where its members then sit.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=256)
def job_share(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> int | None:
    """The job's GPUs in each NVLink domain of ``domain`` GPUs it uses; None where the
    count cannot be placed (see the module docstring). A job within one domain is one
    share; without a domain past the node (``domain`` 0) the node is the domain. A
    ``pinned`` share (a cluster file's ``domain_share``) is taken as given, the count
    then a whole number of such shares."""
    if not domain:
        return gpus_per_node
    if gpus <= domain:
        return gpus
    if gpus % gpus_per_node:
        return None
    if pinned:
        return pinned if gpus % pinned == 0 else None
    for share in range(domain - domain % gpus_per_node, domain // 2, -gpus_per_node):
        if gpus % share == 0:
            return share
    return None


def smallest_share(gpus_per_node: int, domain: int) -> int:
    """The fewest GPUs a share of a domain may hold: whole nodes, above half the domain."""
    return (domain // 2 // gpus_per_node + 1) * gpus_per_node


def placed(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> bool:
    """Whether ``gpus`` is a count the planner places: whole nodes (or under one node's),
    in equal shares of the NVLink domains where there are such domains."""
    if gpus < 1 or (gpus > gpus_per_node and gpus % gpus_per_node):
        return False
    return job_share(gpus, gpus_per_node, domain, pinned) is not None


def neighbours(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> list[int]:
    """The counts nearest ``gpus`` below and above that are placed (the one below left out
    when there is none)."""
    top = 2 * gpus + 2 * max(domain, gpus_per_node)
    below = next((n for n in range(gpus - 1, 0, -1) if placed(n, gpus_per_node, domain, pinned)), None)
    above = next(n for n in range(gpus + 1, top) if placed(n, gpus_per_node, domain, pinned))
    return [n for n in (below, above) if n]


def count_text(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> str:
    """A placed count with its domains where it does not fill them: '512 (8 NVLink
    domains of 64)'."""
    share = job_share(gpus, gpus_per_node, domain, pinned)
    if not domain or share in (None, domain) or gpus <= domain:
        return str(gpus)
    return f"{gpus} ({gpus // share} NVLink domains of {share})"


def placement_problem(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> str | None:
    """Why ``gpus`` cannot be placed on a cluster with NVLink domains of ``domain`` GPUs,
    and which counts near it can (the caller names the count and the cluster); None if
    it can. Part nodes are the node check's (``Cluster.resized``)."""
    if not domain or placed(gpus, gpus_per_node, domain, pinned) or (gpus > gpus_per_node and gpus % gpus_per_node):
        return None
    near = " or ".join(count_text(n, gpus_per_node, domain, pinned) for n in neighbours(gpus, gpus_per_node, domain, pinned))
    if pinned:
        return f"the cluster's domain_share = {pinned} does not divide it (a job takes {pinned} GPUs of each domain); give e.g. {near}"
    low = smallest_share(gpus_per_node, domain)
    return (
        f"its {gpus // gpus_per_node} nodes of {gpus_per_node} GPUs do not split into equal shares of {low} to {domain} "
        f"GPUs, one a {domain}-GPU NVLink domain, as Slurm's --segment places a job across racks; give e.g. {near}"
    )


def placement_text(gpus: int, gpus_per_node: int, domain: int, pinned: int = 0) -> str:
    """How the job's GPUs sit, for the report: '512 GPUs as 8 NVLink domains of 64 of 72'."""
    share = job_share(gpus, gpus_per_node, domain, pinned) or domain
    if gpus <= domain:
        return f"{gpus} GPUs in one NVLink domain of {domain}"
    if share == domain:
        return f"{gpus} GPUs as {gpus // domain} NVLink domains of {domain}"
    return (
        f"{gpus} GPUs as {gpus // share} NVLink domains of {share} of {domain} ({share // gpus_per_node} of each domain's "
        f"{domain // gpus_per_node} nodes, as Slurm's --segment {share // gpus_per_node} places them"
        + (", domain_share)" if pinned else ")")
    )
