"""What an annotation's name says: a component of a layer, or a pipeline action.

Components (what runs inside a layer, as ``components.py`` models it): ``attn``,
``mlp``, ``dispatch``, ``combine``, each with a phase ``(F)``, ``(B)`` or ``(W)``, as
DeepSeek's training profile names them (``attn(F)``, ``dispatch(B)``, ``mlp(W)``).
Other naming schemes map onto these through ``Mapping`` (``--map``).

Pipeline actions:

* pipesim's runtime: ``pipesim/F0.3 rank=1 stage=1 of=1f1b pp=2``, a pair
  ``pipesim/F1.6&BW0.0 rank=0 stage=6&0 of=dualpipe`` (item in pipesim's notation, its
  rank, the model stage of each op, the schedule's name);
* PyTorch's ``_PipelineScheduleRuntime`` (every multi-stage schedule class):
  ``PP:{action}``, the action as ``_Action.__repr__`` writes it: ``PP:2F0``, ``PP:3I2``
  (backward for the input, pipesim's B), ``PP:3W2``, ``PP:1B0`` (full backward, pipesim's
  BW), ``PP:(0F7;7B3)OVERLAP_F_B``; communication and bookkeeping actions
  (``PP:1SEND_F0``, ``PP:0RECV_B1``, ``PP:0UNSHARD``, ``PP:0REDUCE_GRAD``) are known but
  are not compute;
* PyTorch's single-stage ``ScheduleGPipe``: ``Forward {mb}`` and ``Backward {mb}``.

Stage indices of PyTorch's actions are global, like pipesim's stage numbers.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass

from ..errors import PipesimError
from ..inputs import load_toml
from ..ir import Item, Op, Pair, parse_item

COMPONENTS = ("attn", "mlp", "dispatch", "combine")
PHASES = ("F", "B", "W")
COMM = ("dispatch", "combine")  # the components that are communication
#: names that mean a component without a mapping (lower case, without the phase)
ALIASES = {
    "attn": "attn",
    "attention": "attn",
    "mlp": "mlp",
    "moe": "mlp",
    "experts": "mlp",
    "ffn": "mlp",
    "dispatch": "dispatch",
    "combine": "combine",
}
_PHASED = re.compile(r"^\s*(.*?)\s*\(\s*([FBW])\s*\)\s*$")
# stage, rank and micro-batch numbers of at most 6 digits: a label naming one past a
# million names no stage of a profiled step (and one in the billions made profile
# allocate for them all): it is read past like any other name
_PIPESIM = re.compile(r"^pipesim/(\S+) rank=(\d{1,6}) stage=(\d{1,6}(?:&\d{1,6})?)(?: of=(\S+?))?(?: pp=(\d{1,6}))?$")
_TORCH = re.compile(r"^PP:(\d{1,6})(F|I|W|B)(\d{1,6})$")
_TORCH_PAIR = re.compile(r"^PP:\((\d{1,6})F(\d{1,6});(\d{1,6})(I|B)(\d{1,6})\)OVERLAP_F_B$")
_TORCH_OTHER = re.compile(r"^PP:\d{0,6}(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD)\d{0,6}$")
_GPIPE = re.compile(r"^(Forward|Backward) (\d{1,6})$")
TORCH_KIND = {"F": "F", "I": "B", "W": "W", "B": "BW"}  # PyTorch's letter -> pipesim's kind

EXPECTED = (
    "components like attn(F), mlp(B), dispatch(F), combine(W) (or yours, with --map), "
    "pipesim's runtime labels (pipesim/F0.3 rank=1 stage=1) or PyTorch pipelining's (PP:2F0, PP:3I2, Forward 0)"
)


@dataclass(frozen=True, slots=True)
class Component:
    name: str  # attn, mlp, dispatch, combine
    phase: str  # F, B, W

    @property
    def field(self) -> str:
        """The ``LayerCosts`` field of this component's time (``attn_f``, ``dispatch_b``)."""
        return f"{self.name}_{self.phase.lower()}"

    @property
    def stream(self) -> str:
        return "comm" if self.name in COMM else "compute"

    def __str__(self) -> str:
        return f"{self.name}({self.phase})"


@dataclass(frozen=True, slots=True)
class Action:
    """One pipeline item on one rank. ``stages`` holds the model stage of each op of the
    item; ``chunks_known`` is False for PyTorch's labels, whose chunk numbers pipesim
    derives from the stages a rank holds; ``compute`` is False for communication and
    bookkeeping actions."""

    item: Item | None
    stages: tuple[int, ...]
    rank: int | None = None
    schedule: str | None = None
    chunks_known: bool = True
    compute: bool = True
    pp: int | None = None  # the run's pipeline ranks (pipesim's labels since they carry it)


