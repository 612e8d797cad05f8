"""From attributed traces to what pipesim models: per-layer component times, per-stage
F/B/W/BW costs, and the measured ``Timeline``.

Times come from the GPU when the trace has kernels: a component's time is the sum of
its kernels' times (``busy``, the time at least one of them runs, is shown beside it:
it is shorter when a component runs kernels on two streams at once, as DeepSeek's
``mlp(W)`` does); an action's time is the span from its first kernel's start to its last
kernel's end. A trace without kernels (a CPU run) gives the CPU durations of
the annotated ranges instead, and says so. All times here are seconds.
"""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..costs import Costs
from ..deps import needs, produces
from ..errors import PipesimError
from ..ir import Item, Op, Pair, Placement, Schedule, ops_of
from ..timeline import Event, Inside, Segment, Timeline
from .attribute import Attributed, Instance, attribute, union_length
from .labels import COMPONENTS, EXPECTED, PHASES, Component, Mapping, action
from .trace import read_trace

US = 1e-6


@dataclass(frozen=True)
class ComponentRow:
    component: Component
    instances: int
    per_layer: float  # mean summed kernel time of one instance (one layer of one micro-batch)
    busy: float  # mean time at least one of its kernels runs
    streams: tuple[int, ...]  # CUDA streams its kernels ran on (() on a CPU trace)
    share: float  # its busy time over the window
    kernels: int


@dataclass(frozen=True)
class Filled:
    """A per-stage cost no op measured: ``kind`` at ``stage`` is the mean of ``sources``."""

    kind: str  # F, B, W or BW
    stage: int
    sources: tuple[int, ...]  # the stages that ran the kind


@dataclass
class Profile:
    sources: list[str]
    gpu: bool
    window: float  # seconds from the first to the last measured work, per trace (summed)
    rows: list[ComponentRow]
    layers: int
    kernels: int
    unassigned: int
    unassigned_time: float
    schedule: Schedule
    timeline: Timeline
    stage_costs: Costs | None  # from pipeline actions, when there are any
    device: str | None = None
    total_sms: int | None = None
    comm_sms_seen: float | None = None  # SMs the communication kernels held (their grid)
    overlapped: float = 0.0  # share of compute kernel time that ran beside communication
    notes: list[str] = field(default_factory=list)
    filled: tuple[Filled, ...] = ()  # per-stage costs not measured, filled from other stages

    @property
    def layer_times(self) -> dict[str, float]:
        """``LayerCosts`` fields measured (``attn_f`` -> seconds per layer)."""
        return {r.component.field: r.per_layer for r in self.rows}


def trace_paths(target: str | Path) -> list[Path]:
    """The traces of ``target``: the file itself, or a folder's ``rank*.json`` (what
    ``pipesim run --profile`` writes; ``.json.gz`` too), in rank order, else all its
    ``*.json`` / ``*.json.gz``."""
    p = Path(target)
    if p.is_dir():
        files = [f for f in p.iterdir() if f.is_file() and f.name.endswith((".json", ".json.gz"))]
        files = sorted(
            [f for f in files if f.name.startswith("rank")] or files,
            key=lambda f: (_rank_of_name(f.name) is None, _rank_of_name(f.name) or 0, f.name),
        )
        if not files:
            # run --schedules a,b --profile DIR writes a folder per schedule
            held = sorted(d.name for d in p.iterdir() if d.is_dir() and any(d.glob("rank*.json*")))
            if held:
                raise PipesimError(
                    f"{p}: no traces in this folder, but its folders {', '.join(held)} hold some (a run of several "
                    f"schedules): give one, e.g. {p / held[0]}"
                )
            raise PipesimError(f"{p}: no traces in this folder; expected rank0.json, rank1.json, ... (pipesim run --profile)")
        return files
    if not p.exists():
        raise PipesimError(f"no trace {str(p)!r}: give a torch.profiler trace (.json or .json.gz) or a folder of them")
    return [p]


def _rank_of_name(name: str) -> int | None:
    digits = "".join(c for c in name.split(".")[0] if c.isdigit())
    return int(digits) if digits else None


def profile(target: str | Path, mapping: Mapping | None = None) -> Profile:
    mapping = mapping or Mapping()

    def wanted(name: str) -> bool:
        return mapping.component(name) is not None or action(name) is not None

    paths = trace_paths(target)
    runs = [attribute(read_trace(path, wanted), mapping.component, action) for path in paths]
    return measure(runs)


