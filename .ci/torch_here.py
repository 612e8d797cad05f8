"""One line, before anything is downloaded, when the pinned torch is not on this machine.

make test pins torch (.ci/pins.txt) because its CPU build is the one that lies on local disk;
for another Python, pip would quietly fetch the CUDA build and its nvidia-* wheels (about 4.7 GB)
instead. This asks pip where the pin would come from (a dry run: metadata only, nothing
downloaded) and stops with one line when it is not a local file. PIPESIM_TORCH_DOWNLOAD=1
lets the download go ahead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PINS = Path(__file__).with_name("pins.txt")


def main() -> int:
    pin = next(line.strip() for line in PINS.read_text().splitlines() if line.startswith("torch=="))
    here = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    if os.environ.get("PIPESIM_TORCH_DOWNLOAD") == "1":
        return 0
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet", "--report", "-", pin],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        print(f"make test: pip finds no {pin} for {here}; use Python 3.11 (make test PYTHON=python3.11)", file=sys.stderr)
        return 2
    wanted = json.loads(probe.stdout or "{}").get("install", [])
    url = wanted[0]["download_info"]["url"] if wanted else "file:"  # nothing to install: it is already here
    if not url.startswith("file:"):
        print(
            f"make test: {pin} for {here} is not on this machine; pip would download {url.rsplit('/', 1)[-1]} "
            f"and CUDA's nvidia-* wheels (about 4.7 GB). Use Python 3.11 (make test PYTHON=python3.11), "
            f"or PIPESIM_TORCH_DOWNLOAD=1 make test to download it",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
