"""The body of one rank's process: given an initialised process group, run a list of jobs
(schedules) and report, per job, what this rank measured and how far off it was.

Both launchers (``pipesim run`` on localhost, and ``torchrun``) call ``run_jobs``; one
launch runs many schedules, because starting processes and importing torch costs far more
than running a small schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..costs import Costs
from ..ir import Schedule
from ..profile.trace import RUN_KEY
from .check import max_relative_error
from .executor import Fault, RealWork, SyntheticWork, Transport, build_modules, execute_rank, model_shape, synthetic_shape
from .model import Reference, reference
from .moe import ExpertGroup, is_expert
from .parts import ComponentWork
from .plan import comm_plan, holders, shared_groups
from .results import RankReport


@dataclass
class Job:
    """One schedule to run: on ``model`` (real), or sleeping ``costs`` seconds per op
    (synthetic) when ``costs`` is given; ``check`` compares with one process."""

    schedule: Schedule
    model: object | None = None
    costs: Costs | None = None
    check: bool = False
    tolerance: float = 1e-9
    profile: str | None = None  # a folder: record a torch.profiler trace there, rank{r}.json
    ep: int = 1  # expert-parallel ranks per stage: pp x ep processes
    a2a_delay: float = 0.0  # seconds an all-to-all takes at least (a synthetic slow link)
    overlap: bool = True  # overlapped pairs on two streams; False: their halves in turn


@dataclass
class RankContext:
    """What a worker knows about its process: where it is, how to say what it is doing
    (``at``, read by the launcher when the process dies), the test fault to inject."""

    rank: int
    world: int
    backend: str
    device: torch.device
    at: Callable[[str], None] = lambda where: None
    fault: Fault | None = None
    _groups: dict = field(default_factory=dict)

    def group(self, ranks: tuple[int, ...]):
        """A process group over ``ranks`` (every rank must ask for the same groups in the
        same order: creating one is collective); cached for later jobs."""
        if ranks not in self._groups:
            self._groups[ranks] = dist.new_group(list(ranks))
        return self._groups[ranks]

    def p2p_group(self, src: int, dst: int):
        """The group that carries tensors from ``src`` to ``dst``. gloo matches by tag, so
        the default group serves. NCCL matches by order on one stream per communicator,
        where a receive posted early would hold up a send queued behind it: one
        communicator per direction keeps each stream a plain in-order queue."""
        return self.group((src, dst)) if self.backend == "nccl" else None

    def sync(self) -> None:
        """Wait for the device: GPU work is asynchronous, and a timeline of launches is
        not a timeline of work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def run_jobs(ctx: RankContext, jobs: list[Job]) -> list[RankReport]:
    torch.set_num_threads(1)  # several ranks share the cores; intra-op threads only fight
    warm_up()
    offset = clock_offset(ctx)
    latency = measure_latency(ctx) if any(j.costs is not None for j in jobs) else None
    references: dict = {}
    out = []
    for job in jobs:
        report = run_job(ctx, job, references, offset)
        if job.costs is not None:
            report.latency = latency
        out.append(report)
    dist.barrier()
    return out


