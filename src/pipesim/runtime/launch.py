"""Starting the ranks: on this machine (``pipesim run``), or as one rank of ``torchrun``.

Localhost: one process per rank, forked from a forkserver that imported torch once (so a
launch costs one torch import, not one per rank). This process hosts the rendezvous
store and watches the ranks: the first one that raises, dies or outlives the timeout
stops the run; the others are killed within ``GRACE`` seconds, and the run fails with one
line naming the rank and the op it was at. The ranks also watch this process, and exit
if it dies, so nothing is left behind.

torchrun (multi-node)::

    torchrun --nnodes 2 --nproc-per-node 4 --rdzv-endpoint HOST:29500 \\
        -m pipesim.runtime run --schedule dualpipe --pp 8 -m 16 --check

Each process then runs as rank ``RANK`` of ``WORLD_SIZE`` (which must equal ``--pp``, times
``--ep`` with experts);
rank 0 gathers and prints the report; a failing rank prints its one line and exits 1,
and torchrun stops the others.
"""

from __future__ import annotations

import datetime
import importlib
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..errors import PipesimError
from .capacity import under_torchrun
from .executor import CommError, Fault, OpError
from .results import RunFailed

GRACE = 1.0  # seconds to let other failure reports arrive before naming the cause
WHERE = 160  # bytes of "where am I" per rank in shared memory


