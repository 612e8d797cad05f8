"""The package's public names load on first use: ``import pipesim`` and ``pipesim --version``
import no numpy (nor torch, matplotlib), and every name exported before still imports."""

from __future__ import annotations

import json
import subprocess
import sys

#: pipesim's __all__ as it stood when its names were imported eagerly (b865320)
EXPORTED = (
    "Costs DeadlockError Event Op Pair PipesimError Placement REGISTRY Report Schedule Segment Timeline Transfer "
    "build parse_item parse_op simulate summarize validate"
).split()
#: where each is defined, from the same commit's imports
HOMES = {
    "costs": ["Costs"],
    "engine": ["validate"],
    "errors": ["DeadlockError", "PipesimError"],
    "ir": ["Op", "Pair", "Placement", "Schedule", "parse_item", "parse_op"],
    "metrics": ["Report", "summarize"],
    "schedules": ["REGISTRY", "build"],
    "simulate": ["simulate"],
    "timeline": ["Event", "Segment", "Timeline", "Transfer"],
}
#: a module set to None in sys.modules fails to import: the child loads none of them
BLOCK = "import sys\nfor m in ('numpy', 'torch', 'matplotlib'):\n    sys.modules[m] = None\n"


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_version_and_import_need_no_numpy():
    # --version imported numpy through the schedule reader (cli -> files -> ir); import
    # pipesim through every public name
    done = _python(BLOCK + "import pipesim\nprint(pipesim.__version__)\nfrom pipesim.cli import main\nmain(['--version'])")
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("\n")[:2]
    assert second == f"pipesim {first}"


def test_every_name_exported_before_imports_and_is_its_modules():
    import importlib

    import pipesim

    assert sorted(pipesim.__all__) == sorted(EXPORTED) and sum(map(len, HOMES.values())) == len(EXPORTED)
    for module, names in HOMES.items():
        home = importlib.import_module(f"pipesim.{module}")
        for name in names:
            assert getattr(pipesim, name) is getattr(home, name), name
    namespace: dict = {}
    exec("from pipesim import *", namespace)
    assert {n for n in namespace if not n.startswith("__")} == set(EXPORTED)


def test_simulate_and_validate_stay_the_functions_once_their_modules_load():
    # importing the submodule first binds its name on the package; the function must win,
    # as it did when the package imported it after the module
    code = (
        "import json, pipesim, pipesim.simulate, pipesim.validate\n"
        "from pipesim.commands import simulate\n"
        "s = pipesim.build('1f1b', 2, 2)\n"
        "pipesim.validate(s)\n"
        "print(json.dumps([callable(pipesim.simulate), callable(pipesim.validate), pipesim.summarize(s, pipesim.simulate(s)).makespan]))"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    # 1F1B's makespan at unit F, B, W (BW = 2): (M + pp - 1) * (F + BW) = 3 * 3
    assert json.loads(done.stdout) == [True, True, 9.0]


def test_a_core_run_needs_neither_torch_nor_matplotlib():
    code = BLOCK.replace("'numpy', ", "") + (
        "import pipesim\ns = pipesim.build('dualpipe', 4, 8)\n"
        "print(pipesim.summarize(s, pipesim.simulate(s, pipesim.Costs(f=1, b=1, w=1))).makespan)"
    )
    done = _python(code)
    assert done.returncode == 0 and float(done.stdout) > 0, done.stderr
