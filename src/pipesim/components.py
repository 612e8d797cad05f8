"""The component cost model: what happens inside a chunk, and why DualPipe pairs ops.

A chunk is L layers. A layer's forward is attention -> all-to-all dispatch -> MLP ->
all-to-all combine; its backward runs the other way, combine -> MLP -> dispatch ->
attention, each compute part split into the input gradient (B) and the weight gradient
(W). Compute runs on the GPU's compute stream, all-to-alls on a communication stream.

* A lone op (1F1B, ZB, a DualPipe op outside a pair) runs its parts one after another:
  its communication is exposed. (``lone_overlap=True`` instead splits the micro-batch in
  two halves whose parts interleave on the two streams, for schedules that overlap
  communication inside one micro-batch; that is an assumption about the implementation,
  stated as such.)
* An overlapped pair (DualPipe's F&B) runs the forward of one micro-batch and the
  backward of another on both streams at once, in the order of DeepSeek-V3's Figure 4:
  per layer, compute MLP(B), MLP(W), MLP(F), ATTN(B), ATTN(W), ATTN(F) and communication
  DISPATCH(F), DISPATCH(B), COMBINE(F), COMBINE(B), each part waiting for its own
  micro-batch's previous part.

While a communication kernel runs it holds ``comm_sms`` of the GPU's ``total_sms``
(DeepSeek-V3: 20 of 132 on H800), so compute running beside it goes slower by that
share. With ``held_in_pairs`` the communication of an overlapped pair holds its SMs from
the pair's start until its last communication part ends, waiting for its inputs
included: DeepSeek-V3's all-to-all kernels are launched on their stream ahead of their
data and spin on their peers' (section 3.2.2: 20 SMs dedicated to communication; in its
public training profile the communication stream is busy 28.6 of every 32.4 ms of a
pair's per-layer compute). The pair's duration comes out of this two-stream
simulation, not a constant.
P2P transfers between stages are the ``p2p`` latency on the edges between ranks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from .errors import PipesimError
from .ir import Item, Op, Pair
from .timeline import Event, Inside, Segment, exposed_time


@dataclass(frozen=True)
class LayerCosts:
    """Times of one layer's parts for one micro-batch, on a whole GPU."""

    attn_f: float = 1.0
    mlp_f: float = 1.0
    dispatch_f: float = 0.0
    combine_f: float = 0.0
    attn_b: float | None = None  # default: attn_f
    attn_w: float | None = None  # default: attn_f
    mlp_b: float | None = None  # default: mlp_f
    mlp_w: float | None = None  # default: mlp_f
    dispatch_b: float | None = None  # default: dispatch_f (same bytes, other direction)
    combine_b: float | None = None  # default: combine_f

    def __post_init__(self) -> None:
        defaults = {
            "attn_b": self.attn_f,
            "attn_w": self.attn_f,
            "mlp_b": self.mlp_f,
            "mlp_w": self.mlp_f,
            "dispatch_b": self.dispatch_f,
            "combine_b": self.combine_f,
        }
        for name, v in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, v)
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or v < 0 or v != v:
                raise PipesimError(f"component time {f.name.replace('_', '-')} must be a number >= 0, got {v!r}")

    @property
    def forward_compute(self) -> float:
        return self.attn_f + self.mlp_f

    @property
    def forward_comm(self) -> float:
        return self.dispatch_f + self.combine_f

    @property
    def backward_compute(self) -> float:
        return self.attn_b + self.mlp_b

    @property
    def weight_compute(self) -> float:
        return self.attn_w + self.mlp_w

    @property
    def backward_comm(self) -> float:
        return self.dispatch_b + self.combine_b


#: Presets. ``ep-1to1``: DeepSeek-V3's regime, where expert-parallel all-to-all takes as
#: long as the computation: in each direction a layer's communication equals its
#: computation (forward 2 + 2, backward with weight gradients 4 + 4).
PRESETS: dict[str, LayerCosts] = {
    "ep-1to1": LayerCosts(attn_f=1, mlp_f=1, dispatch_f=1, combine_f=1, dispatch_b=2, combine_b=2),
}


