"""Running a stage whose module lists its components (``parts()``, see ``moe.py``), so that
an overlapped pair can run its two micro-batches' components on two streams, in the
order the simulator uses (``components.pair_plan``, DeepSeek-V3's Figure 4).

Each part runs on leaves detached from the part before, so its backward is one
``autograd.grad`` over its own small graph: the backward of a stage becomes a list of
steps that can be interleaved with another micro-batch's forward, and a B step keeps the
part's graph for the W step (``retain_graph``). A communication part's backward is its
reverse all-to-all (``moe._AllToAll``), run where the part's step runs.

Streams: the compute stream is the rank's own thread; the communication stream is one
worker thread (in order, like a CUDA stream), and a part waits for the parts it needs
through events, as GPU streams wait on each other's events. On CPU the all-to-all is a
gloo collective called from that thread, so it proceeds (and its synthetic delay sleeps)
while the main thread computes. Lone ops run their parts in order on the main thread.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from ..components import LayerCosts, pair_plan
from ..deps import Key
from ..ir import Item, Op, Pair, Schedule, ops_of
from .moe import Part
from .plan import data_needs, held_stages


def _leaf(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.requires_grad_(True) if t.is_floating_point() else t


@dataclass
class Tape:
    """One micro-batch's forward through one chunk: per part, its input leaves and
    outputs; then the backward's pending gradients and the W steps left to do."""

    records: list[tuple[Part, dict, dict]] = field(default_factory=list)
    state: dict = field(default_factory=dict)
    loss: tuple | None = None  # (output leaf, scaled loss) on the last stage
    grads: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)  # part index -> (outputs, gradients)


