"""pipesim: generate, check, simulate, draw, plan and run pipeline-parallel schedules.

>>> import pipesim
>>> s = pipesim.build("dualpipe", pp=8, microbatches=16)
>>> report = pipesim.summarize(s, pipesim.simulate(s, pipesim.Costs(f=1, b=1, w=1)))

The public names load on first use (PEP 562's module ``__getattr__``): ``import pipesim``
alone, and ``pipesim --version``, import neither numpy nor the schedule builders, which
every name below brings in; nor does ``pipesim --help`` or any command's ``--help``
(tests/test_family_names.py), whose flags name the schedules from plain data
(family_names.py) and whose modules import what builds, reads or draws where it runs.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType

TYPE_CHECKING = False  # typing's own flag, without importing typing (~20 ms)
if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .costs import Costs
    from .engine import validate
    from .errors import DeadlockError, PipesimError
    from .ir import Op, Pair, Placement, Schedule, parse_item, parse_op
    from .metrics import Report, summarize
    from .schedules import REGISTRY, build
    from .simulate import simulate
    from .timeline import Event, Segment, Timeline, Transfer

#: each public name (__all__) and the submodule that defines it
_HOMES = {
    "Costs": "costs",
    "DeadlockError": "errors",
    "PipesimError": "errors",
    **dict.fromkeys(("Op", "Pair", "Placement", "Schedule", "parse_item", "parse_op"), "ir"),
    "Report": "metrics",
    "summarize": "metrics",
    "REGISTRY": "schedules",
    "build": "schedules",
    "simulate": "simulate",
    **dict.fromkeys(("Event", "Segment", "Timeline", "Transfer"), "timeline"),
    "validate": "engine",
}

__all__ = [
    "Costs",
    "DeadlockError",
    "Event",
    "Op",
    "Pair",
    "PipesimError",
    "Placement",
    "REGISTRY",
    "Report",
    "Schedule",
    "Segment",
    "Timeline",
    "Transfer",
    "build",
    "parse_item",
    "parse_op",
    "simulate",
    "summarize",
    "validate",
]


def __getattr__(name: str) -> object:
    if name == "__version__":
        value: object = _version()
    elif name in _HOMES:
        value = getattr(import_module(f".{_HOMES[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once: later uses find it in the module
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # importlib.metadata alone costs ~50 ms

    try:
        return version("pipesim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


class _Package(ModuleType):
    """The package, whose ``simulate`` and ``validate`` stay the functions. Importing a
    submodule binds its name on the package; eagerly the functions were imported after
    their modules and so won, but loaded lazily the first internal ``from .simulate
    import ...`` would leave ``pipesim.simulate`` the module. (``validate`` the function
    is engine.py's; the validate module words its refusals.)"""

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, ModuleType) and name in _HOMES:
            return  # the submodule stays reachable as sys.modules["pipesim.<name>"]
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