class Task(NamedTuple):
    """One part of an item on one stream (a tuple: a pair's plan makes hundreds)."""

    part: str  # "ATTN(F)", "DISPATCH(B)", ...
    half: str  # which op of the item: "F"/"B" in a pair, "" or "a"/"b" in a lone op
    layer: int
    stream: str  # "compute" or "comm"
    work: float  # time on a whole GPU (compute) or on the link (comm)
    after: tuple[int, ...]  # indices of tasks that must end first


def run_streams(
    tasks: list[Task], orders: dict[str, list[int]], comm_share: float, held: bool = False
) -> list[tuple[float, float]]:
    """Simulate two in-order streams. Each stream starts its next task when the task
    before it on the stream and everything in ``after`` have ended. Compute progresses at
    rate 1 - ``comm_share`` while a communication task runs (``held``: until the last
    communication task with work has ended, waits included), else at rate 1."""
    n = len(tasks)
    ends: list[float | None] = [None] * n
    starts = [0.0] * n
    seqs = list(orders.values())
    compute = [name == "compute" for name in orders]
    comm = [name == "comm" for name in orders]
    k = len(seqs)
    pos = [0] * k
    task = [-1] * k  # per stream, the task it runs (-1: none), its start and work left
    left = [0.0] * k
    rate = [1.0] * k
    slow = 1.0 - comm_share
    # held: the SMs stay taken until the communication stream's last task with work ends
    last_comm = next((i for i in reversed(orders.get("comm", [])) if tasks[i].work > 0), None) if held else None
    t = 0.0
    while True:
        # start what can start now (zero-work tasks finish on the spot)
        progressed = True
        while progressed:
            progressed = False
            for s in range(k):
                if task[s] >= 0 or pos[s] >= len(seqs[s]):
                    continue
                i = seqs[s][pos[s]]
                ready = True
                for j in tasks[i].after:
                    e = ends[j]
                    if e is None or e > t + 1e-12:
                        ready = False
                        break
                if ready:
                    pos[s] += 1
                    progressed = True
                    work = tasks[i].work
                    if work <= 0:
                        starts[i] = ends[i] = t
                    else:
                        task[s], starts[i], left[s] = i, t, work
        comm_on = last_comm is not None and ends[last_comm] is None
        busy = False
        for s in range(k):
            if task[s] >= 0:
                busy = True
                comm_on = comm_on or comm[s]
        if not busy:
            break
        step = math.inf
        for s in range(k):
            if task[s] >= 0:
                rate[s] = slow if comm_on and compute[s] else 1.0
                d = left[s] / rate[s]
                if d < step:
                    step = d
        t += step
        for s in range(k):
            if task[s] >= 0:
                left[s] -= step * rate[s]
                if left[s] <= 1e-12:
                    ends[task[s]] = t
                    task[s] = -1
    if any(x is None for x in ends):  # an order that contradicts the dependencies
        stuck = [f"{tasks[i].part} L{tasks[i].layer}" for i, x in enumerate(ends) if x is None]
        raise PipesimError(f"component stream orders cannot run: {', '.join(stuck[:4])} never start")
    return list(zip(starts, ends))  # type: ignore[arg-type]


def forward_tasks(layers: tuple[LayerCosts, ...], tag: str, tasks: list[Task]) -> list[dict[str, int]]:
    """Append a chunk's forward parts; return per layer the index of each part."""
    out, prev = [], ()
    for li, c in enumerate(layers):
        ids = {}
        for part, stream, work in (
            ("ATTN(F)", "compute", c.attn_f),
            ("DISPATCH(F)", "comm", c.dispatch_f),
            ("MLP(F)", "compute", c.mlp_f),
            ("COMBINE(F)", "comm", c.combine_f),
        ):
            tasks.append(Task(part, tag, li, stream, work, prev))
            ids[part] = len(tasks) - 1
            prev = (len(tasks) - 1,)
        out.append(ids)
    return out


