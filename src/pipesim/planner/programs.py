"""What candidates of one schedule share: built schedules, their shapes (item counts and
activation rows, for the bounds and the memory check) and compiled programs."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from ..engine import BW, B, F, W, op_stages
from ..ir import KINDS, Schedule
from ..memory import pair_peak_of
from ..schedules import REGISTRY, build, cache
from ..schedules.classic import smallest_group
from ..simulate import Program, compile

#: schedules, their shapes and compiled programs kept for reuse across candidates, in
#: bytes of their arrays (see _nbytes)
PROGRAM_CACHE_BYTES = 192 * 2**20


class ProgramCache:
    """Schedules by (family, pp, M, options), each with its Shape and, once simulated, its
    compiled program; least recently used dropped first once their bytes pass ``limit``.
    A schedule is kept as its arrays (``RankTable``), not as the Op objects a builder may
    have made: ten times smaller, so what a search needs again is still there. A Megatron
    group order's shape is continued from three shorter runs (``group_points``) rather
    than built at M: DeepSeek-V3 on one GB200 NVL72 rack built them at M up to 15360 (16 s
    of an 18 s search, 0.8 GB); its program is still built whole, when it is simulated."""

    def __init__(self, limit: int = PROGRAM_CACHE_BYTES, continued: bool = True):
        self.limit = limit
        self.continued = continued  # group-sized orders' shapes continued from shorter runs (``group_points``)
        self.bytes = 0
        self.kept: OrderedDict[tuple, list] = OrderedDict()  # key -> [schedule, shape, program, bytes]

    def _entry(self, name: str, pp: int, M: int, options: dict) -> list:
        key = (name, pp, M, tuple(sorted(options.items())))
        hit = self.kept.get(key)
        if hit is not None:
            self.kept.move_to_end(key)
            return hit
        if _searched_for_costs(name, pp, M, options):
            s = cache.for_costs(name, pp, M, options, lambda: build(name, pp, M, **options))
        else:
            s = build(name, pp, M, **options)
        s = Schedule(s.name, s.pp, s.microbatches, s.placement, s.table, s.info)
        entry = self.kept[key] = [s, None, None, 0]
        self._grow(entry, _nbytes(s.table))
        return entry

    def _grow(self, entry: list, size: int) -> None:
        entry[3] += size
        self.bytes += size
        while self.bytes > self.limit and len(self.kept) > 1:
            _, dropped = self.kept.popitem(last=False)
            self.bytes -= dropped[3]

    def shape(self, name: str, pp: int, M: int, options: dict) -> Shape:
        points = group_points(name, pp, M, options) if self.continued else None
        if points is not None:
            key = ("continued", name, pp, M, tuple(sorted(options.items())))
            hit = self.kept.get(key)
            if hit is None:  # kept whether or not it continues: a failed one is not tried again
                got = continued_shape(
                    [self.shape(name, pp, x, options) for x in points], (M - points[0]) // (points[1] - points[0])
                )
                hit = self.kept[key] = [None, got, None, 0]
                self._grow(hit, _nbytes(got))
            else:
                self.kept.move_to_end(key)
            if hit[1] is not None:
                return hit[1]
        e = self._entry(name, pp, M, options)
        if e[1] is None:  # made when first asked for: a candidate ruled out by its placement needs none
            e[1] = shape(e[0])
            self._grow(e, _nbytes(e[1]))
        return e[1]

    def program(self, name: str, pp: int, M: int, options: dict) -> Program:
        e = self._entry(name, pp, M, options)
        if e[2] is None:
            e[2] = compile(e[0])
            self._grow(e, _nbytes(e[2]))
        return e[2]


def _searched_for_costs(name: str, pp: int, M: int, options: dict) -> bool:
    """Whether the family searches its order for the candidate's own costs (zb-auto's
    heuristic, deterministic unless ``exact`` runs CP-SAT against the clock): such an
    order is kept on disk by its options (``cache.for_costs``), the planner asking for
    the same few dozen on every run of a search."""
    fam = REGISTRY[name]
    searched = not fam.periodic and {"f", "b", "w"} <= fam.options.keys() and not options.get("exact", False)
    return searched and fam.check(pp, M, **options) is None  # what build refuses, it refuses itself


def _nbytes(x) -> int:
    """The bytes of the arrays an object holds (a program's, a shape's, a rank table's;
    a broadcast column holds one number), and a few hundred for the rest."""
    arrays = [v for v in (getattr(x, k, None) for k in getattr(x, "__slots__", ())) if isinstance(v, np.ndarray)]
    arrays += [v for v in getattr(x, "__dict__", {}).values() if isinstance(v, np.ndarray)]
    keys = sum(map(len, getattr(x, "counts", ())))  # a shape's counts: a dict entry and a key tuple each
    return 512 + 200 * keys + sum(a.nbytes for a in arrays if 0 not in a.strides)


@dataclass(frozen=True)
class Shape:
    """What a schedule's order says without costs, per rank: how often each cost key occurs
    (so a rank's busy time under any costs is a short sum): ("F", stage) for a lone op,
    ("pair", backward kind, f stage, b stage), in the order they first occur; and the
    activations live right after each forward starts (a pair's: just before it, its own
    peak added per memory model) (so peak memory under any sizes is a
    max of short sums), as arrays with one row per item that starts a forward and one
    after each item that ends a B (where a W share above 1 peaks): ``u`` the
    whole ones and ``v`` the ones kept for W alone, per column, where column j of rank r is
    stage ``cols[r, j]`` (ascending; -1 pads); ``rows[r]:rows[r + 1]`` are rank r's rows."""

    counts: list[dict]
    cols: np.ndarray  # int, ranks x columns
    rows: np.ndarray  # int64, ranks + 1
    u: np.ndarray  # int64, rows x columns
    v: np.ndarray  # int64, rows x columns
    # what ``activation_peaks`` reads for every memory model, worked out once a shape:
    row_cols: np.ndarray  # int64, rows x columns: each row's column stages (-1 pads)
    used: tuple[int, ...]  # the stages that occur, ascending
    has: np.ndarray  # the ranks with rows
    has_rows: np.ndarray  # where each of those ranks' rows start
    # an overlapped pair's row leaves its forward out of ``u``: ``memory.pair_peak`` adds
    # what the pair holds at its layer-by-layer worst, per memory model
    pair_rows: np.ndarray  # int64: the rows of pairs
    pair_of: np.ndarray  # int64: each such row's index into ``pairs``
    pairs: tuple[tuple[int, int, int], ...]  # (forward stage, backward stage, backward kind)
    # ``activation_peaks``' answers by what they read of a memory model: kept with the
    # shape, so they go when it does
    peaks: dict = field(default_factory=dict, init=False, repr=False, compare=False)


def shape(s: Schedule) -> Shape:
    """A rank runs its items one after another, so the order alone fixes its activation
    peak: a forward adds its activation when its item starts, B frees the share W does not
    need, W the rest, BW all of it, when their item ends (``pipesim.memory``'s model).
    From the schedule's arrays: running sums per (rank, stage) over each rank's items."""
    t, pl = s.table, s.placement
    n, pp, S = t.items, s.pp, pl.stages
    rank = t.ranks_of_items()
    o_item, o_kind, o_chunk, o_mb = t.ops()
    o_stage = op_stages(pl, rank[o_item], o_chunk, o_mb).astype(np.int64)
    stage2 = np.full(n, -1, np.int64)
    stage2[t.kind2 >= 0] = o_stage[n:]
    # counts: one key per (rank, kinds, stages), numbered in order of first occurrence
    key = ((t.kind.astype(np.int64) * S + o_stage[:n]) * 5 + (t.kind2 + 1)) * (S + 1) + (stage2 + 1)
    uniq, first, many = np.unique(rank.astype(np.int64) * (4 * S * 5 * (S + 1)) + key, return_index=True, return_counts=True)
    counts: list[dict] = [{} for _ in range(pp)]
    for i, c in zip(np.sort(first).tolist(), many[np.argsort(first)].tolist()):
        k, x, k2, x2 = int(t.kind[i]), int(o_stage[i]), int(t.kind2[i]), int(stage2[i])
        counts[int(rank[i])][("pair", KINDS[k2], x, x2) if k2 >= 0 else (KINDS[k], x)] = c
    del uniq
    # activations: each op's column among its rank's stages
    o_rank = rank[o_item].astype(np.int64)
    held, col = np.unique(o_rank * S + o_stage, return_inverse=True)
    held_rank = held // S
    col = col - np.searchsorted(held_rank, held_rank)[col]
    K = int(col.max()) + 1 if len(col) else 0
    cols = np.full((pp, K), -1, np.int64)
    cols[held_rank, np.arange(len(held)) - np.searchsorted(held_rank, held_rank)] = held % S
    cell = o_item.astype(np.int64) * K + col
    size = n * K

    def per_cell(weights) -> np.ndarray:
        return np.bincount(cell, weights, size).astype(np.int64).reshape(n, K)

    isf = o_kind == F
    start_u = per_cell(isf)
    end_u = per_cell(-((o_kind == B) | (o_kind == BW)).astype(np.float64))
    end_v = per_cell((o_kind == B).astype(np.float64) - (o_kind == W))
    first_item = t.offsets[:-1][rank] if n else np.zeros(0, np.int64)

    def before(delta: np.ndarray) -> np.ndarray:  # summed over the rank's earlier items
        c = np.cumsum(delta, axis=0) - delta
        return c - c[first_item]

    fwd = np.unique(o_item[isf])
    # and right after each item that ends a B: with a W share above 1 a B adds memory
    # (``MemoryModel.w_share``), so a peak may fall there; below 1 those rows are lower
    ends_b = np.unique(o_item[o_kind == B])
    prior = before(start_u + end_u)
    lone = (t.kind2 < 0)[:, None]  # a pair's forward: what it adds is pair_peak's
    items = np.concatenate([fwd, ends_b])
    order = np.argsort(items, kind="stable")  # items are numbered rank by rank
    u = np.concatenate([(prior + start_u * lone)[fwd], (prior + start_u + end_u)[ends_b]])[order]
    v = np.concatenate([before(end_v)[fwd], (before(end_v) + end_v)[ends_b]])[order]
    rows = np.searchsorted(items[order], t.offsets).astype(np.int64)
    row_rank = np.repeat(np.arange(pp), np.diff(rows))
    has = np.flatnonzero(np.diff(rows) > 0)
    used = tuple(np.unique(cols[cols >= 0]).tolist())
    # each pair's row (its forward's, the first of its item's rows) and its stages' key
    is_pair = np.concatenate([t.kind2[fwd] >= 0, np.zeros(len(ends_b), bool)])[order]
    pair_rows = np.flatnonzero(is_pair)
    paired = items[order][pair_rows]
    # one number per (forward stage, backward stage, backward kind), in the order of those
    # triples: a plain unique, not np.unique over rows (which sorts a structured view, ten
    # times the cost on the thousands of shapes a search makes)
    code = (o_stage[paired] * S + stage2[paired]) * len(KINDS) + t.kind2[paired]
    uniq, pair_of = np.unique(code.astype(np.int64), return_inverse=True)
    pairs = tuple((x // len(KINDS) // S, x // len(KINDS) % S, x % len(KINDS)) for x in uniq.tolist())
    return Shape(counts, cols, rows, u, v, cols[row_rank], used, has, rows[has], pair_rows, pair_of.reshape(-1), pairs)


def activation_table(mm, stages: int) -> np.ndarray:
    """Each stage's activation bytes on memory model ``mm``, and a 0 after them: what
    ``activation_peaks`` looks its cells up in, the same for every order on the model."""
    return np.array([*(mm.activation_bytes(x) for x in range(stages)), 0.0], np.float64)


def activation_peaks(sh: Shape, mm, table: np.ndarray | None = None) -> list[float]:
    """Per rank, the most activation bytes live at once (summed stage by stage in
    ascending order, as a plain sum over the rank's stages would; an overlapped pair's
    at its layer-by-layer worst, ``memory.pair_peak``). ``table``: ``activation_table``
    of ``mm``, where the caller keeps it.

    With ``table``, the answer is kept with the shape by all it reads of ``mm``: its
    stages' activation bytes (the table), its W share and its layers' bytes (which, with
    the table, fix each pair's ``pair_peak``). Splits of many layouts hold the same
    bytes on each stage: Qwen3-235B-A22B on b200 checks 9225 orders against memory
    models for 1562 distinct answers."""
    if table is None:
        return _activation_peaks(sh, mm, None)
    key = (table.tobytes(), mm.w_share, mm.layer_bytes)
    hit = sh.peaks.get(key)
    if hit is None:
        hit = sh.peaks[key] = tuple(_activation_peaks(sh, mm, table))
    return list(hit)


def _activation_peaks(sh: Shape, mm, table: np.ndarray | None) -> list[float]:
    w = mm.w_share
    # per cell, its stage's bytes (0 where no stage): a table lookup, the table holding
    # the stages that occur (an empty column's -1 reads the appended 0)
    if table is None:
        table = np.zeros(sh.used[-1] + 2 if sh.used else 1, np.float64)
        for x in sh.used:
            table[x] = mm.activation_bytes(x)
    live = table[sh.row_cols]
    live *= sh.u + w * sh.v  # per row and column, bytes
    # column by column, the rank's stages in ascending order, onto 0.0 (the first column
    # plus 0.0: the same floats as 0.0 plus it, without a row of zeros made first)
    total = live[:, 0] + 0.0 if live.shape[1] else np.zeros(len(live))
    for j in range(1, live.shape[1]):
        total += live[:, j]
    if len(sh.pair_rows):  # at a pair's row, the most its layer-by-layer run holds besides
        extra = [pair_peak_of(mm, f, b, k) for f, b, k in sh.pairs]
        total[sh.pair_rows] += np.asarray(extra)[sh.pair_of]
    pp = sh.cols.shape[0]
    peaks = np.maximum.reduceat(total, sh.has_rows).tolist() if len(sh.has) else []
    if len(peaks) == pp:  # every rank has rows (the common case): in rank order already
        return peaks
    out = [0.0] * pp
    for r, x in zip(sh.has.tolist(), peaks):
        out[r] = x
    return out


def memory_peaks(sh: Shape, mm, table: np.ndarray | None = None) -> list[float]:
    """Per rank, what its peak holds beyond ``bounds.static_bytes``: its activation peak,
    exact; under ``MemoryModel.grads_in_backward``, whose gradients static_bytes leaves
    out, at least its largest stage's gradients too (held alone after that stage's
    first backward, if no activation is): a floor of the peak ``pipesim.memory`` finds,
    so no candidate that fits is refused on it. ``table``: ``activation_table`` of ``mm``."""
    peaks = activation_peaks(sh, mm, table)
    if not mm.grads_in_backward:
        return peaks
    grads = [max((mm.stage_bytes(int(x))[1] for x in row if x >= 0), default=0.0) for row in sh.cols]
    return [max(a, g) for a, g in zip(peaks, grads)]


def sample_points(name: str, pp: int, M: int, options: dict | None = None) -> tuple[int, int] | None:
    """Two micro-batch counts a period apart past warm-up (from 2pp on a periodic schedule
    repeats itself every 2pp micro-batches under equal stage costs), congruent to M modulo
    2pp so the schedule's constraints still hold, from which M's totals follow affinely
    once a third point a period on continues their line (``measured.extrapolated``: the
    end stages' embedding and head make the pipeline reach its steady pace later, by how
    much depends on the costs); None when M must be simulated itself: the schedule is
    searched rather than periodic, it is built with a Megatron group size (its order
    repeats every g micro-batches, not 2pp), or M is as cheap."""
    if not REGISTRY[name].periodic or "group_size" in (options or {}):
        return None
    q = 2 * pp
    m1 = q + (M - q) % q
    return (m1, m1 + q) if M > m1 + 2 * q else None


def megatron_group(name: str, pp: int, M: int, options: dict) -> dict:
    """Megatron's group size where a family needs one at M: a builder that takes
    ``group_size`` and refuses M with its default of pp (combined 1F1B at M not a multiple
    of pp; plain interleaved 1F1B runs PyTorch's rounds there, and needs a group only where
    they refuse M) gets the smallest g Megatron accepts. A larger g only turns pairs into
    lone F+BW passes and adds warm-up activations (theory: ((v-1)g + pp)(F+BW) +
    (vM - (v-1)g - 1)F&B, peak 2(pp-r-1) + (v-1)g + 2), so the smallest is the one to
    search. Its order repeats every g micro-batches, not 2pp: such candidates are
    simulated whole (``sample_points``)."""
    fam = REGISTRY[name]
    if "group_size" not in fam.options or not M % pp or fam.check(pp, M, **options) is None:
        return {}
    g = smallest_group(pp, M)
    return {} if g is None else {"group_size": g}


def group_points(name: str, pp: int, M: int, options: dict) -> tuple[int, int, int] | None:
    """Three micro-batch counts a group apart, congruent to M modulo the group (so the last
    group is as full as M's), from whose shapes M's follows (``continued_shape``); None
    when M is as cheap to build. A Megatron group order (``megatron_group``; simulated
    whole, ``sample_points``) walks the schedule table in groups of g micro-batches, each
    rank pairing forward ``warm + k`` with backward k: past the warm-up, g more
    micro-batches insert one more period of the same items, and the order's counts grow
    by that period's while its activation rows repeat. The first point leaves room for
    every rank's warm-up (at most 2pp + (v-1)g virtual micro-batches) and two periods."""
    g, fam = options.get("group_size"), REGISTRY[name]
    if g is None or not fam.periodic:
        return None
    base = 2 * pp + 2 * g
    m1 = base + (M - base) % g
    if M <= m1 + 2 * g:
        return None
    points = (m1, m1 + g, m1 + 2 * g)
    return points if all(fam.check(pp, x, **options) is None for x in points) else None


def compact(sh: Shape) -> Shape:
    """The shape with each rank's repeated rows kept once: ``activation_peaks`` takes each
    rank's most over its rows, each row summed on its own, so rows equal in every column,
    in their pair and in their rank give the same total and one of them is enough."""
    pp, K = sh.cols.shape
    row_rank = np.repeat(np.arange(pp), np.diff(sh.rows))
    pair = np.full(len(sh.u), -1, np.int64)
    pair[sh.pair_rows] = sh.pair_of
    rows = np.unique(np.column_stack([row_rank, sh.u, sh.v, pair]), axis=0)  # sorted by rank first
    rank, u, v, pair = rows[:, 0], rows[:, 1 : 1 + K], rows[:, 1 + K : 1 + 2 * K], rows[:, -1]
    offsets = np.searchsorted(rank, np.arange(pp + 1)).astype(np.int64)
    has = np.flatnonzero(np.diff(offsets) > 0)
    pair_rows = np.flatnonzero(pair >= 0)
    return Shape(
        sh.counts, sh.cols, offsets, u, v, sh.cols[rank], sh.used, has, offsets[has], pair_rows, pair[pair_rows], sh.pairs
    )


def continued_shape(shapes: list[Shape], n: int) -> Shape | None:
    """The shape of the order ``n`` groups past the first of three a group apart
    (``group_points``): each rank's counts continued along the line through them (exact:
    whole numbers, keys in the same order of first occurrence) and its distinct rows;
    None unless the three show the period: the same keys in the same order, counts a
    constant step apart, the same columns, pairs and distinct rows."""
    a, b, c = shapes
    ka, kb, kc = (compact(x) for x in shapes)
    same = [np.array_equal(getattr(ka, f), getattr(x, f)) for x in (kb, kc) for f in ("cols", "rows", "u", "v", "pair_of")]
    if not all(same) or not ka.pairs == kb.pairs == kc.pairs:
        return None
    counts = []
    for ra, rb, rc in zip(a.counts, b.counts, c.counts):
        if not list(ra) == list(rb) == list(rc) or any(rc[k] - rb[k] != rb[k] - ra[k] for k in ra):
            return None
        counts.append({k: ra[k] + n * (rb[k] - ra[k]) for k in ra})
    return replace(ka, counts=counts)