def run_job(ctx: RankContext, job: Job, references: dict, offset: float = 0.0) -> RankReport:
    s = job.schedule  # validated when the job was made (api.job)
    pp, ep = s.pp, job.ep
    rank, base = ctx.rank % pp, ctx.rank - ctx.rank % pp  # pipeline rank; its replica's rank 0
    ctx.at(f"the setup of {s.name}")
    plan = comm_plan(s)
    for e in range(ep):  # collective: every rank creates every replica's groups, in one order
        for src, dst in sorted({(link.src, link.dst) for link in plan.sends.values()}):
            ctx.p2p_group(e * pp + src, e * pp + dst)
    fault = ctx.fault if ctx.fault is not None and ctx.fault.rank == ctx.rank else None
    if fault is not None:
        fault = dataclasses.replace(fault, rank=rank)  # the executor speaks pipeline ranks
    if job.costs is not None:
        work = SyntheticWork(s, rank, job.costs, ctx.device)
        shape_of = synthetic_shape
    else:
        for e in range(ep):  # collective, as above; each replica sums its own copies
            for ranks in shared_groups(s):
                ctx.group(tuple(e * pp + r for r in ranks))
        summing = {ranks: ctx.group(tuple(base + r for r in ranks)) for ranks in shared_groups(s)}
        experts = expert_group(ctx, job, rank)
        work = make_work(s, rank, job, ctx.device, experts, fault)
        shape_of = model_shape(s, job.model, ep)
    transport = Transport(rank, plan, shape_of, ctx.device, ctx.p2p_group, base)
    stamp = run_stamp() if job.profile is not None else None
    if job.profile is None or base > 0:  # one trace per pipeline rank: its first replica's
        t0 = common_start(ctx, offset)
        run = execute_rank(s, rank, work, transport, t0, ctx.at, fault, ctx.sync)
    else:
        with profiled(s, ctx, job.profile, getattr(work, "offthread", None), stamp) as mark:
            work.mark = record_part
            # the clock starts once the profiler has: its start-up (0.7-1.4 s a rank here,
            # each its own) is not the run's time, nor a head start for a faster rank
            t0 = common_start(ctx, offset)
            run = execute_rank(s, rank, work, transport, t0, ctx.at, fault, ctx.sync, mark)
    report = RankReport(run.events, run.losses, parts=[(i, lab, a - t0, b - t0) for i, lab, a, b in getattr(work, "log", [])])
    if job.costs is None:
        ctx.at(f"summing the gradients of {s.name}")
        sum_shared_gradients(s, rank, work, summing)
        if experts is not None:
            sum_over_experts(work, experts, report)
        if job.check:
            key = (id(job.model), s.placement.stages, s.microbatches)
            if key not in references:
                references[key] = reference(job.model, s.placement.stages, s.microbatches)
            ref: Reference = references[key]
            report.error = max_relative_error(work.modules, work.chunk_stage, report.losses, ref)
    return report


def expert_group(ctx: RankContext, job: Job, rank: int) -> ExpertGroup | None:
    """This rank's EP group (the same pipeline rank in every replica); None without EP."""
    if job.ep == 1:
        return None
    pp = job.schedule.pp
    groups = [ctx.group(tuple(e * pp + r for e in range(job.ep))) for r in range(pp)]  # collective
    return ExpertGroup(ctx.rank // pp, job.ep, groups[rank], job.a2a_delay)


def make_work(s: Schedule, rank: int, job: Job, device, experts: ExpertGroup | None, fault: Fault | None):
    """ComponentWork when the stage modules list their parts (an MoE), else RealWork."""
    modules = build_modules(s, rank, job.model, device, experts)
    if not all(callable(getattr(m, "parts", None)) for m in modules.values()):
        return RealWork(s, rank, job.model, device, job.overlap, modules)
    work = ComponentWork(s, rank, job.model, device, modules, experts, job.overlap)
    if experts is not None and fault is not None and fault.mode == "a2a":
        experts.on_comm = lambda: work.current == fault.item and os.kill(os.getpid(), signal.SIGKILL)
    return work


def record_part(label: str):
    from torch.profiler import record_function

    return record_function(label)


def sum_over_experts(work, experts: ExpertGroup, report: RankReport) -> None:
    """The EP group's ranks each ran a slice of every micro-batch: sum the gradients of the
    replicated (non-expert) weights over the group, and average the losses. The experts'
    gradients came back through the all-to-alls already whole."""
    for chunk in sorted(work.modules):
        dense = [p for n, p in work.modules[chunk].named_parameters() if not is_expert(n)]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in dense])
        dist.all_reduce(flat, group=experts.group)
        i = 0
        for p in dense:
            p.grad = flat[i : i + p.numel()].view_as(p).clone()
            i += p.numel()
    if report.losses:
        mbs = sorted(report.losses)
        t = torch.tensor([report.losses[m] for m in mbs], dtype=torch.float64)
        dist.all_reduce(t, group=experts.group)
        report.losses = {m: v / experts.size for m, v in zip(mbs, t.tolist())}