def backward_tasks(layers: tuple[LayerCosts, ...], tag: str, with_w: bool, tasks: list[Task]) -> list[dict[str, int]]:
    """Append a chunk's backward parts, last layer first; W parts only when ``with_w``."""
    out, prev = [], ()
    for li in reversed(range(len(layers))):
        c = layers[li]
        ids = {}
        for part, stream, work in (
            ("COMBINE(B)", "comm", c.combine_b),
            ("MLP(B)", "compute", c.mlp_b),
            ("DISPATCH(B)", "comm", c.dispatch_b),
            ("ATTN(B)", "compute", c.attn_b),
        ):
            tasks.append(Task(part, tag, li, stream, work, prev))
            ids[part] = len(tasks) - 1
            prev = (len(tasks) - 1,)
            if with_w and part in ("MLP(B)", "ATTN(B)"):
                name = part.replace("(B)", "(W)")
                work_w = c.mlp_w if part == "MLP(B)" else c.attn_w
                tasks.append(Task(name, tag, li, "compute", work_w, (ids[part],)))
                ids[name] = len(tasks) - 1
        out.append(ids)
    return out


def weight_tasks(layers: tuple[LayerCosts, ...], tag: str, tasks: list[Task]) -> list[dict[str, int]]:
    out = []
    for li in reversed(range(len(layers))):
        c = layers[li]
        ids = {}
        for part, work in (("MLP(W)", c.mlp_w), ("ATTN(W)", c.attn_w)):
            tasks.append(Task(part, tag, li, "compute", work, ()))
            ids[part] = len(tasks) - 1
        out.append(ids)
    return out


def pair_plan(f_layers, b_layers, with_w: bool) -> tuple[list[Task], dict[str, list[int]]]:
    """Tasks and stream orders of an overlapped pair, in DeepSeek-V3 Figure 4's order.

    Block k pairs forward layer k with backward layer L-1-k. Compute runs MLP(B), MLP(W),
    MLP(F), ATTN(B), ATTN(W) of the block, then ATTN(F) of the next forward layer;
    communication runs DISPATCH(F), DISPATCH(B), COMBINE(F) of the block, then COMBINE(B)
    of the next backward layer. The first ATTN(F) and COMBINE(B) open the pair.
    """
    tasks: list[Task] = []
    fw = forward_tasks(f_layers, "F", tasks)
    bw = backward_tasks(b_layers, "B", with_w, tasks)
    compute: list[int] = []
    comm: list[int] = []
    if fw:
        compute.append(fw[0]["ATTN(F)"])
    if bw:
        comm.append(bw[0]["COMBINE(B)"])
    for k in range(max(len(fw), len(bw))):
        f = fw[k] if k < len(fw) else {}
        b = bw[k] if k < len(bw) else {}
        for ids, part in ((b, "MLP(B)"), (b, "MLP(W)"), (f, "MLP(F)"), (b, "ATTN(B)"), (b, "ATTN(W)")):
            if part in ids:
                compute.append(ids[part])
        if k + 1 < len(fw):
            compute.append(fw[k + 1]["ATTN(F)"])
        for ids, part in ((f, "DISPATCH(F)"), (b, "DISPATCH(B)"), (f, "COMBINE(F)")):
            if part in ids:
                comm.append(ids[part])
        if k + 1 < len(bw):
            comm.append(bw[k + 1]["COMBINE(B)"])
    return tasks, {"compute": compute, "comm": comm}


