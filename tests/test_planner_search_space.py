"""What the free search covers: context parallelism at 8K sequences, models with experts
(tensor parallelism, expert tensor parallelism), and the bounds that let it refuse layouts
without building their costs."""

from __future__ import annotations

from dataclasses import replace

from pipesim.planner.bounds import static_floor
from pipesim.planner.candidates import Candidate, layouts
from pipesim.planner.device_memory import rank_usables
from pipesim.planner.evaluate import Prepared, Shared, prepare
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.specs import load_cluster, load_model, load_training, model_training
from pipesim.planner.stages import stage_parts


def setup(model: str, cluster: str, gpus: int, **training):
    m, c = load_model(model), load_cluster(cluster).resized(gpus)
    return m, c, load_training(base={**model_training(model), **training})


def shapes(found) -> set[tuple[int, int, int, int]]:
    return {(lay.tp, lay.cp, lay.pp, lay.dp) for lay in found}


def test_fed_8k_sequences_search_cp2_beside_the_largest_tp_alone():
    """Megatron-Bridge's Llama 3 70B set-up (64 H100, 8192 tokens, 128 sequences): tp 1,
    2, 4 and 8 are searched (the 64 query and 8 key/value heads divide each; 8 fills the
    NVLink domain), and at each pp1 already gives every replica 2pp micro-batches, so
    none is starved. The 8K sequence splits into 2cp chunks of 2048 tokens or more only
    at cp2, searched beside tp8 alone: wherever a stage's 64 / (8 x pp) GPUs hold two
    context ranks (pp 1, 2, 4), dp the rest. No cp beside tp 1-4, no cp4 or cp8, and at
    4096 tokens (cp2's chunks would be 1024) no cp at all."""
    m, c, t = setup("llama3-70b", "h100", 64, seq=8192, global_batch=128)
    by_hand = {(8, 2, 1, 4), (8, 2, 2, 2), (8, 2, 4, 1)}
    found = shapes(layouts(m, c, t))
    assert {s for s in found if s[1] > 1} == by_hand
    assert {s[0] for s in found} == {1, 2, 4, 8}
    m, c, t = setup("llama3-70b", "h100", 64, seq=4096, global_batch=128)
    assert {lay.cp for lay in layouts(m, c, t)} == {1}


def test_bridge_405b_cp2_layout_is_searched_and_starved_tp_keeps_deeper_cp():
    """Megatron-Bridge 25.09's Llama 3.1 405B (1024 H100, 8192 tokens, 512 sequences) runs
    TP8 PP8 CP2 DP8: tp8 x pp8 leaves 16 replicas of 32 micro-batches (>= 2pp = 16, fed),
    so tp8 searches cp1 and cp2 only. tp4 is fed too (pp1: 256 replicas of 2 = 2pp
    micro-batches) and is not the largest tp: cp1 alone. At tp2 no pipeline depth feeds
    its replicas (pp stages x replicas = 512 GPUs: 512 / replicas = pp micro-batches each,
    never 2pp), so it keeps the starved rule: cp up to 8 (chunks of 512 tokens)."""
    m, c, t = setup("llama3-405b", "h100", 1024, seq=8192, global_batch=512)
    found = shapes(layouts(m, c, t))
    assert (8, 2, 8, 8) in found
    assert {s[1] for s in found if s[0] == 8} == {1, 2}
    assert {s[1] for s in found if s[0] == 4} == {1}
    assert {s[1] for s in found if s[0] == 2} == {1, 2, 4, 8}


def test_starved_short_sequences_still_search_without_cp():
    """512-token sequences, 8 a step, on 64 GPUs: every tp is starved, and cp2's chunks
    would be 128 tokens (below the 512 searched), so no cp; the layouts without it (tp8
    x dp8, each replica one sequence) stay searched rather than none at all."""
    m, c, t = setup("llama3-8b", "h100", 64, seq=512, global_batch=8)
    found = shapes(layouts(m, c, t))
    assert (8, 1, 1, 8) in found and {s[1] for s in found} == {1}


def test_moe_free_search_covers_megatron_bridge_deepseek_layout():
    """Megatron-Bridge runs DeepSeek-V3 on 1024 H100 as TP2 PP8 EP64 (attention dp64, the
    experts folded as etp1 x ep64 x edp2): the free search now holds that layout, and
    tensor parallelism up to the node for the attention beside it."""
    m, c, t = setup("deepseek-v3", "h100", 1024, seq=4096, global_batch=8192)
    found = set(layouts(m, c, t))
    assert Layout(pp=8, dp=64, tp=2, ep=64, micro_batch=1) in found
    assert {lay.tp for lay in found} == {1, 2, 4, 8}


def test_expert_tensor_parallelism_is_searched_where_ep_cannot_grow():
    """Mixtral's 8 experts on 64 GPUs: etp > 1 only beside ep = 8 (every expert on a rank
    of its own already) and only as etp = tp, Megatron-LM's default; etp1 with every power
    of two up to 8 beside it."""
    m, c, t = setup("mixtral-8x22b", "h100", 64)
    found = list(layouts(m, c, t))
    sharded = [lay for lay in found if lay.etp > 1]
    assert sharded and all(lay.ep == 8 and lay.etp == lay.tp for lay in sharded)
    assert {lay.ep for lay in found if lay.etp == 1 and lay.tp == 2} == {1, 2, 4, 8}