def run_stamp() -> str:
    """The identity of this run, the same on every rank (a collective: every rank calls
    it): rank 0's start time and a random tag. Each rank's trace carries it, so that
    ``pipesim profile`` can tell one run's rank files from an earlier run's left in the
    same folder (a failed run writes only the ranks that finished), even when both ran
    the same schedule at the same pp."""
    stamp = [f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}/{secrets.token_hex(4)}" if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(stamp, src=0)
    return stamp[0]


@contextlib.contextmanager
def profiled(schedule: Schedule, ctx: RankContext, folder: str, offthread: list | None = None, stamp: str | None = None):
    """Record a torch.profiler trace of this rank's run into ``folder``/rank{r}.json (CPU
    activities, and CUDA on a GPU), each item under the label ``pipesim profile`` reads
    (``profile.labels.pipesim_label``: item, rank, model stages, schedule).

    ``offthread``: (label, start, end) of the steps a communication thread ran, filled
    during the run. torch.profiler records ranges only on the thread that started it, so
    those are written into the trace afterwards, on a thread of their own, placed by a
    clock mark recorded at the start. ``stamp``: the run's identity (``run_stamp``),
    written beside ``traceEvents`` as ``pipesimRun``."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from ..ir import ops_of
    from ..profile.labels import pipesim_label

    pl = schedule.placement

    def mark(item):
        stages = tuple(pl.stage_of(ctx.rank, op.chunk, op.mb) for op in ops_of(item))
        return record_function(pipesim_label(item, ctx.rank, stages, schedule.name, schedule.pp))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.device.type == "cuda" else [])
    prof = profile(activities=activities)
    with _quiet_stderr():  # Kineto prints a line to stderr at each start and stop
        prof.start()
    with record_function(CLOCK_MARK):
        clock = time.perf_counter()
    try:
        yield mark
    finally:
        with _quiet_stderr():
            prof.stop()
    os.makedirs(folder, exist_ok=True)  # made here, once the run has started: see api.job
    save_trace(prof, os.path.join(folder, f"rank{ctx.rank}.json"), clock, offthread or [], stamp)


def save_trace(prof, path: str, clock: float, ranges: list, stamp: str | None = None) -> None:
    """Export ``prof`` to ``path`` whole or not at all. A large trace takes seconds to
    write, and the launcher kills a rank mid-write when another rank fails, on Ctrl-C or
    at the timeout: written in place, that left a cut rank{r}.json (and a previous run's
    whole one gone). Written beside it under a temporary name, then renamed."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    try:
        prof.export_chrome_trace(tmp)
        add_thread_ranges(tmp, clock, ranges, stamp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


CLOCK_MARK = "pipesim/clock"


def add_thread_ranges(path: str, clock: float, ranges: list[tuple[str, float, float, int]], stamp: str | None = None) -> None:
    """Write ``ranges`` ((label, start, end) in perf_counter seconds, and the thread's
    system id, which Kineto's events carry too, so a GPU kernel that thread launched is
    attributed to its range) into the Chrome trace at ``path`` as user annotations; drop
    the clock mark; write ``stamp`` (the run's identity) as ``pipesimRun``."""
    import json

    with open(path) as f:
        trace = json.load(f)
    events = trace.get("traceEvents", [])
    mark = next((e for e in events if e.get("name") == CLOCK_MARK and e.get("ph") == "X"), None)
    if mark is None and stamp is None:
        return
    if mark is not None:
        events.remove(mark)
        pid, base = mark.get("pid"), float(mark["ts"])
        for label, start, end, tid in ranges:
            ts = base + (start - clock) * 1e6
            events.append(
                {"ph": "X", "cat": "user_annotation", "name": label, "pid": pid, "tid": tid, "ts": ts, "dur": (end - start) * 1e6}
            )
    if stamp is not None:
        trace[RUN_KEY] = stamp
    with open(path, "w") as f:
        json.dump(trace, f)


@contextlib.contextmanager
def _quiet_stderr():
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def clock_offset(ctx: RankContext, rounds: int = 20) -> float:
    """What to add to this rank's clock to read rank 0's: the round trip with rank 0 that
    took least time brackets rank 0's reading most tightly (Cristian's method). On one
    machine the clocks agree anyway, but ranks leave a barrier milliseconds apart when the
    cores are busy, so a barrier alone would misplace whole ranks; on several nodes the
    clocks themselves differ."""
    buf = torch.zeros(1, dtype=torch.float64, device=ctx.device)
    best_rtt, best = float("inf"), 0.0
    for r in range(1, ctx.world):
        for i in range(rounds):
            tag = 3_000_000 + 2 * (r * rounds + i)
            if ctx.rank == r:
                t1 = time.perf_counter()
                dist.send(buf, dst=0, tag=tag)
                dist.recv(buf, src=0, tag=tag + 1)
                t3 = time.perf_counter()
                if t3 - t1 < best_rtt:
                    best_rtt, best = t3 - t1, buf.item() - (t1 + t3) / 2
            elif ctx.rank == 0:
                dist.recv(buf, src=r, tag=tag)
                buf.fill_(time.perf_counter())
                dist.send(buf, dst=r, tag=tag + 1)
    dist.barrier()
    return best


def common_start(ctx: RankContext, offset: float) -> float:
    """The start of a job on this rank's clock: rank 0 reads its clock after a barrier
    and tells everyone, who convert it with their offset."""
    dist.barrier()
    start = torch.tensor([time.perf_counter() + offset], dtype=torch.float64, device=ctx.device)
    dist.broadcast(start, src=0)
    return start.item() - offset


def warm_up() -> None:
    """One tiny backward with grad_outputs before any clock starts: the first one in a
    process pays for lazy imports and initialisation, which would show as a slow op."""
    layer = torch.nn.Linear(2, 2)
    x = torch.ones(1, 2, requires_grad=True)
    torch.autograd.grad(layer(x), [x, *layer.parameters()], torch.ones(1, 2))


def sum_shared_gradients(schedule: Schedule, rank: int, work, groups: dict) -> None:
    """A stage held more than once (dual placements) got part of its micro-batches on each
    copy: sum them so every copy holds the whole gradient. Stages are visited in order on
    every rank, so the all-reduces of each group line up."""
    for positions in holders(schedule).values():
        mine = [c for r, c in positions if r == rank]
        if len(positions) < 2 or not mine:
            continue
        params = [list(work.modules[c].parameters()) for c in mine]
        flat = sum(torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in ps]) for ps in params)
        ranks = tuple(sorted({r for r, _ in positions}))
        if len(ranks) > 1:
            dist.all_reduce(flat, group=groups[ranks])
        for ps in params:
            i = 0
            for p in ps:
                p.grad = flat[i : i + p.numel()].view_as(p).clone()
                i += p.numel()


