"""A chunk's layers as tasks on two streams, and the simulation that times them.

Compute runs on the GPU's compute stream, all-to-alls on a communication stream.

* A lone op (1F1B, ZB, a DualPipe op outside a pair) runs its parts one after another:
  its communication is exposed. (``lone_plan`` with ``split`` instead splits the
  micro-batch in two halves whose parts interleave on the two streams, for schedules that
  overlap communication inside one micro-batch; that is an assumption about the
  implementation, stated as such.)
* An overlapped pair (DualPipe's F&B) runs the forward of one micro-batch and the
  backward of another on both streams at once, in the order of DeepSeek-V3's Figure 4
  (``pair_plan``): per layer, compute MLP(B), MLP(W), MLP(F), ATTN(B), ATTN(W), ATTN(F)
  and communication DISPATCH(F), DISPATCH(B), COMBINE(F), COMBINE(B), each part waiting
  for its own micro-batch's previous part.

While a communication kernel runs it holds a share of the GPU's SMs, so compute running
beside it goes slower by that share (``run_streams``'s ``comm_share``; with ``held`` the
share stays taken until the last communication part ends, waits included).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .errors import PipesimError
from .ir import Op
from .layer import LayerCosts


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
    # the tasks' fields the loop reads, as lists (a search times thousands of pairs)
    works = [task.work for task in tasks]
    afters = [task.after for task in tasks]
    slow = 1.0 - comm_share
    # held: the SMs stay taken until the communication stream's last task with work ends
    last_comm = next((i for i in reversed(orders.get("comm", [])) if works[i] > 0), None) if held else None
    if list(orders) == ["compute", "comm"]:  # every plan this module makes
        _compute_and_comm(works, afters, orders["compute"], orders["comm"], slow, last_comm, starts, ends)
    else:
        _any_streams(works, afters, orders, slow, last_comm, starts, ends)
    if any(x is None for x in ends):  # an order that contradicts the dependencies
        stuck = [f"{tasks[i].part} L{tasks[i].layer}" for i, x in enumerate(ends) if x is None]
        raise PipesimError(f"component stream orders cannot run: {', '.join(stuck[:4])} never start")
    return list(zip(starts, ends))  # type: ignore[arg-type]


def _any_streams(works, afters, orders, slow, last_comm, starts, ends) -> None:
    """``run_streams``' loop over any streams, into ``starts`` and ``ends``."""
    seqs = list(orders.values())
    compute = [name == "compute" for name in orders]
    comm = [name == "comm" for name in orders]
    k = len(seqs)
    streams = range(k)
    lens = [len(seq) for seq in seqs]
    pos = [0] * k
    task = [-1] * k  # per stream, the task it runs (-1: none), its start and work left
    left = [0.0] * k
    rate = [1.0] * k
    t = 0.0
    while True:
        # start what can start now (zero-work tasks finish on the spot)
        progressed = True
        now = t + 1e-12
        while progressed:
            progressed = False
            for s in streams:
                if task[s] >= 0 or pos[s] >= lens[s]:
                    continue
                i = seqs[s][pos[s]]
                ready = True
                for j in afters[i]:
                    e = ends[j]
                    if e is None or e > now:
                        ready = False
                        break
                if ready:
                    pos[s] += 1
                    progressed = True
                    work = works[i]
                    if work <= 0:
                        starts[i] = ends[i] = t
                    else:
                        task[s], starts[i], left[s] = i, t, work
        comm_on = last_comm is not None and ends[last_comm] is None
        busy = False
        for s in streams:
            if task[s] >= 0:
                busy = True
                comm_on = comm_on or comm[s]
        if not busy:
            return
        step = math.inf
        for s in streams:
            if task[s] >= 0:
                rate[s] = slow if comm_on and compute[s] else 1.0
                d = left[s] / rate[s]
                if d < step:
                    step = d
        t += step
        for s in streams:
            if task[s] >= 0:
                left[s] -= step * rate[s]
                if left[s] <= 1e-12:
                    ends[task[s]] = t
                    task[s] = -1


