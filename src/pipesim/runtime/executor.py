"""One rank's part of a schedule: run its items in order, moving tensors between ranks.

Why it cannot deadlock: before the first item, a rank posts a receive for every tensor
it will ever get (``Plan.recvs``), and it sends with ``isend`` as soon as an item ends.
So no send ever waits for its receiver to reach some point of its program, the only
blocking call is "wait for this input", and the ranks run exactly the walk
``validate.execution_order`` proves complete. Receives are posted in each sender's
production order and tagged, so a transport that matches by order (NCCL) and one that
matches by tag (gloo) pair them the same way. The price is one buffer per incoming
tensor, allocated up front; fine for checking and measuring schedules.

What an item does is the ``Work``'s business: ``RealWork`` runs a model (F, B as the
input gradient only, keeping the graph for W, W, BW, and a pair as its two halves one
after the other), ``SyntheticWork`` sleeps for the item's cost so that measured and
simulated timelines can be compared on any number of cores.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..costs import Costs, item_time
from ..deps import Key, produces
from ..ir import Item, Op, Pair, Schedule, ops_of
from .plan import Plan, data_needs, held_stages


class CommError(RuntimeError):
    """A transfer failed: usually a symptom (a peer died), not the cause."""


class OpError(RuntimeError):
    """An item failed on this rank; ``where`` names it (``B0.3 of dualpipe``)."""

    def __init__(self, where: str, cause: BaseException):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.where = where
        self.cause = cause


@dataclass(frozen=True)
class Fault:
    """A deliberate failure for tests: at ``item`` (notation, e.g. ``B0.3``) on ``rank``,
    ``raise`` an exception, ``die`` (SIGKILL itself) or ``corrupt`` the item's outputs."""

    rank: int
    item: str
    mode: str = "raise"

    @classmethod
    def parse(cls, text: str | None) -> Fault | None:
        if not text:
            return None
        parts = text.split(":")
        if len(parts) not in (2, 3) or not parts[0].isdigit() or (len(parts) == 3 and parts[2] not in FAULT_MODES):
            raise ValueError(f"PIPESIM_FAULT must be RANK:ITEM[:{'|'.join(FAULT_MODES)}], got {text!r}")
        return cls(int(parts[0]), parts[1], parts[2] if len(parts) == 3 else "raise")


FAULT_MODES = ("raise", "die", "corrupt", "a2a")  # a2a: die inside the item's first all-to-all


# ---------------------------------------------------------------------------------------
# transport


class Transport:
    """The receives a rank posted and the sends it started, keyed by data key."""

    def __init__(
        self,
        rank: int,
        plan: Plan,
        shape_of: Callable[[Key], tuple[tuple[int, ...], torch.dtype]],
        device: torch.device,
        group_of: Callable[[int, int], object],
        offset: int = 0,
    ):
        """``offset``: the global rank of this pipeline's rank 0 (its EP replica times pp)."""
        self.rank = rank
        self.offset = offset
        self.plan = plan
        self.group_of = group_of
        self.local: dict[Key, torch.Tensor] = {}
        self.pending: dict[Key, tuple[torch.Tensor, object]] = {}
        self.sent: list[tuple[torch.Tensor, object]] = []
        for link in plan.recvs[rank]:
            shape, dtype = shape_of(link.key)
            buf = torch.empty(shape, dtype=dtype, device=device)
            src, dst = offset + link.src, offset + rank
            work = dist.irecv(buf, src=src, group=group_of(src, dst), tag=link.tag)
            self.pending[link.key] = (buf, work)

    def take(self, key: Key) -> torch.Tensor:
        if key in self.local:
            return self.local.pop(key)
        buf, work = self.pending.pop(key)
        try:
            work.wait()
        except Exception as e:
            raise CommError(f"receiving {key[0]}{key[2]}.{key[3]} from rank {key[1]} failed: {e}") from e
        return buf

    def deliver(self, key: Key, tensor: torch.Tensor) -> None:
        if key in self.plan.local:
            self.local[key] = tensor
        link = self.plan.sends.get(key)
        if link is not None:
            t = tensor.contiguous()
            try:
                src, dst = self.offset + self.rank, self.offset + link.dst
                work = dist.isend(t, dst=dst, group=self.group_of(src, dst), tag=link.tag)
            except Exception as e:
                raise CommError(f"sending {key[0]}{key[2]}.{key[3]} to rank {link.dst} failed: {e}") from e
            self.sent.append((t, work))

    def wants(self, key: Key) -> bool:
        return key in self.plan.local or key in self.plan.sends

    def finish(self) -> None:
        for _, work in self.sent:
            try:
                work.wait()
            except Exception as e:
                raise CommError(f"a send did not complete: {e}") from e
        self.sent.clear()


