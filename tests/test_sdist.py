"""The sdist's promise (MANIFEST.in, docs/package.md): unpacked, its own tests run. So every
top-level folder the tests read must be in it; src/ and the pins travel by other rules."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: how the tests name the repository's top-level folders
READS = re.compile(r'(?:parent\.parent|parents\[1\]|ROOT) / "([\w.]+)"')


def _grafted() -> set[str]:
    lines = (ROOT / "MANIFEST.in").read_text().splitlines()
    return {line.split()[1] for line in lines if line.startswith("graft ")}


def test_every_folder_the_tests_read_is_in_the_sdist():
    read = {m for p in (ROOT / "tests").glob("*.py") for m in READS.findall(p.read_text())}
    folders = {name for name in read if (ROOT / name).is_dir() and name not in ("src", ".ci")}
    assert "benchmarks" in folders  # the scan sees what it is meant to see
    assert folders <= _grafted(), f"MANIFEST.in lacks graft {sorted(folders - _grafted())}"
