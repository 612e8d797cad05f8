"""Peak memory per GPU: pipesim against torchtitan's published figures.

    PYTHONPATH=src python benchmarks/peak_memory.py

torchtitan's docs/performance.md (Llama 3.1 on 96 GB H100s, measured at torchtitan 9dec370,
torch 1963fc8) gives each run's memory as the largest ``max_reserved`` of the caching
allocator over the ranks (train.py logs ``device_mem_stats.max_reserved_gib``; the CUDA
context and NCCL's own buffers are outside it). Each row below is set up as that page and
the configs at that commit say:

- activation checkpointing: Tables 1 and 3 "selective", which llama3_8b.toml at 9dec370 sets
  to ``selective_ac_option = 'op'`` (pipesim's ``op``); every other table "full";
- the loss: ``cross_entropy(pred.flatten(0, 1).float(), ...)`` (train.py), with ``pred``
  deleted before the backward: an fp32 log-softmax saved, two more fp32 copies in its
  backward (``loss_backward_copies = 2``), three under tensor parallelism's loss_parallel;
  its kernels move 36 bytes a logit, 76 under loss_parallel (``training.torchtitan_loss``);
- eager rows run torchtitan's eager RMSNorm, rotary and SwiGLU (``fused_elementwise =
  false``); torch.compile rows (every row but Tables 1 and 3's eager ones) the compiled
  block's (``fused_kernels = "inductor"``: what AOTAutograd's partitioner saves, which
  under op checkpointing leaves out the down projection's output; activations.py);
- FSDP2 over the data (and context) ranks with fp32 gradient reduction; without pipeline
  parallelism every block but the last is resharded after its forward, with it none;
- pipeline rows: ``pipeline_parallel_microbatches`` defaults to the pipeline degree (8), so
  the local batch of 32 runs as 8 micro-batches of 4, 8 of 1 at local batch 8; torchtitan's
  interleaved 1F1B runs two stages per rank.

What PyTorch's own parallelism keeps (Training's last block of switches, all on here):

- DTensor's sequence parallelism: each column-parallel multiply (wq/wk/wv, w1/w3 and the
  output head) keeps the all-gathered input, the whole sequence (``sp_saves_gathered``);
- FSDP2 over the fp32 model: 16 bytes a parameter over the shards, no bf16 shard
  (``fsdp_fp32_shards``), and no gradient shard at the activations' peak, train.py's
  ``optimizers.zero_grad()`` having freed them (``zero_grad_frees``); under pipelining a
  stage's unsharded fp32 gradients only from its first backward, which makes them, to its
  last, whose reduce-scatter drops them (``grads_from_first_backward``);
- ``del pred``: the bf16 logits' block stays reserved through the loss's backward, which
  only asks for larger fp32 blocks (``loss_frees_logits``);
- torch.distributed.pipelining: the last stage keeps every micro-batch's logits until the
  step ends, and every stage a receive buffer per micro-batch for its input and its
  output's gradient (``pp_keeps_outputs``); before pytorch/pytorch#164329 (October
  2025), every stage but the first each micro-batch's input gradient, left on the receive
  buffer until the next step (``pp_keeps_input_grads``); and before pytorch/pytorch#153383
  (May 2025) every stage but the last each micro-batch's output, in ``output_chunks``
  until the next step (``pp_keeps_stage_outputs``);
- context parallelism's attention backward: the whole sequence's keys and values gathered
  (torchtitan's default rotate method, ``allgather``), fp32 gradient accumulators and the
  ring's dk/dv buffers (``torch_context_parallel``);
- FSDP2's collectives on their own CUDA streams, whose freed blocks the caching allocator
  reuses only there: two layers' flat all-gather outputs, one layer's fp32 reduce-scatter
  input and the fp32 gradient shards, reserved beside the default stream's memory
  (``fsdp_stream_pools``);
- torch.compile around each block only (apply_compile): the final norm runs eager, with
  the eager RMSNorm's fp32 copies (``final_norm_eager``).

The 405B rows run Float8 linears with FSDP's float8 all-gather, as llama3_405b.toml at
9dec370 sets (``enable_fsdp_float8_all_gather``): a stage kept gathered holds its blocks'
weights in one byte (``fsdp_float8_all_gather``), except at FSDP 1 (the CP8 row), where
torchtitan/float8.py at that commit leaves it off (it asks ``dp_shard_enabled``) and the
stage holds them in bf16. The other Float8 rows' configs at that
commit do not turn Float8 on; how their command lines did is not published: they run
without it (under FSDP without pipelining it moves only two layers' gathered weights).

pipesim's peak is the largest over the ranks of each rank's own: its parameters, gradients
and optimizer states plus its activation peak over the schedule (the head's saved loss on
the last stage; the "static" column is what a rank holds all step, and the pipeline rows'
"activations" column holds the gradients alive beside them at the peak), its backward transient (the loss's on the rank of the last stage, one
recomputed layer's on the others), FSDP's gathered parameters and the framework's
buffers and FSDP's stream pools above, as the planner holds them back on that rank
(``device_memory.usable_on_rank``), over (1 - allocator_fragmentation) for what the
allocator reserves beyond what it hands out.
"""