def lone_plan(op: Op, layers: tuple[LayerCosts, ...], split: bool) -> tuple[list[Task], dict[str, list[int]]]:
    """Tasks and orders of a lone op: its parts in sequence, or (``split``) two half
    micro-batches whose parts alternate so one half's communication hides behind the
    other's computation."""
    halves = ("a", "b") if split and op.kind != "W" else ("",)
    # whole micro-batches keep their layers (times 1.0 would be the same numbers)
    part_layers = layers if len(halves) == 1 else tuple(_scaled(c, 1.0 / len(halves)) for c in layers)
    tasks: list[Task] = []
    per_half = []
    for h in halves:
        tag = h
        if op.kind == "F":
            per_half.append(forward_tasks(part_layers, tag, tasks))
        elif op.kind == "W":
            per_half.append(weight_tasks(part_layers, tag, tasks))
        else:
            per_half.append(backward_tasks(part_layers, tag, op.kind == "BW", tasks))
    if not split:  # one part after another, whatever its stream
        tasks = [Task(t.part, t.half, t.layer, t.stream, t.work, (i - 1,) if i else ()) for i, t in enumerate(tasks)]
        return tasks, {
            "compute": [i for i, t in enumerate(tasks) if t.stream == "compute"],
            "comm": [i for i, t in enumerate(tasks) if t.stream == "comm"],
        }
    orders: dict[str, list[int]] = {"compute": [], "comm": []}
    for li in range(len(layers)):
        for part in per_half[0][li]:  # part by part, alternating the halves
            for half in per_half:
                i = half[li][part]
                orders[tasks[i].stream].append(i)
    return tasks, orders


def _scaled(c: LayerCosts, k: float) -> LayerCosts:
    return LayerCosts(**{f.name: getattr(c, f.name) * k for f in fields(c)})


#: plans of items shared by every cost model, keyed by the layers they run (bounded:
#: a plan of a deep stage holds a tuple per part)
_PLANS: dict[tuple, tuple[float, Inside]] = {}
PLANS_KEPT = 2048

#: the parts of one layer of a lone op, in the order ``forward_tasks``, ``backward_tasks``
#: and ``weight_tasks`` append them
_SERIAL_PARTS = {
    "F": ("attn_f", "dispatch_f", "mlp_f", "combine_f"),
    "B": ("combine_b", "mlp_b", "dispatch_b", "attn_b"),
    "BW": ("combine_b", "mlp_b", "mlp_w", "dispatch_b", "attn_b", "attn_w"),
    "W": ("mlp_w", "attn_w"),
}


#: ``serial_time`` of every kind of op on some layers, shared by every cost model, keyed
#: by the identities of the layers (hashing their values would cost as much as adding
#: them up; a search's cost models share the LayerCosts objects of each kind of layer).
#: Each entry keeps its layers, so no id in a key can pass to another object while the
#: key is kept.
_SERIAL: dict[tuple, tuple[dict[str, float], tuple[LayerCosts, ...]]] = {}
SERIAL_KEPT = 1 << 16


#: the compute parts of one op of a layer (``forward_tasks`` and ``backward_tasks`` put
#: these on the compute stream; the all-to-alls go beside them)
COMPUTE_PARTS = {"F": ("attn_f", "mlp_f"), "B": ("attn_b", "mlp_b"), "BW": ("attn_b", "mlp_b", "attn_w", "mlp_w")}


def _serial(layers: tuple[LayerCosts, ...]) -> dict:
    """Per kind of op (F, B, W, BW), ``serial_time`` on these layers, and per kind of
    op with compute parts, ("compute", kind): their summed compute, layer by layer and
    part by part. A search asks for all of them of most stages (their bounds' fill and
    drain, the pairs' floors, their step's overheads)."""
    key = tuple(map(id, layers))
    hit = _SERIAL.get(key)
    if hit is None:
        times: dict = {kind: serial_time(kind, layers) for kind in _SERIAL_PARTS}
        for kind, parts in COMPUTE_PARTS.items():
            times["compute", kind] = sum(getattr(c, part) for c in layers for part in parts)
        hit = _SERIAL[key] = (times, layers)
        if len(_SERIAL) > SERIAL_KEPT:
            del _SERIAL[next(iter(_SERIAL))]  # the oldest: a bounded memory
    return hit[0]


def serial_times(tasks: list[Task]) -> list[tuple[float, float]]:
    """(start, end) of tasks that run one after another in list order, as ``run_streams``
    times such a chain: each starts when the one before ends and lasts its work."""
    t = 0.0
    out = []
    for task in tasks:
        if task.work > 0:
            out.append((t, t + task.work))
            t += task.work
        else:
            out.append((t, t))
    return out


