"""pipesim schedules to and from torch.distributed.pipelining's action lists.

PyTorch names an action by its *global* stage index, a type and a micro-batch: ``2F0``,
``3I2`` (backward for the input, pipesim's B), ``3W2``, ``2B0`` (a full backward,
pipesim's BW), and an overlapped pair ``(0F7;7B3)OVERLAP_F_B``. A compute-only CSV has
one row per rank and one action per cell; PyTorch infers which rank holds a stage from
the row it appears in, and lowers the rows to sends and receives itself
(``_PipelineScheduleRuntime._load_csv``). The global stage index of (rank, chunk) is its
position along the route, so interleaved chunk c of rank r is stage c*pp + r and the V's
chunk 1 of rank r is stage 2pp-1-r, with no special case.

No torch here except ``order_of_torch_class``, which reads a PyTorch schedule's
``pipeline_order`` without running it.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator

import numpy as np

from ..engine import compile
from ..errors import PipesimError
from ..inputs import MAX_COUNT, MAX_TORCH_OPS, integer, shorten, work
from ..ir import KINDS, STANDARD_PLACEMENTS, Item, Op, Pair, Placement, Schedule

TO_TORCH = {"F": "F", "B": "I", "W": "W", "BW": "B"}
FROM_TORCH = {v: k for k, v in TO_TORCH.items()}
_ACTION = re.compile(r"^(\d+)(F|I|W|B)(\d+)$")
_OVERLAP = re.compile(r"^\((.*);(.*)\)OVERLAP_F_B$")
# actions that are not computation: PyTorch's own lowering adds them, a compute-only
# order does not need them
_NOT_COMPUTE = re.compile(r"^\d+(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*$")


# ---------------------------------------------------------------------------------------
# export


def why_not_torch(schedule: Schedule) -> str | None:
    """Why PyTorch's runtime cannot run ``schedule`` as it is, or None if it can. Read
    off the schedule's arrays (no Op object per op: exports run up to the work limit)."""
    pl = schedule.placement
    if len(pl.routes) > 1:
        return (
            f"{schedule.name} keeps two copies of the model ({pl.kind} placement, {len(pl.routes)} routes in opposite "
            "directions); torch.distributed.pipelining holds each stage once, so it cannot express it "
            "(dualpipev is DualPipe on one copy)"
        )
    # the last stage's forwards (a pair's forward among them) are those of the (rank,
    # chunk) the one route ends on, in that rank's order
    r, c = pl.routes[0][-1]
    t = schedule.table
    a, b = int(t.offsets[r]), int(t.offsets[r + 1])
    mbs = t.mb[a:b][(t.kind[a:b] == KINDS.index("F")) & (t.chunk[a:b] == c)]
    back = np.flatnonzero(mbs[1:] < mbs[:-1])
    if len(back):
        i = int(back[0]) + 1
        return (
            f"{schedule.name} runs the last stage's forward of micro-batch {mbs[i]} after {mbs[i - 1]}; "
            "torch.distributed.pipelining stores losses in forward order and reads them back by "
            "micro-batch, so it needs them in increasing order"
        )
    return None


def torch_action(schedule: Schedule, rank: int, item: Item) -> str:
    def one(op: Op) -> str:
        return f"{schedule.placement.stage_of(rank, op.chunk, op.mb)}{TO_TORCH[op.kind]}{op.mb}"

    if isinstance(item, Pair):
        return f"({one(item.forward)};{one(item.backward)})OVERLAP_F_B"
    return one(item)


def check_torch(schedule: Schedule) -> None:
    """PipesimError unless ``schedule`` is valid and PyTorch's runtime can run it."""
    compile(schedule)  # the array check; validate's per-op walk words a failure
    reason = why_not_torch(schedule)
    if reason:
        raise PipesimError(reason)


