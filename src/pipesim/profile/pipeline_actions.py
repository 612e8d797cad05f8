"""From pipeline actions in attributed traces to what pipesim simulates: the schedule
that ran (its placement included), the measured ``Timeline``, and per-stage F/B/W/BW
costs with the P2P latency. Times are seconds."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from ..costs import Costs
from ..deps import needs, produces
from ..errors import PipesimError
from ..ir import Item, Op, Pair, Placement, Schedule, ops_of
from ..timeline import Event, Inside, Segment, Timeline
from ..validate import check_structure, execution_order
from .attribute import Attributed, Instance
from .trace import US


@dataclass(frozen=True)
class Filled:
    """A per-stage cost no op measured: ``kind`` at ``stage`` is the mean of ``sources``."""

    kind: str  # F, B, W or BW
    stage: int
    sources: tuple[int, ...]  # the stages that ran the kind


def _span(inst: Instance, gpu: bool) -> tuple[float, float]:
    span = inst.gpu_span if gpu else None
    return span if span is not None else (inst.range.start, inst.range.end)


def pipeline_of(
    runs: list[Attributed], gpu: bool, notes: list[str], one_file: bool = False
) -> tuple[Schedule, Timeline, Costs | None, tuple]:
    """``one_file``: the user named one trace file, not a folder of them."""
    acted = [(i, run) for i, run in enumerate(runs) if any(a.what.compute for a in run.actions)]
    if not acted:
        return (*_one_item(runs, gpu), ())
    # rank of each trace: the label's, else the trace's distributedInfo, else its place
    per_rank: dict[int, list[tuple[Item, tuple[int, ...], float, float, Instance, Attributed]]] = {}
    runs_of: dict[int, tuple[str, str | None, int | None, str | None]] = {}  # rank -> (trace, schedule, pp, run)
    names = Counter()
    for i, run in acted:
        acts = [a for a in run.actions if a.what.compute]
        rank = acts[0].what.rank if acts[0].what.rank is not None else run.trace.rank if run.trace.rank is not None else i
        if rank in per_rank:
            raise PipesimError(f"{run.trace.path}: a second trace of rank {rank}; give one trace per rank")
        rows = []
        for inst in acts:
            a = inst.what
            stages = tuple(rank if s < 0 else s for s in a.stages)  # GPipe: stage = rank
            start, end = _span(inst, gpu)
            rows.append((a.item, stages, start, end, inst, run))
            names[a.schedule or ("torch" if not a.chunks_known else "measured")] += 1
        per_rank[rank] = rows
        runs_of[rank] = (run.trace.path, acts[0].what.schedule, acts[0].what.pp, run.trace.run)
    _one_run(runs_of)
    said = next((pp for _, _, pp, _ in runs_of.values() if pp is not None), None)  # the labels' pp, when they say it
    pp = max(max(per_rank) + 1, said or 0)
    if len(per_rank) < pp:  # the first gap, found without listing them all (a label may name rank 10**9)
        missing = next(r for r in range(pp) if r not in per_rank)
        had = f" (the run had pp={said})" if said == pp else ""
        # profile takes one TRACE: "give one per rank" to a user who gave a rank's file
        # asked for what the command line cannot take; the folder of the run's traces is it
        give = (
            f"give the folder holding every rank's trace ({Path(runs[0].trace.path).parent})" if one_file else "give one per rank"
        )
        raise PipesimError(f"traces of ranks {', '.join(map(str, sorted(per_rank)))} but none of rank {missing}{had}; {give}")
    # chunk numbers of PyTorch's labels: a rank's stages in increasing order are its chunks
    # 0, 1, ... (looped: stage c*pp + r; V: r then 2pp-1-r)
    ranks, events, op_stage = [], [], {}
    t0 = min(row[2] for rows in per_rank.values() for row in rows)
    steps = False
    for r in range(pp):
        rows = sorted(per_rank[r], key=lambda row: row[2])
        seen: set = set()
        for i, row in enumerate(rows):
            if row[:2] in seen:  # the same item at the same stages again: a second step began
                rows, steps = rows[:i], True
                break
            seen.add(row[:2])
        held = sorted({s for row in rows for s in row[1]})
        items, evs = [], []
        for item, stages, start, end, inst, run in rows:
            if not inst.what.chunks_known:
                item = _with_chunks(item, tuple(held.index(s) for s in stages))
            for op, s in zip(ops_of(item), stages):
                op_stage[(r, op)] = s
            items.append(item)
            evs.append(Event(r, item, (start - t0) * US, (end - t0) * US, _inside(inst, run, gpu, start)))
        ranks.append(tuple(items))
        events.append(tuple(evs))
    placement = _placement(pp, op_stage)
    name = names.most_common(1)[0][0]
    schedule = Schedule(name, pp, placement.microbatches, placement, tuple(ranks))
    _whole_step(schedule)
    timeline = Timeline(pp, tuple(events), (), source="measured")
    overhead, latency = between_items(schedule, timeline)
    costs, filled = _stage_costs(events, op_stage, placement.stages, overhead)
    if steps:
        notes.append("the traces hold more than one step: the first is read")
    if filled:
        notes.append(filled_note(filled))
    return schedule, timeline, replace(costs, comm=latency), filled


def _whole_step(schedule: Schedule) -> None:
    """Refuse a step that lacks an op, or holds one twice. ``_placement`` sees every
    micro-batch at every stage through any kind, so a trace that lost one op (the
    profiler started late, or dropped events) got whole routes and was read as the run,
    its makespan, bubble and costs without the op. A run executes a validated schedule,
    so what the traces show must validate too."""
    try:
        check_structure(schedule)
        execution_order(schedule)
    except PipesimError as e:
        problem = str(e).removeprefix(f"invalid {schedule.name} schedule: ")
        raise PipesimError(f"the traces hold no whole step: {problem}; profile every rank of one whole step") from None


def filled_note(filled: tuple[Filled, ...]) -> str:
    """One line naming every per-stage cost that was filled in, and from which stages."""
    said = "; ".join(f"{f.kind} at stage {f.stage} from stages {', '.join(map(str, f.sources))}" for f in filled)
    return f"not measured (no such op ran there), filled with the mean of the stages that ran it: {said}"


def _one_run(runs_of: dict[int, tuple[str, str | None, int | None, str | None]]) -> None:
    """Refuse traces whose pipesim labels name different schedules or pipeline sizes, or
    that different runs wrote (their ``pipesimRun`` stamps differ): a folder keeps an
    earlier run's rank files past the next run's pp, and a failed run writes only the
    ranks that finished, so its rank 0 can sit beside an earlier run's rank 1 of the same
    schedule and pp; read together they make a run of neither."""
    seen: dict[tuple[str | None, int | None], str] = {}
    stamps: dict[str | None, list[str]] = {}
    for path, name, pp, stamp in (runs_of[r] for r in sorted(runs_of)):
        if name is not None:
            seen.setdefault((name, pp), path)
            stamps.setdefault(stamp, []).append(Path(path).name)
    what = "give the traces of one run (a --profile folder keeps an earlier run's rank files: give each run an empty one)"
    if len(seen) > 1:
        shown = ", ".join(f"{Path(p).name} ran {n}" + (f" at pp={pp}" if pp else "") for (n, pp), p in seen.items())
        raise PipesimError(f"traces of more than one run: {shown}; {what}")
    if len(stamps) > 1:  # no stamp: a trace of a pipesim from before the stamps, not of this run either
        shown = "; ".join(
            f"{', '.join(files)} from {f'the run of {s}' if s else 'an unstamped run'}" for s, files in stamps.items()
        )
        raise PipesimError(f"traces of more than one run of the same schedule: {shown}; {what}")


def between_items(schedule: Schedule, timeline: Timeline) -> tuple[float, float]:
    """(overhead, latency) measured between items, as the simulation adds them.

    ``overhead`` is the mean time a rank spends between two items when the second needs
    nothing from another rank (the runtime's own work per item: posting its sends, taking
    the next inputs, being scheduled); the costs add it to every item. An item with a
    remote input whose producer ended before the previous item did may still have waited
    for the transfer, so it tells nothing certain and is left out (it is used only when
    no rank has an item without remote inputs).

    ``latency`` is the P2P time on top of that: the mean wait from a remote producer's
    end to its consumer's start, over the consumers whose producer ended after their
    rank's previous item (so the rank certainly waited), less the overhead. That wait
    holds the producer's sends and the consumer's taking as well as the transfer, and the
    simulation already counts those once in the producer's item (its end is its measured
    end plus the overhead); counted again as latency, every wait on the critical path
    would cost one overhead too many. Means rather than medians: the simulated makespan
    adds them up, so their tails count."""
    done: dict = {}
    for evs in timeline.events:
        for e in evs:
            for op in ops_of(e.item):
                done.update({key: e.end for key in produces(e.rank, op)})
    gaps, unsure, waits = [], [], []
    for evs in timeline.events:
        for prev, e in zip(evs, evs[1:]):
            keys = [k for op in ops_of(e.item) for k in needs(schedule.placement, e.rank, op) if k[1] != e.rank]
            remote = max((done[k] for k in keys if k in done), default=None)
            if remote is None:
                gaps.append(e.start - prev.end)
            elif remote > prev.end:
                waits.append(e.start - remote)
            else:
                unsure.append(e.start - prev.end)
    gaps = gaps or unsure
    overhead = max(0.0, statistics.fmean(gaps)) if gaps else 0.0
    return overhead, max(0.0, statistics.fmean(waits) - overhead) if waits else 0.0


def timeline_costs(schedule: Schedule, timeline: Timeline) -> Costs:
    """The costs a measured ``timeline`` of ``schedule`` shows, read as ``pipeline_of``
    reads a traced run: each kind's mean time at each stage and a pair's, each plus the
    overhead between items, and the latency as ``comm`` (``between_items``). ``pipesim
    run --synthetic`` simulates its order again with them, to say how much of its
    difference from the simulation is the ops' and the runtime's own time."""
    pl = schedule.placement
    op_stage = {
        (e.rank, op): pl.stage_of(e.rank, op.chunk, op.mb) for evs in timeline.events for e in evs for op in ops_of(e.item)
    }
    overhead, latency = between_items(schedule, timeline)
    costs, _ = _stage_costs(timeline.events, op_stage, pl.stages, overhead)
    return replace(costs, comm=latency)


def _with_chunks(item: Item, chunks: tuple[int, ...]) -> Item:
    if isinstance(item, Pair):
        return Pair(Op("F", chunks[0], item.forward.mb), Op(item.backward.kind, chunks[1], item.backward.mb))
    return Op(item.kind, chunks[0], item.mb)


def _placement(pp: int, op_stage: dict) -> Placement:
    """The routes the micro-batches took: for each, the (rank, chunk) that ran each stage."""
    where: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)
    for (r, op), s in op_stage.items():
        where[op.mb][s] = (r, op.chunk)
    stages = 1 + max(s for s in op_stage.values())
    M = 1 + max(where)
    # a stage or micro-batch no op ran: refused before anything of its size is made (a
    # label naming stage 10**9 made 6-9 GB of routes)
    seen = set(op_stage.values())
    if len(seen) < stages or len(where) < M:
        mb = next(m for m in range(M) if m not in where) if len(where) < M else min(where)
        s = next(x for x in range(stages) if x not in seen) if len(seen) < stages else 0
        raise PipesimError(f"the traces show no op of micro-batch {mb} at stage {s}: profile every rank of one whole step")
    routes: list[tuple] = []
    route_of = []
    for mb in range(M):
        route = tuple(where.get(mb, {}).get(s) for s in range(stages))
        if None in route:
            raise PipesimError(
                f"the traces show no op of micro-batch {mb} at stage {route.index(None)}: profile every rank of one whole step"
            )
        if route not in routes:
            routes.append(route)
        route_of.append(routes.index(route))
    chunks = 1 + max(c for route in routes for _, c in route)
    for kind in ("flat", "interleaved", "v", "dual"):
        try:
            std = Placement.standard(kind, pp, M, chunks)
        except PipesimError:
            continue
        if std.routes == tuple(routes) and std.route_of == tuple(route_of):
            return std
    return Placement("custom", pp, chunks, tuple(routes), tuple(route_of))


def _stage_costs(events, op_stage: dict, stages: int, overhead: float = 0.0) -> tuple[Costs, tuple[Filled, ...]]:
    """Mean measured time of each kind at each stage, plus the ``overhead`` a rank spends
    between items: per-stage F/B/W/BW, and a pair's; and the costs filled in because no
    op of their kind ran at their stage (``Costs`` needs every stage's)."""
    times: dict[tuple[str, int], list[float]] = defaultdict(list)
    pairs = []
    for evs in events:
        for e in evs:
            if isinstance(e.item, Pair):
                pairs.append(e.duration)
            else:
                times[(e.item.kind, op_stage[(e.rank, e.item)])].append(e.duration)

    filled: list[Filled] = []

    def per_stage(kind: str) -> tuple[float, ...] | None:
        if not any((kind, s) in times for s in range(stages)):
            return None
        mean = {s: sum(v) / len(v) + overhead for (k, s), v in times.items() if k == kind}
        fill = sum(mean.values()) / len(mean)  # a stage without this kind: the mean of the others, said as such
        filled.extend(Filled(kind, s, tuple(sorted(mean))) for s in range(stages) if s not in mean)
        return tuple(mean.get(s, fill) for s in range(stages))

    f, b, w, bw = (per_stage(k) for k in ("F", "B", "W", "BW"))
    # kinds not measured cost nothing; a fused backward alone is the B+W of Costs
    costs = Costs(
        f=f or 0.0,
        b=b or bw or 0.0,
        w=w or 0.0,
        bw=bw if bw is not None and b is not None else None,
        pair=sum(pairs) / len(pairs) + overhead if pairs else None,
    )
    return costs, tuple(filled)


def measured_kinds(schedule: Schedule) -> tuple[str, ...]:
    """The op kinds a measured schedule ran, in F, B, W, BW order."""
    seen = {op.kind for _, it in schedule.items() for op in ops_of(it)}
    return tuple(k for k in ("F", "B", "W", "BW") if k in seen)


def _inside(inst: Instance, run: Attributed, gpu: bool, start: float) -> Inside | None:
    """The components measured inside an action, as its segments."""
    r = inst.range
    within = [c for c in run.components if c.range.pid == r.pid and r.start <= c.range.start and c.range.end <= r.end]
    return _segments_inside(within, gpu, start)


def _segments_inside(comps: list[Instance], gpu: bool, start: float) -> Inside | None:
    if not comps:
        return None
    seen: Counter = Counter()
    segs = []
    for c in comps:
        a, b = _span(c, gpu)
        layer = seen[c.what]
        seen[c.what] += 1
        segs.append(Segment(c.what.stream, f"{str(c.what).upper()} L{layer}", (a - start) * US, (b - start) * US))
    return Inside.of(tuple(segs))


def _one_item(runs: list[Attributed], gpu: bool) -> tuple[Schedule, Timeline, None]:
    """Components without pipeline actions (DeepSeek's profile of one F&B pair): one rank,
    one item spanning the window, the pair when there are forward and backward parts."""
    run = next(r for r in runs if r.components)
    phases = {c.what.phase for c in run.components}
    if "F" in phases and phases - {"F"}:
        item: Item = Pair(Op("F", 0, 1), Op("BW", 0, 0))
    else:
        item = Op("F" if phases == {"F"} else "BW", 0, 0)
    spans = [_span(c, gpu) for c in run.components]
    start, end = min(a for a, _ in spans), max(b for _, b in spans)
    ev = Event(0, item, 0.0, (end - start) * US, _segments_inside(run.components, gpu, start))
    M = 2 if isinstance(item, Pair) else 1
    schedule = Schedule("measured", 1, M, Placement.flat(1, M), ((item,),))
    return schedule, Timeline(1, ((ev,),), (), source="measured"), None
