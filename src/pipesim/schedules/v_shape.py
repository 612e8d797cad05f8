"""The V-shape family of Qi et al. (Zero Bubble's ZB-V, and V-Min / V-Half from "Pipeline
Parallelism with Controllable Memory"): rank r holds stage r (chunk 0) and stage
2pp-1-r (chunk 1), so the first and last stage share a rank and every rank's memory is
balanced.

Each is the best of a few constructions at F = B = W = 1 under its activation limit (in
chunk-activations, two per micro-batch stage of 1F1B), polished by local search:

* ``zb-v``: limit 2pp (1F1B's memory), zero bubble when F = B = W;
* ``v-half``: limit 2((pp+2)//2), about half of 1F1B's;
* ``v-min``: limit 2((pp+4)//3), about a third.

Constructions: the repeating building block (``autoschedule.blocks``; also kept in V
order, and also squeezed between its passes as the authors' generator does), the Zero
Bubble authors' round-based greedy (``autoschedule.vgreedy``, which gives ZB-V its zero
span bubble) and the list scheduler (``autoschedule.greedy``), each with the limit.
Orders are chosen at unit costs and are then fixed: simulating them under other costs
just runs the same order.

Building stays O(ops) where the answer has a known shape: ZB-V from M = 2pp - 1 on is
the authors' hand-written pattern (optimal there), and V-Half and V-Min from M >
3pp/2 + 8 build their blocks for that many micro-batches and repeat the steady state
(``repeat_steady_state``): the order the whole search at M would pick.
"""

from __future__ import annotations

import functools
import hashlib
import math
from array import array

import numpy as np

from ..autoschedule import repeat
from ..autoschedule.blocks import Block, block_variants, v_half_blocks, v_min_block, zb_v_block
from ..autoschedule.evaluate import Index, asap, orders_of
from ..autoschedule.greedy import Policy, list_schedule
from ..autoschedule.polish import fits, makespan_key, polish, span_makespan_key
from ..autoschedule.problem import Plan, Problem
from ..autoschedule.vgreedy import v_greedy_orders
from ..costs import Costs
from ..errors import PipesimError
from ..inputs import MAX_SEARCH_OPS_COST, MAX_V_MIN_SEARCH_OPS, work
from ..ir import Placement, RankTable, Schedule
from . import cache
from .cache import cached

# At unit costs only these knobs of the list scheduler matter (``fill`` never does).
# The ones that won somewhere on a grid of pp 1..8 and M 1..32 (w_first never did alone).
V_POLICIES = (
    Policy(b_first=False),
    Policy(),
    Policy(unblock=True),
    Policy(b_first=False, unblock=True),
    Policy(banker=True, b_first=False, unblock=True),
    Policy(banker=True),
)


# Moves tried by the local search; enough to settle the warm-up and cool-down at the
# sizes people run, and bounded so that building stays interactive.
POLISH_BUDGET = 3000
POLISH_WORK = 400_000  # ... and at most this many op evaluations, so large sizes stay quick
PAIRED_OPS = 100_000  # sizes up to which the blocks' variants (V order, squeezed) are tried too


def zb_v_limit(pp: int) -> int:
    return 2 * pp


