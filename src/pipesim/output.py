"""The output helpers every command module shares: the Rich console, JSON on stdout,
and how a share and a number are printed."""

from __future__ import annotations

import sys

from rich.console import Console


def console() -> Console:
    """Rich console; when piped, 160 columns rather than Rich's 80 so tables stay whole."""
    width = None if sys.stdout.isatty() else 160
    return _Console(highlight=False, soft_wrap=True, width=width)


class _Console(Console):
    """Rich exits 1 on a broken pipe; pipesim treats a reader that went away as success
    (``pipesim compare | head``), in ``main``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def emit_json(data: dict) -> None:
    """``data`` as JSON on stdout, written as it is made (a ``files.Stream`` in it,
    such as a schedule's ranks, is never held whole)."""
    from .files import write_json  # the file writers read schedules (numpy): not to build the parser

    write_json("-", data)


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def share(x: float | None, makespan: float) -> str:
    """A share of the makespan (a bubble, a utilization); n/a when the makespan is 0: every
    item taking no time leaves no time to share out, and 0% beside 0% would say nothing true."""
    return pct(x if makespan > 0 else None)


def num(x: float) -> str:
    return f"{x:.6g}"
