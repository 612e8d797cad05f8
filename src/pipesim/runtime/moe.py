"""A small mixture-of-experts transformer whose experts are sharded over an expert-parallel
(EP) group, with dispatch and combine as real ``all_to_all_single`` calls.

Each layer is four *parts*, the components of ``components.py`` (DeepSeek-V3's Figure 4):

* ``attn`` (compute): ``a = h + attention(norm(h))``; the router picks ``top_k`` experts
  per token and their gates (softmax over the chosen logits).
* ``dispatch`` (communication): each token's copy for each chosen expert goes to the rank
  holding that expert. Every rank sends every other rank a block of ``tokens * top_k``
  rows, the worst case, with the local expert id in an extra column (-1: empty row), so
  no token is ever dropped and the split sizes need no exchange of their own.
* ``mlp`` (compute): each local expert runs on the rows addressed to it.
* ``combine`` (communication): the outputs go back, and the sender sums each token's
  expert outputs weighted by its gates, plus the residual, as DeepEP's combine kernel
  reduces the top-k outputs on arrival.

The whole micro-batch is ``batch`` sequences; the EP group's ranks each take an equal
slice along dimension 0 (data-parallel attention, sharded experts), and built without a
group (``ep=None``) the stage holds every expert: the single-process reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..errors import PipesimError
from ..inputs import MAX_COUNT, divisors_text
from ..schedule_checks import whole
from .capacity import MAX_BLOCKS
from .model import TinyTransformer

PARTS = ("attn", "dispatch", "mlp", "combine")
STREAM = {"attn": "compute", "dispatch": "comm", "mlp": "compute", "combine": "comm"}


@dataclass
class ExpertGroup:
    """This rank's place in its EP group, and how its all-to-alls behave: ``delay``
    seconds is the least an all-to-all takes (a synthetic slow link, slept inside the
    call); ``on_comm`` is called before each one (the test fault hook)."""

    rank: int
    size: int
    group: object = None
    delay: float = 0.0
    on_comm: Callable[[], None] = lambda: None

    def all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        return _AllToAll.apply(x, self)

    def exchange(self, x: torch.Tensor) -> torch.Tensor:
        """One all-to-all of equal blocks along dimension 0, taking at least ``delay``."""
        start = time.perf_counter()
        self.on_comm()
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous(), group=self.group)
        left = self.delay - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return out


class _AllToAll(torch.autograd.Function):
    """all_to_all with equal splits is its own transpose: the gradient goes back the same way."""

    @staticmethod
    def forward(ctx, x, ep):
        ctx.ep = ep
        return ep.exchange(x)

    @staticmethod
    def backward(ctx, g):
        return ctx.ep.exchange(g), None


@dataclass
class Part:
    """One component of one layer: ``fn`` maps the state tensors named ``takes`` to new
    named tensors; ``params`` are the weights it uses (for the W step)."""

    name: str  # attn, dispatch, mlp, combine
    layer: int
    takes: tuple[str, ...]
    fn: Callable[..., dict[str, torch.Tensor]]
    params: tuple[nn.Parameter, ...] = ()

    @property
    def stream(self) -> str:
        return STREAM[self.name]


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.up = nn.Linear(dim, hidden, dtype=dtype)
        self.down = nn.Linear(hidden, dim, dtype=dtype)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


class MoELayer(nn.Module):
    def __init__(self, dim, heads, experts, top_k, dtype, seed, held, ep: ExpertGroup | None):
        super().__init__()
        torch.manual_seed(seed)
        self.norm1 = nn.LayerNorm(dim, dtype=dtype)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, dtype=dtype)
        self.norm2 = nn.LayerNorm(dim, dtype=dtype)
        self.router = nn.Linear(dim, experts, bias=False, dtype=dtype)
        # each expert seeded by its number alone, so a shard holds the very weights the
        # unsharded model has under the same names
        self.experts = nn.ModuleDict()
        for e in held:
            torch.manual_seed(seed * 1_000 + 17 + e)
            self.experts[str(e)] = Expert(dim, 2 * dim, dtype)
        self.n_experts, self.top_k, self.ep = experts, top_k, ep
        self.per_rank = experts // (ep.size if ep else 1)

    def _a2a(self, x: torch.Tensor) -> torch.Tensor:
        return self.ep.all_to_all(x) if self.ep is not None else x

    def attn_part(self, h):
        n = self.norm1(h)
        a = h + self.attn(n, n, n, need_weights=False)[0]
        r = self.norm2(a)
        top = torch.topk(self.router(r), self.top_k, dim=-1)
        return {"a": a, "r": r, "idx": top.indices.detach(), "gates": torch.softmax(top.values, dim=-1)}

    def dispatch_part(self, r, idx):
        d, k = r.shape[-1], self.top_k
        rows = r.reshape(-1, d).repeat_interleave(k, 0)  # (tokens*k, d): slot t*k+j
        flat = idx.reshape(-1)
        ranks = self.ep.size if self.ep else 1
        dest = flat // self.per_rank
        mask = (dest[None, :] == torch.arange(ranks)[:, None]).to(r.dtype)  # (ranks, slots)
        local = torch.where(mask.bool(), (flat % self.per_rank).to(r.dtype)[None, :], torch.full_like(mask, -1.0))
        send = torch.cat([mask[..., None] * rows[None], local[..., None]], dim=-1)  # (ranks, slots, d+1)
        return {"recv": self._a2a(send)}

    def mlp_part(self, recv):
        d = recv.shape[-1] - 1
        feats, ids = recv[..., :d].reshape(-1, d), recv[..., d].reshape(-1).detach()
        y = torch.zeros_like(feats)
        first = (self.ep.rank if self.ep else 0) * self.per_rank
        for le in range(self.per_rank):
            i = (ids == le).nonzero().squeeze(1)
            if i.numel():
                y = y.index_add(0, i, self.experts[str(first + le)](feats[i]))
        return {"y": y.reshape(recv.shape[:-1] + (d,))}

    def combine_part(self, a, y, idx, gates):
        z = self._a2a(y)  # (ranks, slots, d): block j came back from rank j
        d, k = a.shape[-1], self.top_k
        flat = idx.reshape(-1)
        picked = z[flat // self.per_rank, torch.arange(flat.numel())]  # (slots, d)
        mixed = (picked.reshape(-1, k, d) * gates.reshape(-1, k, 1)).sum(1)
        return {"h": a + mixed.reshape(a.shape)}

    def parts(self, layer: int) -> list[Part]:
        dense = tuple(p for n, p in self.named_parameters() if not n.startswith("experts."))
        return [
            Part("attn", layer, ("h",), self.attn_part, dense),
            Part("dispatch", layer, ("r", "idx"), self.dispatch_part),
            Part("mlp", layer, ("recv",), self.mlp_part, tuple(self.experts.parameters())),
            Part("combine", layer, ("a", "y", "idx", "gates"), self.combine_part),
        ]

    def forward(self, h):
        state = {"h": h}
        for part in self.parts(0):
            state.update(part.fn(*(state[n] for n in part.takes)))
        return state["h"]


class MoEStage(nn.Sequential):
    """A stage: MoE layers one after another; ``parts()`` lists their components in order."""

    def parts(self) -> list[Part]:
        return [p for i, layer in enumerate(self) for p in layer.parts(i)]


def is_expert(name: str) -> bool:
    """Expert weights are sharded, not replicated: the EP group does not sum their gradients."""
    return ".experts." in f".{name}"


@dataclass(frozen=True)
class MoETransformer(TinyTransformer):
    """A stage model (see ``model.py``) with experts: ``build(stage, stages, ep)`` shards
    them over ``ep`` (an ``ExpertGroup``), or holds them all without one. Micro-batches,
    boundaries and the loss are the tiny model's; float64, so the check tells a mistake
    from summation order."""

    seq: int = 4
    batch: int = 4  # sequences per micro-batch, over the whole EP group
    experts: int = 4
    top_k: int = 2

    def __post_init__(self) -> None:
        for name in ("layers_per_stage", "experts", "top_k"):  # "4" met a TypeError in a comparison
            whole(getattr(self, name), f"MoETransformer's {name}", 1, MAX_COUNT)
        if not 1 <= self.top_k <= self.experts:
            raise PipesimError(f"--top-k must be between 1 and --experts={self.experts}, got {self.top_k}")
        # the bound --experts and --layers have (capacity.MAX_BLOCKS): made from the
        # library, 100,000 experts were taken and built for minutes in every rank
        blocks = self.layers_per_stage * self.experts
        if blocks > MAX_BLOCKS:
            raise PipesimError(
                f"MoETransformer(experts={self.experts}, layers_per_stage={self.layers_per_stage}) builds {blocks:,} experts "
                f"a stage, above the {MAX_BLOCKS:,} blocks pipesim's models take (each about 0.5 ms to build, and every op "
                "loops over them): lower experts or layers_per_stage"
            )

    def check_ep(self, ep: int) -> None:
        """Bad input before any process starts: the group must split experts and batch evenly."""
        if self.experts % ep:
            raise PipesimError(
                f"--ep {ep} must divide the model's {self.experts} experts (each rank holds an equal share): "
                f"give --ep {divisors_text(self.experts, ep)}"
            )
        if self.batch % ep:
            # reached from the library only: the CLI's moe model takes a batch of 2 ep
            raise PipesimError(
                f"--ep {ep} must divide the micro-batch's {self.batch} sequences (each rank takes a slice): give --ep "
                f"{divisors_text(self.batch, ep)}, or a batch that {ep} divides"
            )

    def build(self, stage: int, stages: int, ep: ExpertGroup | None = None) -> nn.Module:
        per = self.experts // (ep.size if ep else 1)
        held = range(ep.rank * per, (ep.rank + 1) * per) if ep else range(self.experts)
        with torch.random.fork_rng(devices=[]):
            return MoEStage(
                *(
                    MoELayer(
                        self.dim,
                        self.heads,
                        self.experts,
                        self.top_k,
                        self._dtype,
                        (self.seed * 100_003 + stage) * 1_000 + i,
                        held,
                        ep,
                    )
                    for i in range(self.layers_per_stage)
                )
            )
