"""What the free search covers: context parallelism at 8K sequences, models with experts
(tensor parallelism, expert tensor parallelism), and the bounds that let it refuse layouts
without building their costs."""

from __future__ import annotations

from dataclasses import replace

from pipesim.planner.bounds import static_floor
from pipesim.planner.candidates import Candidate, layouts
from pipesim.planner.device_memory import rank_usables
from pipesim.planner.evaluate import Prepared, prepare
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.shared import Shared
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


def test_nvl72_domain_searches_cp2_beside_tp4_as_mlperf_gb200_runs_it():
    """NVIDIA's MLPerf Training v5.0 Llama 3.1 405B on GB200 NVL72 runs TP4 PP8 CP2, the tp x
    cp group of 8 inside the 72-GPU NVLink domain (training_results_v5.0, read in the fork
    prishajain1/training_results_v5.0 at 0fdc28f: config_GB200_64x4x112xtp4pp8cp2_cg.sh,
    config_GB200_128x4x112xtp4pp8cp2_cg_dplast.sh, config_GB200_384x4x48xtp4pp8cp2.sh).
    Its 256, 512 and 1536 GPUs are no multiple of a 72-GPU rack, which the preset takes;
    8 racks, 576 GPUs, at the preset's 2048 sequences of 8192 tokens. By hand: tp4 leaves
    144 = 16 x 9 GPUs a tensor rank; pipeline depths are the powers of two dividing it and
    those times 9. No tp is starved (pp9 leaves 576 / (tp x 9), a power of two of
    replicas, each fed 2048 / replicas >= 18 = 2pp micro-batches), so at 8K tokens cp2
    alone (2 x 2 chunks of 2048 tokens), now beside tp4 too: 4 x 2 = 8 GPUs fill whole
    slots of a 72-GPU domain. cp2 needs 144 / pp even (pp 1, 2, 4, 8, 9, 18, 36, 72), and
    dp = 72 / pp must divide the 2048 sequences: pp 9, 18, 36, 72."""
    m, c, t = setup("llama3-405b", "gb200-nvl72", 576, seq=8192, global_batch=2048)
    found = shapes(layouts(m, c, t))
    assert {s for s in found if s[:2] == (4, 2)} == {(4, 2, 9, 8), (4, 2, 18, 4), (4, 2, 36, 2), (4, 2, 72, 1)}
    assert {s[1] for s in found} == {1, 2}  # cp4 would cut 8K into chunks of 1024: not searched fed
    assert {s[0] for s in found if s[1] > 1} == {4, 8}  # tp2 x cp2 and tp1 x cp2: narrower than tp8, left out


def test_eight_gpu_nodes_keep_cp2_beside_the_largest_tp_alone():
    """On a node of 8 (b200 and h100: no NVLink domain past the node) cp2 beside tp4 would
    send the ring between nodes: the candidates stay as they were. llama3-405b at the
    presets' 1024 GPUs, 2048 sequences of 8192 tokens, by hand: tp 1, 2, 4, 8 (128 query
    and 8 key/value heads); none starved (replicas 1024 / (tp x pp) get 2 x tp x pp >= 2pp
    micro-batches each); cp2 beside tp8 alone, wherever a stage's 128 / pp GPUs hold two
    context ranks (pp 1 to 64; pp128 exceeds the 126 layers), dp = 64 / pp."""
    by_hand = {(8, 2, pp, 64 // pp) for pp in (1, 2, 4, 8, 16, 32, 64)}
    for cluster in ("b200", "h100"):
        m, c, t = setup("llama3-405b", cluster, 1024, seq=8192, global_batch=2048)
        found = shapes(layouts(m, c, t))
        assert {s for s in found if s[1] > 1} == by_hand, cluster
        assert {s[0] for s in found} == {1, 2, 4, 8}, cluster


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
