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


def join_group(rank: int, store_file: str, world: int):
    """Join the gloo group of ``world`` ranks rendezvousing on ``store_file``; a one-dimensional
    CPU device mesh over it."""
    import datetime

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group(
        "gloo", init_method=f"file://{store_file}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60)
    )
    return init_device_mesh("cpu", (world,))


def leave_group(rank: int, out: str, result) -> None:
    """Rank 0 writes ``result`` as JSON to ``out``; every rank then leaves the group."""
    import json

    import torch.distributed as dist

    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


def launched(tmp_path_factory, name: str, fn, nprocs: int, seconds: float = 120):
    """Run ``fn(rank, store_file, out)`` on ``nprocs`` gloo ranks and return what rank 0
    wrote to ``out`` (``leave_group``)."""
    import json

    d = tmp_path_factory.mktemp(name)
    out = d / "out.json"
    run_ranks(fn, (str(d / "store"), str(out)), nprocs, seconds)
    return json.loads(out.read_text())