class Mapping:
    """Other naming schemes: ``attn=self_attn,mlp=moe`` maps annotation stems (the name
    before ``(F)``/``(B)``/``(W)``) to components; ``attn_f=fwd_attn*`` maps one whole
    name, a glob pattern, to one component and phase. A TOML file with a ``[map]`` table
    of the same keys does the same."""

    def __init__(self, stems: dict[str, str] | None = None, exact: dict[str, list[str]] | None = None):
        self.stems = stems or {}  # lower-case stem -> component
        self.exact = exact or {}  # "attn_f" -> patterns

    @classmethod
    def parse(cls, text: str | None) -> Mapping:
        if not text:
            return cls()
        if text.lower().endswith(".toml") or ("=" not in text and os.path.isfile(text)):
            # map.TOML or map.txt, a file, was told "--map takes COMPONENT=NAME pairs"
            data = load_toml(text, "--map file")
            table = data.get("map")
            if not isinstance(table, dict):
                raise PipesimError(f'--map {text}: expected a [map] table of component = name, like attn = "self_attn"')
            pairs = [(str(k), v) for k, v in table.items()]
        else:
            pairs = []
            for part in text.split(","):
                if "=" not in part:
                    raise PipesimError(f"--map takes COMPONENT=NAME pairs like attn=self_attn,mlp=moe, got {part.strip()!r}")
                k, v = part.split("=", 1)
                pairs.append((k.strip(), v.strip()))
        stems: dict[str, str] = {}
        exact: dict[str, list[str]] = {}
        fields = {f"{c}_{p.lower()}" for c in COMPONENTS for p in PHASES}
        for key, names in pairs:
            for name in names if isinstance(names, list) else [names]:
                if not isinstance(name, str) or not name:
                    raise PipesimError(f"--map {key}: expected an annotation name, got {name!r}")
                # one name given to two components: the last silently won (stems), or the
                # first (patterns), so the other's time was 0 in the cost file
                if key in COMPONENTS:
                    other = stems.get(name.lower())
                else:
                    other = next((f for f, ps in exact.items() if name in ps), None)
                if other is not None and other != key:
                    raise PipesimError(f"--map gives {name!r} to both {other} and {key}; give each name one component")
                if key in COMPONENTS:
                    stems[name.lower()] = key
                elif key in fields:
                    exact.setdefault(key, []).append(name)
                else:
                    raise PipesimError(
                        f"--map: unknown component {key!r}; use {', '.join(COMPONENTS)} (a name before (F)/(B)/(W)) "
                        f"or one of {', '.join(sorted(fields))} (a whole name)"
                    )
        return cls(stems, exact)

    def component(self, name: str) -> Component | None:
        for key, patterns in self.exact.items():
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                comp, phase = key.split("_")
                return Component(comp, phase.upper())
        m = _PHASED.match(name)
        if not m:
            return None
        stem = m.group(1).lower()
        comp = self.stems.get(stem) or ALIASES.get(stem)
        return Component(comp, m.group(2)) if comp else None


def action(name: str) -> Action | None:
    """The pipeline action ``name`` labels, or None."""
    if name.startswith("pipesim/"):
        m = _PIPESIM.match(name)
        if not m:
            return None
        try:
            item = parse_item(m.group(1))
        except PipesimError:
            return None
        stages = tuple(int(x) for x in m.group(3).split("&"))
        if len(stages) != (2 if isinstance(item, Pair) else 1):
            return None
        return Action(item, stages, int(m.group(2)), m.group(4), pp=int(m.group(5)) if m.group(5) else None)
    if name.startswith("PP:"):
        if m := _TORCH.match(name):
            stage, kind, mb = int(m.group(1)), TORCH_KIND[m.group(2)], int(m.group(3))
            return Action(Op(kind, 0, mb), (stage,), chunks_known=False)
        if m := _TORCH_PAIR.match(name):
            f = Op("F", 0, int(m.group(2)))
            b = Op(TORCH_KIND[m.group(4)], 0, int(m.group(5)))
            return Action(Pair(f, b), (int(m.group(1)), int(m.group(3))), chunks_known=False)
        if _TORCH_OTHER.match(name):
            return Action(None, (), chunks_known=False, compute=False)
        return None
    if m := _GPIPE.match(name):  # ScheduleGPipe: one stage per rank, chunk 0
        return Action(Op("F" if m.group(1) == "Forward" else "BW", 0, int(m.group(2))), (-1,), chunks_known=False)
    return None


def pipesim_label(item: Item, rank: int, stages: tuple[int, ...], schedule: str, pp: int | None = None) -> str:
    """The name pipesim's runtime records for ``item`` (read back by ``action``); ``pp``
    lets the reader tell a missing rank's trace, or another run's, from a smaller run."""
    return f"pipesim/{item} rank={rank} stage={'&'.join(map(str, stages))} of={schedule}" + (f" pp={pp}" if pp else "")