def v_half_limit(pp: int) -> int:
    return 2 * ((pp + 2) // 2)


def v_min_limit(pp: int) -> int:
    return 2 * ((pp + 4) // 3)


def _lower_bounds(prob: Problem) -> tuple[float, float]:
    """(longest span, makespan) no order can beat: a rank's own work, and that work
    started when the first forward can reach the rank."""
    pp = prob.placement.pp
    work = prob.works()
    return max(work), max(sum(prob.f[:r]) + work[r] for r in range(pp))


def _block_plans(index: Index, pp: int, M: int, blocks: tuple[Block, ...], variants: bool) -> list[Plan]:
    """The timed orders of the repeated blocks that fit in memory, with their variants
    (kept in V order, squeezed) if ``variants``."""
    plans = []
    squeezes = pairings = (False, True) if variants else (False,)
    keep = 6 * pp * M <= KEEP_OPS
    for block in blocks:
        built = {
            paired: _block_orders(pp, M, block, paired, squeezes) if keep else _Built(pp, M, block, paired, squeezes)
            for paired in pairings
        }
        for n in range(len(squeezes)):  # each squeeze, then each pairing: the order plans are tried in
            for paired in pairings:
                got = built[paired]
                orders = got.orders[n]
                if orders is not None and all(fits(index, seq) for seq in orders):
                    plan = got.timed(index, n)
                    if plan is not None:
                        plans.append(plan)
    return plans


class _Built:
    """A block's orders for each squeeze (``block_variants``: they share the first pass),
    and their times by the costs they were timed under. ZB-V, V-Half and V-Min at one size
    try the same blocks under the same unit costs and differ only in the memory limit,
    which the caller checks (``fits``) and the times do not read: each order is timed once
    for the three."""

    def __init__(self, pp: int, M: int, block: Block, paired: bool, squeezes: tuple[bool, ...]):
        self.orders = [
            None if o is None else tuple(tuple(seq) for seq in o) for o in block_variants(pp, M, block, paired, squeezes)
        ]
        # per rank, each op's start and end as plain doubles: a tuple per op would hold a
        # planner run's kept blocks in about 10% more memory
        self.times: dict[tuple, tuple | None] = {}

    def timed(self, index: Index, n: int) -> Plan | None:
        """``asap`` of the n-th orders under ``index``'s problem."""
        prob = index.prob
        key = (n, prob.placement, prob.f, prob.b, prob.w, prob.comm, prob.split)  # all that timing reads
        if key not in self.times:
            plan = asap(index, self.orders[n])
            self.times[key] = None if plan is None else tuple(_columns(ops) for ops in plan.ranks)
            return plan
        times = self.times[key]
        if times is None:
            return None
        ranks = tuple(
            tuple((*op, t, e) for op, t, e in zip(seq, starts, ends)) for seq, (starts, ends) in zip(self.orders[n], times)
        )
        return Plan(prob, ranks, "asap")


def _columns(ops: tuple) -> tuple[array, array]:
    return array("d", [op[3] for op in ops]), array("d", [op[4] for op in ops])


#: sizes up to which the blocks' orders are kept for the process (pp x M = 4096, the
#: planner's largest V): ZB-V, V-Half and V-Min at one size share most of their blocks.
#: 32 of them (each a block with or without the V order, its one or two squeezes and
#: their times): a planner run asks for up to 8 a size (four blocks, two each) at four or
#: five sizes. 64 held the cold Qwen3-235B plan on gb200-nvl72 at 328 MB peak against 291
#: MB, for no time saved
KEEP_OPS = 6 * 4096


@functools.lru_cache(maxsize=32)
def _block_orders(pp: int, M: int, block: Block, paired: bool, squeezes: tuple[bool, ...]) -> _Built:
    return _Built(pp, M, block, paired, squeezes)


def forget() -> None:
    """Drop what is kept for the process (the blocks' orders, the repeated V's short
    build), so that a benchmark measures a cold build."""
    _block_orders.cache_clear()
    short_plan.cache_clear()


# At unit costs a V rank runs 6 ops (F, B, W of two chunks) per micro-batch, one every
# slot in the steady state: repeating it adds one micro-batch.
PERIOD = 6


def short(pp: int) -> int:
    """Micro-batches enough for a steady state between the blocks' warm-up (about 4pp
    slots) and cool-down (about the last 5pp), at least four periods long."""
    return 3 * pp // 2 + 8


#: the pp at which V-Min's whole search finds another order than the repeated steady
#: state (there the list schedules or polish reshape the warm-up and cool-down)
V_MIN_SEARCHED_PP = (2, 5)


def repeats(name: str, pp: int, M: int) -> bool:
    """Is this V (``v-half`` or ``v-min``) built by repeating the steady state of the one
    at ``short(pp)`` micro-batches? From M > short(pp) on that gives op for op the order
    the whole search at M picks (blocks and their variants, list schedules, polish),
    except for V-Min at pp = 2 and 5 (tests/test_v_shape.py checks a grid of every pp up
    to 12; benchmarks/v_repeat_grid.py every pp up to 33 to 20K ops), so only the warm-up
    and cool-down need building."""
    return M > short(pp) and not (name == "v-min" and pp in V_MIN_SEARCHED_PP)


def repeat_steady_state(plan: Plan, microbatches: int) -> RankTable | None:
    """``plan``'s orders (unit costs) for more micro-batches: at one time T inside every
    rank's steady state, the period just before T runs again, one micro-batch later each
    time, and every op after T moves up by as many micro-batches. None when the ranks
    share no steady window (two periods either side of T) to cut at."""
    k = microbatches - plan.problem.placement.microbatches
    return repeat.repeat_steady_state(plan, k, PERIOD, 1, margin=2)


def _variants(pp: int, M: int) -> bool:
    # the blocks' variants help in a few warm-ups and cool-downs; above PAIRED_OPS ops
    # those are a small share of the span and they would quadruple the search
    return 6 * pp * M <= PAIRED_OPS


def _repeated(name: str, pp: int, M: int, limit: int, blocks: tuple[Block, ...]) -> Schedule | None:
    """The best block (by makespan) built for ``short(pp)`` micro-batches, its steady
    state repeated up to M; None where the V is not built that way."""
    if not repeats(name, pp, M):
        return None
    plan = short_plan(pp, limit, blocks, _variants(pp, M))  # the candidates a build at M tries
    table = None if plan is None else repeat_steady_state(plan, M)
    return None if table is None else Schedule(name, pp, M, Placement.v(pp, M), table)


@functools.lru_cache(maxsize=16)
def short_plan(pp: int, limit: int, blocks: tuple[Block, ...], variants: bool) -> Plan | None:
    """The best block (by makespan) at ``short(pp)`` micro-batches, or None if none fits.
    Kept for the process: the planner repeats it to several M at one pp (``forget``);
    and its orders on disk (``cache``): trying every block costs 0.1-0.5 s a pp, timing
    the kept orders (``asap``, which made the plan from them) a few ms."""
    few = short(pp)
    index = Index(Problem.of(Placement.v(pp, few), Costs(), memory_limit=limit))
    digest = hashlib.sha256(repr((limit, blocks, variants)).encode()).hexdigest()[:16]
    stem = f"v-short-pp{pp}-{digest}"
    kept = cache.read(stem)
    if kept is not None:
        try:
            orders = cache.decode_triples(kept["orders"], 3, 2, few)
            if all(len(set(ops)) == len(ops) == 6 * few for ops in orders) and len(orders) == pp:  # each op once
                plan = asap(index, orders)
                if plan is not None:
                    return plan
        except Exception:  # torn or from another format: search again
            pass
    plans = _block_plans(index, pp, few, blocks, variants)
    best = min(plans, key=makespan_key) if plans else None
    if best is not None and cache.cache_dir() is not None:  # off: nothing to encode
        cache.write(stem, {"orders": cache.encode_triples(orders_of(best))})
    return best


def _v(name: str, pp: int, M: int, limit: int, blocks: tuple[Block, ...], key=makespan_key, greedy: bool = False) -> Schedule:
    prob = Problem.of(Placement.v(pp, M), Costs(), memory_limit=limit)
    index = Index(prob)
    # the round-based greedy reserves 1F1B's memory in its warm-up: only ZB-V's limit suits it
    orders_found = v_greedy_orders(prob) if greedy else []
    plans = [plan for orders in orders_found if (plan := asap(index, orders)) is not None]
    span_lb, makespan_lb = _lower_bounds(prob)
    for plan in plans:  # the greedy often reaches both bounds (ZB-V): nothing can beat it
        if plan.span <= span_lb + 1e-9 and makespan_key(plan)[0] <= makespan_lb + 1e-9:
            return plan.schedule(name)
    plans += _block_plans(index, pp, M, blocks, _variants(pp, M))
    # A list schedule stops once a rank's span is sure to pass the best key's first term
    # (makespan or longest span, each at least any rank's span) so far: it could not be
    # the best. The margin keeps rounding in the key from ever calling such a one a tie.
    bound = min((key(plan)[0] for plan in plans), default=math.inf) + 1e-6
    for pol in V_POLICIES:
        plan = list_schedule(prob, pol, bound)
        if plan is not None:
            plans.append(plan)
            bound = min(bound, key(plan)[0] + 1e-6)
    if not plans:  # cannot happen for limit >= 2: the banker policies always finish
        raise PipesimError(f"{name}: no schedule fits {limit} activations per rank at pp={pp}, M={M}")
    best = min(plans, key=key)
    ops = 6 * pp * M
    best = polish(index, best, key, window=3 * pp, budget=min(POLISH_BUDGET, max(20, POLISH_WORK // ops)))
    return best.schedule(name)


# ZB-V's hand-written pattern, in tokens: F, B, W of chunk 0 and chunk 1
_F0, _F1, _B0, _B1, _W0, _W1 = range(6)
_TOKEN_KIND = np.array([0, 0, 1, 1, 2, 2], np.int8)  # indices into ir.KINDS
_TOKEN_CHUNK = np.array([0, 1, 0, 1, 0, 1], np.int32)


def zbv_pattern(pp: int, microbatches: int) -> RankTable:
    """The Zero Bubble authors' ZB-V pattern (PyTorch's ZBVZeroBubble ports it), laid out
    for n = max(M, 2pp - 1) micro-batches and cut back to M. Rank r runs 2(pp-r)-1
    forwards of chunk 0; r of (F1, F0); pp-r of (F1, B1, W1); then the steady state
    (F0, B0, W0, F1, B1, W1) until its chunk-0 forwards are done, and pp-r-1 more without
    the forward; then r of (B0, B1), pp-r of (B0, W0), and the Ws left (W1 first). Each
    token's micro-batch is how many of its kind ran before it on the rank."""
    n = max(microbatches, 2 * pp - 1)
    steady = np.array([_F0, _B0, _W0, _F1, _B1, _W1])
    rows = []
    for r in range(pp):
        q = pp - r
        tok = np.concatenate(
            [
                np.full(2 * q - 1, _F0),
                np.tile([_F1, _F0], r),
                np.tile([_F1, _B1, _W1], q),
                np.tile(steady, n - 2 * pp + r + 1),  # until F0 reaches n
                np.tile(steady[1:], q - 1),
                np.tile([_B0, _B1], r),
                np.tile([_B0, _W0], q),
                np.full(r, _W1),
                np.full(r, _W0),
            ]
        ).astype(np.int8)
        order = np.argsort(tok, kind="stable")  # each token's occurrences, in order
        first = np.concatenate([[0], np.cumsum(np.bincount(tok, minlength=6))[:-1]])
        mb = np.empty(len(tok), np.int32)
        mb[order] = np.arange(len(tok)) - first[tok[order]]
        keep = mb < microbatches
        rows.append((_TOKEN_KIND[tok[keep]], _TOKEN_CHUNK[tok[keep]], mb[keep]))
    return RankTable.stack(rows)


def zb_v(pp: int, microbatches: int) -> Schedule:
    """ZB-V: 1F1B's activation memory (2pp chunks); when F = B = W, makespan 6M + pp - 1
    once M >= pp and no idle time inside any rank's span once M >= 2pp - 1.

    From M = 2pp - 1 on, the Zero Bubble authors' hand-written pattern (the one PyTorch's
    ZBVZeroBubble ports) already reaches both lower bounds, span 6M and makespan
    6M + pp - 1, within 2pp activations: nothing can beat it, so it is built directly in
    O(ops) (so ``export`` can name ZBVZeroBubble for it). Below that it leaves idle time
    that the search removes."""
    if microbatches >= 2 * pp - 1:
        return Schedule("zb-v", pp, microbatches, Placement.v(pp, microbatches), zbv_pattern(pp, microbatches))
    return zb_v_searched(pp, microbatches)


@cached("zb-v")  # searched once per (pp, M), then read from the cache file
def zb_v_searched(pp: int, microbatches: int) -> Schedule:
    """ZB-V by search: the sizes where the hand-written pattern leaves idle time."""
    return _v(
        "zb-v",
        pp,
        microbatches,
        zb_v_limit(pp),
        (zb_v_block(pp), *v_half_blocks(pp), v_min_block(pp)),
        span_makespan_key,
        greedy=True,
    )


def _v_half_blocks(pp: int) -> tuple[Block, ...]:
    return (*v_half_blocks(pp), v_min_block(pp))


def v_half(pp: int, microbatches: int) -> Schedule:
    """V-Half: about half of 1F1B's activation memory."""
    got = _repeated("v-half", pp, microbatches, v_half_limit(pp), _v_half_blocks(pp))
    return got if got is not None else v_half_searched(pp, microbatches)


@cached("v-half")  # searched once per (pp, M), then read from the cache file
def v_half_searched(pp: int, microbatches: int) -> Schedule:
    return _v("v-half", pp, microbatches, v_half_limit(pp), _v_half_blocks(pp))


def v_min(pp: int, microbatches: int) -> Schedule:
    """V-Min: about a third of 1F1B's activation memory."""
    got = _repeated("v-min", pp, microbatches, v_min_limit(pp), (v_min_block(pp),))
    if got is not None:
        return got
    # its repeated block does not fit: the whole order is searched, Python per op
    work(pp, microbatches, 2, what="v-min's searched order", limit=MAX_V_MIN_SEARCH_OPS, cost=MAX_SEARCH_OPS_COST)
    return v_min_searched(pp, microbatches)


@cached("v-min")  # searched once per (pp, M), then read from the cache file
def v_min_searched(pp: int, microbatches: int) -> Schedule:
    return _v("v-min", pp, microbatches, v_min_limit(pp), (v_min_block(pp),))