def torch_row(schedule: Schedule, rank: int) -> list[str]:
    """Rank ``rank``'s actions (``torch_action`` of each item), read off the schedule's
    arrays, of a schedule ``check_torch`` passed (one route: a stage per (rank, chunk))."""
    t = schedule.table
    a, b = int(t.offsets[rank]), int(t.offsets[rank + 1])
    stage = schedule.placement.stage_grid()[0, rank]
    code = [TO_TORCH[k] for k in KINDS]
    row = [f"{stage[c]}{code[k]}{m}" for k, c, m in zip(t.kind[a:b].tolist(), t.chunk[a:b].tolist(), t.mb[a:b].tolist())]
    for j in np.flatnonzero(t.kind2[a:b] >= 0).tolist():
        i = a + j
        row[j] = f"({row[j]};{stage[t.chunk2[i]]}{code[t.kind2[i]]}{t.mb2[i]})OVERLAP_F_B"
    return row


def to_torch_rows(schedule: Schedule) -> list[list[str]]:
    """The compute-only action rows, one per rank; PipesimError if PyTorch cannot run it."""
    check_torch(schedule)
    return [torch_row(schedule, r) for r in range(schedule.pp)]


def rows_to_csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def csv_chunks(schedule: Schedule) -> Iterator[bytes]:
    """``rows_to_csv(to_torch_rows(schedule))`` made and encoded a rank at a time, for a
    writer that never holds the whole text, of a schedule ``check_torch`` passed."""
    return (rows_to_csv([torch_row(schedule, r)]).encode("utf-8") for r in range(schedule.pp))


#: PyTorch's classes by the placement torchtitan gives their stages: one stage per rank,
#: looped (stage c*pp + r on rank r) or a V (``_get_pp_rank_to_stage_indices_mapping``)
SINGLE_STAGE = ("GPipe", "1F1B")
LOOPED = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble")
V_SHAPED = ("ZBVZeroBubble", "DualPipeV")


#: the class whose name makes torchtitan place the stages so, for a CSV to run on
PLACING = {"single": "1F1B", "looped": "Interleaved1F1B", "v": "ZBVZeroBubble"}


def _shape(pl: Placement, pp: int, M: int) -> str | None:
    """How torchtitan would have to place the stages: "single", "looped" or "v"."""
    if pl.chunks == 1 and pl.routes == Placement.flat(pp, M).routes:
        return "single"
    if len(pl.routes) == 1 and pl.routes == Placement.interleaved(pp, M, pl.chunks).routes:
        return "looped"
    if pl.chunks == 2 and pl.routes == Placement.v(pp, M).routes:
        return "v"
    return None


def torch_class_of(schedule: Schedule) -> str | None:
    """The PyTorch class whose own order is exactly ``schedule``'s (for the single-stage
    classes, the order their runtime executes), or None when no class runs it. A
    multi-stage class may match a one-stage-per-rank order (ZB-H1 is InterleavedZeroBubble
    on one stage per rank).

    Compared with pipesim's generators for those classes, which tests/test_torch_orders.py
    holds equal to the classes op for op."""
    from ..schedules import TORCH_NAMES, build

    pl, pp, M = schedule.placement, schedule.pp, schedule.microbatches
    names = {"single": SINGLE_STAGE + LOOPED, "looped": LOOPED, "v": V_SHAPED}.get(_shape(pl, pp, M), ())
    for name in names:
        if name == "1F1B" and M < pp:
            continue  # Schedule1F1B refuses fewer micro-batches than stages
        try:
            theirs = build(TORCH_NAMES[name], pp, M, **({"chunks": pl.chunks} if name in LOOPED else {}))
        except PipesimError:
            continue
        if theirs.table == schedule.table:  # the arrays, not an Op object per op
            return name
    return None


def torchtitan_class(schedule: Schedule, exact: str | None) -> str | None:
    """The schedule name torchtitan can be given that runs ``schedule``'s order exactly,
    or None; ``exact`` is ``torch_class_of(schedule)``. A multi-stage class that matches a
    one-stage-per-rank order does not count: torchtitan gives multi-stage classes 2 or
    more stages per rank."""
    single = _shape(schedule.placement, schedule.pp, schedule.microbatches) == "single"
    return None if exact in LOOPED and single else exact


#: Largest order ``torchtitan_hint`` compares with PyTorch's classes: each candidate's
#: order is built op by op in Python (InterleavedZeroBubble at 7.7M ops: 25 s of CPU,
#: which made export run past a minute well inside the work limit). Past it the CSV is
#: the advice, and it is sound there anyway: PyTorch's own order generators are slower
#: than linear (``MAX_TORCH_OPS``), so naming a class would cost minutes in torchtitan.
MAX_MATCH_OPS = 1_000_000


