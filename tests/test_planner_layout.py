"""The layout: its groups, where their members sit, and the constraints on its degrees."""

from __future__ import annotations

from pipesim.planner.layout import Layout, Span, span


def members(lay: Layout, name: str, first: int) -> list[int]:
    """The group of dimension ``name`` that holds rank ``first`` (a group start)."""
    return [first + k * lay.stride(name) for k in range(lay.size(name))]


def test_megatron_rank_order_by_hand():
    """Megatron-Core's parallel_state docstring example, 16 GPUs, tp2 pp4 (dp2): tensor
    groups [0, 1], [2, 3], ...; data-parallel groups [0, 2], [1, 3], ...; pipeline groups
    [0, 4, 8, 12], [1, 5, 9, 13], ... (tp fastest, then dp, then pp)."""
    lay = Layout(pp=4, dp=2, tp=2)
    assert members(lay, "tp", 2) == [2, 3]
    assert members(lay, "dp", 1) == [1, 3]
    assert members(lay, "pp", 1) == [1, 5, 9, 13]
    with_cp = Layout(pp=2, dp=2, tp=2, cp=2)  # tp-cp-dp-pp: cp groups two apart, dp four
    assert members(with_cp, "cp", 0) == [0, 2] and members(with_cp, "dp", 0) == [0, 4]
    assert members(with_cp, "pp", 0) == [0, 8]


def test_moe_folding_meshes():
    """Qwen3-235B as Megatron-Bridge runs it on 256 GPUs: attention tp2 x dp16 x pp8;
    experts ep32 over the same 32 GPUs of a pipeline stage (etp1), so each expert has one
    copy (edp1); the expert group is 32 consecutive ranks."""
    lay = Layout(pp=8, dp=16, tp=2, ep=32)
    assert lay.gpus == 256 and lay.edp == 1
    assert members(lay, "ep", 32) == list(range(32, 64))
    folded = Layout(pp=8, dp=32, tp=2, ep=8, etp=2)  # tp2 x dp32 = 64 = etp2 x ep8 x edp4
    assert (folded.edp, folded.stride("ep"), folded.stride("edp")) == (4, 2, 16)
    assert str(lay) == "pp8 x dp16 x tp2, ep32"
    assert str(Layout(pp=8, dp=64, ep=64)) == "pp8 x dp64 x ep64"  # the form plans always printed
    assert str(Layout(pp=16, dp=16, tp=8, cp=16)) == "pp16 x dp16 x tp8 x cp16"


def test_spans_on_nvlink_domains():
    """Groups over consecutive ranks on 8-GPU nodes and on 72-GPU NVL72 racks: a tp8 group
    stays in a node; 16 GPUs one apart straddle two racks where 72 is not a multiple of 16
    (ranks 64-79: 8 in each); dp groups four apart on 8-GPU nodes have 2 members a node;
    members a domain apart each sit alone."""
    assert span(8, 1, 8) == span(8, 1, 72) == Span(True, 8, 1)
    assert span(1, 4, 8) == Span(True, 1, 1)  # a group of one is nowhere apart
    assert span(8, 1, 8).inside
    assert span(16, 1, 72).inside is False and span(16, 1, 72).per_domain == 8
    assert span(9, 8, 72).inside  # 72 = 9 x 8: every dp9 group over tp8 fits a rack
    assert (span(32, 4, 8).per_domain, span(32, 4, 8).domains) == (2, 16)
    assert (span(4, 8, 8).inside, span(4, 8, 8).per_domain) == (False, 1)
    assert span(64, 1, 72).per_domain == 8  # the group of ranks 64-127: 8 in rack 0, 56 in rack 1