def _compute_and_comm(works, afters, compute, comm, slow, last_comm, starts, ends) -> None:
    """``run_streams``' loop for a compute stream and a communication stream, written out
    for the two (the thousands of pair plans a search times run here): the same events
    in the same order, the same arithmetic (a rate of 1.0 leaves a number as it is), into
    ``starts`` and ``ends``."""
    p0 = p1 = 0  # each stream's next task in its order
    run0 = run1 = -1  # the task each stream runs, -1: none; and its work left
    left0 = left1 = 0.0
    t = 0.0
    while True:
        now = t + 1e-12
        progressed = True
        while progressed:  # start what can start now (zero-work tasks finish on the spot)
            progressed = False
            if run0 < 0:
                p0, run0, left0, started = _start(compute, p0, works, afters, starts, ends, t, now)
                progressed = started
            if run1 < 0:
                p1, run1, left1, started = _start(comm, p1, works, afters, starts, ends, t, now)
                progressed = progressed or started
            if run0 >= 0 and run1 >= 0:
                break  # both busy: nothing more starts now
        if run0 < 0 and run1 < 0:
            return
        rate0 = slow if run1 >= 0 or (last_comm is not None and ends[last_comm] is None) else 1.0
        step = left0 / rate0 if run0 >= 0 else math.inf
        if run1 >= 0 and left1 < step:
            step = left1
        t += step
        if run0 >= 0:
            left0 -= step * rate0
            if left0 <= 1e-12:
                ends[run0] = t
                run0 = -1
        if run1 >= 0:
            left1 -= step
            if left1 <= 1e-12:
                ends[run1] = t
                run1 = -1


def _start(order, p, works, afters, starts, ends, t, now) -> tuple[int, int, float, bool]:
    """An idle stream's next task at ``t``, if its inputs have ended by ``now``:
    (its next place, the task it runs or -1, that task's work, whether one started). A
    task without work ends where it starts."""
    if p >= len(order):
        return p, -1, 0.0, False
    i = order[p]
    for j in afters[i]:
        e = ends[j]
        if e is None or e > now:
            return p, -1, 0.0, False
    starts[i] = t
    work = works[i]
    if work <= 0:
        ends[i] = t
        return p + 1, -1, 0.0, True
    return p + 1, i, work, True


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
    part_layers = layers if len(halves) == 1 else tuple(c.scaled(1.0 / len(halves)) for c in layers)
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


#: the parts of one layer of a lone op, in the order ``forward_tasks``, ``backward_tasks``
#: and ``weight_tasks`` append them
SERIAL_PARTS = {
    "F": ("attn_f", "dispatch_f", "mlp_f", "combine_f"),
    "B": ("combine_b", "mlp_b", "dispatch_b", "attn_b"),
    "BW": ("combine_b", "mlp_b", "mlp_w", "dispatch_b", "attn_b", "attn_w"),
    "W": ("mlp_w", "attn_w"),
}

#: the compute parts of one op of a layer (``forward_tasks`` and ``backward_tasks`` put
#: these on the compute stream; the all-to-alls go beside them)
COMPUTE_PARTS = {"F": ("attn_f", "mlp_f"), "B": ("attn_b", "mlp_b"), "BW": ("attn_b", "mlp_b", "attn_w", "mlp_w")}


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


#: each field of ``SERIAL_PARTS``: the part it times and the stream that runs it, as
#: ``forward_tasks``, ``backward_tasks`` and ``weight_tasks`` name them
PART_OF = {
    "attn_f": ("ATTN(F)", "compute"),
    "dispatch_f": ("DISPATCH(F)", "comm"),
    "mlp_f": ("MLP(F)", "compute"),
    "combine_f": ("COMBINE(F)", "comm"),
    "combine_b": ("COMBINE(B)", "comm"),
    "mlp_b": ("MLP(B)", "compute"),
    "dispatch_b": ("DISPATCH(B)", "comm"),
    "attn_b": ("ATTN(B)", "compute"),
    "mlp_w": ("MLP(W)", "compute"),
    "attn_w": ("ATTN(W)", "compute"),
}


def serial_parts(kind: str, layers: tuple[LayerCosts, ...]) -> tuple[float, list[tuple[str, str, int, float, float]]]:
    """A lone op whose parts run one after another (``lone_plan`` without ``split``),
    timed as ``serial_times`` times its tasks, without making them: its end, and its
    parts that take time as (stream, part, layer, start, end), in the tasks' order.
    The simulation asks this of every kind of op on every stage it runs (thousands in a
    search), where the tasks, made twice over by ``lone_plan``, cost more than the sums."""
    t = 0.0
    out = []
    names = [(name, *PART_OF[name]) for name in SERIAL_PARTS[kind]]
    order = range(len(layers)) if kind == "F" else reversed(range(len(layers)))
    for li in order:
        c = layers[li]
        for name, part, stream in names:
            work = getattr(c, name)
            if work > 0:
                out.append((stream, part, li, t, t + work))
                t += work
    return t, out


def serial_time(kind: str, layers: tuple[LayerCosts, ...]) -> float:
    """How long a lone op lasts when its parts run one after another (``lone_plan``
    without ``split``): their sum, added in the order ``run_streams`` advances its clock
    through them (so the same float), without building the tasks. Forwards run the
    layers first to last, the others last to first."""
    t = 0.0
    names = SERIAL_PARTS[kind]
    for c in layers if kind == "F" else reversed(layers):
        for name in names:
            work = getattr(c, name)
            if work > 0:
                t += work
    return t