def torchtitan_hint(schedule: Schedule, csv_path: str = "schedule.csv") -> str:
    """How to run ``schedule`` in torchtitan: by a schedule name when a PyTorch class runs
    exactly this order, else with the CSV. torchtitan (pytorch/torchtitan at b5bcd76,
    torchtitan/distributed/pipeline_parallel.py) takes the stage placement from
    ``pipeline_parallel_schedule`` even when it reads the order from
    ``pipeline_parallel_schedule_csv``, so the name must give the CSV's placement, and it
    gives a multi-stage class at least 2 stages per rank."""
    pl, pp, M = schedule.placement, schedule.pp, schedule.microbatches
    matched = schedule.num_ops <= MAX_MATCH_OPS
    shape, exact = _shape(pl, pp, M), torch_class_of(schedule) if matched else None
    titan = torchtitan_class(schedule, exact)
    layers = "" if pl.chunks <= 2 else f"; set pipeline_parallel_layers_per_stage so that each rank gets {pl.chunks} stages"
    if titan:
        return f'torchtitan: pipeline_parallel_schedule = "{titan}" runs this order exactly (no CSV needed){layers}; num_pp_microbatches = {M}'
    if shape is None:
        return (
            "no PyTorch schedule class runs this order, and torchtitan places stages one per rank, looped or as a V "
            "only: this placement needs your own PipelineStage setup and _PipelineScheduleRuntime._load_csv"
        )
    who = (
        f"PyTorch's {exact} on one stage per rank runs this order, but torchtitan gives multi-stage classes 2 or more"
        if exact
        else "no PyTorch schedule class runs this order"
        if matched
        else f"at {schedule.num_ops:,} ops (above {MAX_MATCH_OPS:,}) the order is not compared with PyTorch's classes"
    )
    how = {"single": "one stage per rank", "looped": f"looped, {pl.chunks} stages per rank", "v": "a V"}[shape]
    return (
        f'{who}: in torchtitan set pipeline_parallel_schedule_csv = "{csv_path}", and pipeline_parallel_schedule = '
        f'"{PLACING[shape]}" ({how}) only to place the stages{layers}; num_pp_microbatches = {M}'
    )


# ---------------------------------------------------------------------------------------
# import


def read_csv(text: str, where: str = "the CSV") -> list[list[str]]:
    """The rows of a compute-only CSV, one per rank, as PyTorch's
    ``_PipelineScheduleRuntime._load_csv`` reads them (torch 2.13,
    torch/distributed/pipelining/schedules.py: ``open(filename, newline="")`` and one
    rank per ``csv.reader`` row, whose count ``_validate_schedule`` checks against the
    group's size)."""
    if text.startswith("\ufeff"):
        # Excel's "CSV UTF-8" and Notepad write one; it was "cannot read '\ufeff0F0'" of a
        # file that shows 0F0 (and PyTorch, which opens the file plainly, reads it so too)
        raise PipesimError(
            f"{where}: starts with a byte-order mark (U+FEFF), which PyTorch's _load_csv reads into rank 0's first "
            "action; save it as UTF-8 without one"
        )
    try:
        rows = [row for row in csv.reader(io.StringIO(text))]
    except csv.Error as e:  # a field past the csv module's limit, a NUL, a broken quote
        raise PipesimError(f"{where}: not a schedule CSV ({e}); expected one row of actions per rank, like 0F0,0F1,0I0") from None
    blank = len(rows)
    while blank and not any(cell.strip() for cell in rows[blank - 1]):
        blank -= 1
    if blank < len(rows) and blank:
        # an editor's or a heredoc's blank lines at the end: each a rank with nothing to do
        # to PyTorch too, so a 2-rank order loads only on a group of 4; it read as pp=4, and
        # --pp 2 "disagreed with the CSV's 4 rows" of a file that shows 2
        raise PipesimError(
            f"{where}: {len(rows) - blank} blank line(s) after the last of its {blank} rows, which PyTorch's _load_csv "
            f"reads as ranks with no actions (a group of {len(rows)}, not {blank}); delete them"
        )
    return rows


