"""The search keeps each spec's hash on the instance (``training.hashed_once``) and each
layout's per-layer activations (``footprint.layer_columns``): a kept hash must be the one
Python's dataclasses define (the hash of the tuple of the compared fields, so dicts and
sets of specs order as before), never travel to another process, and the memory model
must hold each layer's bytes as the layer's own activation gives them."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace
from pathlib import Path

import pytest

from pipesim.planner import activations
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout, local_training
from pipesim.planner.saved_widths import layer_mode
from pipesim.planner.specs import load_cluster, load_model, load_training
from pipesim.planner.split import partition

HF = Path(__file__).parent / "data" / "hf"


def _field_hash(x) -> int:
    """The hash ``dataclass(frozen=True)`` generates: of the tuple of the fields it compares."""
    return hash(tuple(getattr(x, f.name) for f in fields(x) if (f.compare if f.hash is None else f.hash)))


SPECS = [
    lambda: load_training(),
    lambda: load_cluster("h800-2048"),
    lambda: load_model("deepseek-v3"),
    lambda: Layout(pp=8, dp=32, tp=2, ep=64, cp=2),
]


@pytest.mark.parametrize("make", SPECS)
def test_a_kept_hash_is_the_dataclass_hash_of_the_fields(make):
    x = make()
    assert hash(x) == _field_hash(x)
    assert hash(x) == _field_hash(x)  # the kept value, asked again
    other = (
        replace(x, name="other") if hasattr(x, "name") else replace(x, pp=x.pp * 2) if hasattr(x, "pp") else replace(x, seq=8192)
    )
    assert hash(other) == _field_hash(other) and other != x


@pytest.mark.parametrize("make", SPECS)
def test_a_pickled_spec_leaves_its_kept_hash_behind(make):
    """String hashes differ between processes: a copy hashes its own fields afresh."""
    x = make()
    hash(x)
    state = x.__reduce_ex__(4)[2]
    assert set(state) == {f.name for f in fields(x)} | ({"domain"} & set(x.__dict__))
    copy = pickle.loads(pickle.dumps(x))
    assert copy == x and hash(copy) == _field_hash(copy)


@pytest.mark.parametrize("recompute", ["none", "selective", "full", "every-2"])
def test_each_layer_holds_the_activation_of_the_first_layer_of_its_kind(recompute):
    """Qwen3-235B-A22B's config lists its layers' attention kinds, gpt-oss alternates
    sliding and full attention: a stage's layers hold, in order, the activation
    ``activations.layer_activation`` gives the first layer of their kind (MoE or dense,
    and recomputation mode), whatever split the layers come in."""
    t = load_training()
    for name in ("gpt-oss-20b.json", "qwen3-235b-a22b.json"):
        m = load_model(str(HF / name))
        for lay, stages in ((Layout(pp=4, dp=8, tp=2, ep=8), 4), (Layout(pp=2, dp=4, cp=2), 6)):
            local = local_training(t, lay)
            first: dict = {}
            for i in range(m.layers):
                first.setdefault((m.is_moe_layer(i), layer_mode(recompute, i)), i)
            for parts in (partition(m.layers, stages), [range(0, 1), range(1, m.layers - 2), range(m.layers - 2, m.layers)]):
                mm = memory_model(m, t, lay, len(parts), recompute, parts)
                for s, rng in enumerate(parts):
                    want = tuple(
                        activations.layer_activation(
                            m, first[m.is_moe_layer(i), layer_mode(recompute, i)], local, lay, recompute
                        )[0]
                        for i in rng
                    )
                    assert mm.layer_bytes[s] == want
