"""How the GPUs are used: the parallel degrees of one candidate, its process groups, and
where each group's members sit relative to the cluster's NVLink domains.

Two meshes over the same GPUs, as Megatron-Core builds them (``parallel_state``: one
``RankGenerator`` for the attention and dense layers, one for the experts, with the same
pipeline groups; its "MoE parallel folding"):

- attention and dense layers: tp x cp x dp x pp, rank order tp fastest, then cp, dp, pp
  (Megatron's default ``--order tp-cp-ep-dp-pp`` with ep = 1 in this mesh);
- MoE layers: etp x ep x edp x pp, rank order etp, ep, edp, pp (cp = 1 in this mesh),
  where tp x cp x dp = etp x ep x edp.

A group of one dimension has members ``stride`` ranks apart, the stride being the product
of the faster dimensions; consecutive ranks fill an NVLink domain (8 GPUs on a DGX, 72 on
an NVL72 rack) before the next one, so whether a group's collective runs on NVLink, on
the network between domains or on both follows from (size, stride, domain) alone.
torchtitan's ``ParallelDims`` keeps the same degrees in one dataclass and builds its meshes
from them; this is the planner's equivalent, without processes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .specs import Model

#: the dimensions of each mesh, fastest first
ATTENTION_ORDER = ("tp", "cp", "dp", "pp")
EXPERT_ORDER = ("etp", "ep", "edp", "pp")


@dataclass(frozen=True)
class Span:
    """Where the members of a group sit: ``inside`` every such group lies in one NVLink
    domain; otherwise the group touches ``domains`` domains and, in the worst-placed
    group, its thinnest domain holds ``per_domain`` of its members (the domain whose few
    network links a ring through it must share)."""

    inside: bool
    per_domain: int
    domains: int


@dataclass(frozen=True)
class Layout:
    """One candidate's parallel degrees: pp pipeline ranks x dp data-parallel replicas x
    tp tensor shards x cp context shards for the attention and dense layers; the experts
    over etp expert-tensor shards x ep expert ranks x edp expert replicas of the same
    tp x cp x dp GPUs (``edp``); ``micro_batch`` sequences per micro-batch."""

    pp: int
    dp: int
    tp: int = 1
    ep: int = 1
    micro_batch: int = 1  # sequences per micro-batch
    cp: int = 1
    etp: int = 1

    @property
    def gpus(self) -> int:
        return self.pp * self.dp * self.tp * self.cp

    @property
    def edp(self) -> int:
        """Expert data-parallel degree: the replicas of each expert shard."""
        return max(1, self.tp * self.cp * self.dp // (self.etp * self.ep))

    def size(self, name: str) -> int:
        return getattr(self, name)

    def stride(self, name: str) -> int:
        """Ranks between consecutive members of a group of dimension ``name``."""
        order = EXPERT_ORDER if name in EXPERT_ORDER[:3] else ATTENTION_ORDER
        out = 1
        for d in order[: order.index(name)]:
            out *= self.size(d)
        return out

    def span(self, name: str, domain: int) -> Span:
        """Where the members of each group of dimension ``name`` sit for NVLink domains
        of ``domain`` consecutive ranks."""
        return span(self.size(name), self.stride(name), domain)

    def __str__(self) -> str:
        parts = [f"pp{self.pp}", f"dp{self.dp}"]
        if self.tp > 1:
            parts.append(f"tp{self.tp}")
        if self.cp == 1 and self.etp == 1:  # the form plans have always printed
            if self.ep > 1:
                parts.append(f"ep{self.ep}")
            return " x ".join(parts[:3]) + (f", {parts[3]}" if len(parts) > 3 else "")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        experts = [f"ep{self.ep}"] if self.ep > 1 else []
        if self.etp > 1:
            experts.append(f"etp{self.etp}")
        return " x ".join(parts) + (f", {' x '.join(experts)}" if experts else "")


@lru_cache(maxsize=4096)
def span(size: int, stride: int, domain: int) -> Span:
    """Placement of groups of ``size`` members ``stride`` ranks apart over domains of
    ``domain`` consecutive ranks, for the worst-placed such group. Group starts are the
    ranks whose coordinate in this dimension is 0; only their offset inside a domain
    matters, so each offset that occurs is looked at once."""
    if size <= 1:
        return Span(True, 1, 1)
    if stride >= domain:  # every member in a domain of its own
        return Span(False, 1, size)
    period = stride * size
    step = int(np.gcd(period, domain))
    offsets = sorted({(i + k * step) % domain for i in range(stride) for k in range(domain // step)})
    members = stride * np.arange(size)
    inside, fewest, most = True, size, 1
    for b in offsets:
        counts = np.bincount((b + members) // domain)
        counts = counts[counts > 0]
        inside = inside and len(counts) == 1
        fewest = min(fewest, int(counts.min()))
        most = max(most, len(counts))
    return Span(inside, fewest, most)


def default_ep(m: Model, dp: int) -> int:
    """The expert-parallel degree ``memory`` and ``compare --model`` assume when none is
    given: experts spread over up to 64 data-parallel GPUs (DeepSeek-V3's ep64)."""
    return min(64, dp, m.moe.experts) if m.moe else 1