def from_torch_rows(
    rows: list[list[str | None]], name: str, microbatches: int | None = None, source: str | None = None
) -> Schedule:
    """A pipesim Schedule from PyTorch action rows (compute-only or with communication,
    which is dropped). The placement is what the rows imply: each stage on the rank whose
    row names it, a rank's stages in increasing order as its chunks 0, 1, ...

    Not validated here: ``validate`` the result to find what is wrong with an order.
    ``source``: what errors name (the file the rows came from); default ``name``."""
    source = source or name
    pp = len(rows)
    if pp == 0:
        raise PipesimError(f"{source}: no rows; expected one row of actions per rank")
    work(pp, 1, where=f"{source}: ")  # the ranks, before a cell is parsed (200,000 rows took 9 s to refuse)
    parsed: list[list[tuple]] = []
    rank_of: dict[int, int] = {}
    for r, row in enumerate(rows):
        out = []
        for i, cell in enumerate(row):
            text = (cell or "").strip()
            if not text or text == "None" or _NOT_COMPUTE.match(text):
                continue
            m = _OVERLAP.match(text)
            parts = [m.group(1).strip(), m.group(2).strip()] if m else [text]
            acts = []
            for part in parts:
                a = _ACTION.match(part)
                if not a:
                    raise PipesimError(
                        f"{source}: rank {r} cell {i}: cannot read {text!r}; expected STAGE TYPE MICROBATCH such as 2F0, 3I2, "
                        "3W2, 2B0, or (0F7;7B3)OVERLAP_F_B"
                    )
                where = f"{source}: rank {r} cell {i}: {shorten(part)}"
                stage = integer(a.group(1), "stage", 0, MAX_COUNT, where)  # capped before int()
                kind, mb = a.group(2), integer(a.group(3), "micro-batch", 0, MAX_COUNT, where)
                if rank_of.setdefault(stage, r) != r:
                    raise PipesimError(
                        f"{source}: stage {stage} appears on rank {rank_of[stage]} and on rank {r}; a stage lives on one rank"
                    )
                acts.append((stage, kind, mb))
            if m and (acts[0][1] != "F" or acts[1][1] not in ("I", "B")):
                raise PipesimError(f"{source}: rank {r}: {text!r} must overlap a forward with a backward (F then I or B)")
            out.append(acts)
        parsed.append(out)
    if not rank_of:  # blank rows: a 0-op schedule, which pipesim's own reader refuses
        raise PipesimError(f"{source}: {pp} row(s) but no actions; expected one row of actions per rank, like 0F0,0F1,0I0")
    stages = max(rank_of, default=-1) + 1
    work(1, stages, where=f"{source}: stages: ")  # before listing the stages no rank holds
    missing = [s for s in range(stages) if s not in rank_of]
    if missing:
        raise PipesimError(f"{source}: stage {missing[0]} appears on no rank (stages must be 0..{stages - 1})")
    chunk_of: dict[int, int] = {}
    held: dict[int, list[int]] = {}
    for s in sorted(rank_of):  # one pass, not one per rank: a CSV may have 200,000 rows
        held.setdefault(rank_of[s], []).append(s)
    for ss in held.values():
        for c, s in enumerate(ss):
            chunk_of[s] = c
    chunks = max(chunk_of.values(), default=0) + 1
    mbs = [a[2] for acts in parsed for item in acts for a in item]
    M = microbatches if microbatches is not None else max(mbs, default=-1) + 1
    if M < 1:
        raise PipesimError(f"{source}: no actions to import")
    work(pp, M, chunks, where=f"{source}: ")
    route = tuple((rank_of[s], chunk_of[s]) for s in range(stages))
    placement = _named_placement(pp, M, chunks, route)

    def op(a) -> Op:
        stage, kind, mb = a
        return Op(FROM_TORCH[kind], chunk_of[stage], mb)

    ranks = tuple(tuple(Pair(op(acts[0]), op(acts[1])) if len(acts) == 2 else op(acts[0]) for acts in out) for out in parsed)
    return Schedule(name, pp, M, placement, ranks)


