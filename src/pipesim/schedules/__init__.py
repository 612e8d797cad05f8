"""The schedule registry: every generator under one name, with its constraints.

``build(name, pp=, microbatches=, **options)`` is the one way to make a schedule. Each
generator is a pure function of (pp, microbatches, options) returning a ``Schedule``.
What sizes and chunk counts a family accepts is written once, here (``Family.check``):
``build()`` raises its reason as a PipesimError before calling the generator, and the
planner asks it (and ``Family.placement_of``) to rule candidates out without building
them. The generators check only the values of their cost options (zb-auto) and report a
search that finds nothing (the V shapes). The command line's help reads the names and
options from plain data, ``family_names.FAMILY_OPTIONS``, without importing the builders;
tests/test_family_names.py holds it equal to this registry.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral

from ..errors import PipesimError
from ..inputs import MAX_LIST_OPS, MAX_LIST_OPS_COST, MAX_SEARCH_OPS_COST, MAX_SEARCH_PP, MAX_ZB_AUTO_OPS, MAX_ZB_H2_OPS, work
from ..ir import Placement, Schedule
from ..schedule_checks import shown
from .chimera import chimera
from .classic import gpipe, group_refused, interleaved_1f1b, one_f_one_b
from .combined import interleaved_1f1b_overlap, one_f_one_b_overlap
from .dualpipe import dualpipe, dualpipev
from .torch_orders import TORCH_NAMES, interleaved_zb, looped_bfs, rounds_refused, zbv_torch
from .v_shape import v_half, v_min, zb_v
from .zb_auto import zb_auto
from .zero_bubble import zb_h1, zb_h2

# --------------------------------------------------------------------------------------
# each family's constraints on (pp, M, chunks), worded as build() raises them; a family
# with none has no entry. Options arrive with the builder's defaults filled in.


def _chunks_from(name: str, least: int, chunks: object, hint: str = "") -> str | None:
    if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < least:  # True ran as 1 chunk
        return f"{name} needs --chunks >= {least}{hint}, got {shown(chunks)}"
    return None


def _group_from(name: str, pp: int, M: int, group_size: object) -> str | None:
    if group_size is not None and (not isinstance(group_size, int) or isinstance(group_size, bool)):
        # True ran as a group of 1 at pp=1, and the string '4' was said as 4
        return f"{name} needs --group-size a whole number from --pp={pp} to --microbatches={M}, got {shown(group_size)}"
    return None


def _interleaved_1f1b(pp: int, M: int, chunks: object, group_size: object = None, **_) -> str | None:
    # one chunk is allowed because PyTorch's Interleaved1F1B allows one stage per rank:
    # 1F1B with twice its warm-up forwards; M not a multiple of pp and no group runs
    # PyTorch's rounds, a group Megatron's table
    if refused := _chunks_from("interleaved-1f1b", 1, chunks) or _group_from("interleaved-1f1b", pp, M, group_size):
        return refused
    if group_size is None and M % pp:
        return rounds_refused("interleaved-1f1b", pp, M)
    return group_refused("interleaved-1f1b", pp, M, group_size)


def _interleaved_zb(pp: int, M: int, chunks: object, **_) -> str | None:
    return _chunks_from("interleaved-zb", 1, chunks, " (stages per rank)") or rounds_refused("interleaved-zb", pp, M)


def _looped_bfs(pp: int, M: int, chunks: object, **_) -> str | None:
    return _chunks_from("looped-bfs", 1, chunks, " (stages per rank)")


def _interleaved_1f1b_overlap(pp: int, M: int, chunks: object, group_size: object = None, **_) -> str | None:
    if refused := _chunks_from("interleaved-1f1b-overlap", 2, chunks):
        return f"{refused} (with 1 chunk use 1f1b-overlap)"
    return _group_from("interleaved-1f1b-overlap", pp, M, group_size) or group_refused(
        "interleaved-1f1b-overlap", pp, M, group_size
    )


def _even_pp(name: str, pp: int) -> str | None:
    return f"{name} needs an even --pp, got {pp}" if pp % 2 else None


def _two_pipelines(name: str, pp: int, M: int) -> str | None:
    return f"{name} needs --microbatches >= 2 * --pp = {2 * pp}, got {M}" if M < 2 * pp else None


def _dualpipe(pp: int, M: int, **_) -> str | None:
    if refused := _even_pp("dualpipe", pp):
        return refused
    if M % 2:
        return f"dualpipe needs an even --microbatches (half enter at each end), got {M}"
    return _two_pipelines("dualpipe", pp, M)


def _dualpipev(pp: int, M: int, **_) -> str | None:
    return _two_pipelines("dualpipev", pp, M)


def _chimera(pp: int, M: int, **_) -> str | None:
    if refused := _even_pp("chimera", pp):
        return refused
    if M % pp:
        return f"chimera needs --microbatches a multiple of --pp={pp} (whole units of pp/2 each way), got {M}"
    return None


@dataclass(frozen=True)
class Family:
    name: str
    builder: Callable[..., Schedule]
    placement: str  # flat, interleaved, v or dual
    constraints: str
    summary: str
    #: a handcrafted pattern: past warm-up (M >= 2pp) the order repeats every 2pp
    #: micro-batches, so totals grow affinely with M (the planner extrapolates on it);
    #: searched orders (ZB-H2, ZB-V, V-Half, V-Min, zb-auto) make no such promise
    periodic: bool = True
    #: the family's own constraints (above): (pp, M, **options) -> why not, or None
    refuses: Callable[..., str | None] | None = None
    #: a work limit below MAX_OPS, for a builder slower per op than the engine, and
    #: what it costs there
    max_ops: int | None = None
    max_ops_cost: str = ""

    @functools.cached_property
    def options(self) -> dict[str, object]:
        """Keyword options beyond pp and microbatches, with their defaults."""
        params = list(inspect.signature(self.builder).parameters.values())[2:]
        return {p.name: p.default for p in params}

    def check(self, pp: int, microbatches: int, **options) -> str | None:
        """Why ``build()`` would refuse these sizes and options, worded as it raises it
        (the first reason only); None when it builds. Nothing is built."""
        return _refusal(self, self.name, pp, microbatches, options)

    def placement_of(self, pp: int, microbatches: int, **options) -> Placement:
        """The placement the family's schedule has at these sizes, without building it
        (sizes that ``check`` accepts)."""
        chunks = options.get("chunks", self.options.get("chunks"))
        return _standard(self.placement, pp, microbatches, chunks if isinstance(chunks, int) else 1)


@functools.lru_cache(maxsize=256)
def _standard(kind: str, pp: int, microbatches: int, chunks: int) -> Placement:
    """Placements are immutable: the planner asks for the same few thousands of times."""
    return Placement.standard(kind, pp, microbatches, chunks)


REGISTRY: dict[str, Family] = {
    f.name: f
    for f in [
        Family("gpipe", gpipe, "flat", "any pp >= 1, M >= 1", "all forwards, then all backwards"),
        Family("1f1b", one_f_one_b, "flat", "any pp >= 1, M >= 1", "one forward, one backward; pp-r warm-up"),
        Family(
            "interleaved-1f1b",
            interleaved_1f1b,
            "interleaved",
            "M a multiple of max(1, M // pp) (PyTorch's rounds; any multiple of pp); --chunks >= 1 (default 2); "
            "--group-size g: Megatron's groups, pp <= g <= M, M % g 0 or >= pp",
            "Megatron's virtual stages: bubble shrinks by the number of chunks",
            refuses=_interleaved_1f1b,
        ),
        Family("zb-h1", zb_h1, "flat", "any pp >= 1, M >= 1", "Zero Bubble H1: B/W split, 1F1B's memory"),
        Family(
            "zb-h2",
            zb_h2,
            "flat",
            "any pp >= 1, M >= 1",
            "Zero Bubble H2: 2pp activations for a zero span bubble",
            periodic=False,
            max_ops=MAX_ZB_H2_OPS,
            max_ops_cost=MAX_SEARCH_OPS_COST,
        ),
        Family(
            "zb-v", zb_v, "v", "any pp >= 1, M >= 1", "Zero Bubble V: 1F1B's memory, zero bubble when F = B = W", periodic=False
        ),
        Family("v-half", v_half, "v", "any pp >= 1, M >= 1", "V-Half: about 1/2 of 1F1B's activation memory", periodic=False),
        Family("v-min", v_min, "v", "any pp >= 1, M >= 1", "V-Min: about 1/3 of 1F1B's activation memory", periodic=False),
        Family(
            "zb-auto",
            zb_auto,
            "flat",
            "any pp >= 1, M >= 1; --memory-limit >= 1",
            "searched for your costs and memory limit (--exact: CP-SAT, proves optimality)",
            periodic=False,
            max_ops=MAX_ZB_AUTO_OPS,
            max_ops_cost=MAX_SEARCH_OPS_COST,
        ),
        Family(
            "dualpipe",
            dualpipe,
            "dual",
            "even pp; even M >= 2pp",
            "DeepSeek-V3's bidirectional schedule with overlapped F&B pairs",
            refuses=_dualpipe,
        ),
        Family("dualpipev", dualpipev, "v", "M >= 2pp", "DualPipe cut in half onto a V placement", refuses=_dualpipev),
        Family(
            "chimera",
            chimera,
            "dual",
            "even pp; M a multiple of pp",
            "two pipelines in opposite directions over two model copies",
            refuses=_chimera,
            max_ops=MAX_LIST_OPS,  # its greedy list scheduler is Python per op
            max_ops_cost=MAX_LIST_OPS_COST,
        ),
        # --- combined 1F1B (Megatron-LM's EP-overlapped 1F1B; schedules/combined.py) ---
        Family(
            "1f1b-overlap",
            one_f_one_b_overlap,
            "flat",
            "any pp >= 1, M >= 1; --delay-wgrad splits W off",
            "Megatron's combined 1F1B, one chunk: F&B pairs hide each other's all-to-all",
        ),
        Family(
            "interleaved-1f1b-overlap",
            interleaved_1f1b_overlap,
            "interleaved",
            "--group-size g (default pp): pp <= g <= M, M % g 0 or >= pp; --chunks >= 2 (default 2); --delay-wgrad splits W off",
            "Megatron's combined 1F1B (--overlap-moe-expert-parallel-comm) on virtual stages",
            refuses=_interleaved_1f1b_overlap,
        ),
        # --- end combined 1F1B ---
        # --- PyTorch's schedules that pipesim had no order for (torch_orders.py); the
        # --- others of PyTorch's names are aliases of gpipe, 1f1b, interleaved-1f1b
        # --- and dualpipev (TORCH_NAMES)
        Family(
            "looped-bfs",
            looped_bfs,
            "interleaved",
            "any pp >= 1, M >= 1; --chunks >= 1 (default 2)",
            "PyTorch's LoopedBFS: every forward chunk by chunk, then every backward",
            refuses=_looped_bfs,
        ),
        Family(
            "interleaved-zb",
            interleaved_zb,
            "interleaved",
            "M a multiple of max(1, M // pp); --chunks >= 1 (default 2)",
            "PyTorch's InterleavedZeroBubble: ZB-1P's B/W split on looped stages",
            refuses=_interleaved_zb,
        ),
        Family(
            "zbv-torch",
            zbv_torch,
            "v",
            "any pp >= 1, M >= 1",
            "PyTorch's ZBVZeroBubble: ZB-V's hand-written pattern",
            # its steady state does not repeat every 2pp micro-batches under uneven stage
            # costs (the planner's extrapolation test found it), so it is simulated whole
            periodic=False,
        ),
        # --- end of PyTorch's schedules
    ]
}


def canonical(name: str) -> str | None:
    """The registry's name for ``name``, matched without regard to case, PyTorch's class
    names (``Interleaved1F1B``, ``ZBVZeroBubble``, ...) included; None if unknown (a
    name that is not a string included)."""
    if not isinstance(name, str):
        return None
    if name in REGISTRY:
        return name
    known = {n.lower(): n for n in REGISTRY} | {t.lower(): n for t, n in TORCH_NAMES.items()}
    return known.get(name.lower())


def family(name: str) -> Family:
    if not isinstance(name, str):  # None met an AttributeError in name.lower()
        raise PipesimError(
            f"a schedule name must be a string such as '1f1b' (pipesim.REGISTRY lists them), got {shown(name, typed=True)}"
        )
    found = canonical(name)
    if found is not None:
        return REGISTRY[found]
    # suggest in the style typed: PyTorch's spelling for a name with capitals
    ours, theirs = {n.lower(): n for n in REGISTRY}, {t.lower(): t for t in TORCH_NAMES}
    spelled = ours | theirs if name != name.lower() else theirs | ours
    close = difflib.get_close_matches(name.lower(), spelled, n=1)
    hint = f" (did you mean {spelled[close[0]]}?)" if close else ""
    raise PipesimError(
        f"unknown schedule {name!r}{hint}; choose from {', '.join(REGISTRY)} or PyTorch's {', '.join(TORCH_NAMES)}"
    )


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")


def _count(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and value >= 1


def _refusal(fam: Family, name: str, pp: int, microbatches: int, options: dict) -> str | None:
    """The checks of ``build()`` in its order: sizes, option names (as ``name`` was
    typed), the work limit, then the family's own constraints."""
    # numpy's integers count (the planner's sizes); True ran as pp=1, and the string '4'
    # was said as 4, hiding what was wrong
    if not _count(pp):
        return f"--pp must be an integer >= 1, got {shown(pp)}"
    if not _count(microbatches):
        return f"--microbatches must be an integer >= 1, got {shown(microbatches)}"
    allowed = fam.options
    for key in options:
        if key not in allowed:
            takes = ", ".join(_flag(k) for k in allowed) or "no options"
            return f"{name} does not take {_flag(key)}; it takes {takes}"
    chunks = options.get("chunks")
    if not isinstance(chunks, int) or chunks < 1:  # the family's check words a bad value
        chunks = 2 if fam.placement in ("v", "interleaved") else 1
    try:
        stages = pp * chunks if fam.placement != "dual" else pp
        work(pp, microbatches, stages=stages, what=name, limit=fam.max_ops, cost=fam.max_ops_cost)
    except PipesimError as e:
        return str(e)
    if not fam.periodic and pp > MAX_SEARCH_PP:
        return (
            f"{name} searches its order, and its search grows faster than pp: pp={pp} is above the limit of "
            f"{MAX_SEARCH_PP} (about 10 s there; v-half --pp 256 runs past a minute); use --pp <= {MAX_SEARCH_PP}, "
            "or a handcrafted schedule such as 1f1b, zb-h1 or dualpipev"
        )
    if fam.refuses is None:
        return None
    return fam.refuses(pp, microbatches, **{**allowed, **options})


def build(name: str, pp: int, microbatches: int, **options) -> Schedule:
    """Build the schedule ``name`` for ``pp`` ranks and ``microbatches`` micro-batches."""
    fam = family(name)
    refused = _refusal(fam, name, pp, microbatches, options)
    if refused is not None:
        raise PipesimError(refused)
    return fam.builder(int(pp), int(microbatches), **options)  # numpy's integers as Python's