def measure(runs: list[Attributed]) -> Profile:
    if not any(run.components or [a for a in run.actions if a.what.compute] for run in runs):
        raise PipesimError(_nothing_found(runs))
    gpu = any(run.trace.kernels for run in runs)
    notes = []
    if not gpu:
        notes.append("no GPU kernels in the trace: times are the CPU durations of the annotated ranges")
    kernels = sum(len(run.trace.kernels) for run in runs)
    unassigned = [k for run in runs for k in run.unassigned]
    window = sum(_window(run, gpu) for run in runs)
    rows, layers, overlapped, comm_sms = _components(runs, gpu, window)
    schedule, timeline, costs, filled = _pipeline(runs, gpu, notes)
    first = runs[0].trace
    if unassigned:
        notes.append(f"{len(unassigned)} kernels were launched outside every recognised annotation (not counted)")
    return Profile(
        sources=[run.trace.path for run in runs],
        gpu=gpu,
        window=window,
        rows=rows,
        layers=layers,
        kernels=kernels,
        unassigned=len(unassigned),
        unassigned_time=union_length([(k.start, k.end) for k in unassigned]) * US,
        schedule=schedule,
        timeline=timeline,
        stage_costs=costs,
        device=first.device,
        total_sms=first.total_sms,
        comm_sms_seen=comm_sms,
        overlapped=overlapped,
        notes=notes,
        filled=filled,
    )


def _nothing_found(runs: list[Attributed]) -> str:
    where = runs[0].trace.path if len(runs) == 1 else f"{len(runs)} traces in {Path(runs[0].trace.path).parent}"
    events = sum(r.trace.events for r in runs)
    kernels = sum(len(r.trace.kernels) for r in runs)
    ops = sum(r.trace.cpu_ops for r in runs)
    names = Counter()
    for r in runs:
        names.update(r.unrecognised)
    if events == 0:
        found = "no events at all"
    else:
        shown = ", ".join(repr(n) for n, _ in names.most_common(4))
        found = (
            f"{events} events ({ops} operators), {kernels} GPU kernels and {sum(names.values())} annotations"
            + (f" ({shown}{', ...' if len(names) > 4 else ''})" if names else "")
            + ", none of which pipesim reads"
        )
    return f"{where}: found {found}; expected {EXPECTED}"


def _window(run: Attributed, gpu: bool) -> float:
    if gpu and run.trace.kernels:
        return (max(k.end for k in run.trace.kernels) - min(k.start for k in run.trace.kernels)) * US
    spans = [i.range for i in run.components + run.actions]
    return (max(r.end for r in spans) - min(r.start for r in spans)) * US if spans else 0.0


def _time(inst: Instance, gpu: bool) -> float:
    """A component instance's time: its kernel time, or its CPU duration without kernels."""
    return sum(k.end - k.start for k in inst.kernels) * US if gpu else (inst.range.end - inst.range.start) * US


def _components(runs: list[Attributed], gpu: bool, window: float):
    groups: dict[Component, list[Instance]] = defaultdict(list)
    for run in runs:
        for inst in run.components:
            groups[inst.what].append(inst)
    order = {(c, p): i for i, (p, c) in enumerate((p, c) for p in PHASES for c in COMPONENTS)}
    rows = []
    for comp in sorted(groups, key=lambda c: order[(c.name, c.phase)]):
        insts = groups[comp]
        total = sum(_time(i, gpu) for i in insts)
        busy = sum(i.busy * US for i in insts) if gpu else total
        rows.append(
            ComponentRow(
                comp,
                len(insts),
                total / len(insts),
                busy / len(insts),
                tuple(sorted({k.stream for i in insts for k in i.kernels})),
                busy / window if window > 0 else 0.0,
                sum(len(i.kernels) for i in insts),
            )
        )
    n_actions = sum(1 for run in runs for a in run.actions if a.what.compute)
    layers = max(1, round(max((r.instances for r in rows), default=1) / max(1, n_actions)))
    # compute kernels that ran while a communication kernel held part of the GPU
    comm = [(k.start, k.end) for g, insts in groups.items() if g.stream == "comm" for i in insts for k in i.kernels]
    compute = [(k.start, k.end) for g, insts in groups.items() if g.stream == "compute" for i in insts for k in i.kernels]
    total = sum(b - a for a, b in compute)
    overlapped = _overlap(compute, comm) / total if total > 0 and comm else 0.0
    # the grid most of the communication time ran with: DeepEP's kernels take one block per SM
    grids: Counter = Counter()
    for g, insts in groups.items():
        if g.stream == "comm":
            for i in insts:
                for k in i.kernels:
                    grids[k.blocks] += k.end - k.start
    comm_sms = float(grids.most_common(1)[0][0]) if grids else None
    return rows, layers, overlapped, comm_sms


