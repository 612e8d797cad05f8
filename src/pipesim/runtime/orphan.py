"""Imported first in the forkserver of ``pipesim run``: it dies with the launcher.

The forkserver notices its launcher is gone only between forks, and it spends its first
seconds (up to 20 under load) importing torch; a launcher killed then would leave it
and its resource tracker behind. So before those imports, ask Linux to kill this
process when its parent dies (``PR_SET_PDEATHSIG``), and exit now if that has already
happened. Elsewhere (no prctl) nothing changes. No torch here: that is the point.
Only the forkserver may import this module: importing it is the act.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

LAUNCHER = "PIPESIM_LAUNCHER_PID"  # set by launch.launch() before the forkserver starts
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    launcher = os.environ.get(LAUNCHER)
    if launcher and os.getppid() != int(launcher):  # it died before prctl took effect
        os._exit(3)


_die_with_parent()
