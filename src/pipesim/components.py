"""The component cost model: what happens inside a chunk, and why DualPipe pairs ops.

A chunk is L layers, each timed part by part (``layer.LayerCosts``: attention, all-to-all
dispatch, MLP, all-to-all combine, forward and backward). ``ComponentCosts`` prices a
schedule's items from those parts run on two streams (``streams``): a lone op (1F1B, ZB,
a DualPipe op outside a pair) runs its parts one after another, so its communication is
exposed (``lone_overlap=True`` instead overlaps two half micro-batches, an assumption
about the implementation, stated as such); an overlapped pair (DualPipe's F&B) runs the
forward of one micro-batch and the backward of another on both streams at once, in the
order of DeepSeek-V3's Figure 4.

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

The names of ``layer`` and ``streams`` that callers use are importable from here too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, fields

from .errors import PipesimError
from .inputs import MAX_VALUE, number
from .ir import Item, Op, Pair
from .layer import PRESETS, LayerCosts
from .streams import (
    COMPUTE_PARTS,
    SERIAL_PARTS,
    Task,
    backward_tasks,
    forward_tasks,
    lone_plan,
    pair_plan,
    run_streams,
    serial_parts,
    serial_time,
    serial_times,
    weight_tasks,
)
from .timeline import Event, Inside, Segment, exposed_time

__all__ = [
    "COMPUTE_PARTS",
    "PRESETS",
    "ComponentCosts",
    "LayerCosts",
    "Task",
    "backward_tasks",
    "forward_tasks",
    "lone_plan",
    "pair_plan",
    "run_streams",
    "serial_time",
    "serial_times",
    "weight_tasks",
]


#: plans of items shared by every cost model, keyed by the layers they run (bounded:
#: a plan of a deep stage holds a tuple per part). DeepSeek-V2 on b200 asks for 10594
#: distinct plans: 2048 kept made 2469 of them again (0.2 s), 8192 kept 8
_PLANS: dict[tuple, tuple[float, Inside]] = {}
PLANS_KEPT = 8192

#: a number for each stage's layers by their values (``ComponentCosts._layers_key``), which
#: ``_PLANS`` is keyed by: equal layers, one number. Bounded; a number is never reused, so
#: layers seen again after theirs was dropped get a new one (and their plans are made again)
_LAYER_KEYS: dict[tuple[LayerCosts, ...], int] = {}
_NUMBERS = itertools.count()
LAYER_KEYS_KEPT = 1 << 16

#: ``serial_time`` of every kind of op on some layers, shared by every cost model, keyed
#: by the identities of the layers (hashing their values would cost as much as adding
#: them up; a search's cost models share the LayerCosts objects of each kind of layer).
#: Each entry keeps its layers, so no id in a key can pass to another object while the
#: key is kept.
_SERIAL: dict[tuple, tuple[dict[str, float], tuple[LayerCosts, ...]]] = {}
SERIAL_KEPT = 1 << 16


def _serial(layers: tuple[LayerCosts, ...]) -> dict:
    """Per kind of op (F, B, W, BW), ``serial_time`` on these layers, and per kind of
    op with compute parts, ("compute", kind): their summed compute, layer by layer and
    part by part. A search asks for all of them of most stages (their bounds' fill and
    drain, the pairs' floors, their step's overheads)."""
    key = tuple(map(id, layers))
    hit = _SERIAL.get(key)
    if hit is None:
        times: dict = {kind: serial_time(kind, layers) for kind in SERIAL_PARTS}
        for kind, parts in COMPUTE_PARTS.items():
            times["compute", kind] = sum(getattr(c, part) for c in layers for part in parts)
        hit = _SERIAL[key] = (times, layers)
        if len(_SERIAL) > SERIAL_KEPT:
            del _SERIAL[next(iter(_SERIAL))]  # the oldest: a bounded memory
    return hit[0]


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
    # op_time's answers by (kind, stage): a search asks it about a million times, each
    # else two lookups and a call (``_serial_times``) for the same float
    _op_times: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)
    _layer_keys: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)  # ``_layers_key``'s

    def __post_init__(self) -> None:
        if not self.stages or any(not s for s in self.stages):
            raise PipesimError("a component cost model needs at least one layer per stage")
        number(self.total_sms, "--total-sms", 1, MAX_VALUE)  # an inf total made every slowdown 0
        if not 0 <= self.comm_sms < self.total_sms:
            raise PipesimError(f"--comm-sms must be >= 0 and below --total-sms={self.total_sms:g}, got {self.comm_sms:g}")
        number(self.p2p, "--p2p", 0, MAX_VALUE)  # a NaN p2p was dropped by the engine's max()

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
        stages = tuple(tuple(c.scaled(k) for c in stage) for stage in self.stages)
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
        layers = f"{len(stage)} layer{'s' if len(stage) != 1 else ''} per chunk"
        return f"{head}; {layers}; p2p {self.p2p:g}; communication holds {self.comm_sms:g}/{self.total_sms:g} SMs{lone}"

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
        t = self._op_times.get(key)
        if t is None:
            t = self._op_times[key] = self._op_time(key)
        return t

    def _op_time(self, key: tuple[str, int]) -> float:
        """``op_time`` of an op of kind ``key[0]`` on stage ``key[1]``: its plan's time where
        it has one, which is its parts' serial time where they run one after another."""
        kind, stage = key
        hit = self._cache.get(key)
        if hit is not None:
            return hit[0]
        if self.lone_overlap and kind != "W":  # half micro-batches overlap: simulated
            return self._plan(key)[0]
        # parts one after another: the sum of their times, kept apart from the plan, which
        # only a simulation asks for (``inside``)
        return self._serial_times(stage)[kind]

    def pass_times(self, stages: int) -> tuple[list[float], list[float]] | None:
        """Per stage of the first ``stages``, ``op_time`` of its forward and of its
        shorter backward (B, or the fused BW), read off each stage's serial times at once
        (a planner asks this of thousands of cost models, three ``op_time`` calls a stage
        otherwise); None where lone ops overlap half micro-batches (simulated plans)."""
        if self.lone_overlap:
            return None
        fwd, bwd = [], []
        for stage in range(stages):
            times = self._serial_times(stage)
            fwd.append(times["F"])
            bwd.append(min(times["B"], times["BW"]))
        return fwd, bwd

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
            # The layers by a number standing for their values (``_layers_key``), not the
            # values hashed at each look-up: DeepSeek-V2 on b200 hashed 574k LayerCosts here
            if key[0] == "pair":
                content = (
                    key[3],
                    self._layers_key(key[1]),
                    self._layers_key(key[2]),
                    self.lone_overlap,
                    self.comm_share,
                    self.held_in_pairs,
                )
            else:
                content = (key[0], self._layers_key(key[1]), self.lone_overlap, self.comm_share)
            hit = _PLANS.get(content)
            if hit is None:
                hit = _PLANS[content] = self._run_plan(key)
                if len(_PLANS) > PLANS_KEPT:
                    del _PLANS[next(iter(_PLANS))]  # the oldest: a bounded memory
            self._cache[key] = hit
        return hit

    def _layers_key(self, stage: int) -> int:
        """A number for the values of ``stage``'s layers, the same for equal layers of any
        cost model (``_LAYER_KEYS``), worked out once per stage of this one."""
        got = self._layer_keys.get(stage)
        if got is None:
            layers = self.layers(stage)
            got = _LAYER_KEYS.get(layers)
            if got is None:
                got = _LAYER_KEYS[layers] = next(_NUMBERS)
                if len(_LAYER_KEYS) > LAYER_KEYS_KEPT:
                    del _LAYER_KEYS[next(iter(_LAYER_KEYS))]  # the oldest; its number is never given again
            self._layer_keys[stage] = got
        return got

    def _run_plan(self, key: tuple) -> tuple[float, Inside]:
        if key[0] != "pair" and not (self.lone_overlap and key[0] != "W"):
            # parts one after another, timed without their tasks (``serial_parts``): a
            # chain's parts that take time start one after another, so each stream's list
            # is in order already, and the op ends where its last part does
            end, kept = serial_parts(key[0], self.layers(key[1]))
            parts = tuple((stream, part, 0, li, a, b) for stream, part, li, a, b in kept)
            compute = [(a, b) for stream, _, _, a, b in kept if stream == "compute"]
            comm = [(a, b) for stream, _, _, a, b in kept if stream != "compute"]
            return end, Inside(parts, sum(b - a for a, b in compute), exposed_time(compute, comm), ("",) * len(parts))
        if key[0] == "pair":
            _, fs, bs, bkind = key
            tasks, orders = pair_plan(self.layers(fs), self.layers(bs), bkind == "BW")
        else:
            kind, stage = key
            tasks, orders = lone_plan(Op(kind, 0, 0), self.layers(stage), self.lone_overlap)
        times = run_streams(tasks, orders, self.comm_share, held=self.held_in_pairs and key[0] == "pair")
        parts, tags, compute, comm = [], [], [], []
        for t, (a, b) in zip(tasks, times):  # the parts that take time
            if b > a:
                parts.append((t.stream, t.part, 1 if t.half == "B" else 0, t.layer, a, b))
                tags.append(t.half if t.half in ("a", "b") else "")
                (compute if t.stream == "compute" else comm).append((a, b))
        compute.sort()
        comm.sort()
        inside = Inside(tuple(parts), sum(b - a for a, b in compute), exposed_time(compute, comm), tuple(tags))
        return max((b for _, b in times), default=0.0), inside