def pick_backend(backend: str, nprocs: int) -> str:
    """gloo, or NCCL when every local rank can have a GPU of its own (NCCL refuses two
    ranks on one device)."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    enough = gpus >= (1 if under_torchrun() else nprocs)
    if backend == "auto":
        return "nccl" if enough else "gloo"
    if backend == "nccl" and not enough:
        raise PipesimError(f"--backend nccl needs a GPU per rank: {nprocs} ranks, {gpus} GPUs here; use --backend gloo")
    return backend


def device_for(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------
# localhost


def launch(
    target: str,
    payload,
    nprocs: int,
    backend: str = "gloo",
    timeout: float = 600.0,
    fault: Fault | None = None,
    preload: tuple[str, ...] = (),
    since: float | None = None,
) -> list:
    """Run ``target(ctx, payload)`` in ``nprocs`` processes and return their results by
    rank (``target`` is "module:function", imported in the ranks only); raise RunFailed
    naming the first rank that failed. Results come back by
    rank. ``preload``: modules the
    target needs, imported once in the forkserver rather than in every rank (only the
    first launch of a process starts the forkserver, so only its list counts).
    ``timeout`` counts from ``since`` (a ``time.monotonic()``; default now), start-up
    included: the forkserver's torch import takes seconds, and a limit that began after it
    let a 0.5 s run take 11 s before it said anything."""
    deadline = (time.monotonic() if since is None else since) + timeout
    if time.monotonic() > deadline:  # the launcher's own torch import took it all
        raise RunFailed(f"timed out after {timeout:g} s: at start-up, before any rank started; give --timeout more time")
    ctx = mp.get_context("forkserver")
    # what every rank needs: autograd.grad with grad_outputs imports torch.fx's symbolic
    # shapes (sympy) on first use, half a second per process
    # orphan first: it makes the forkserver die with this process, before torch's imports
    # (not imported here: importing orphan acts on the process that imports it)
    os.environ["PIPESIM_LAUNCHER_PID"] = str(os.getpid())
    check_network(backend)
    # the ranks' C++ logging: a failed connection otherwise prints a wall of c10d warnings
    # and stack frames before the one line the launcher reports
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    ctx.set_forkserver_preload(
        ["pipesim.runtime.orphan", "pipesim.runtime.worker", "torch.fx.experimental.symbolic_shapes", *preload]
    )
    _start_forkserver()
    try:
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60))
    except Exception as e:  # no loopback, no free port
        raise PipesimError(
            network_error(e)
            or f"cannot open the rendezvous on 127.0.0.1 ({_line(e)}): is the loopback interface up (ip link set lo up)?"
        ) from None
    where = ctx.Array("c", WHERE * nprocs, lock=False)
    procs, conns, alive, failed = [], [], [], []
    port = store.port

    def start_ranks() -> None:
        # a rank's start waits for the forkserver's imports: in a thread, so that the
        # deadline can end the wait
        try:
            for rank in range(nprocs):
                recv_end, send_end = ctx.Pipe(duplex=False)
                alive_r, alive_w = ctx.Pipe(duplex=False)
                conns.append(recv_end)
                alive.append(alive_w)
                p = ctx.Process(
                    target=_child,
                    args=(rank, nprocs, port, backend, timeout, target, payload, where, send_end, alive_r, fault),
                    daemon=True,
                    name=f"pipesim-rank{rank}",
                )
                try:
                    p.start()
                    procs.append(p)
                finally:
                    send_end.close()
                    alive_r.close()
        except BaseException as e:  # re-raised in the launcher's thread
            failed.append(e)

    starter = threading.Thread(target=start_ranks, daemon=True, name="pipesim-start-ranks")
    try:
        starter.start()
        starter.join(max(0.0, deadline - time.monotonic()))
        if starter.is_alive():
            raise RunFailed(
                f"timed out after {timeout:g} s: at start-up, {len(procs)} of {nprocs} ranks started "
                "(the first launch imports torch, seconds); give --timeout more time"
            )
        if failed:
            raise failed[0]
        return _watch(procs, conns, where, deadline, timeout)
    except RunFailed as e:
        e.pids = [p.pid for p in procs]  # for whoever wants to see that none is left
        raise
    finally:
        if starter.is_alive():  # the deadline, or Ctrl-C, while the forkserver still imported
            _stop_forkserver()  # its imports are what the starts wait for; the wait ends with it
            starter.join(5)
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        for c in conns + alive:
            c.close()
        del store


def _stop_forkserver() -> None:
    """Kill the forkserver this process started (a later launch starts another: the
    forkserver's own check finds it dead and reaps it)."""
    from multiprocessing import forkserver

    # a private attribute (CPython 3.8-3.13): where another Python lacks it, nothing is killed
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _start_forkserver() -> None:
    """Start the forkserver (if not running) with Ctrl-C ignored, which it keeps across
    exec and hands to the ranks: Ctrl-C reaches every process of the terminal's group,
    and only the launcher should answer it (it stops the ranks, and prints one line);
    multiprocessing ignores it in the forkserver only after the imports, seconds later."""
    from multiprocessing import forkserver

    if threading.current_thread() is not threading.main_thread():
        forkserver.ensure_running()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        forkserver.ensure_running()
    finally:
        signal.signal(signal.SIGINT, previous)


def _where(buf, rank: int) -> str:
    raw = bytes(buf[rank * WHERE : (rank + 1) * WHERE]).split(b"\0", 1)[0]
    return raw.decode(errors="replace") or "start-up"


def _watch(procs, conns, where, deadline: float, timeout: float) -> list:
    n = len(procs)
    results: list = [None] * n
    done = [False] * n
    failures: list[tuple[int, int, str]] = []  # (priority, rank, message); lower is likelier the cause
    first_failure = None
    while not all(done):
        now = time.monotonic()
        if first_failure is not None and now - first_failure > GRACE:
            break
        if now > deadline:
            stuck = ", ".join(f"rank {r} at {_where(where, r)}" for r in range(n) if not done[r])
            failures.append((3, -1, f"timed out after {timeout:g} s: {stuck}"))
            break
        ready = wait(
            [c for r, c in enumerate(conns) if not done[r]] + [p.sentinel for r, p in enumerate(procs) if not done[r]],
            min(0.2, max(0.0, deadline - now) + 0.01),
        )
        for r in range(n):
            if done[r]:
                continue
            if conns[r] in ready or (procs[r].sentinel in ready and conns[r].poll()):
                try:
                    kind, value = conns[r].recv()
                except (EOFError, OSError):
                    kind, value = None, None
                if kind == "ok":
                    results[r], done[r] = value, True
                    continue
                if kind == "error":
                    failures.append(value)
                    done[r] = True
            if not done[r] and procs[r].sentinel in ready:
                procs[r].join(1)
                code = procs[r].exitcode
                how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
                failures.append((0, r, f"rank {r} died ({how}) at {_where(where, r)}"))
                done[r] = True
        if failures and first_failure is None:
            first_failure = time.monotonic()
    if failures:
        failures.sort()
        prio, rank, msg = failures[0]
        if prio < 0:  # the network, not the schedule: a setup error (exit 2), not a failed run
            raise PipesimError(msg)
        others = sorted({r for r in range(n) if r != rank})
        raise RunFailed(f"{msg}; stopped rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}")
    return results


def _child(rank, world, port, backend, timeout, target, payload, where, conn, alive, fault) -> None:
    # The launcher holds the other end of ``alive``: EOF means it is gone, and a rank left
    # alone would wait on its peers forever.
    threading.Thread(target=_exit_when_closed, args=(alive,), daemon=True).start()
    from .worker import RankContext

    def at(text: str) -> None:
        data = text.encode()[: WHERE - 1]
        where[rank * WHERE : rank * WHERE + len(data) + 1] = data + b"\0"

    at("start-up")
    if backend == "gloo":  # every rank is on this machine: talk over the loopback interface
        loopback = loopback_interface()
        if loopback is not None:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", loopback)
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout))
        ctx = RankContext(rank, world, backend, device_for(backend, rank), at, fault)
        result = resolve(target)(ctx, payload)
        conn.send(("ok", result))
    except BaseException as e:  # report anything, then exit: the launcher stops the rest
        conn.send(("error", failure(rank, _where(where, rank), e)))
        conn.close()
        os._exit(1)
    conn.close()
    # skip the process-group teardown: every transfer has completed, and the launcher
    # is waiting for the results, not for a clean gloo shutdown
    os._exit(0)


def resolve(target: str) -> Callable:
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def _exit_when_closed(alive) -> None:
    try:
        alive.recv()
    except (EOFError, OSError):
        pass
    os._exit(3)


