"""Usable device memory: capacity as the device reports it, less what is held back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import PipesimError
from pipesim.planner.device_memory import MIB, communicators, usable
from pipesim.planner.layout import Layout
from pipesim.planner.specs import cluster_from_table, load_cluster, load_training

H100_MIB = 81559  # nvidia-smi memory.total of an H100 80GB HBM3


def test_capacity_is_what_nvidia_smi_reports():
    c = load_cluster("h100")
    assert c.memory_mib == H100_MIB
    assert c.hbm_gb * 1e9 == pytest.approx(H100_MIB * 2**20)  # 85.5e9 bytes, not 80e9
    assert c.hbm_gb > 85


def test_each_part_held_back_is_its_own_line():
    c, t = load_cluster("h100"), load_training()
    u = usable(c, t, Layout(pp=4, dp=8, tp=8), transient=3e9)
    held = dict(u.held)
    assert held["CUDA context"] == c.cuda_context_mib * MIB
    nccl = next(v for k, v in held.items() if k.startswith("NCCL"))
    assert nccl == 3 * c.nccl_mib_per_group * MIB  # tensor, data, pipeline
    assert held["backward transient (the loss or one recomputed layer)"] == 3e9
    rest = c.hbm_gb * 1e9 - held["CUDA context"] - nccl - 3e9
    frag = next(v for k, v in held.items() if k.startswith("allocator"))
    assert frag == pytest.approx(rest * t.allocator_fragmentation)
    assert u.bytes == pytest.approx(rest * (1 - t.allocator_fragmentation))


def test_h100_usable_is_above_the_old_flat_reserve():
    """The old planner counted 80e9 bytes and kept 10% back (72e9); the card has 85.5e9,
    and a tp8 x pp x dp rank, everything held back, keeps about 80e9 of them."""
    u = usable(load_cluster("h100"), load_training(), Layout(pp=4, dp=8, tp=8))
    assert 78e9 < u.bytes < 82e9


def test_nccl_grows_with_the_groups():
    c, t = load_cluster("h100"), load_training()
    sizes = [
        usable(c, t, lay).bytes
        for lay in (Layout(1, 1), Layout(1, 8), Layout(2, 8), Layout(2, 8, tp=8), Layout(2, 64, tp=8, ep=8))
    ]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert communicators(Layout(1, 1)) == []
    assert communicators(Layout(2, 64, tp=8, ep=8)) == ["tensor", "data", "pipeline", "expert", "expert data"]


def test_fragmentation_is_a_share():
    c = load_cluster("h100")
    none = usable(c, replace(load_training(), allocator_fragmentation=0.0), Layout(1, 1))
    some = usable(c, replace(load_training(), allocator_fragmentation=0.1), Layout(1, 1))
    assert some.bytes == pytest.approx(none.bytes * 0.9)
    for bad in (1, 1.5):
        with pytest.raises(PipesimError, match="allocator_fragmentation must be a share from 0 up to"):
            load_training(allocator_fragmentation=bad)


def test_ambiguous_memory_unit_is_refused():
    table = {"name": "c", "gpu": "X", "gpus": 8, "gpus_per_node": 8, "bf16_tflops": 1, "fp8_tflops": 0}
    table |= {"nvlink_gbps": 1, "network_gbps": 1}
    with pytest.raises(PipesimError, match="hbm_gb is ambiguous.*give memory_mib"):
        cluster_from_table({**table, "hbm_gb": 80}, "c.toml")
    with pytest.raises(PipesimError, match="missing key 'memory_mib': give device memory in MiB"):
        cluster_from_table(table, "c.toml")
    assert cluster_from_table({**table, "memory_mib": 81920}, "c.toml").hbm_gb == pytest.approx(85.899, abs=1e-3)


def test_memory_json_reports_layers_and_usable(capsys):
    import json

    from pipesim.cli import main

    assert main(["memory", "--model", "llama3-8b", "--pp", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    dense, head = d["activations_per_layer"]
    assert dense["layer"] == "dense" and head["layer"] == "head"
    assert dense["bytes"] == pytest.approx(sum(dense["tensors"].values()))
    assert "attention norm output" in dense["tensors"] and "loss softmax" in head["tensors"]
    u = d["usable"]
    assert u["usable_bytes"] == pytest.approx(u["capacity_bytes"] - sum(u["held_bytes"].values()))
    assert u["capacity_bytes"] == pytest.approx(H100_MIB * 2**20)


def test_the_plan_report_lists_what_is_held_back(capsys, tmp_path):
    from pipesim.cli import main

    out = tmp_path / "plan.md"
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "-o", str(out)]) == 0
    text = out.read_text()
    assert "GB usable" in text and "CUDA context" in text and "NCCL buffers" in text and "allocator fragmentation" in text
    assert "| usable memory |" in text or "usable memory" in text


def test_framework_buffers_are_held_back_where_the_training_says():
    """torchtitan's ``del pred`` strands one micro-batch's bf16 logits (2 bytes x vocab
    shard x tokens); torch.distributed.pipelining instead keeps every micro-batch's logits
    on the last stage and a receive buffer per micro-batch for each stage's input (every
    stage but the first) and output gradient (every stage but the last). Megatron-style
    training (the switches off) holds neither."""
    from pipesim.planner.device_memory import usable_on_rank
    from pipesim.planner.specs import load_model

    m, c = load_model("llama3-8b"), load_cluster("h100")
    t = replace(load_training(), seq=8192, global_batch=64, zero=3)
    key = "framework buffers (stranded logits, pipeline outputs and receive buffers)"

    def held(t, lay, rank: int, microbatches: int) -> dict:
        # a flat pipeline: rank r holds stage r; no FSDP stream pools, so no parameters enter
        return dict(usable_on_rank(m, c, t, lay, "full", (rank,), lay.pp, microbatches, 0.0).held)

    plain = Layout(1, 8, tp=2, micro_batch=2)  # 64 sequences: 4 micro-batches of 2 per replica
    assert key not in held(t, plain, 0, 4)
    logits = 2 * m.vocab / 2 * 2 * 8192
    assert held(replace(t, loss_frees_logits=True), plain, 0, 4)[key] == logits
    piped = Layout(4, 8, tp=2, micro_batch=2)
    kept = replace(t, loss_frees_logits=True, pp_keeps_outputs=True)
    boundary = 2 * m.hidden / 2 * 2 * 8192  # sequence-sharded under tensor parallelism
    assert held(kept, piped, 0, 4)[key] == 4 * boundary  # its output's gradient
    assert held(kept, piped, 1, 4)[key] == 4 * 2 * boundary  # its input and its output's gradient
    assert held(kept, piped, 3, 4)[key] == 4 * (logits + boundary)  # the logits and its input


def test_transients_per_stage_and_fsdp_accumulation():
    """The loss's backward runs on the last stage only; a stage FSDP keeps gathered adds
    each bf16 gradient into its unsharded fp32 buffer (FSDP2's
    accumulate_unsharded_grad_if_needed), so its recomputed layer makes no reduce-dtype
    copy, while one regathered per micro-batch copies the layer's gradients for the
    reduce-scatter (grad_reduce_bytes each)."""
    from pipesim.planner.device_memory import backward_transient
    from pipesim.planner.specs import load_model

    m = load_model("llama3-8b")
    t = replace(load_training(), seq=8192, zero=3, grad_reduce_bytes=4, loss_backward_copies=2)
    lay = Layout(4, 8, micro_batch=2)
    assert backward_transient(m, t, lay, "full", last_stage=True) > backward_transient(m, t, lay, "full", last_stage=False)
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336  # wq, wk, wv, wo; w1, w2, w3
    kept, regathered = (backward_transient(m, replace(t, fsdp_reshard=r), lay, "full", False) for r in ("never", "always"))
    assert regathered - kept == pytest.approx(4 * layer)


def test_fsdp_side_stream_pools_are_their_own_line():
    """With fsdp_stream_pools, what FSDP2's side streams keep reserved is its own line of
    what the card loses: for Llama 3 8B on FSDP8, two layers' bf16 all-gather outputs, one
    layer's fp32 reduce-scatter input and the fp32 gradient shards of the whole model (8.03e9
    parameters over 8); under pipeline parallelism the shards of what each rank holds: the
    first its layers and the embedding, a middle one its layers, the last its layers and
    the output head. Off, or without ZeRO-3, no such line."""
    from pipesim.planner.device_memory import rank_usables
    from pipesim.planner.footprint import memory_model
    from pipesim.planner.specs import load_model
    from pipesim.planner.stages import stage_parts

    m, c = load_model("llama3-8b"), load_cluster("h100")
    t = replace(load_training(), seq=8192, global_batch=16, zero=3, grad_reduce_bytes=4, zero_grad_frees=True)
    key = "FSDP's side-stream pools (all-gather outputs, reduce-scatter input, gradient shards)"

    def ranks(t, lay) -> tuple[list[dict], list[int]]:
        """Each rank's held-back parts on a flat pipeline (rank r holds stage r), and the
        layers the split gives each stage."""
        flat = tuple((r,) for r in range(lay.pp))
        parts = stage_parts(m, c, t, lay, lay.pp, "full", flat)
        mm = memory_model(m, t, lay, lay.pp, "full", parts)
        return [dict(u.held) for u in rank_usables(m, c, t, lay, "full", flat, lay.pp, 1, mm)], [len(p) for p in parts]

    lay = Layout(1, 8, micro_batch=2)
    assert key not in ranks(t, lay)[0][0]
    assert key not in ranks(replace(t, zero=1, fsdp_stream_pools=True), lay)[0][0]
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336
    block = layer + 2 * 4096  # and its two RMSNorm weights
    table = 128256 * 4096  # the embedding, and the untied output head of the same shape
    # the blocks and the untied embedding and head (the final norm's 4096 are not counted)
    params = 32 * block + 2 * table
    pools = ranks(replace(t, fsdp_stream_pools=True), lay)[0][0][key]
    assert pools == pytest.approx(2 * 2 * layer + 4 * layer + 4 * params / 8)
    # pp4 x dp8: each rank's blocks (as the split gives them) and its end of the model,
    # its gradient shards over 8
    held, layers = ranks(replace(t, fsdp_stream_pools=True), Layout(4, 8, micro_batch=2))
    own = [n * block + table * (r in (0, 3)) for r, n in enumerate(layers)]
    assert [h[key] for h in held] == pytest.approx([2 * 2 * layer + 4 * layer + 4 * p / 8 for p in own])
    # the recomputed layer's fp32 reduce-scatter copy is that stream's input: not counted twice
    from pipesim.planner.device_memory import backward_transient

    lay = Layout(1, 8, micro_batch=1)
    off, on = (backward_transient(m, replace(t, fsdp_stream_pools=p), lay, "full", False) for p in (False, True))
    assert off - on == pytest.approx(4 * layer)
