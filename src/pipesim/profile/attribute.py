"""Which annotation launched which GPU kernel.

A kernel carries the correlation id of the runtime call that launched it
(``cudaLaunchKernel`` and kin), and that call ran on some CPU thread at some time: the
kernel belongs to the innermost recognised annotation open on that thread then. The
backward of a ``record_function`` range runs on autograd's own thread while the
annotating thread waits inside the range, so a launch outside every range of its own
thread goes to the innermost range open at that time on its process's annotating thread
(the one with most recognised ranges). Components and pipeline actions are looked up
separately: a kernel can be in ``mlp(B)`` inside ``PP:3I2``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

from .labels import Action, Component
from .trace import Kernel, Range, Trace


@dataclass
class Instance:
    """One recognised range and the GPU work it launched."""

    what: Component | Action
    range: Range
    kernels: list[Kernel] = field(default_factory=list)

    @property
    def gpu_span(self) -> tuple[float, float] | None:
        if not self.kernels:
            return None
        return min(k.start for k in self.kernels), max(k.end for k in self.kernels)

    @property
    def busy(self) -> float:
        """Time (us) at least one of its kernels runs, whatever the stream."""
        return union_length([(k.start, k.end) for k in self.kernels])


@dataclass
class Attributed:
    """One trace, attributed: its component and action instances in time order, and the
    kernels no recognised range launched."""

    trace: Trace
    components: list[Instance]
    actions: list[Instance]
    unassigned: list[Kernel]
    unrecognised: Counter  # user annotation names pipesim does not read -> count


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


class _Innermost:
    """The innermost range of one thread open at a time: ranges on a thread nest, so it
    is the latest-starting one that is still open, found by walking up from the last
    range to start."""

    def __init__(self, instances: list[Instance]):
        self.items = sorted(instances, key=lambda i: (i.range.start, -i.range.end))
        self.starts = [i.range.start for i in self.items]
        self.parent: list[int] = []
        stack: list[int] = []
        for j, inst in enumerate(self.items):
            while stack and self.items[stack[-1]].range.end < inst.range.start:
                stack.pop()
            self.parent.append(stack[-1] if stack else -1)
            stack.append(j)

    def at(self, ts: float) -> Instance | None:
        j = bisect.bisect_right(self.starts, ts) - 1
        while j >= 0 and self.items[j].range.end < ts:
            j = self.parent[j]
        return self.items[j] if j >= 0 else None


def _lookup(instances: list[Instance]):
    by_thread: dict[tuple, list[Instance]] = {}
    for inst in instances:
        by_thread.setdefault((inst.range.pid, inst.range.tid), []).append(inst)
    maps = {key: _Innermost(v) for key, v in by_thread.items()}
    main: dict[object, tuple] = {}
    for key in sorted(by_thread, key=lambda k: -len(by_thread[k])):
        main.setdefault(key[0], key)

    def find(pid, tid, ts) -> Instance | None:
        own = maps.get((pid, tid))
        hit = own.at(ts) if own else None
        if hit is None and main.get(pid) not in (None, (pid, tid)):
            hit = maps[main[pid]].at(ts)
        return hit

    return find


def attribute(trace: Trace, component_of, action_of) -> Attributed:
    """``component_of(name)`` and ``action_of(name)`` read an annotation's name (None if
    it names nothing they know)."""
    comps, acts = [], []
    unrecognised: Counter = Counter()
    for r in trace.ranges:
        c = component_of(r.name)
        if c is not None:
            comps.append(Instance(c, r))
            continue
        a = action_of(r.name)
        if a is not None:
            acts.append(Instance(a, r))
        elif not r.name.startswith(("ProfilerStep#", "aten::", "autograd::", "cuda", "Optimizer.")):
            unrecognised[r.name] += 1
    find_comp, find_act = _lookup(comps), _lookup(acts)
    unassigned = []
    for k in trace.kernels:
        launch = trace.launches.get(k.correlation) if k.correlation is not None else None
        if launch is None:
            unassigned.append(k)
            continue
        c, a = find_comp(*launch), find_act(*launch)
        if c is not None:
            c.kernels.append(k)
        if a is not None:
            a.kernels.append(k)
        if c is None and a is None:
            unassigned.append(k)
    comps.sort(key=lambda i: i.range.start)
    acts.sort(key=lambda i: i.range.start)
    return Attributed(trace, comps, acts, unassigned, unrecognised)
