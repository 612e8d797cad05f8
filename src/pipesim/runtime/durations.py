"""The durations ``pipesim run`` takes: what a synthetic op sleeps (``--f 20ms``, one per
stage with commas), the least time of an all-to-all, and the whole run's time limit."""

from __future__ import annotations

import argparse
import math
import re

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|us|µs)?\s*$")
_UNIT = {"ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6}
MAX_DURATION = 86400.0  # seconds: a rank sleeping longer than a day is a typo, and 1e308 overflows


def parse_duration(text: str, bare: str = "ms") -> float:
    """``20ms``, ``0.02s``, ``500us`` or a bare number (of milliseconds unless ``bare``
    says otherwise), in seconds."""
    m = _DURATION.match(text)
    if not m:
        example = "20ms, 0.02s, 500us or 20 (milliseconds)" if bare == "ms" else "120s, 500ms or 120 (seconds)"
        raise argparse.ArgumentTypeError(f"expected a duration like {example}, got {text!r}")
    value = float(m.group(1)) * _UNIT[m.group(2) or bare]
    if not math.isfinite(value) or value > MAX_DURATION:
        raise argparse.ArgumentTypeError(f"expected a duration up to {MAX_DURATION:g} s (a day), got {text!r}")
    return value


def duration_value(text: str) -> float | tuple[float, ...]:
    """One duration for every stage, or a comma-separated duration per stage."""
    vals = tuple(parse_duration(x) for x in text.split(","))
    return vals[0] if len(vals) == 1 else vals


DEFAULT_DURATION = 0.02


def timeout_value(text: str) -> float:
    """A time limit: a bare number is seconds here."""
    v = parse_duration(text, bare="s")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a time limit > 0, got {text!r}")
    return v


def add_durations(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("synthetic durations (20ms, 0.02s, 500us, or a number of ms; comma-separated per stage)")
    g.add_argument("--f", type=duration_value, help="forward (default 20ms)")
    g.add_argument("--b", type=duration_value, help="backward for the input (default 20ms)")
    g.add_argument("--w", type=duration_value, help="weight gradient (default 20ms)")
    g.add_argument("--bw", type=duration_value, help="fused backward (default B + W)")
    g.add_argument("--pair", type=parse_duration, help="overlapped F&B pair (default F + BW)")
    g.add_argument("--comm", type=parse_duration, help="P2P latency for the simulation (default: measured at start-up)")