# ---------------------------------------------------------------------------------------
# work


class RealWork:
    """Runs the model stages this rank holds."""

    def __init__(self, schedule: Schedule, rank: int, model, device: torch.device, overlap: bool = True, modules=None):
        self.schedule = schedule
        self.pair_hook = getattr(model, "pair", None) if overlap else None
        self.rank = rank
        self.model = model
        self.device = device
        self.stages = schedule.placement.stages
        self.chunk_stage = held_stages(schedule, rank)
        self.modules = modules if modules is not None else build_modules(schedule, rank, model, device)
        # (chunk, mb) -> [input, root (output or scaled loss), gradient of root once B ran]
        self.saved: dict[tuple[int, int], list] = {}
        self.losses: dict[int, float] = {}

    def run(self, item: Item, inputs: dict[Key, torch.Tensor]) -> dict[Key, torch.Tensor]:
        if isinstance(item, Pair) and self.pair_hook is not None and item.backward.kind == "BW":
            return self._user_pair(item, inputs)
        out: dict[Key, torch.Tensor] = {}
        for op in ops_of(item):
            out.update(getattr(self, "_" + op.kind)(op, inputs))
        return out

    def _stage(self, op: Op) -> int:
        return self.schedule.placement.stage_of(self.rank, op.chunk, op.mb)

    def _upstream(self, op: Op, inputs: dict[Key, torch.Tensor]) -> torch.Tensor | None:
        keys = data_needs(self.schedule, self.rank, op)
        return inputs[keys[0]] if keys else None

    def _user_pair(self, item: Pair, inputs) -> dict:
        """The model's own overlapped pair (``pair(f_module, f_input, b_module, b_output,
        b_grad) -> f_output``, see ``model.py``): it runs the forward and the backward
        (into ``.grad``, as ``torch.autograd.backward`` does) however it overlaps them."""
        f, b = item.forward, item.backward
        x = self._input(f, inputs)
        bx, root = self.saved.pop((b.chunk, b.mb))[:2]
        bx.grad = None
        y = self.pair_hook(self.modules[f.chunk], x, self.modules[b.chunk], root, self._upstream(b, inputs))
        out = self._forward_done(f, x, y)
        if self._stage(b) > 0:
            out[("B", self.rank, b.chunk, b.mb)] = bx.grad
        return out

    def _input(self, op: Op, inputs) -> torch.Tensor:
        """A forward's input: the micro-batch on the first stage, else the upstream
        activation as a leaf whose gradient B computes."""
        if self._stage(op) == 0:
            return self.model.microbatch(op.mb)[0].to(self.device)
        x = self._upstream(op, inputs).detach().to(self.device)
        return x.requires_grad_(True) if x.is_floating_point() else x

    def _forward_done(self, op: Op, x: torch.Tensor, y: torch.Tensor) -> dict:
        """Keep what B needs; the loss on the last stage, else the output to send."""
        if self._stage(op) == self.stages - 1:
            loss = self.model.loss(y, self.model.microbatch(op.mb)[1].to(self.device))
            self.losses[op.mb] = loss.item()
            self.saved[(op.chunk, op.mb)] = [x, loss / self.schedule.microbatches]
            return {}
        self.saved[(op.chunk, op.mb)] = [x, y]
        return {("F", self.rank, op.chunk, op.mb): y.detach()}

    def _F(self, op: Op, inputs) -> dict:
        x = self._input(op, inputs)
        return self._forward_done(op, x, self.modules[op.chunk](x))

    def _params(self, chunk: int) -> list[torch.nn.Parameter]:
        return [p for p in self.modules[chunk].parameters() if p.requires_grad]

    def _accumulate(self, params, grads) -> None:
        for p, g in zip(params, grads):
            if g is None:
                continue
            p.grad = g if p.grad is None else p.grad + g

    def _backward(self, op: Op, inputs, weights: bool) -> dict:
        saved = self.saved[(op.chunk, op.mb)]
        x, root = saved[0], saved[1]
        g = self._upstream(op, inputs)
        wrt = [x] if x.requires_grad else []
        params = self._params(op.chunk) if weights else []
        out = {}
        if wrt or params:
            # B keeps the graph (retain_graph) because W walks it again for the weights
            grads = torch.autograd.grad(root, wrt + params, g, retain_graph=not weights, allow_unused=True)
            if wrt and self._stage(op) > 0:
                out[("B", self.rank, op.chunk, op.mb)] = grads[0]
            self._accumulate(params, grads[len(wrt) :])
        if weights:
            del self.saved[(op.chunk, op.mb)]
        else:
            saved.append(g)
        return out

    def _B(self, op: Op, inputs) -> dict:
        return self._backward(op, inputs, weights=False)

    def _BW(self, op: Op, inputs) -> dict:
        return self._backward(op, inputs, weights=True)

    def _W(self, op: Op, inputs) -> dict:
        x, root, g = self.saved.pop((op.chunk, op.mb))
        params = self._params(op.chunk)
        if params:
            self._accumulate(params, torch.autograd.grad(root, params, g, allow_unused=True))
        return {}


