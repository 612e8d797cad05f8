"""Every GPU benchmark in turn, for a session lent a GPU: one command, a time budget each.

    python benchmarks/gpu_checks.py                    # writes gpu-checks-<UTC time>/
    python benchmarks/gpu_checks.py --out DIR --budget 120 --only ub_chunks_gpu,layer_gpu

Runs ``ub_chunks_gpu``, ``layer_gpu``, ``attention_gpu`` and ``gemm_gpu`` (the order is what
each settles, most open first; see each one's docstring and docs/fidelity.md), each in a
process of its own so that a slow or hung one is stopped at its ``--budget`` (seconds,
default 120: the four fit a 10-minute command) and the next still runs. Each one's table
(stdout, then stderr) goes to ``OUT/NAME.txt`` as it is printed, so a stopped one keeps
what it had; ``OUT/summary.txt`` holds the lines printed here, one a benchmark: ran (its
seconds), skipped and why, timed out, or failed with its exit status and last line.

The prices are taken on the preset of the card found (``--preset auto``: h100 on an H100,
h200 on an H200; another card is priced on h200 and says so). ``--out`` must be new or
empty: a folder holding anything is refused in one line, exit status 2, nothing written.
Without PyTorch or a CUDA GPU it says so in a line a benchmark and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gpu_timing import no_gpu_reason  # noqa: E402

from pipesim.errors import PipesimError  # noqa: E402
from pipesim.parser import Parser  # noqa: E402

#: most open question first (docs/fidelity.md): the Bridge 405B row's unpriced chunks, the
#: torchtitan-faithful layer never run since it was rewritten, then H100 checks of terms
#: measured only on an H200
BENCHMARKS = ("ub_chunks_gpu", "layer_gpu", "attention_gpu", "gemm_gpu")
PRESET_OF_CARD = (("H100", "h100"), ("H200", "h200"))


def budget(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0 < v <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds a benchmark, more than 0 and at most 3600, got {text!r}")
    return v


def only(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",")))  # each once: a second run would replace its table
    bad = [n for n in names if n not in BENCHMARKS]
    if bad:
        raise argparse.ArgumentTypeError(f"no benchmark named {', '.join(map(repr, bad))}; choose from {', '.join(BENCHMARKS)}")
    return names


def parse(argv: list[str] | None):
    ap = Parser(prog="gpu_checks.py", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="a new or empty folder for the tables (default gpu-checks-<UTC time>)")
    ap.add_argument("--budget", type=budget, default=120.0, help="seconds each benchmark may run (default 120)")
    ap.add_argument("--only", type=only, default=BENCHMARKS, help=f"a comma-separated subset of {','.join(BENCHMARKS)}")
    ap.add_argument("--preset", default="auto", help="the cluster preset to price on (default: the card's, h200 else)")
    return ap.parse_args(argv)


def refuse_used(out: Path) -> None:
    """A folder that holds anything already would mix two sessions' tables."""
    if out.exists() and not out.is_dir():
        raise PipesimError(f"--out {out} is a file; give a new or empty folder")
    if out.is_dir() and any(out.iterdir()):
        raise PipesimError(f"--out {out} is not empty; give a new or empty folder, so that no earlier table is mixed in")


def card_preset(asked: str) -> tuple[str, str]:
    """(preset, the card's name) for the GPU present. Asked in a process of its own: naming
    the card starts CUDA, and a context held here would take the benchmarks' memory."""
    ask = "import torch; print(torch.cuda.get_device_name(0))"
    name = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=120).stdout.strip() or "a GPU"
    if asked != "auto":
        return asked, name
    return next((p for card, p in PRESET_OF_CARD if card in name), "h200"), name


def run_one(name: str, preset: str, seconds: float, out: Path) -> str:
    """Run benchmarks/NAME.py into OUT/NAME.txt; the summary line of how it went."""
    path = out / f"{name}.txt"
    t0 = time.monotonic()
    with open(path, "w") as f:
        # a session of its own, so that a stopped benchmark's children go with it
        proc = subprocess.Popen(
            [sys.executable, str(HERE / f"{name}.py"), "--preset", preset],
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},  # the table reaches the file as printed
        )
        try:
            code = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"{name}: timed out after {seconds:g} s (what it printed is in {path})"
    took = time.monotonic() - t0
    lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    if code != 0:
        return f"{name}: failed (exit status {code}) after {took:.0f} s: {lines[-1] if lines else 'no output'} ({path})"
    if len(lines) == 1 and "nothing to measure" in lines[0]:
        return f"{name}: skipped: {lines[0]}"
    return f"{name}: ran in {took:.0f} s on {preset} -> {path}"


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        out = args.out or Path(f"gpu-checks-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        refuse_used(out)
    except PipesimError as e:
        print(f"gpu_checks.py: {e}", file=sys.stderr)
        return 2
    why = no_gpu_reason()
    if why is not None:
        for name in args.only:
            print(f"{name}: skipped: {why}")
        print(f"nothing to measure here ({why}); nothing written")
        return 0
    preset, card = card_preset(args.preset)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"gpu_checks.py: cannot make --out {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    unknown = args.preset == "auto" and not any(c in card for c, _ in PRESET_OF_CARD)
    note = " (no preset of this card: pass --preset)" if unknown else ""
    lines = [f"# gpu_checks on {card}, priced on {preset}{note}, {args.budget:g} s a benchmark"]
    print(lines[0], flush=True)
    for name in args.only:
        line = run_one(name, preset, args.budget, out)
        print(line, flush=True)
        lines.append(line)
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
