"""V-shape schedules from a repeating building block (Qi et al. 2024, "Pipeline
Parallelism with Controllable Memory"), in unit time (F = B = W = 1).

A *block* places one micro-batch's passes: the forward runs down the V (stages 0..2pp-1,
rank r holds stages r and 2pp-1-r), the backward back up. It is given by the gap between
consecutive forwards on each leg, the gap at the turn, the wait between the last forward
and the first backward, and likewise for the backward. Repeating the block every 6 slots
(each rank does F, B and W of two chunks per micro-batch) gives a schedule with no
bubble in its steady state, provided no rank gets two passes in the same slot mod 6; the
two free slots of every 6 take the Ws. The block's lifespans (first forward to last W on
a rank) set the peak memory: the tight block has about 2pp/3 live chunk-activations, 1/3
of 1F1B's (V-Min); spacing the first legs by 2 gives about pp (V-Half).

The repeated blocks leave idle slots in the warm-up and cool-down. ``reorder`` moves ops
there into the earliest free slot their inputs allow, never past the block's own peak
memory: once with the Ws in place, once more for the cool-down with the Ws taken out
(they then run in any free slot) and put back afterwards.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from .. import kernel
from .problem import B, F, W

Slots = dict[int, tuple[int, int, int]]  # slot -> (kind, stage, mb) on one rank


@dataclass(frozen=True)
class Block:
    leg1: int = 1  # forward gap between ranks on the way down (chunk 0)
    turn_f: int = 1  # forward gap at the bottom of the V (same rank, chunk 0 -> 1)
    leg2: int = 1  # forward gap on the way up (chunk 1)
    loss: int = 0  # extra wait between the last forward and the first backward
    back1: int = 1  # backward gap through chunk 1
    turn_b: int = 1  # backward gap at the turn (chunk 1 -> 0)
    back2: int = 1  # backward gap through chunk 0

    def times(self, pp: int) -> tuple[list[int], list[int]] | None:
        """Slots of F and B per stage for micro-batch 0, or None if two passes of one
        rank collide once repeated every 6 slots."""
        S = 2 * pp
        tf, tb = [0] * S, [0] * S
        for s in range(1, S):
            tf[s] = tf[s - 1] + (self.leg1 if s < pp else self.turn_f if s == pp else self.leg2)
        tb[S - 1] = tf[S - 1] + 1 + self.loss
        for s in range(S - 2, -1, -1):
            tb[s] = tb[s + 1] + (self.back1 if s >= pp else self.turn_b if s == pp - 1 else self.back2)
        for r in range(pp):
            mine = (r, S - 1 - r)
            if len({tf[s] % 6 for s in mine} | {tb[s] % 6 for s in mine}) < 4:
                return None
        return tf, tb


def v_min_block(pp: int) -> Block:
    """Every gap tight; when 3 divides pp the first backward and forward of a rank would
    share a slot mod 6, so the loss wait takes 2 (an even shift keeps the rest apart)."""
    return Block(loss=2 if pp % 3 == 0 else 0)


def v_half_blocks(pp: int) -> tuple[Block, ...]:
    """The first legs spaced by 2 (about half of 1F1B's lifespans); for even pp the loss
    wait is 3 (odd, to clear the collisions the even spacing creates), with the extra
    gap at the backward turn or at the forward turn (the latter is better for small M
    at larger pp)."""
    loss = 3 if pp % 2 == 0 else 0
    return (Block(leg1=2, back1=2, turn_b=2, loss=loss), Block(leg1=2, turn_f=2, back1=2, loss=loss))


def zb_v_block(pp: int) -> Block:
    """Every leg spaced by 3: lifespans of about 2pp chunk-activations (1F1B's memory),
    and after reordering no bubble once M >= pp."""
    return Block(leg1=3, leg2=3, back1=3, back2=3)


def _place_ws(occ: Slots) -> None:
    """Each W into the first free slot after its B, first in first out."""
    last = -1
    for tb, (kind, s, i) in sorted(occ.items()):
        if kind != B:
            continue
        t = max(tb + 1, last + 1)
        while t in occ:
            t += 1
        occ[t] = (W, s, i)
        last = t


def _place_ws_by_chunk(occ: Slots, pp: int) -> None:
    """The Ws into free slots in time order, those of chunk 1 (the first backward leg)
    ahead of chunk 0's, each chunk first in first out."""
    queues: tuple[deque, deque] = (deque(), deque())
    t, last = 0, max(occ)
    while t <= last or queues[0] or queues[1]:
        op = occ.get(t)
        if op is None:
            q = queues[0] or queues[1]
            if q:
                _, s, i = q.popleft()
                occ[t] = (W, s, i)
        elif op[0] == B:
            queues[0 if op[1] >= pp else 1].append(op)
        t += 1


def _profile(
    occ: Slots,
    horizon: int,
    start: int = 0,
    live: int = 0,
    pending: int = 0,
    settle=None,
    bound: float = math.inf,
) -> tuple[list[int], list[int]] | None:
    """Live chunk-activations after each slot from ``start`` on, given the state before
    it, of a rank whose Ws are not placed (a pending one is taken to run in every free
    slot), and beside it the Ws pending after each slot. With ``settle`` (the
    previous profiles and the last slot that changed), stop at the first slot from there
    on whose state is the previous one: every later slot is then as before. None as soon
    as the memory passes ``bound`` (a trial move that would is dropped whatever the rest
    of the slots hold), or before the first slot where the state before it already does
    (the slot holds the moved F or B, which leaves at least that)."""
    prof: list[int] = []
    pend: list[int] = []
    add, add_pending, get = prof.append, pend.append, occ.get
    # without ``settle``, a first slot to compare from that no slot reaches
    old, old_pending, check = settle if settle is not None else ((), (), horizon)
    if live > bound:
        return None
    for t in range(start, horizon):
        op = get(t)
        if op is None:
            if pending:
                live -= 1
                pending -= 1
        else:
            kind = op[0]
            if kind == F:
                live += 1
                if live > bound:
                    return None
            elif kind == B:
                pending += 1
            elif kind == W:
                live -= 1
        add(live)
        add_pending(pending)
        if t >= check and live == old[t] and pending == old_pending[t]:
            break
    return prof, pend


def _placed_profile(o: Slots, horizon: int) -> tuple[list[int], list[int]]:
    """``_profile`` of a rank whose Ws are placed, from slot 0 on: a running sum of +1 at
    each F and -1 at each W (no W is ever pending)."""
    step = [0] * horizon
    for t, op in o.items():
        if op[0] != B:
            step[t] = 1 if op[0] == F else -1
    return list(accumulate(step)), [0] * horizon


def _input_end(end: list[int], S: int, M: int, kind: int, s: int, i: int) -> int:
    """The slot after which the input of (kind, stage s, micro-batch i) is there; ``end``
    holds each op's end slot at ``(kind * S + stage) * M + mb``."""
    if kind == F:
        return 0 if s == 0 else end[(s - 1) * M + i]
    if kind == B:
        return end[s * M + i] if s == S - 1 else end[(S + s + 1) * M + i]
    return end[(S + s) * M + i]


def _reorder(pp: int, M: int, occ: list[Slots], bound: int, with_ws: bool, paired: bool = False) -> None:
    """One pass in slot order; see the module docstring. With the Ws placed, moving an F
    earlier raises memory by one over the slots it skips and moving a W earlier lowers
    it, so a range check suffices; without them (cool-down only) the memory from the
    new slot on is recomputed."""
    horizon = max(max(o) for o in occ if o) + 2
    # the memory after each slot and (without the Ws) the Ws pending after it: the state
    # before any slot, kept up to date as ops move, so a trial move recomputes only its tail
    prof, pend = (list(x) for x in zip(*(_placed_profile(o, horizon) if with_ws else _profile(o, horizon) for o in occ)))
    # ranks whose whole profile is within the bound (every rank once a move is kept): a
    # trial there need not check the slots it leaves as they were
    within = [max(p, default=0) <= bound for p in prof]
    ops = sorted((t, r, op) for r, o in enumerate(occ) for t, op in o.items())
    # an op that stays where it is ends in the slot after its own: every op's end so, and
    # those the pass moves overwritten as it goes (an op reads only the ends of ops before
    # it in slot order, which the pass has then been through)
    end = [0] * (6 * pp * M)  # by (kind * S + stage) * M + mb, as _input_end reads it
    for t, _, (kind, s, i) in ops:
        end[(kind * 2 * pp + s) * M + i] = t + 1
    last_w: dict[int, int] = {}
    # the phases, by position in slot order: the warm-up until the first backward of stage
    # 0, the cool-down from the first forward of the last micro-batch (chunk 0) after it;
    # the steady state between them moves nothing (nor the warm-up without the Ws)
    # (found by their slots, which ``end`` holds, not by reading every op: stage s < pp
    # is on rank s, so each is a (slot, rank) to look up in ``ops``)
    S = 2 * pp
    steady = min((bisect_left(ops, (end[(S + 0) * M + i] - 1, 0)) for i in range(M)), default=len(ops))
    cool = min((n for s in range(pp) if (n := bisect_left(ops, (end[s * M + M - 1] - 1, s))) >= steady), default=len(ops))
    state = (occ, prof, pend, within, end, last_w)
    if with_ws:
        _moves(pp, M, ops[:steady], state, bound, horizon, True, paired)
        # the steady state's Ws stay where they are: each rank's last before the cool-down
        steady_w: dict[int, int] = {}
        for n in range(cool - 1, steady - 1, -1):  # from the last back, until every rank has one
            t, r, op = ops[n]
            if op[0] == W and r not in steady_w:
                steady_w[r] = t + 1
                if len(steady_w) == len(occ):
                    break
        last_w.update(steady_w)
    _moves(pp, M, ops[cool:], state, bound, horizon, with_ws, paired)


def _moves(pp: int, M: int, ops: list, state: tuple, bound: int, horizon: int, with_ws: bool, paired: bool) -> None:
    """``_reorder``'s moves of ``ops`` (a warm-up or cool-down, in slot order): each into
    the earliest free slot its inputs and the memory bound allow."""
    occ, prof, pend, within, end, last_w = state
    S = 2 * pp
    for t0, r, (kind, s, i) in ops:
        o = occ[r]
        at = t0
        at_end = (kind * S + s) * M + i
        ready = _input_end(end, S, M, kind, s, i)
        if paired and kind == W:
            ready = max(ready, last_w.get(r, 0))  # the Ws of a rank stay first in, first out
        elif i > 0:
            ready = max(ready, end[at_end - 1])
        if paired and (kind == F and s >= pp or kind == B and s < pp):
            # also keep a rank's two passes of one micro-batch in V order (F of
            # chunk 0 before F of chunk 1, B of chunk 1 before B of chunk 0): fewer
            # moves, which sometimes squeeze better
            ready = max(ready, end[(kind * S + S - 1 - s) * M + i])
        if with_ws and kind == F and ready < t0:
            # an F fits at t when every slot from t to t0 stays under the bound: the
            # slots that allow it are a run ending at t0, back to the last slot at the
            # bound (the memory never passes it with the Ws placed: it starts within it,
            # an F moves only where it stays so and a W only lowers it)
            back = prof[r][t0 - 1 : ready - 1 if ready else None : -1]
            ready = t0 - back.index(bound) if bound in back else ready
        for t in range(ready, t0):
            if t in o:
                continue
            if with_ws:
                step = 1 if kind == F else -1 if kind == W else 0
                if step:
                    pr = prof[r]
                    pr[t:t0] = map(step.__add__, pr[t:t0])
                del o[t0]
                o[t] = (kind, s, i)
                at = t
                break
            del o[t0]
            o[t] = (kind, s, i)
            before = (prof[r][t - 1], pend[r][t - 1]) if t else (0, 0)
            got = _profile(o, horizon, t, *before, settle=(prof[r], pend[r], t0), bound=bound)
            if got is not None:
                tail, waiting = got
                n = t + len(tail)
            if got is not None and (within[r] or (max(prof[r][:t], default=0) <= bound and max(prof[r][n:], default=0) <= bound)):
                prof[r][t:n] = tail
                pend[r][t:n] = waiting
                within[r] = True
                at = t
                break
            del o[t]
            o[t0] = (kind, s, i)
        end[at_end] = at + 1
        if kind == W:
            last_w[r] = at + 1


def _squeeze(pp: int, M: int, occ: list[Slots]) -> list[Slots]:
    """Every op moved to the earliest slot its input and its rank's previous op allow,
    each rank's order kept (taken in slot order, every input is already placed)."""
    S, n = 2 * pp, len(occ)
    end = [0] * (3 * S * M)  # at (kind * S + stage) * M + mb, as _input_end reads it
    free = [0] * n
    out: list[Slots] = [{} for _ in occ]
    # slot order, ranks in turn within a slot (t * n + r orders as (t, r) does)
    for key, op in sorted((t * n + r, op) for r, o in enumerate(occ) for t, op in o.items()):
        r = key % n
        kind, s, i = op
        ready, f = _input_end(end, S, M, kind, s, i), free[r]
        t = ready if ready > f else f
        out[r][t] = op
        end[(kind * S + s) * M + i] = free[r] = t + 1
    return out


def _without_ws(occ: list[Slots]) -> list[Slots]:
    return [{t: op for t, op in o.items() if op[0] != W} for o in occ]


def block_orders(
    pp: int, M: int, block: Block, paired: bool = False, squeeze: bool = False
) -> list[list[tuple[int, int, int]]] | None:
    """Per-rank orders (kind, chunk, mb) of the repeated, reordered block; None if the
    block collides. With ``squeeze``, every op also moves as early as it can after each
    pass (the Ws placed first), as the authors' generator does: the second pass then
    starts from a tighter order (V-Half at pp=8, M=9 gets their 71 slots, 72 without)."""
    return block_variants(pp, M, block, paired, (squeeze,))[0]


def block_variants(
    pp: int, M: int, block: Block, paired: bool, squeezes: tuple[bool, ...]
) -> list[list[list[tuple[int, int, int]]] | None]:
    """``block_orders`` for each of ``squeezes``: the first pass (with the Ws placed) does
    not depend on ``squeeze``, so it runs once for all of them (half of a block's time)."""
    times = block.times(pp)
    if times is None:
        return [None for _ in squeezes]
    tf, tb = times
    S = 2 * pp
    codes = kernel.block_variants(pp, M, tf, tb, paired, squeezes)
    if codes is not None:  # the same passes in C, as op codes (kind * S + stage) * M + mb
        kind, stage, mb = codes // (S * M), codes // M % S, codes % M
        cols = [x.tolist() for x in (kind, (stage >= pp).astype(np.int32), mb)]
        return [[list(zip(k, c, i)) for k, c, i in zip(*(x[n] for x in cols))] for n in range(len(squeezes))]
    occ: list[Slots] = []
    for r in range(pp):
        o: Slots = {}
        for s in (r, S - 1 - r):
            for i in range(M):
                o[tf[s] + 6 * i] = (F, s, i)
                o[tb[s] + 6 * i] = (B, s, i)
        _place_ws(o)
        occ.append(o)
    horizon = max(max(o) for o in occ) + 2
    bound = max(max(_placed_profile(o, horizon)[0]) for o in occ)  # the Ws are placed here
    _reorder(pp, M, occ, bound, with_ws=True, paired=paired)
    # the second pass reads the first's slots and builds its own: each variant starts from them
    return [_second_pass(pp, M, occ, bound, paired, squeeze) for squeeze in squeezes]


def _second_pass(pp: int, M: int, occ: list[Slots], bound: int, paired: bool, squeeze: bool) -> list[list[tuple[int, int, int]]]:
    """``block_orders`` from the first pass on; ``occ`` is left as it was."""
    occ = _without_ws(_squeeze(pp, M, occ) if squeeze else occ)
    _reorder(pp, M, occ, bound, with_ws=False, paired=paired)
    if squeeze:
        for o in occ:
            _place_ws(o)
        occ = _without_ws(_squeeze(pp, M, occ))
    for o in occ:
        if paired:
            _place_ws_by_chunk(o, pp)
        else:
            _place_ws(o)
    return [[(kind, 0 if s < pp else 1, i) for _, (kind, s, i) in sorted(o.items())] for o in occ]