def build_modules(schedule: Schedule, rank: int, model, device: torch.device, ep=None) -> dict:
    """chunk -> the module of the stage ``rank`` holds there; ``ep`` (an EP group) goes to
    ``build`` only when given, so stage models without experts need not take it."""
    stages = schedule.placement.stages
    args = (ep,) if ep is not None else ()
    return {c: model.build(s, stages, *args).to(device) for c, s in held_stages(schedule, rank).items()}


class SyntheticWork:
    """Sleeps for each item's cost (seconds) instead of computing: sleeping, not spinning,
    so more ranks than cores still keep time. Sends one-element placeholders."""

    def __init__(self, schedule: Schedule, rank: int, costs: Costs, device: torch.device):
        self.schedule = schedule
        self.rank = rank
        self.costs = costs
        self.token = torch.zeros(1, device=device)
        self.losses: dict[int, float] = {}

    def duration(self, item: Item) -> float:
        return item_time(self.costs, self.schedule.placement, self.rank, item)

    def run(self, item: Item, inputs) -> dict:
        deadline = time.perf_counter() + self.duration(item)
        while (left := deadline - time.perf_counter()) > 0:
            time.sleep(left)
        return {k: self.token for op in ops_of(item) for k in produces(self.rank, op)}


def synthetic_shape(key: Key) -> tuple[tuple[int, ...], torch.dtype]:
    return (1,), torch.float32


def model_shape(schedule: Schedule, model, ep: int = 1) -> Callable[[Key], tuple[tuple[int, ...], torch.dtype]]:
    """The shape of a data key's tensor: a forward sends its stage's output, a backward its
    stage's input (the previous stage's output); with ``ep`` ranks per stage, each holds
    its slice of dimension 0."""
    pl, stages = schedule.placement, schedule.placement.stages

    def shape_of(key: Key):
        phase, r, c, mb = key
        s = pl.stage_of(r, c, mb)
        shape, dtype = model.boundary(s if phase == "F" else s - 1, stages)
        return (shape[0] // ep, *shape[1:]), dtype

    return shape_of


# ---------------------------------------------------------------------------------------
# the loop


@dataclass
class RankRun:
    """What one rank measured: (item, start, end) in seconds from the common start."""

    events: list[tuple[Item, float, float]] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)


def execute_rank(
    schedule: Schedule,
    rank: int,
    work,
    transport: Transport,
    t0: float,
    at: Callable[[str], None] = lambda where: None,
    fault: Fault | None = None,
    sync: Callable[[], None] = lambda: None,
    mark: Callable[[Item], AbstractContextManager] = lambda item: contextlib.nullcontext(),
) -> RankRun:
    """Run ``rank``'s items in order. ``at`` is told where the rank is before each item
    (so that whoever watches can name the op a dead rank stopped at); ``sync`` waits for
    the device around each item's work, so that the clock times work, not launches;
    ``mark`` wraps that timed work (a profiler label, see ``worker.profiled``)."""
    run = RankRun()
    clock = time.perf_counter
    for item in schedule.ranks[rank]:
        where = f"{item} of {schedule.name}"
        at(where)
        try:
            if fault is not None and fault.rank == rank and fault.item == str(item) and fault.mode in ("raise", "die"):
                if fault.mode == "die":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError("injected fault (PIPESIM_FAULT)")
            inputs = {k: transport.take(k) for op in ops_of(item) for k in data_needs(schedule, rank, op)}
            with mark(item):
                sync()
                start = clock()
                outputs = work.run(item, inputs)
                sync()
                end = clock()
            if fault is not None and fault.rank == rank and fault.item == str(item) and fault.mode == "corrupt":
                outputs = {k: v * 1.001 for k, v in outputs.items()}
            for key, tensor in outputs.items():
                if transport.wants(key):
                    transport.deliver(key, tensor)
        except Exception as e:
            raise OpError(where, e) from e
        run.events.append((item, start - t0, end - t0))
    at(f"the end of {schedule.name}")
    try:
        transport.finish()
    except CommError as e:
        raise OpError(f"the end of {schedule.name}", e) from e
    run.losses = dict(work.losses)
    return run