class ComponentWork:
    """``RealWork`` for modules with ``parts()``: F, B, W, BW part by part, and pairs on
    two streams (``overlap``) or as their two halves one after the other."""

    def __init__(self, schedule: Schedule, rank: int, model, device, modules: dict, ep=None, overlap: bool = True):
        self.schedule, self.rank, self.model, self.device = schedule, rank, model, device
        self.ep, self.overlap = ep, overlap
        self.stages = schedule.placement.stages
        self.chunk_stage = held_stages(schedule, rank)
        self.modules = modules
        self.parts = {c: m.parts() for c, m in self.modules.items()}
        self.tapes: dict[tuple[int, int], Tape] = {}
        self.losses: dict[int, float] = {}
        self.mark: Callable[[str], contextlib.AbstractContextManager] = lambda label: contextlib.nullcontext()
        self.log: list[tuple[str, str, float, float]] = []  # (item, part label, start, end) of each step
        self.offthread: list[tuple[str, float, float, int]] = []  # (label, start, end, thread id) off the main thread
        self._comm: ThreadPoolExecutor | None = None
        self.current = ""  # the item being run, as notation

    # -- micro-batches, sliced over the EP group --------------------------------------

    def _slice(self, t: torch.Tensor) -> torch.Tensor:
        if self.ep is None or self.ep.size == 1:
            return t
        n = t.shape[0] // self.ep.size
        return t[self.ep.rank * n : (self.ep.rank + 1) * n]

    def _stage(self, op: Op) -> int:
        return self.schedule.placement.stage_of(self.rank, op.chunk, op.mb)

    def _upstream(self, op: Op, inputs) -> torch.Tensor | None:
        keys = data_needs(self.schedule, self.rank, op)
        return inputs[keys[0]] if keys else None

    # -- steps: each is one part of one micro-batch ----------------------------------

    def _step(self, label: str, fn: Callable[[], None]) -> None:
        if threading.current_thread() is not threading.main_thread():  # not seen by the profiler
            start = time.perf_counter()
            fn()
            end = time.perf_counter()
            self.offthread.append((label, start, end, threading.get_native_id()))
        else:
            with self.mark(label):
                start = time.perf_counter()
                fn()
                end = time.perf_counter()
        self.log.append((self.current, label, start, end))

    def _begin_forward(self, op: Op, inputs) -> Tape:
        x = self._upstream(op, inputs) if self._stage(op) > 0 else self._slice(self.model.microbatch(op.mb)[0])
        tape = Tape(state={"h": x.to(self.device)})
        self.tapes[(op.chunk, op.mb)] = tape
        return tape

    def _forward_part(self, tape: Tape, part: Part) -> None:
        ins = {n: _leaf(tape.state[n]) for n in part.takes}
        outs = part.fn(*ins.values())
        tape.state.update(outs)
        tape.records.append((part, ins, outs))

    def _end_forward(self, op: Op, tape: Tape) -> dict[Key, torch.Tensor]:
        h = tape.state.pop("h")
        tape.state.clear()
        if self._stage(op) == self.stages - 1:
            out = _leaf(h)
            target = self._slice(self.model.microbatch(op.mb)[1]).to(self.device)
            loss = self.model.loss(out, target)
            self.losses[op.mb] = loss.item()
            scale = self.schedule.microbatches * (self.ep.size if self.ep is not None else 1)
            tape.loss = (out, loss / scale)
            return {}
        return {("F", self.rank, op.chunk, op.mb): h.detach()}

    def _begin_backward(self, op: Op, inputs) -> Tape:
        tape = self.tapes[(op.chunk, op.mb)]
        if tape.loss is not None:
            out, root = tape.loss
            tape.grads["h"] = torch.autograd.grad(root, out)[0]
            tape.loss = None
        else:
            tape.grads["h"] = self._upstream(op, inputs)
        return tape

    def _backward_part(self, tape: Tape, i: int, weights: bool) -> None:
        """B (``weights`` False: keep the graph for W) or B and W at once."""
        part, ins, outs = tape.records[i]
        have = [(t, tape.grads.pop(n)) for n, t in outs.items() if t.requires_grad and n in tape.grads]
        names = [n for n, t in ins.items() if t.requires_grad]
        params = list(part.params) if weights else []
        if not have:
            return
        got = torch.autograd.grad(
            [t for t, _ in have],
            [ins[n] for n in names] + params,
            [g for _, g in have],
            retain_graph=bool(part.params) and not weights,
            allow_unused=True,
        )
        for n, g in zip(names, got):
            if g is not None:
                tape.grads[n] = tape.grads[n] + g if n in tape.grads else g
        _accumulate(params, got[len(names) :])
        if part.params and not weights:
            tape.weights[i] = ([t for t, _ in have], [g for _, g in have])

    def _weight_part(self, tape: Tape, i: int) -> None:
        if i not in tape.weights:
            return
        outs, grads = tape.weights.pop(i)
        params = list(tape.records[i][0].params)
        _accumulate(params, torch.autograd.grad(outs, params, grads, allow_unused=True))

    def _end_backward(self, op: Op, tape: Tape) -> dict[Key, torch.Tensor]:
        g = tape.grads.pop("h", None)
        if op.kind != "B":
            del self.tapes[(op.chunk, op.mb)]
        if self._stage(op) > 0:
            return {("B", self.rank, op.chunk, op.mb): g}
        return {}

    # -- items -------------------------------------------------------------------------

    def run(self, item: Item, inputs: dict[Key, torch.Tensor]) -> dict[Key, torch.Tensor]:
        self.current = str(item)
        if isinstance(item, Pair) and self.overlap:
            return self._pair(item, inputs)
        out: dict[Key, torch.Tensor] = {}
        for op in ops_of(item):
            out.update(self._lone(op, inputs))
        return out

    def _lone(self, op: Op, inputs) -> dict[Key, torch.Tensor]:
        parts = self.parts[op.chunk]
        if op.kind == "F":
            tape = self._begin_forward(op, inputs)
            for part in parts:
                self._step(f"{part.name}(F)", lambda p=part: self._forward_part(tape, p))
            return self._end_forward(op, tape)
        tape = self.tapes[(op.chunk, op.mb)]
        if op.kind == "W":
            for i in reversed(range(len(parts))):
                if i in tape.weights:
                    self._step(f"{parts[i].name}(W)", lambda i=i: self._weight_part(tape, i))
            del self.tapes[(op.chunk, op.mb)]
            return {}
        tape = self._begin_backward(op, inputs)
        for i in reversed(range(len(parts))):
            self._step(f"{parts[i].name}(B)", lambda i=i: self._backward_part(tape, i, op.kind == "BW"))
        return self._end_backward(op, tape)

    def _pair(self, item: Pair, inputs) -> dict[Key, torch.Tensor]:
        """The two halves' parts on two streams, in ``pair_plan``'s orders: each part waits
        for its own micro-batch's part before it (and its stream's task before it)."""
        f, b = item.forward, item.backward
        fparts, bparts = self.parts[f.chunk], self.parts[b.chunk]
        ftape = self._begin_forward(f, inputs)
        btape = self._begin_backward(b, inputs)
        index = {(p.layer, p.name): i for i, p in enumerate(bparts)}
        fidx = {(p.layer, p.name): p for p in fparts}
        nf, nb = 1 + max(p.layer for p in fparts), 1 + max(p.layer for p in bparts)
        tasks, orders = pair_plan((LayerCosts(),) * nf, (LayerCosts(),) * nb, b.kind == "BW")

        def action(task) -> tuple[str, Callable[[], None]]:
            name, phase = task.part.split("(")
            name, phase = name.lower(), phase.rstrip(")")
            if phase == "F":
                return f"{name}(F)", lambda: self._forward_part(ftape, fidx[(task.layer, name)])
            i = index[(task.layer, name)]
            if phase == "W":
                return f"{name}(W)", lambda: self._weight_part(btape, i)
            return f"{name}(B)", lambda: self._backward_part(btape, i, weights=False)

        gpu = GpuStreams(self.device) if self.device.type == "cuda" else None
        run_two_streams(tasks, orders, action, self._stream(), self._step, gpu)
        return {**self._end_forward(f, ftape), **self._end_backward(b, btape)}

    def _stream(self) -> ThreadPoolExecutor:
        if self._comm is None:
            self._comm = ThreadPoolExecutor(1, thread_name_prefix="pipesim-comm")
        return self._comm