def failure(rank: int, where: str, e: BaseException) -> tuple[int, int, str]:
    """(priority, rank, one-line message) for an exception on ``rank``: a broken transfer
    is usually another rank's fault, so it ranks after a plain error; a network that
    stops the ranks from meeting at all comes first (priority -1, a setup error)."""
    if where == "start-up":
        net = network_error(e)
        if net is not None:
            return (-1, rank, net)
    if isinstance(e, OpError):
        where, cause = e.where, e.cause
    else:
        cause = e
    text = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
    if isinstance(cause, (CommError, dist.DistError)):
        return (2, rank, f"rank {rank} lost a transfer at {where}: {text}")
    tb = traceback.extract_tb(cause.__traceback__)
    origin = f" ({os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return (1, rank, f"rank {rank} raised {type(cause).__name__} at {where}: {text}{origin}")


# ---------------------------------------------------------------------------------------
# the network: what stops ranks from meeting, said in one line with the fix


def interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


def loopback_interface() -> str | None:
    return next((n for n in interfaces() if n.startswith("lo")), None)


def check_network(backend: str) -> None:
    """Before any process starts: GLOO_SOCKET_IFNAME must name interfaces this machine has."""
    given = os.environ.get("GLOO_SOCKET_IFNAME")
    if backend != "gloo" or not given:
        return
    have = interfaces()
    missing = [n for n in given.split(",") if n not in have]
    if have and missing:
        raise PipesimError(
            f"GLOO_SOCKET_IFNAME={given} names {missing[0]!r}, which is no network interface of this machine "
            f"(it has {', '.join(have)}); set it to one of those, or unset it"
        )


_PORT = re.compile(r"port: (\d+)")
_PEER = re.compile(r"connect to \(([^,]+), (\d+)\)")
_IFACE = re.compile(r"Unable to find address for: (\S+)")


def network_error(e: BaseException) -> str | None:
    """One line naming what failed and how to fix it, for the errors c10d and gloo raise
    when ranks cannot meet; None for anything else."""
    text = str(e)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        m = _PORT.search(text)
        port = m.group(1) if m else "the rendezvous port"
        return (
            f"the rendezvous port {port} is in use by another process: pick a free one "
            "(torchrun --rdzv-endpoint HOST:PORT, or MASTER_PORT)"
        )
    m = _IFACE.search(text)
    if m:
        return (
            f"gloo found no usable address on the network interface {m.group(1)!r} (GLOO_SOCKET_IFNAME): set "
            f"GLOO_SOCKET_IFNAME to an interface that is up and has an address (this machine has "
            f"{', '.join(interfaces()) or 'none'})"
        )
    m = _PEER.search(text)
    if m or "Connection refused" in text or "timed out" in text and "connect" in text:
        where = f"{m.group(1)}:{m.group(2)}" if m else "the rendezvous"
        return (
            f"could not reach {where} to meet the other ranks (connection refused or timed out): check that the "
            "first node is up, that MASTER_ADDR/--rdzv-endpoint names it, and that a firewall lets the port through"
        )
    return None


def _line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


# ---------------------------------------------------------------------------------------
# torchrun


def _env_rank(name: str, least: int = 0) -> int:
    """One of torchrun's numbers from the environment; set by hand to something else
    (WORLD_SIZE=abc), it was a ValueError traceback."""
    text = os.environ[name].strip()
    if not (text.isascii() and text.isdigit()) or int(text) < least:
        raise PipesimError(
            f"{name}={os.environ[name]!r}: torchrun sets RANK, WORLD_SIZE and LOCAL_RANK to whole numbers "
            f"(WORLD_SIZE from 1, the others from 0); unset them to let pipesim start its own ranks"
        )
    return int(text)


def run_as_torchrun_rank(target: str, payload, nprocs: int, backend: str, timeout: float, fault: Fault | None):
    """Run ``target`` as this torchrun process's rank; return all ranks' results on rank 0
    and None elsewhere. A failure prints its line and exits 1 (torchrun stops the rest)."""
    from .worker import RankContext

    rank, world = _env_rank("RANK"), _env_rank("WORLD_SIZE", least=1)
    local_rank = _env_rank("LOCAL_RANK") if "LOCAL_RANK" in os.environ else rank
    if world != nprocs:
        raise RunFailed(f"torchrun started {world} processes but the run needs {nprocs} (--pp x --ep); they must match")
    state = {"where": "start-up"}
    try:
        check_network(backend)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    except Exception as e:
        print(f"pipesim: error: rank {rank}: {network_error(e) or _line(e)}", file=sys.stderr, flush=True)
        os._exit(2)
    try:
        ctx = RankContext(rank, world, backend, device_for(backend, local_rank), lambda w: state.update(where=w), fault)
        result = resolve(target)(ctx, payload)
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
        dist.destroy_process_group()
    except Exception as e:
        print(f"pipesim: error: {failure(rank, state['where'], e)[2]}", file=sys.stderr, flush=True)
        os._exit(1)
    return gathered
