"""How many rank processes this machine can run, asked before torch is imported.

``pipesim run`` refuses too many ranks before it imports torch (seconds under load: a
refusal took 7-9 s when the check lived beside the launcher), so this module imports
nothing heavy."""

from __future__ import annotations

import os

from ..errors import PipesimError


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ)


PER_CORE = 8  # rank processes per core: synthetic ranks sleep, real ones share the cores
# memory of one rank process (forked from a forkserver that imported torch): 64 ranks
# of a synthetic run took 9 GB here (issue 23), about 140 MB each
RANK_MEMORY = 150 * 2**20
MAX_RANKS_ENV = "PIPESIM_MAX_RANKS"  # overrides the limit (a machine you know better)

#: the most blocks (a tiny model's layers, or an MoE model's experts over its layers) one
#: stage of pipesim's own models is built with: the flags (``user_model``) and the model
#: classes (``TinyTransformer``, ``MoETransformer``, made from the library too) refuse
#: more. Measured here (one thread, dim 16, float64): building takes about 1.1 ms a tiny
#: layer and 0.4-0.7 ms an expert, and every MoE op loops over its experts (7-17 us each
#: a forward), so `--experts 100000` kept every rank busy for minutes with no output
#: before the first op. 10,000 builds in about 5-10 s; the models check schedules, and
#: published MoE layers hold far fewer experts (DeepSeek-V3: 256 routed, arXiv 2412.19437
#: section 4.2).
MAX_BLOCKS = 10_000


def capacity() -> tuple[int, str]:
    """How many rank processes this machine can run at once, and why that many."""
    override = os.environ.get(MAX_RANKS_ENV, "").strip()
    if override:
        # abc, 0 or -3 fell back to the machine's limit unsaid: the user set it to be obeyed
        if not override.isascii() or not override.isdigit() or int(override) < 1:
            raise PipesimError(f"{MAX_RANKS_ENV}={override!r}: expected a whole number of rank processes >= 1 (or unset it)")
        return int(override), f"{MAX_RANKS_ENV}={override}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    limit, why = PER_CORE * cores, f"{PER_CORE} per core on {cores} core{'s' if cores > 1 else ''}"
    avail = available_memory()
    if avail is not None and avail // RANK_MEMORY < limit:
        limit, why = int(avail // RANK_MEMORY), f"{RANK_MEMORY >> 20} MB each in {avail / 2**30:.1f} GB of free memory"
    return max(2, limit), why


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_capacity(nprocs: int, pp: int, ep: int = 1) -> None:
    """Refuse, before starting any, more rank processes than this machine can run."""
    limit, why = capacity()
    if nprocs > limit:
        what = f"--pp {pp}" + (f" x --ep {ep}" if ep > 1 else "")
        raise PipesimError(
            f"{what} needs {nprocs} processes, more than this machine can run ({limit}: {why}); "
            f"lower {'--pp or --ep' if ep > 1 else '--pp'}, or spread the ranks over machines with torchrun "
            f"(or set {MAX_RANKS_ENV})"
        )


def refuse_mixed_sizes(runs: list[tuple[str, int, int, int]]) -> None:
    """Schedules launched together share one set of rank processes: each of ``runs``,
    (name, pp, stages, ep), must need as many as the others. Said schedule by schedule,
    since a file brings its own pp and stages, which the command line does not show."""
    if len({(pp, ep) for _, pp, _, ep in runs}) <= 1:
        return
    mixed_ep = len({ep for *_, ep in runs}) > 1
    each = "; ".join(
        f"{name} runs on {pp} ranks ({stages} stages{f', --ep {ep}' if mixed_ep else ''})" for name, pp, stages, ep in runs
    )
    raise PipesimError(
        f"schedules run together share their ranks, and these need different numbers: {each}; run each in its own launch"
    )
