"""The compiled loops' loader: a library that lacks one of the loops' symbols (a cached
library from another build, a $CC that makes something else) runs the Python loops, as
a machine without a compiler does, rather than failing every simulation."""

from __future__ import annotations

import shutil

import pytest

from pipesim import build, kernel, simulate, summarize


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_a_library_missing_a_symbol_falls_back_to_the_python_loops(tmp_path, monkeypatch):
    # a library with the walk alone: pipesim_times and the rest are not in it
    source = tmp_path / "walk_only.c"
    source.write_text("#include <stdint.h>\nint64_t pipesim_walk(int64_t n) { return n; }\n")
    monkeypatch.setattr(kernel, "_SOURCES", (source,))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PIPESIM_KERNEL", raising=False)
    monkeypatch.setattr(kernel, "_lib", [])  # not tried yet in this process
    assert kernel.compiled() is None
    assert list((tmp_path / "cache" / "pipesim").glob("engine-*.so"))  # it was built, then refused
    s = build("1f1b", 4, 8)
    # 1F1B at unit F, B, W (BW = 2): (M + pp - 1) * (F + BW) = 11 * 3
    assert summarize(s, simulate(s)).makespan == 33.0
