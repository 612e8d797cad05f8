"""Shared test helpers. Reference data (op orders and numbers recorded from the public
implementations and papers) is a copy of shared/reference, so the suite runs anywhere."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st

REFERENCE = Path(__file__).parent / "data" / "reference"

# ci (the default, and CI's): the same examples every run, so a red CI is a change's fault and
# reproducible; dev (HYPOTHESIS_PROFILE=dev): more examples, new ones every run, to find bugs
settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _temp_folder(tmp_path_factory):
    """Temporary files of the tests and of every process they start (torch's pymp-* and
    torchelastic_* folders, which a stopped rank leaves behind) go to pytest's own temporary
    folder, not the system's: TMPDIR for the processes, tempfile.tempdir for this one."""
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmp"))
    tempfile.tempdir = None  # recomputed from TMPDIR at the next use
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture(autouse=True, scope="session")
def _orders_cache(tmp_path_factory):
    """Searched orders are cached under the user's cache directory; tests keep theirs
    in a temporary one (subprocesses inherit it)."""
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield


def printed(main, argv: list[str]) -> tuple[object, str]:
    """What a script's ``main(argv)`` returns and what it prints (stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = main(argv)
    return result, out.getvalue()


def load_script(path: Path):
    """A benchmark (or docs) script imported as a module, to call its functions; registered
    under its name, since dataclasses look their module up while the script runs."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def reference_cases(prefix: str) -> list[dict]:
    """Every reference file whose name starts with ``prefix`` followed by ``_pp``."""
    out = []
    for path in sorted(REFERENCE.glob(f"{prefix}_pp*_m*.json")):
        d = json.loads(path.read_text())
        d["_path"] = path
        out.append(d)
    return out


@functools.cache
def registry_schedules(pp: int) -> dict:
    """Every registry schedule built at ``pp`` with its default options and the first
    micro-batch count it accepts among 2pp, 4pp, 3pp, pp (None if none), so that tests
    over the registry cover families added later without naming them."""
    from pipesim import REGISTRY, PipesimError, build

    out = {}
    for name in REGISTRY:
        for m in (2 * pp, 4 * pp, 3 * pp, pp):
            try:
                out[name] = build(name, pp, m)
                break
            except PipesimError:
                continue
    return out


def shapes():
    """(name, pp, M, options) satisfying each family's constraints."""

    from pipesim import REGISTRY

    @st.composite
    def draw(d):
        name = d(st.sampled_from(sorted(REGISTRY)))
        pp = d(st.integers(1, 8))
        opts = {}
        if name == "dualpipe":
            pp = 2 * d(st.integers(1, 4))
            M = 2 * d(st.integers(pp, pp + 6))
        elif name == "dualpipev":
            M = d(st.integers(2 * pp, 2 * pp + 9))
        elif name == "chimera":
            pp = 2 * d(st.integers(1, 4))
            M = pp * d(st.integers(1, 3))
        elif name == "interleaved-1f1b-overlap":
            opts["chunks"] = d(st.integers(2, 4))
            M = pp * d(st.integers(1, 4))
        elif name in ("interleaved-1f1b", "interleaved-zb"):
            opts["chunks"] = d(st.integers(1, 4))
            # PyTorch's rounds: every multiple of pp, and some M that are not
            M = d(st.integers(1, 4 * pp).filter(lambda m: m % max(1, m // pp) == 0))
        else:
            M = d(st.integers(1, 24))
        return name, pp, M, opts

    return draw()


@pytest.fixture
def fake_group():
    """``make(size)``: a device mesh of ``size`` fake ranks on the CPU (torch_blocks.fake_mesh),
    torn down after the test."""
    from torch_blocks import fake_mesh

    with contextlib.ExitStack() as stack:
        yield lambda size: stack.enter_context(fake_mesh(size))