from __future__ import annotations

from pipesim.memory import memory
from pipesim.planner.device_memory import rank_usables
from pipesim.planner.footprint import memory_model
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Training, load_cluster, load_model
from pipesim.planner.stages import component_costs, stage_parts
from pipesim.planner.training import torchtitan_loss
from pipesim.schedules import build
from pipesim.simulate import simulate

GIB = 2**30
#: torch.compile around each block (apply_compile): what AOTAutograd's partitioner saves
COMPILE = dict(fused_kernels="inductor")


def rows():
    """(table and run, model, published GiB, layout, training fields, recomputation,
    schedule, micro-batches), from docs/performance.md's six tables."""
    for dp, eager, compiled in ((8, 82.4, 77.0), (128, 67.0, 62.0)):  # Tables 1 and 3: local batch 2
        lay = dict(dp=dp, micro_batch=2)
        yield f"8B FSDP{dp}", "llama3-8b", eager, lay, dict(seq=8192, fused_elementwise=False), "op", "1f1b", 1
        yield f"8B FSDP{dp} + compile", "llama3-8b", compiled, lay, dict(seq=8192, **COMPILE), "op", "1f1b", 1
    # Tables 2, 4, 5 and 6: torch.compile and torchao's Float8 linears
    f8 = dict(precision="fp8", fp8_scaling="tensor", fp8_casts="torchao", **COMPILE)
    for cp, pub in zip((1, 2, 4, 8), (83.9, 84.2, 84.0, 84.5)):  # Table 2: FSDP x CP on 8 GPUs, local batch 1
        lay = dict(dp=8 // cp, cp=cp, micro_batch=1)
        yield f"8B FSDP{8 // cp} CP{cp} s{32 * cp}K", "llama3-8b", pub, lay, dict(seq=32768 * cp, **f8), "full", "1f1b", 1
    for name, pub in (("", 71.9), (" AsyncTP", 67.6)):  # Table 4: local batch 16
        lay = dict(dp=32, tp=8, micro_batch=16)
        yield f"70B FSDP32 TP8{name}", "llama3-70b", pub, lay, dict(seq=8192, **f8), "full", "1f1b", 1
    # the 405B rows: llama3_405b.toml at 9dec370 turns on enable_fsdp_float8_all_gather
    f8 = dict(f8, fsdp_float8_all_gather=True)
    for schedule, pub in (("1f1b", 82.5), ("interleaved-1f1b", 72.7)):  # Table 5: local batch 32 as 8 micro-batches
        lay = dict(dp=8, tp=8, pp=8, micro_batch=4)
        yield f"405B FSDP8 TP8 PP8 {schedule}", "llama3-405b", pub, lay, dict(seq=8192, **f8), "full", schedule, 8
    for cp, pub in zip((1, 2, 4, 8), (75.3, 75.9, 77.1, 84.9)):  # Table 6: 1F1B, local batch 8
        lay = dict(dp=8 // cp, cp=cp, tp=8, pp=8, micro_batch=1)
        name = f"405B FSDP{8 // cp} TP8 PP8 CP{cp} s{32 * cp}K"
        # torchtitan/float8.py at 9dec370 turns the float8 all-gather on only where
        # parallel_dims.dp_shard_enabled: not at FSDP 1 (CP8), whose FSDP shards over the
        # context ranks alone and gathers the bf16 cast (published_runs.toml's CP8 row too)
        fields = dict(f8, fsdp_float8_all_gather=8 // cp > 1)
        yield name, "llama3-405b", pub, lay, dict(seq=32768 * cp, **fields), "full", "1f1b", 8


def torchtitan_training(fields: dict, tp: int) -> Training:
    """torchtitan's training set-up at 9dec370 (see the module docstring)."""
    return Training(
        **{
            "zero": 3,
            "grad_reduce_bytes": 4,  # mixed_precision_reduce = "float32"
            **torchtitan_loss(tp),  # its eager loss on upcast logits, loss_parallel under TP
            "global_batch": 1,
            # PyTorch's own parallelism (Training's last block of fields)
            "sp_saves_gathered": True,  # DTensor's SequenceParallel/ColwiseParallel
            "fsdp_fp32_shards": True,  # FSDP2 over an fp32 model
            "zero_grad_frees": True,  # optimizers.zero_grad() at each step's start
            "loss_frees_logits": True,  # train.py: del pred before loss.backward()
            "pp_keeps_outputs": True,  # torch.distributed.pipelining
            "torch_context_parallel": True,  # torch's context_parallel ...
            "cp_comm": "all_gather",  # ... with context_parallel_rotate_method = "allgather"
            "fsdp_stream_pools": True,  # FSDP2's collectives on their own CUDA streams
            "final_norm_eager": True,  # apply_compile wraps the blocks, not the final norm
            "pp_keeps_input_grads": True,  # pipelining's stage_backward at torch 1963fc8
            "pp_keeps_stage_outputs": True,  # pipelining's output_chunks at torch 1963fc8
            "grads_from_first_backward": True,  # FSDP2's unsharded gradients under pipelining
            "w_keeps_graph": True,  # pipelining's stage_backward_input retains the graph until the W
            **fields,
        }
    )


def predict(model: str, lay_fields: dict, t_fields: dict, recompute: str, schedule: str = "1f1b", M: int = 1) -> dict:
    """pipesim's peak for one row, GiB by part, on the rank whose peak is the largest.

    Each rank's peak is its own: its static bytes and activation peak over the schedule,
    its backward transient (the loss's on the rank holding the last stage, one recomputed
    layer's elsewhere), FSDP's gathered parameters, and what the framework keeps there."""
    m, c = load_model(model), load_cluster("h100")  # the peak does not depend on the card's capacity
    lay = Layout(**{"pp": 1, "dp": 1, **lay_fields})
    t = torchtitan_training(t_fields, lay.tp)
    s = build(schedule, lay.pp, M, **({"chunks": 2} if schedule.startswith("interleaved") else {}))
    stages = s.placement.stages
    held = s.placement.held()
    parts = stage_parts(m, c, t, lay, stages, recompute, held)
    mm = memory_model(m, t, lay, stages, recompute, parts)
    mem = memory(s, simulate(s, component_costs(m, c, t, lay, stages, recompute, parts)), mm)
    ranks = []
    # what the planner holds back on each rank (device_memory.usable_on_rank), less the
    # CUDA context and NCCL's buffers, which max_reserved does not count, and with the
    # fragmentation share taken of the whole reserved peak below
    for r, u in enumerate(rank_usables(m, c, t, lay, recompute, held, stages, M, mm)):
        back = {what.split(" (")[0]: b for what, b in u.held}
        held_all_step = mem.params[r] + mem.optimizer[r] + (0.0 if mm.grads_in_backward else mem.grads[r])
        part = {
            "static": held_all_step / GIB,
            "activations": (mem.peak[r] - held_all_step) / GIB,  # with the gradients alive beside them
            "transient": back["backward transient"] / GIB,
            "gathered": back["FSDP gathered parameters"] / GIB,
            "pools": back.get("FSDP's side-stream pools", 0.0) / GIB,
            "framework": back.get("framework buffers", 0.0) / GIB,
        }
        part["reserved"] = sum(part.values()) / (1 - t.allocator_fragmentation)
        ranks.append(part)
    return max(ranks, key=lambda p: p["reserved"])


def main() -> None:
    print("## Peak memory per GPU: torchtitan's published max reserved against pipesim\n")
    print(
        "| run | AC | published (GiB) | static | activations | transient | FSDP gathered | FSDP streams | framework "
        "| pipesim reserved (GiB) | error |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errors = []
    for name, model, pub, lay, tf, rc, schedule, M in rows():
        p = predict(model, lay, tf, rc, schedule, M)
        errors.append(p["reserved"] / pub - 1)
        print(
            f"| {name} | {rc} | {pub:.1f} | {p['static']:.1f} | {p['activations']:.1f} | {p['transient']:.1f} | "
            f"{p['gathered']:.1f} | {p['pools']:.1f} | {p['framework']:.1f} | {p['reserved']:.1f} | {errors[-1]:+.1%} |"
        )
    inside = sum(abs(e) <= 0.10 for e in errors)
    mean = sum(map(abs, errors)) / len(errors)
    print(
        f"\n{len(errors)} rows: {inside} within 10% (target: all), mean |error| {mean:.1%}, mean signed {sum(errors) / len(errors):+.1%}."
    )


if __name__ == "__main__":
    main()
