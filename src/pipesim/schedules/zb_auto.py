"""``zb-auto``: the Zero Bubble paper's automatic scheduling, for the user's own costs and
memory limit (flat placement; see ``pipesim.autoschedule``).

Memory follows the paper's model: a forward adds one activation (``activation_bytes``
bytes when the limit is given in bytes, else one unit: the limit is then in micro-batches
of one stage's activation), the B adds ``w_memory - 1`` of it and the W frees ``w_memory``
(the paper's M_B and M_W: w_memory = M_W / M_B). A ``w_memory`` above 1 is a B that adds
memory (the W keeps more than the activation: ``memory.MemoryModel.w_share``); the limit
then holds right after each B too. The default limit is 1F1B's peak, pp activations (pp -
1 + w_memory when its B adds memory); 2pp is the paper's ZB-2p.
"""

from __future__ import annotations

import functools

from ..autoschedule.problem import KIND, Problem
from ..autoschedule.search import auto_schedule
from ..costs import Costs
from ..errors import PipesimError
from ..inputs import MIN_ACTIVATION_BYTES, number
from ..ir import Placement, Schedule
from ..schedule_checks import shown
from .zero_bubble import zb_h1

Cost = float | tuple[float, ...]


def zb_auto(
    pp: int,
    microbatches: int,
    f: Cost = 1.0,
    b: Cost = 1.0,
    w: Cost = 1.0,
    comm: float = 0.0,
    memory_limit: float | None = None,
    w_memory: float = 1.0,
    activation_bytes: float | None = None,
    exact: bool = False,
    time_limit: float = 10.0,
) -> Schedule:
    """The order with the shortest longest per-rank span found for these costs within
    the memory limit; ``exact`` runs CP-SAT for up to ``time_limit`` seconds to improve it
    and prove it optimal. The schedule's ``info`` says how it was found."""
    if not isinstance(exact, bool):  # "yes" (or "no") ran as true
        raise PipesimError(f"zb-auto's exact must be True or False, got {shown(exact, typed=True)}")
    # the ranges the CLI's flags take (options.nonneg_float, positive_float), checked as
    # they are: finite, and True or "4" refused rather than taken as a number (and said
    # with its type, as build() says pp=True: "got true" read like a file's word)
    option = functools.partial(number, where="zb-auto", show=shown)
    comm = option(comm, "--comm")
    w_memory = option(w_memory, "--w-memory")
    time_limit = option(time_limit, "--time-limit")
    if activation_bytes is not None:
        activation_bytes = option(activation_bytes, "--activation-bytes", MIN_ACTIVATION_BYTES)
    if memory_limit is not None:
        memory_limit = option(memory_limit, "--memory-limit")
    unit = 1.0 if activation_bytes is None else activation_bytes
    # one micro-batch at a time holds its activation, and after its B what its W keeps
    least = max(1.0, w_memory)
    limit = pp - 1 + least if memory_limit is None else memory_limit / unit
    if memory_limit is not None and not limit >= least:
        what = "activation" if least == 1.0 else f"activations (what the W keeps, w_memory {w_memory:g})"
        need = f"{least:g} {what}" if activation_bytes is None else f"{least * unit:g} bytes ({least:g} {what})"
        raise PipesimError(f"zb-auto needs --memory-limit >= {need} per rank, got {memory_limit:g}")
    costs = Costs(f=f, b=b, w=w, comm=comm)  # checks the costs as simulate does (finite, 0..MAX_VALUE)
    costs.check_stages(pp, f"zb-auto at pp={pp}")
    prob = Problem.of(Placement.flat(pp, microbatches), costs, memory_limit=limit, w_memory=float(w_memory))
    # ZB-H1's order competes too: the heuristic's grid does not always rebuild it (pp=5,
    # M=7, W = 2F found a span 0.2 longer), and it holds at most pp activations
    h1 = tuple([(KIND.index(op.kind), op.chunk, op.mb) for op in rank] for rank in zb_h1(pp, microbatches).ranks)
    plan = auto_schedule(prob, exact=exact, time_limit=time_limit, seeds=(("zb-h1", h1),))
    s = plan.schedule("zb-auto")
    info = {
        "method": plan.method,
        "objective": "longest per-rank span",
        "proven_optimal": plan.optimal if exact else None,
        "lower_bound": plan.bound,
        "longest_span": plan.span,
        "memory_limit": limit,
        "w_memory": float(w_memory),
        "peak_memory": max(plan.peak_memory(), default=0.0),
        "search_seconds": plan.seconds,
        **plan.info,
    }
    return Schedule(s.name, s.pp, s.microbatches, s.placement, s.ranks, info)