def _overlap(intervals: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """Total length of ``intervals`` covered by the union of ``others``."""
    merged: list[list[float]] = []
    for a, b in sorted(others):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    starts = [m[0] for m in merged]
    total = 0.0
    for a, b in intervals:
        j = max(0, bisect.bisect_right(starts, a) - 1)
        while j < len(merged) and merged[j][0] < b:
            total += max(0.0, min(b, merged[j][1]) - max(a, merged[j][0]))
            j += 1
    return total


# ---------------------------------------------------------------------------------------
# pipeline actions -> schedule, timeline, per-stage costs


def _span(inst: Instance, gpu: bool) -> tuple[float, float]:
    span = inst.gpu_span if gpu else None
    return span if span is not None else (inst.range.start, inst.range.end)


def _pipeline(runs: list[Attributed], gpu: bool, notes: list[str]) -> tuple[Schedule, Timeline, Costs | None, tuple]:
    acted = [(i, run) for i, run in enumerate(runs) if any(a.what.compute for a in run.actions)]
    if not acted:
        return (*_one_item(runs, gpu), ())
    # rank of each trace: the label's, else the trace's distributedInfo, else its place
    per_rank: dict[int, list[tuple[Item, tuple[int, ...], float, float, Instance, Attributed]]] = {}
    runs_of: dict[int, tuple[str, str | None, int | None]] = {}  # rank -> (trace, schedule, pp) its labels name
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
        runs_of[rank] = (run.trace.path, acts[0].what.schedule, acts[0].what.pp)
    _one_run(runs_of)
    said = next((pp for _, _, pp in runs_of.values() if pp is not None), None)  # the labels' pp, when they say it
    pp = max(max(per_rank) + 1, said or 0)
    if len(per_rank) < pp:  # the first gap, found without listing them all (a label may name rank 10**9)
        missing = next(r for r in range(pp) if r not in per_rank)
        had = f" (the run had pp={said})" if said == pp else ""
        raise PipesimError(
            f"traces of ranks {', '.join(map(str, sorted(per_rank)))} but none of rank {missing}{had}; give one per rank"
        )
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
    timeline = Timeline(pp, tuple(events), (), source="measured")
    overhead, latency = between_items(schedule, timeline)
    costs, filled = _stage_costs(events, op_stage, placement.stages, overhead)
    if steps:
        notes.append("the traces hold more than one step: the first is read")
    if filled:
        notes.append(filled_note(filled))
    return schedule, timeline, replace(costs, comm=latency), filled


def filled_note(filled: tuple[Filled, ...]) -> str:
    """One line naming every per-stage cost that was filled in, and from which stages."""
    said = "; ".join(f"{f.kind} at stage {f.stage} from stages {', '.join(map(str, f.sources))}" for f in filled)
    return f"not measured (no such op ran there), filled with the mean of the stages that ran it: {said}"


def _one_run(runs_of: dict[int, tuple[str, str | None, int | None]]) -> None:
    """Refuse traces whose pipesim labels name different schedules or pipeline sizes: a
    folder keeps an earlier run's rank files past the next run's pp, and read together
    they make a run of neither."""
    seen: dict[tuple[str | None, int | None], str] = {}
    for path, name, pp in (runs_of[r] for r in sorted(runs_of)):
        if name is not None:
            seen.setdefault((name, pp), path)
    if len(seen) > 1:
        shown = ", ".join(f"{Path(p).name} ran {n}" + (f" at pp={pp}" if pp else "") for (n, pp), p in seen.items())
        raise PipesimError(
            f"traces of more than one run: {shown}; give the traces of one run (a --profile folder keeps an earlier "
            "run's rank files: give each run an empty one)"
        )


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
