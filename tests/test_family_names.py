"""The schedule names the command line's help reads without importing the builders
equal the registry's, and ``--help`` imports no numpy."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from pipesim.family_names import FAMILY_OPTIONS, takers
from pipesim.parser import COMMANDS


def test_the_table_is_the_registry_name_for_name_and_option_for_option():
    from pipesim.schedules import REGISTRY

    # the builders' own signatures, read here rather than through Family.options
    registry = {n: tuple(list(inspect.signature(f.builder).parameters)[2:]) for n, f in REGISTRY.items()}
    assert list(FAMILY_OPTIONS.items()) == list(registry.items())


def test_takers_of_chunks_are_the_interleaved_families():
    assert takers("chunks") == ["interleaved-1f1b", "interleaved-1f1b-overlap", "looped-bfs", "interleaved-zb"]


#: every command, from the table the parser builds them by, and the top-level help (no command)
EVERY_COMMAND = [name for names in COMMANDS.values() for name in names]


@pytest.mark.parametrize("command", [*EVERY_COMMAND, None])
def test_a_commands_help_imports_no_numpy(command):
    argv = [command, "--help"] if command else ["--help"]
    code = (
        "import sys\nfrom pipesim.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print('NUMPY' if 'numpy' in sys.modules else 'FREE')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: pipesim " + (command or "") in done.stdout
    assert done.stdout.rstrip().endswith("FREE")