def serial_time(kind: str, layers: tuple[LayerCosts, ...]) -> float:
    """How long a lone op lasts when its parts run one after another (``lone_plan``
    without ``split``): their sum, added in the order ``run_streams`` advances its clock
    through them (so the same float), without building the tasks. Forwards run the
    layers first to last, the others last to first."""
    t = 0.0
    names = _SERIAL_PARTS[kind]
    for c in layers if kind == "F" else reversed(layers):
        for name in names:
            work = getattr(c, name)
            if work > 0:
                t += work
    return t


@dataclass(frozen=True)
class ComponentCosts:
    """A cost model from per-layer component times (``CostModel`` protocol).

    ``stages`` lists, per model stage, the ``LayerCosts`` of each of its layers; a single
    entry serves every stage. ``uniform(layer, layers)`` builds the common case.
    """

    stages: tuple[tuple[LayerCosts, ...], ...]
    p2p: float = 0.0
    comm_sms: float = 20
    total_sms: float = 132
    lone_overlap: bool = False
    held_in_pairs: bool = False  # a pair's communication holds its SMs for the whole pair
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.stages or any(not s for s in self.stages):
            raise PipesimError("a component cost model needs at least one layer per stage")
        if not 0 <= self.comm_sms < self.total_sms:
            raise PipesimError(f"--comm-sms must be >= 0 and below --total-sms={self.total_sms:g}, got {self.comm_sms:g}")
        if self.p2p < 0:
            raise PipesimError(f"--p2p must be >= 0, got {self.p2p}")

    @classmethod
    def uniform(cls, layer: LayerCosts, layers: int = 1, **kw) -> ComponentCosts:
        if layers < 1:
            raise PipesimError(f"--layers must be >= 1, got {layers}")
        return cls(((layer,) * layers,), **kw)

    def to_dict(self) -> dict:
        layers = [[{f.name: getattr(c, f.name) for f in fields(c)} for c in stage] for stage in self.stages]
        uniform = all(stage == self.stages[0] for stage in self.stages) and len(set(self.stages[0])) == 1
        d: dict = {"model": "components"}
        if uniform:
            d.update(layer=layers[0][0], layers=len(self.stages[0]))
        else:
            d["stages"] = layers
        d.update(p2p=self.p2p, comm_sms=self.comm_sms, total_sms=self.total_sms, lone_overlap=self.lone_overlap)
        if self.held_in_pairs:
            d["held_in_pairs"] = True
        return d

    def scaled(self, k: float) -> ComponentCosts:
        """Every part of every layer times ``k`` (a chunk of k times the layers); P2P unchanged."""
        stages = tuple(tuple(_scaled(c, k) for c in stage) for stage in self.stages)
        return ComponentCosts(stages, self.p2p, self.comm_sms, self.total_sms, self.lone_overlap, self.held_in_pairs)

    def describe(self) -> str:
        """One line for humans, e.g. for the CLI's header."""
        stage = self.stages[0]
        c = stage[0]
        same = all(x == c for st in self.stages for x in st)
        head = (
            f"per layer attn {c.attn_f:g}/{c.attn_b:g}/{c.attn_w:g}, mlp {c.mlp_f:g}/{c.mlp_b:g}/{c.mlp_w:g} (F/B/W), "
            f"dispatch {c.dispatch_f:g}/{c.dispatch_b:g}, combine {c.combine_f:g}/{c.combine_b:g} (F/B)"
            if same
            else f"{len(self.stages)} stages of per-layer components"
        )
        lone = ", lone ops overlap half micro-batches" if self.lone_overlap else ""
        return f"{head}; {len(stage)} layers per chunk; p2p {self.p2p:g}; communication holds {self.comm_sms:g}/{self.total_sms:g} SMs{lone}"

    @property
    def comm_share(self) -> float:
        return self.comm_sms / self.total_sms

    def layers(self, stage: int) -> tuple[LayerCosts, ...]:
        if len(self.stages) == 1:
            return self.stages[0]
        if stage >= len(self.stages):
            raise PipesimError(f"component costs give {len(self.stages)} stages, but the schedule has a stage {stage}")
        return self.stages[stage]

    # The CostModel protocol ---------------------------------------------------------

    def op_time(self, op: Op, stage: int) -> float:
        key = (op.kind, stage)
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0]
        if self.lone_overlap and op.kind != "W":  # half micro-batches overlap: simulated
            return self._plan(key)[0]
        # parts one after another: the sum of their times, kept apart from the plan, which
        # only a simulation asks for (``inside``)
        return self._serial_times(stage)[op.kind]

    def compute_time(self, kind: str, stage: int) -> float:
        """Seconds of compute in one op (F, B or the fused BW) on one stage: its compute
        parts one after another at full rate, the least an item holding it lasts."""
        return self._serial_times(stage)["compute", kind]

    def _serial_times(self, stage: int) -> dict:
        times = self._cache.get(("serial", stage))
        if times is None:
            times = self._cache["serial", stage] = _serial(self.layers(stage))
        return times

    def pair_time(self, pair: Pair, f_stage: int, b_stage: int) -> float:
        return self._plan(("pair", f_stage, b_stage, pair.backward.kind))[0]

    def p2p_time(self, src: int, dst: int) -> float:
        return self.p2p

    def inside(self, item: Item, stages: tuple[int, ...]) -> Inside:
        """What runs on which stream inside ``item`` (shared by all items of its shape)."""
        if isinstance(item, Pair):
            return self._plan(("pair", stages[0], stages[1], item.backward.kind))[1]
        return self._plan((item.kind, stages[0]))[1]

    def segments(self, item: Item, stages: tuple[int, ...]) -> tuple[Segment, ...]:
        """The item's parts, times relative to its start, labelled like ``MLP(B) BW0.3 L1``."""
        return Event(0, item, 0.0, self._plan(self._key(item, stages))[0], self.inside(item, stages)).segments

    @staticmethod
    def _key(item: Item, stages: tuple[int, ...]) -> tuple:
        if isinstance(item, Pair):
            return ("pair", stages[0], stages[1], item.backward.kind)
        return (item.kind, stages[0])

    def _plan(self, key: tuple) -> tuple[float, Inside]:
        hit = self._cache.get(key)
        if hit is None:
            # Keyed by what the plan depends on (the layers' times, not the stage's index),
            # so cost models that share layers (the planner's candidates) share plans.
            if key[0] == "pair":
                content = (
                    key[3],
                    self.layers(key[1]),
                    self.layers(key[2]),
                    self.lone_overlap,
                    self.comm_share,
                    self.held_in_pairs,
                )
            else:
                content = (key[0], self.layers(key[1]), self.lone_overlap, self.comm_share)
            hit = _PLANS.get(content)
            if hit is None:
                hit = _PLANS[content] = self._run_plan(key)
                if len(_PLANS) > PLANS_KEPT:
                    del _PLANS[next(iter(_PLANS))]  # the oldest: a bounded memory
            self._cache[key] = hit
        return hit

    def _run_plan(self, key: tuple) -> tuple[float, Inside]:
        if key[0] == "pair":
            _, fs, bs, bkind = key
            tasks, orders = pair_plan(self.layers(fs), self.layers(bs), bkind == "BW")
        else:
            kind, stage = key
            tasks, orders = lone_plan(Op(kind, 0, 0), self.layers(stage), self.lone_overlap)
        if key[0] != "pair" and not (self.lone_overlap and key[0] != "W"):
            times = serial_times(tasks)
        else:
            times = run_streams(tasks, orders, self.comm_share, held=self.held_in_pairs and key[0] == "pair")
        kept = [(t, a, b) for t, (a, b) in zip(tasks, times) if b > a]
        parts = tuple((t.stream, t.part, 1 if t.half == "B" else 0, t.layer, a, b) for t, a, b in kept)
        tags = tuple(t.half if t.half in ("a", "b") else "" for t, _, _ in kept)
        compute = sorted((a, b) for t, a, b in kept if t.stream == "compute")
        comm = sorted((a, b) for t, a, b in kept if t.stream != "compute")
        inside = Inside(parts, sum(b - a for a, b in compute), exposed_time(compute, comm), tags)
        return max((b for _, b in times), default=0.0), inside
