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

from ..errors import PipesimError
from ..inputs import work
from ..ir import STANDARD_PLACEMENTS, Item, Op, Pair, Placement, Schedule
from ..validate import validate

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
    """Why PyTorch's runtime cannot run ``schedule`` as it is, or None if it can."""
    pl = schedule.placement
    if len(pl.routes) > 1:
        return (
            f"{schedule.name} keeps two copies of the model ({pl.kind} placement, {len(pl.routes)} routes in opposite "
            "directions); torch.distributed.pipelining holds each stage once, so it cannot express it "
            "(dualpipev is DualPipe on one copy)"
        )
    last = pl.stages - 1
    for r, items in enumerate(schedule.ranks):
        seen = -1
        for item in items:
            ops = (item.forward,) if isinstance(item, Pair) else (item,)
            for op in ops:
                if op.kind == "F" and pl.stage_of(r, op.chunk, op.mb) == last:
                    if op.mb < seen:
                        return (
                            f"{schedule.name} runs the last stage's forward of micro-batch {op.mb} after {seen}; "
                            "torch.distributed.pipelining stores losses in forward order and reads them back by "
                            "micro-batch, so it needs them in increasing order"
                        )
                    seen = op.mb
    return None


def torch_action(schedule: Schedule, rank: int, item: Item) -> str:
    def one(op: Op) -> str:
        return f"{schedule.placement.stage_of(rank, op.chunk, op.mb)}{TO_TORCH[op.kind]}{op.mb}"

    if isinstance(item, Pair):
        return f"({one(item.forward)};{one(item.backward)})OVERLAP_F_B"
    return one(item)


def to_torch_rows(schedule: Schedule) -> list[list[str]]:
    """The compute-only action rows, one per rank; PipesimError if PyTorch cannot run it."""
    validate(schedule)
    reason = why_not_torch(schedule)
    if reason:
        raise PipesimError(reason)
    return [[torch_action(schedule, r, item) for item in items] for r, items in enumerate(schedule.ranks)]


def rows_to_csv(rows: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()


def torchtitan_hint(schedule: Schedule) -> str:
    """How to make torchtitan place the stages as the CSV expects: it takes the placement
    from the schedule name even when it reads the order from a CSV."""
    pl = schedule.placement
    if pl == Placement.v(schedule.pp, schedule.microbatches):
        return 'torchtitan: pipeline_parallel_schedule = "ZBVZeroBubble" (a V placement) with this CSV'
    if pl.chunks == 1 and pl == Placement.flat(schedule.pp, schedule.microbatches):
        return 'torchtitan: pipeline_parallel_schedule = "1F1B" (one stage per rank) with this CSV'
    if pl == Placement.interleaved(schedule.pp, schedule.microbatches, pl.chunks):
        return f'torchtitan: pipeline_parallel_schedule = "Interleaved1F1B" (looped, {pl.chunks} stages per rank) with this CSV'
    return "torchtitan places stages looped or as a V only; this placement needs your own PipelineStage setup"


# ---------------------------------------------------------------------------------------
# import


def read_csv(text: str) -> list[list[str]]:
    return [row for row in csv.reader(io.StringIO(text))]


def from_torch_rows(rows: list[list[str | None]], name: str, microbatches: int | None = None) -> Schedule:
    """A pipesim Schedule from PyTorch action rows (compute-only or with communication,
    which is dropped). The placement is what the rows imply: each stage on the rank whose
    row names it, a rank's stages in increasing order as its chunks 0, 1, ...

    Not validated here: ``validate`` the result to find what is wrong with an order."""
    pp = len(rows)
    if pp == 0:
        raise PipesimError(f"{name}: no rows; expected one row of actions per rank")
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
                        f"{name}: rank {r} cell {i}: cannot read {text!r}; expected STAGE TYPE MICROBATCH such as 2F0, 3I2, "
                        "3W2, 2B0, or (0F7;7B3)OVERLAP_F_B"
                    )
                stage, kind, mb = int(a.group(1)), a.group(2), int(a.group(3))
                if rank_of.setdefault(stage, r) != r:
                    raise PipesimError(
                        f"{name}: stage {stage} appears on rank {rank_of[stage]} and on rank {r}; a stage lives on one rank"
                    )
                acts.append((stage, kind, mb))
            if m and (acts[0][1] != "F" or acts[1][1] not in ("I", "B")):
                raise PipesimError(f"{name}: rank {r}: {text!r} must overlap a forward with a backward (F then I or B)")
            out.append(acts)
        parsed.append(out)
    stages = max(rank_of, default=-1) + 1
    work(1, stages, where=f"{name}: stages: ")  # before listing the stages no rank holds
    missing = [s for s in range(stages) if s not in rank_of]
    if missing:
        raise PipesimError(f"{name}: stage {missing[0]} appears on no rank (stages must be 0..{stages - 1})")
    chunk_of: dict[int, int] = {}
    for r in range(pp):
        for c, s in enumerate(sorted(s for s, rr in rank_of.items() if rr == r)):
            chunk_of[s] = c
    chunks = max(chunk_of.values(), default=0) + 1
    mbs = [a[2] for acts in parsed for item in acts for a in item]
    M = microbatches if microbatches is not None else max(mbs, default=-1) + 1
    if M < 1:
        raise PipesimError(f"{name}: no actions to import")
    work(pp, M, chunks, where=f"{name}: ")
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


TORCH_CLASSES = ("GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")


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
            raise PipesimError(f"{name} runs one stage per rank; drop --stages-per-rank")
        held = [0]
        n = pp
    else:
        k = stages_per_rank or 2
        if v_shape and k != 2:
            raise PipesimError(f"{name} needs exactly 2 stages per rank (a V), got --stages-per-rank {k}")
        n = pp * k
        held = [0, n - 1] if v_shape else [i * pp for i in range(k)]

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
