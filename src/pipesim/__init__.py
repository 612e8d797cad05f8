"""pipesim: generate, check, simulate, draw, plan and run pipeline-parallel schedules.

>>> import pipesim
>>> s = pipesim.build("dualpipe", pp=8, microbatches=16)
>>> report = pipesim.summarize(s, pipesim.simulate(s, pipesim.Costs(f=1, b=1, w=1)))
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from .costs import Costs
from .errors import DeadlockError, PipesimError
from .ir import Op, Pair, Placement, Schedule, parse_item, parse_op
from .metrics import Report, summarize
from .schedules import REGISTRY, build
from .simulate import simulate
from .timeline import Event, Segment, Timeline, Transfer
from .validate import validate

try:
    __version__ = _version("pipesim")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

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