def _named_placement(pp: int, M: int, chunks: int, route) -> Placement:
    for kind in STANDARD_PLACEMENTS:
        if kind == "dual":
            continue
        try:
            p = Placement.standard(kind, pp, M, chunks)
        except PipesimError:
            continue
        if p.chunks == chunks and p.routes == (route,):
            return p
    return Placement("custom", pp, chunks, (route,), (0,) * M)


def torch_1f1b_defect(name: str, rows: list[list[str]], microbatches: int) -> str | None:
    """What is wrong with torch 2.13's displayed Schedule1F1B order, and what its runtime
    runs instead; None for another class or an order without the defect."""
    if name.lower() != "1f1b" or not rows:
        return None
    last = len(rows) - 1
    fwd = [int(a.group(3)) for a in map(_ACTION.match, rows[last]) if a and a.group(2) == "F"]
    if fwd == list(range(microbatches)) or not fwd:
        return None
    missing = sorted(set(range(microbatches)) - set(fwd))
    extra = sorted(set(fwd) - set(range(microbatches)))
    what = ", ".join(
        ([f"no {', '.join(map(str, missing))}"] if missing else [])
        + ([f"and {', '.join(map(str, extra))} does not exist"] if extra else [])
    )
    return (
        f"PyTorch 2.13's Schedule1F1B displays a wrong pipeline_order: rank {last} lists forwards of micro-batches "
        f"{fwd[0]}..{fwd[-1]} ({what}). Its runtime does not execute that list: rank r runs pp-r forwards, then "
        "alternates a backward and a forward, then the last backwards (Schedule1F1B._step_microbatches), which is "
        "pipesim's --schedule 1F1B"
    )


def placing_class(pl: Placement, pp: int, M: int) -> str | None:
    """The schedule name that makes torchtitan place stages as ``pl`` does, or None."""
    shape = _shape(pl, pp, M)
    return PLACING[shape] if shape else None


TORCH_CLASSES = SINGLE_STAGE + LOOPED + V_SHAPED


def order_of_torch_class(name: str, pp: int, microbatches: int, stages_per_rank: int | None = None) -> list[list[str]]:
    """The per-rank action strings of PyTorch's schedule class ``name`` (as
    ``get_schedule_class`` spells it), read from its ``pipeline_order`` without running:
    the class only needs objects that say how many stages there are and which it holds."""
    from torch.distributed.pipelining import schedules as S

    try:
        cls = S.get_schedule_class(name)
    except ValueError:
        raise PipesimError(f"unknown PyTorch schedule {name!r}; choose from {', '.join(TORCH_CLASSES)}") from None
    v_shape = cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV)
    single = issubclass(cls, S.PipelineScheduleSingle)
    if single:
        if stages_per_rank not in (None, 1):
            raise PipesimError(f"{name} runs one stage per rank; drop --chunks")
        held = [0]
        n = pp
    else:
        k = stages_per_rank or 2
        if v_shape and k != 2:
            raise PipesimError(f"{name} needs exactly 2 stages per rank (a V), got --chunks {k}")
        n = pp * k
        held = [0, n - 1] if v_shape else [i * pp for i in range(k)]

    # PyTorch's generator is Python, and slower than linear (ZBVZeroBubble: pp=16 M=512,
    # 49K actions, 7 s; pp=32 M=1024, 197K actions, 47 s, on a 2-core machine)
    work(pp, microbatches, stages=n, where=f"PyTorch's {name}: ", limit=MAX_TORCH_OPS, cost="about 20 s in PyTorch's generator")

    class _Stage:  # what the schedule constructors read from a stage
        def __init__(self, index: int):
            self.stage_index, self.num_stages, self.group_size, self.group_rank = index, n, pp, 0
            self.is_first, self.is_last = index == 0, index == n - 1
            self.submod = None

    try:
        stages = [_Stage(i) for i in held]
        sched = cls(stages[0] if single else stages, microbatches, loss_fn=lambda out, target: out)
    except (ValueError, AssertionError, RuntimeError, ZeroDivisionError) as e:
        raise PipesimError(f"PyTorch's {name} refuses pp={pp}, M={microbatches}: {str(e).strip().splitlines()[0]}") from None
    order = sched.pipeline_order or {}
    return [[str(a) if a is not None else "" for a in order.get(r, [])] for r in range(pp)]
