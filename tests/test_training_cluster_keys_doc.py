"""docs/training-and-cluster.md lists exactly the keys the training and cluster loaders take,
with the defaults they apply and the values the cluster presets set.

The accepted keys are the loaders' own: the list each names when refusing an unknown key.
The defaults are what the loaders give a key left out: an empty training file loaded by
``load_training``, and a cluster table of the doc's required keys alone loaded by
``cluster_from_table``. The presets' values are read from their TOML files. The doc's
side is read from its markdown tables. Either side drifting fails the test."""

from __future__ import annotations

import re
import tomllib
from functools import partial
from pathlib import Path

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.specs import PRESETS, cluster_from_table, load_training, preset_names

DOC = Path(__file__).resolve().parents[1] / "docs" / "training-and-cluster.md"
ODD = "zz_not_a_key"


def _section(title: str) -> str:
    return DOC.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def _tables(text: str) -> list[list[list[str]]]:
    """Each markdown table of ``text``: its rows (header first, rule left out) as cells,
    a ``\\|`` inside a cell kept as ``|``."""
    tables: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= {"-"} for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _keyed(text: str, header: str) -> dict[str, list[str]]:
    """The rows of every table whose second column is ``header``, by their key (`key`)."""
    out: dict[str, list[str]] = {}
    for table in _tables(text):
        if table[0][:2] == ["key", header]:
            for row in table[1:]:
                key = re.fullmatch(r"`(\w+)`", row[0]).group(1)
                assert key not in out, f"{key} is listed twice"
                out[key] = row[1:]
    return out


def _literal(cell: str):
    """The TOML value a cell's first code span writes (`0.024`, `"auto"`, `[1, 2]`)."""
    return tomllib.loads(f"v = {re.match(r'`([^`]+)`', cell).group(1)}")["v"]


def _listed(message: str) -> set[str]:
    return set(re.search(r"expected one of (.+)$", message).group(1).split(", "))


def _refusal(load) -> str:
    with pytest.raises(PipesimError) as e:
        load()
    return str(e.value)


def _training_rows() -> dict[str, list[str]]:
    return _keyed(_section("A training file (TOML)"), "default")


def _cluster_rows() -> dict[str, list[str]]:
    return _keyed(_section("A cluster file (TOML)"), "default")


def _minimal_cluster() -> dict:
    """The doc's required cluster keys alone, valued as the h100 preset values them."""
    h100 = tomllib.loads((PRESETS / "clusters" / "h100.toml").read_text())
    return {k: h100[k] for k, row in _cluster_rows().items() if row[0] == "required"}


def test_the_training_keys_are_exactly_the_loaders(tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text(f"{ODD} = 1\n")
    want = _listed(_refusal(lambda: load_training(str(typo))))
    got = set(_training_rows())
    assert got == want, f"not in the doc: {sorted(want - got)}; not taken: {sorted(got - want)}"
    assert {"seq", "eager_block", "w_keeps_graph", "pp_keeps_input_grads"} <= want and len(want) >= 66


def test_the_training_defaults_are_what_an_empty_file_loads(tmp_path):
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    loaded = load_training(str(empty))
    for key, row in _training_rows().items():
        want = getattr(loaded, key)
        assert _literal(row[0]) == (list(want) if isinstance(want, tuple) else want), key


def test_the_training_keys_take_the_words_the_doc_lists():
    """Each word a string key's row accepts loads (with the setting its row says it
    needs), and a word the row does not list is refused."""
    for key, (default, accepted, _) in _training_rows().items():
        if not isinstance(_literal(default), str):
            continue
        words = re.findall(r'`"([^"`]+)"`', re.split(r"\((?:needs|not)|;", accepted)[0])
        assert _literal(default) in words, key
        needs = re.search(r"needs `(\w+) = ([^`]+)`", accepted)
        beside = tomllib.loads(f"{needs.group(1)} = {needs.group(2)}") if needs else {}
        for word in words:
            word = word.replace("every-N", "every-2")
            assert getattr(load_training(None, base={**beside, key: word}), key) == word
        assert ODD in _refusal(partial(load_training, None, base={key: ODD})), key


def test_the_cluster_keys_are_exactly_the_loaders():
    want = _listed(_refusal(lambda: cluster_from_table({**_minimal_cluster(), ODD: 1}, "c.toml")))
    got = set(_cluster_rows())
    assert got == want, f"not in the doc: {sorted(want - got)}; not taken: {sorted(got - want)}"
    assert {"name", "memory_mib", "nvlink_domain"} <= want and "hbm_gb" not in want


def test_the_cluster_defaults_and_required_keys_are_the_loaders():
    minimal = _minimal_cluster()
    assert {"name", "gpus", "fp8_tflops", "memory_mib"} <= minimal.keys()
    loaded = cluster_from_table(minimal, "c.toml")
    for key in minimal:  # each key the doc calls required is refused when left out
        rest = {k: v for k, v in minimal.items() if k != key}
        assert f"missing key {key!r}: give" in _refusal(partial(cluster_from_table, rest, "c.toml"))
    for key, row in _cluster_rows().items():
        if row[0] != "required":
            want = getattr(loaded, key)
            assert _literal(row[0]) == (list(want) if isinstance(want, tuple) else want), key


def test_the_presets_table_is_what_the_preset_files_set():
    [table] = [t for t in _tables(_section("A cluster file (TOML)")) if t[0][1] != "default"]
    names = [re.fullmatch(r"`([\w-]+)`", c).group(1) for c in table[0][1:]]
    assert names == preset_names("cluster")
    files = {n: tomllib.loads((PRESETS / "clusters" / f"{n}.toml").read_text()) for n in names}
    rows = {re.fullmatch(r"`(\w+)`", r[0]).group(1): r[1:] for r in table[1:]}
    assert set(rows) == {k for f in files.values() for k in f} - {"name"}
    for key, cells in rows.items():
        for name, cell in zip(names, cells, strict=True):
            if cell:
                assert _literal(cell) == files[name].get(key), (name, key)
            else:
                assert key not in files[name], (name, key)
