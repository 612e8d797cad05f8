"""The registry's constraint check: what ``Family.check`` says of a size is what ``build``
does with it, and what the sources say the schedule needs."""

from __future__ import annotations

import pytest

from pipesim import REGISTRY, PipesimError, build
from pipesim.engine import validate

#: searched orders are slow to build: a smaller grid
SEARCHED = {"zb-h2", "zb-v", "v-half", "v-min", "zb-auto"}


def _grid(name: str):
    fam = REGISTRY[name]
    small = name in SEARCHED
    chunk_values = [None, 0, 1, 2, 3, 1.5] if "chunks" in fam.options else [None]
    group_values = [None, 2, 3, 5] if "group_size" in fam.options else [None]
    for pp in range(1, 5 if small else 7):
        for M in range(1, 9 if small else 15):
            for ch in chunk_values:
                for g in group_values:
                    yield pp, M, ({} if ch is None else {"chunks": ch}) | ({} if g is None else {"group_size": g})


@pytest.mark.parametrize("name", list(REGISTRY))
def test_build_raises_exactly_when_the_check_refuses(name):
    """Over (pp, M, chunks), including chunk counts no builder takes: the check refuses
    iff build raises, with build's message; what it accepts builds a valid schedule on
    the placement ``placement_of`` names."""
    fam = REGISTRY[name]
    for pp, M, opts in _grid(name):
        said = fam.check(pp, M, **opts)
        try:
            s = build(name, pp, M, **opts)
        except PipesimError as e:
            assert said == str(e), (pp, M, opts)
            continue
        assert said is None, (pp, M, opts)
        validate(s)
        assert s.placement == fam.placement_of(pp, M, **opts), (pp, M, opts)


def _stated(name: str, pp: int, M: int, chunks: object, group: int | None = None) -> bool:
    """Whether the size is allowed, as the sources state each family's constraints
    (the DualPipe reference code's asserts, PyTorch's and Megatron's checks, Chimera's
    paper); written out here apart from the registry's code."""
    good_chunks = isinstance(chunks, int) and chunks >= (2 if name == "interleaved-1f1b-overlap" else 1)
    if group is not None:  # Megatron's checks on microbatch_group_size_per_vp_stage
        return good_chunks and pp <= group <= M and (M % group == 0 or M % group >= pp)
    return {
        "dualpipe": pp % 2 == 0 and M % 2 == 0 and M >= 2 * pp,
        "dualpipev": M >= 2 * pp,
        "chimera": pp % 2 == 0 and M % pp == 0,
        # PyTorch's interleaved classes: M a multiple of its rounds, max(1, M // pp)
        "interleaved-1f1b": good_chunks and M % max(1, M // pp) == 0,
        "interleaved-zb": good_chunks and M % max(1, M // pp) == 0,
        "looped-bfs": good_chunks,
        # Megatron's groups of pp micro-batches
        "interleaved-1f1b-overlap": good_chunks and M % pp == 0,
    }.get(name, True)


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_check_refuses_what_the_sources_refuse(name):
    fam = REGISTRY[name]
    for pp, M, opts in _grid(name):
        chunks = opts.get("chunks", fam.options.get("chunks"))
        stated = _stated(name, pp, M, chunks, opts.get("group_size"))
        assert (fam.check(pp, M, **opts) is None) == stated, (pp, M, opts)


def test_the_check_refuses_bad_calls_as_build_words_them():
    fam = REGISTRY["1f1b"]
    assert fam.check(0, 4) == "--pp must be an integer >= 1, got 0"
    assert fam.check(2, 0) == "--microbatches must be an integer >= 1, got 0"
    assert fam.check(2, 4, chunks=2) == "1f1b does not take --chunks; it takes no options"
    assert "too large" in fam.check(4096, 10**5)
    with pytest.raises(PipesimError, match="^Interleaved1F1B does not take --exact; it takes --chunks, --group-size$"):
        build("Interleaved1F1B", 2, 4, exact=True)  # worded with the name as typed
