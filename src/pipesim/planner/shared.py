"""What one search computes once and every candidate of it reads (``Shared``): compiled
programs, placements' held stages, stage splits, cost and memory models, and what each
layout holds back; and ``kept``, the small keyed store the candidates of one cost model
share their derived values through."""

from __future__ import annotations

from collections import OrderedDict

from ..simulate import Program
from .bounds import rank_stages, static_bytes
from .device_memory import LayoutHeld, layout_held, roomiest
from .footprint import memory_model
from .layout import Layout
from .programs import PROGRAM_CACHE_BYTES, ProgramCache, Shape
from .specs import Cluster, Model, Training
from .stages import component_costs, stage_parts


class Shared:
    """What one search computes once: programs, item counts, cost models."""

    def __init__(
        self,
        m: Model,
        c: Cluster,
        t: Training,
        cache_bytes: int = PROGRAM_CACHE_BYTES,
        exhaustive: bool = False,
        programs: ProgramCache | None = None,
    ):
        self.m, self.c, self.t = m, c, t
        self.exhaustive = exhaustive
        # programs do not depend on the cluster or training costs: searches of one model
        # under varied assumptions may share them
        self.programs = programs or ProgramCache(0 if exhaustive else cache_bytes, continued=not exhaustive)
        self.costs: OrderedDict[tuple, object] = OrderedDict()
        self.splits: dict[tuple, list[range]] = {}  # stage splits: small, all kept
        self.priced: OrderedDict[tuple, tuple] = OrderedDict()  # per split, its cost and memory models: the last 1024 kept
        self.roomiest: dict[tuple, float] = {}  # the most a rank can fill, per (layout, recomputation)
        self.held: dict[tuple, LayoutHeld] = {}  # what every rank holds back alike, per (layout, recomputation)
        self.placements: dict[int, tuple] = {}  # id -> (placement, its held stages, its ranks' stages, routes_key, held number)
        self.routes: dict[tuple, int] = {}  # (routes, route_of) -> its routes_key
        self.helds: dict[tuple, int] = {}  # held stages -> a number for them (``cost_model``'s keys)
        self.orders: dict[tuple, tuple] = {}  # (family, pp, M, options) -> the order's grad_reduction.order_ends
        self.sizes: dict[tuple, tuple] = {}  # (family, pp, M, chunks) -> evaluate._sizes

    def placement(self, pl) -> tuple[tuple[tuple[int, ...], ...], tuple[frozenset[int], ...]]:
        """What the search reads of a placement (shared among every schedule, micro-batch
        count and layout that has it), worked out once: the stages each rank holds
        (``Placement.held``) and runs (``bounds.rank_stages``). Kept by identity, the
        placement kept with them so its id stays its own."""
        return self._placement(pl)[1:3]

    def routes_key(self, pl) -> int:
        """A number for the placement's routes and which route each micro-batch takes, the
        same for every placement that has them: a key for what depends on nothing else,
        without hashing the micro-batches' routes each time it is looked up."""
        return self._placement(pl)[3]

    def _placement(self, pl) -> tuple:
        hit = self.placements.get(id(pl))
        if hit is None:
            routes = self.routes.setdefault((pl.routes, pl.route_of), len(self.routes))
            held = pl.held()
            number = self.helds.setdefault(held, len(self.helds))
            hit = self.placements[id(pl)] = (pl, held, tuple(map(frozenset, rank_stages(pl))), routes, number)
        return hit

    def most_usable(self, lay: Layout, recompute: str) -> float:
        """Bytes no rank of this layout can fill more than (``device_memory.roomiest``),
        computed once per layout and recomputation: a bound for refusing a layout before
        its placements are looked at, never below any rank's own usable memory."""
        common = self.layout_held(lay, recompute)
        return kept(self.roomiest, (lay, recompute), lambda: roomiest(self.m, self.c, self.t, lay, recompute, common).bytes)

    def layout_held(self, lay: Layout, recompute: str) -> LayoutHeld:
        """What each rank of this layout holds back whatever its placement
        (``device_memory.layout_held``), once per layout and recomputation."""
        return kept(self.held, (lay, recompute), lambda: layout_held(self.m, self.t, lay, recompute))

    def program(self, name: str, pp: int, M: int, options: dict) -> Program:
        return self.programs.program(name, pp, M, options)

    def shape(self, name: str, pp: int, M: int, options: dict) -> Shape:
        """A built schedule's shape."""
        return self.programs.shape(name, pp, M, options)

    def cost_model(self, lay: Layout, stages: int, recompute: str, pl, even_out: bool = True):
        """The candidate's stage split, component costs, memory model and per rank static
        bytes; candidates of one layout and placement (``pl``: the model stages each of
        its ranks holds, ``Placement.held``, which the split balances) share them (the last 1024 kept: remade, one
        loses what its candidates worked out of it, its usable memory and step sync; 16
        kept made Qwen3-235B-A22B on h800-2048 remake 285 of 5954, 1024 kept 76, for
        7 MB more at the peak). The split with and without evening out the
        ranks is often the same: then so is the rest. Kept by a number for the held
        stages (``_placement``), not the stages themselves: a tuple of a tuple a rank,
        which Python hashes anew at every look-up (about 1.7 us at pp32)."""
        _, held, _, _, number = self._placement(pl)

        def make():
            key = (lay, stages, recompute, number, even_out)
            parts = self.splits.get(key)
            if parts is None:
                parts = self.splits[key] = stage_parts(self.m, self.c, self.t, lay, stages, recompute, held, even_out)
            other = self.costs.get((lay, stages, recompute, number, not even_out))
            if other is not None and other[0] == parts:
                return other
            costs, mm, split_memo = self._priced(lay, stages, recompute, parts)
            # the fifth: what candidates sharing this cost model and placement compute of
            # it (usable memory, step overheads), computed once (``kept``); the sixth: what
            # depends on the split's models alone (item times, stage passes, fills), shared
            # by every placement whose split is this one
            return parts, costs, mm, static_bytes(held, mm), {}, split_memo

        if self.exhaustive:
            return make()
        key = (lay, stages, recompute, number, even_out)
        hit = self.costs.get(key)
        if hit is None:
            hit = self.costs[key] = make()
            if len(self.costs) > 1024:
                self.costs.popitem(last=False)
        else:
            self.costs.move_to_end(key)
        return hit

    def models(self, lay: Layout, stages: int, recompute: str, parts: list[range]) -> tuple:
        """The component cost model and memory model of a stage split: placements that
        hold their stages differently often split the layers alike, and neither model
        reads the placement. The last 4096 kept: a wide MoE search comes back to a split
        after hundreds of others (Qwen3-235B-A22B on h800-2048: 3392 distinct; 625 made
        again when 64 were kept, 397 with 1024, 10 with 4096, for 3 MB more each step)."""
        return self._priced(lay, stages, recompute, parts)[:2]

    def _priced(self, lay: Layout, stages: int, recompute: str, parts: list[range]) -> tuple:
        """``models``, and a store (``kept``) for what is worked out of those two alone,
        which lives as long as they are kept."""
        key = (lay, stages, recompute, tuple(parts))
        hit = self.priced.get(key)
        if hit is not None:
            self.priced.move_to_end(key)
            return hit
        hit = (
            component_costs(self.m, self.c, self.t, lay, stages, recompute, parts),
            memory_model(self.m, self.t, lay, stages, recompute, parts),
            {},
        )
        if not self.exhaustive:
            self.priced[key] = hit
            if len(self.priced) > 4096:
                self.priced.popitem(last=False)
        return hit


def kept(store: dict, key, make):
    """``store[key]``, made on first use: a value of one cost model that candidates of
    several schedules or micro-batch counts share."""
    hit = store.get(key)
    if hit is None:
        hit = store[key] = make()
    return hit