def measure_latency(ctx: RankContext, rounds: int = 40) -> float | None:
    """One-way P2P latency between ranks 0 and 1: half the median round trip of a
    one-element tensor, each receive posted before its send starts, as the executor
    posts them. Returned on rank 0, None elsewhere."""
    if ctx.world < 2:
        return 0.0
    there, back = ctx.p2p_group(0, 1), ctx.p2p_group(1, 0)  # collective: all ranks
    trips = []
    if ctx.rank in (0, 1):
        peer = 1 - ctx.rank
        token = torch.zeros(1, device=ctx.device)
        bufs = [torch.zeros(1, device=ctx.device) for _ in range(rounds)]
        inbox = back if ctx.rank == 0 else there
        outbox = there if ctx.rank == 0 else back
        recvs = [dist.irecv(bufs[i], src=peer, group=inbox, tag=1_000_000 + 2 * i + peer) for i in range(rounds)]
    dist.barrier()
    if ctx.rank in (0, 1):
        for i in range(rounds):
            t = time.perf_counter()
            if ctx.rank == 0:
                dist.isend(token, dst=1, group=outbox, tag=1_000_000 + 2 * i).wait()
                recvs[i].wait()
                ctx.sync()
            else:
                recvs[i].wait()
                ctx.sync()
                dist.isend(token, dst=0, group=outbox, tag=1_000_000 + 2 * i + 1).wait()
            trips.append(time.perf_counter() - t)
    dist.barrier()
    return statistics.median(trips[5:]) / 2 if ctx.rank == 0 else None
