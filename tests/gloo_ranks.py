"""Spawned gloo ranks for the tests that run torch.distributed on the CPU
(test_tp_overlap_torch.py, test_micro_pipeline_tp_torch.py): start them, wait, and give up
on them (their processes killed) past a deadline, so a stuck collective cannot hang the
suite."""

from __future__ import annotations

import time

import pytest
import torch.multiprocessing as mp


def run_ranks(fn, args: tuple, nprocs: int, seconds: float) -> None:
    """Run ``fn(rank, *args)`` on ``nprocs`` spawned processes; fail the test if they have
    not all finished within ``seconds``."""
    ctx = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + seconds
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"the {nprocs} gloo ranks did not finish within {seconds:g} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
