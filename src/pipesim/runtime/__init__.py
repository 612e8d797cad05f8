"""Running schedules on torch.distributed, and handing them to PyTorch's pipelining.

Importing this package does not import torch (the CLI imports ``commands`` at start-up);
the names below load their modules, and torch, on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "execute": "api",
    "execute_many": "api",
    "job": "api",
    "TinyTransformer": "model",
    "Sequential": "model",
    "MoETransformer": "moe",
    "reference": "model",
    "RunResult": "results",
    "RunFailed": "results",
    "compare": "results",
    "comm_plan": "plan",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