def _accumulate(params, grads) -> None:
    for p, g in zip(params, grads):
        if g is not None:
            p.grad = g if p.grad is None else p.grad + g


class _Aborted(RuntimeError):
    pass


class GpuStreams:
    """On a GPU the two threads launch onto two CUDA streams: the compute stream (the
    rank's current one) and a communication stream, where NCCL's all-to-all is ordered.
    Each task records an event on its stream when launched, and a task first makes its
    stream wait for the events of the tasks it needs, so the GPU keeps the dependencies
    the threads only launch in order. (Untested here: no GPU on the CI machine.)"""

    def __init__(self, device):
        self.streams = {"compute": torch.cuda.current_stream(device), "comm": torch.cuda.Stream(device)}
        self.events: dict[int, torch.cuda.Event] = {}

    def enter(self, name: str) -> None:
        torch.cuda.set_stream(self.streams[name])  # the current stream is per thread

    def wait(self, deps) -> None:
        stream = torch.cuda.current_stream()
        for j in deps:
            stream.wait_event(self.events[j])

    def record(self, i: int) -> None:
        event = torch.cuda.Event()
        event.record()
        self.events[i] = event


def run_two_streams(tasks, orders, action, comm: ThreadPoolExecutor, step, gpu: GpuStreams | None = None) -> None:
    """Run ``orders["compute"]`` here and ``orders["comm"]`` on ``comm``, each task after
    its ``after`` tasks have ended. The first error stops both streams and is raised."""
    done = [threading.Event() for _ in tasks]
    failed: list[BaseException] = []

    def stream(name: str) -> None:
        try:
            if gpu is not None:
                gpu.enter(name)
            for i in orders[name]:
                for j in tasks[i].after:
                    while not done[j].wait(0.05):
                        if failed:
                            raise _Aborted()
                if gpu is not None:
                    gpu.wait(tasks[i].after)
                label, fn = action(tasks[i])
                step(label, fn)
                if gpu is not None:
                    gpu.record(i)
                done[i].set()
        except BaseException as e:
            failed.append(e)
            raise

    future = comm.submit(stream, "comm")
    try:
        stream("compute")
    except _Aborted:  # the communication stream failed: raise its error
        future.result()
        raise
    future.result()  # a compute error is raised at once: the rank stops, its peers are stopped
