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

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..inputs import divisors_text
from .attention_window import chunk_problem, window_problem
from .specs import Model, Training, hashed_once

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


@hashed_once
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

    def tokens(self, seq: int) -> int:
        """Tokens of one micro-batch a GPU of the attention mesh works on: its 1/cp of
        each sequence (the load-balanced causal split gives every rank 2 of 2cp chunks)."""
        return self.micro_batch * seq // self.cp

    def expert_tokens(self, seq: int) -> float:
        """Tokens of one micro-batch each GPU routes into an MoE layer: its sequence
        shard of the attention's tp x cp group (Megatron-Core runs MoE with tensor
        parallelism only under sequence parallelism, so each tensor rank holds 1/tp)."""
        return self.tokens(seq) / self.tp

    def size(self, name: str) -> int:
        if name == "cpdp":  # the dense layers' gradient replicas: context and data ranks
            return self.cp * self.dp
        return getattr(self, name)

    def stride(self, name: str) -> int:
        """Ranks between consecutive members of a group of dimension ``name`` (``cpdp``:
        the context and data ranks together, adjacent in the rank order)."""
        if name == "cpdp":
            return self.tp
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


def local_training(t: Training, lay) -> Training:
    """The training a context-parallel rank sees: its 1/cp of each sequence, as a run on
    sequences cp times shorter would (the activation and transient formulas are handed the
    local length and must not divide by cp again). ``lay`` may be any layout-like object;
    one without ``cp`` has none."""
    cp = getattr(lay, "cp", 1)
    return _shortened(t, cp) if cp > 1 else t


@lru_cache(maxsize=256)
def _shortened(t: Training, cp: int) -> Training:
    """``t`` on sequences cp times shorter, made once: the search asks for it once a
    split, and a new Training is hashed anew by every cache it is looked up in."""
    return replace(t, seq=t.seq // cp)


def keeps_gathered(t: Training, lay: Layout) -> bool:
    """Whether FSDP (ZeRO-3) keeps each stage's parameters gathered through the step
    rather than freeing them after every micro-batch's forward: torchtitan's
    ``fsdp_reshard_after_forward`` "default" does so exactly when pipeline parallelism is
    on (its PP schedules run many micro-batches per stage; regathering for each would
    multiply the all-gathers), "never" always, "always" never."""
    if t.fsdp_reshard == "default":
        return lay.pp > 1
    return t.fsdp_reshard == "never"


# --------------------------------------------------------------------------------------
# constraints: each stated once, as the line a refused pin or layout prints


def tp_problem(m: Model, tp: int) -> str | None:
    kv = m.attention.kv_heads or m.heads
    if m.heads % tp or kv % tp:
        return (
            f"--tp {tp} must divide {m.name}'s {m.heads} attention heads and {kv} key/value heads: "
            f"give --tp {divisors_text(math.gcd(m.heads, kv), tp)}"
        )
    return None


def cp_problem(m: Model, t: Training, cp: int, tp: int = 1) -> str | None:
    """Context parallelism splits each sequence into 2cp chunks (rank i takes chunks i and
    2cp-1-i, which evens out the causal work: Megatron-Core and torchtitan both do so);
    it needs fused attention (Megatron-Core's CP runs TransformerEngine's flash kernels);
    the all-to-all schemes split the tensor rank's heads cp ways."""
    if cp <= 1:
        return None
    if t.seq % (2 * cp):
        return f"--cp {cp} needs the sequence ({t.seq} tokens) divisible by 2 x cp = {2 * cp} for the load-balanced causal split"
    if not t.flash_attention:
        return f"--cp {cp} needs fused attention (flash_attention = true): context parallelism runs blockwise flash kernels"
    if any(0 < m.window(i) < t.seq for i in range(m.layers)) and window_problem(t):
        return f"--cp {cp}: {m.name} attends over a sliding window, and {window_problem(t)}"
    if refused := chunk_problem(m, t, cp):
        return refused
    if m.attention_sinks and (t.torch_context_parallel or t.cp_comm != "a2a"):
        # Transformer Engine's get_attention_backend (v2.9 and d0067d0da, "Filter: Softmax
        # type"): a softmax other than vanilla under context parallelism has only its cuDNN
        # fused attention, and only with cp_comm_type a2a (Flash is off for any such softmax,
        # unfused for context parallelism)
        return (
            f"--cp {cp}: {m.name} has attention sinks (a learned softmax offset a head), which Transformer Engine "
            'runs under context parallelism only with cp_comm "a2a": give --cp-comm a2a, or --cp 1'
        )
    kv = m.heads if m.attention.kind == "mla" else (m.attention.kv_heads or m.heads)
    if t.cp_comm == "a2a" and ((m.heads // tp) % cp or (kv // tp) % cp):
        return (
            f'--cp {cp} with cp_comm = "a2a" splits heads cp ways: {m.name} has {m.heads // tp} query and {kv // tp} '
            f'key/value heads per tensor rank at tp {tp}; use cp_comm = "p2p", "all_gather" or "a2a+p2p", or a cp dividing both'
        )
    return None


def expert_problem(m: Model, ep: int, etp: int) -> str | None:
    if ep * etp <= 1:
        return None
    if m.moe is None:
        return f"{m.name} has no experts; drop --ep and --etp"
    if m.moe.experts % ep:
        return f"--ep {ep} must divide {m.name}'s {m.moe.experts} experts: give --ep {divisors_text(m.moe.experts, ep)}"
    if m.moe.expert_ffn % etp:
        return (
            f"--etp {etp} must divide {m.name}'s expert width {m.moe.expert_ffn}: "
            f"give --etp {divisors_text(m.moe.expert_ffn, etp)}"
        )
    return None


def fold_problem(lay: Layout) -> str | None:
    """MoE parallel folding: the experts' etp x ep x edp must cover the attention's
    tp x cp x dp GPUs of a pipeline stage, so etp x ep divides them."""
    attn = lay.tp * lay.cp * lay.dp
    if attn % (lay.etp * lay.ep):
        return (
            f"--etp {lay.etp} x --ep {lay.ep} = {lay.etp * lay.ep} must divide tp x cp x dp = {attn} "
            "(the experts fold over the attention's GPUs of a stage: etp x ep x edp = tp x cp x dp)"
        )
    return None


def layout_problem(m: Model, t: Training, lay: Layout) -> str | None:
    """Why a layout cannot run, or None."""
    return tp_problem(m, lay.tp) or cp_problem(m, t, lay.cp, lay.tp) or expert_problem(m, lay.ep, lay.etp) or fold_problem(lay)


def with_default_ep(model, training, lay: Layout) -> Layout:
    """``lay`` with the largest expert degree up to ``default_ep``'s that the layout
    takes (``layout_problem``): 72 GPUs a stage take no ep64 of 256 experts, but ep8."""
    for e in range(default_ep(model, lay.dp), 1, -1):
        if not layout_problem(model, training, replace(lay, ep=e)):
            return replace(lay, ep=e)
    return replace(lay, ep=1)
