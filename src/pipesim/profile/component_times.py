"""Per-layer component times from attributed traces: each component's mean time per
layer of one micro-batch, the streams it ran on, its share of the window, and how much
compute ran beside communication (which ``pipesim profile -o`` writes as a cost file).
Times are seconds."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass

from .attribute import Attributed, Instance
from .labels import COMPONENTS, PHASES, Component
from .trace import US


@dataclass(frozen=True)
class ComponentRow:
    component: Component
    instances: int
    per_layer: float  # mean summed kernel time of one instance (one layer of one micro-batch)
    busy: float  # mean time at least one of its kernels runs
    streams: tuple[int, ...]  # CUDA streams its kernels ran on (() on a CPU trace)
    share: float  # its busy time over the window
    kernels: int


def _time(inst: Instance, gpu: bool) -> float:
    """A component instance's time: its kernel time, or its CPU duration without kernels."""
    return sum(k.end - k.start for k in inst.kernels) * US if gpu else (inst.range.end - inst.range.start) * US


def component_rows(runs: list[Attributed], gpu: bool, window: float):
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