def test_static_floor_never_exceeds_what_a_candidate_holds():
    """The floor the search refuses layouts by is below every candidate's own fullest rank
    (any split, any placement): checked over DeepSeek-V3's candidates on 256 H100 that pass
    the cheap checks, across schedules with one, two and V-shaped chunks per rank."""
    m, c, t = setup("deepseek-v3", "h100", 256, global_batch=1024)
    shared, seen = Shared(m, c, t), 0
    for lay in [Layout(pp=16, dp=16, ep=16), Layout(pp=8, dp=16, tp=2, ep=32), Layout(pp=8, dp=32, ep=32)]:
        floor = static_floor(m, t, lay)
        for name, chunks in (("1f1b", None), ("interleaved-1f1b", 2), ("dualpipev", None)):
            p = prepare(m, c, t, Candidate(lay, name, chunks, "selective", 1024 // lay.dp), shared)
            if isinstance(p, Prepared):
                seen += 1
                assert floor <= max(p.statics) * (1 + 1e-12)
    assert seen >= 3


def test_layout_over_its_static_floor_is_refused_with_the_same_reason():
    """On 80 GB, DeepSeek-V3 at pp2 x ep8 cannot hold its experts: the floor refuses it,
    and so does the full check with its real split."""
    m, c, t = setup("deepseek-v3", "h100", 256, global_batch=1024)
    lay = Layout(pp=2, dp=128, ep=8)
    # the floor is held to the most any rank of the layout could fill: no rank fits below it
    assert static_floor(m, t, lay) > Shared(m, c, t).most_usable(lay, "selective")
    # no rank of a placement (here 1F1B's flat one, each rank with its stage's parameters) has more
    parts = stage_parts(m, c, t, lay, 2, "selective", ((0,), (1,)))
    mm = memory_model(m, t, lay, 2, "selective", parts)
    own = rank_usables(m, c, t, lay, "selective", ((0,), (1,)), 2, 1024 // lay.dp, mm)
    assert Shared(m, c, t).most_usable(lay, "selective") >= max(u.bytes for u in own)
    p = prepare(m, c, t, Candidate(lay, "1f1b", None, "selective", 8), Shared(m, c, t))
    assert not isinstance(p, Prepared) and p.reason.startswith("parameters, gradients and optimizer states need")
    roomy = replace(c, hbm_gb=10_000)
    assert static_floor(m, t, lay) < Shared(m, roomy, t).most_usable(lay, "selective")


def test_no_recomputation_is_left_out_where_selective_is_its_twin():
    """Llama 3 8B under flash attention: selective recomputation recomputes nothing the
    kernel does not already, so each candidate without it would be its selective twin's
    step with more memory. Only zb-auto, ordered under each candidate's own memory room,
    keeps both; and the two really do simulate to the same step."""
    from pipesim.planner.candidates import candidates
    from pipesim.planner.evaluate import evaluate

    m, c, t = setup("llama3-8b", "h100", 16, global_batch=32, seq=2048)
    cands = list(candidates(m, c, t))
    assert {x.schedule for x in cands if x.recompute == "none"} == {"zb-auto"}
    assert {x.recompute for x in cands} == {"none", "selective", "full"}
    lay = Layout(pp=2, dp=8)
    none, sel = (evaluate(m, c, t, Candidate(lay, "1f1b", None, rc, 4)) for rc in ("none", "selective"))
    assert none.step_time == sel.step_time and sel.memory_gb <= none.memory_gb


def test_a_plan_shows_no_runner_up_that_is_its_selective_twin_holding_more():
    """zb-auto keeps candidates without recomputation beside their selective twins; where
    they take the same step the one holding more memory is not a runner-up worth a row
    (it showed as a second, identical line of the ranking)."""
    from pipesim.planner.search import search

    m, c, t = setup("llama3-8b", "h100", 16, global_batch=32, seq=2048)
    plan = search(m, c, t, schedules=["zb-auto"], keep=1000)
    key = lambda r: (r.candidate.layout, r.candidate.schedule, r.candidate.chunks, r.candidate.microbatches)  # noqa: E731
    selective = {key(r): r for r in plan.results if r.candidate.recompute == "selective"}
    assert selective
    for r in plan.results:
        s = selective.get(key(r))
        if r.candidate.recompute == "none" and s is not None:
            assert r.step_time < s.step_time or r.memory_gb < s.memory_gb


def test_a_pinned_etp_searches_the_ep_degrees_its_fold_takes():
    """Mixtral 8x22B on 64 H100s, --etp 8 --pp 2: a stage's 32 GPUs fold as etp x ep x edp
    (Megatron-Core's MoE parallel folding), so etp8 takes ep 1, 2 and 4 (8 x 4 = 32). The
    free search's rule for etp > 1, ep = the experts (8, which 32 / 8 = 4 GPUs cannot hold),
    left the pin no layout, refused as "no layout ... divides 64 GPUs"."""
    from pipesim.planner.candidates import Pins

    m, c, t = setup("mixtral-8x22b", "h100", 64)
    found = list(layouts(m, c, t, Pins(etp=8, pp=2, tp=1)))
    assert {lay.ep for lay in found} == {1, 2, 4} and {lay.etp for lay in found} == {8}
