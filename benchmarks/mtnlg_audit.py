"""What DeepSpeed's pipeline engine did per micro-batch and per step in MT-NLG 530B's run
that pipesim's pinned model of the row does not price, each priced with pipesim's own
cost functions at the 2240-GPU row's shapes, beside the gap to the published step.

    python benchmarks/mtnlg_audit.py

The code audited is the public code of the run's time (late 2021):

- microsoft/DeepSpeed v0.5.8 (9aa288d7452c, 30 Nov 2021): deepspeed/runtime/pipe/engine.py,
  p2p.py, module.py, schedule.py; deepspeed/runtime/utils.py (PartitionedTensor);
  deepspeed/runtime/activation_checkpointing/checkpointing.py; deepspeed/runtime/zero/
  stage2.py (ZeRO stage 1 runs there unless zero_legacy_stage1); deepspeed/utils/timer.py.
- microsoft/Megatron-DeepSpeed acc3e9b5 (12 Nov 2021): pretrain_gpt.py, megatron/
  initialize.py, megatron/model/gpt_model.py (GPTModelPipe), megatron/mpu/data.py,
  megatron/utils.py, and its example launch script examples/curriculum_learning/
  ds_pretrain_gpt2.sh with ds_zero_stage_1_config_baseline.json.

Each item is put where the code runs it (a stage's forward or backward, a transfer, the
step's end) and the step is then timed by a replay of DeepSpeed's own instruction order
(``schedule.TrainSchedule``, rendered here from its step-to-micro-batch arithmetic) in
which a send and its receive block both ranks' streams until both have reached them
(NCCL's blocking send/recv under the engine's ``p2p.send``/``p2p.recv``). The stage
times are pipesim's for the row (``stages.component_costs``, without its blocking-transfer
pseudo-layer, which the replay's transfers replace). Each row's seconds are the replay's
step with that item added less the replay's step without it: an item only a middle stage
pays is hidden while it stays under the last stage's extra work (the output head).

A host sync (a ``.tolist()``, ``.cpu()`` or ``torch.cuda.synchronize``) drains the GPU's
queue; it is priced as the host's issue (``floors.host_floor``) of the seven kernels that
then run before the layer's first multiply, after which the host is ahead again (a
layer's multiplies at this width take milliseconds against microseconds of issue).

What it finds (2240 GPUs): everything the code provably runs and pipesim did not price
comes to about 0.29 s a step, of a 14.2 s gap; the largest part, ZeRO stage 1's
all-reduce of every gradient (0.14 s), is now priced (``zero1_allreduce``, pinned on the
rows). The switches no public source says MT-NLG turned on (partitioned activation
checkpoints, per-layer synchronisation, wall-clock timers, CUDA_LAUNCH_BLOCKING) would add
under 0.7 s between them. DeepSpeed's own order of blocking transfers costs less in the
replay (0.43 s) than pipesim already charges for them (0.86 s). Closing the gap would take a
stall of about 51 ms in every one of the 274 slots, a third of a slot's compute: nothing
in this code is of that size.
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from published_runs import DATA, published_step, specs  # noqa: E402

from pipesim.planner import nccl  # noqa: E402
from pipesim.planner.calibrate import check_layout, evaluate_layout  # noqa: E402
from pipesim.planner.collectives import p2p_seconds, ring_seconds, tied_embedding_sync  # noqa: E402
from pipesim.planner.compute import hbm_rate  # noqa: E402
from pipesim.planner.floors import host_floor, kernel_floor, layer_kernels  # noqa: E402
from pipesim.planner.stages import component_costs  # noqa: E402

ROW = "MT-NLG 530B, 2240 GPUs"
DS = "DeepSpeed v0.5.8"
MDS = "Megatron-DeepSpeed acc3e9b5"


# --------------------------------------------------------------------------------------
# DeepSpeed's TrainSchedule, replayed with blocking transfers


def ds_program(stage: int, stages: int, micro: int) -> list[tuple[str, int]]:
    """One stage's instructions, in the order DeepSpeed's TrainSchedule issues them: it runs
    2 (M + S - 1) steps, even stages forward on even steps and backward on odd ones (odd
    stages the other way round); a forward step first receives its input and sends the
    gradient of the previous (backward) step's micro-batch, a backward step first sends the
    output of the previous (forward) step and receives its own output's gradient."""

    def micro_batch(step: int) -> tuple[int, bool]:
        forward = (step % 2) == (stage % 2)
        if forward:
            return step // 2 - stage // 2, True
        if step % 2 == 0:
            return step // 2 - stages + (stage + 1) // 2, False
        return (step - 1) // 2 - stages + 1 + stage // 2, False

    def valid(k: int) -> bool:
        return 0 <= k < micro

    prog: list[tuple[str, int]] = []
    prev = -1
    for step in range(2 * (micro + stages - 1)):
        k, forward = micro_batch(step)
        if forward and stage > 0:
            prog += [("recv_act", k)] if valid(k) else []
            prog += [("send_grad", prev)] if valid(prev) else []
        elif not forward and stage < stages - 1:
            prog += [("send_act", prev)] if valid(prev) else []
            prog += [("recv_grad", k)] if valid(k) else []
        if valid(k):
            prog.append(("fwd" if forward else "bwd", k))
        prev = k
    return prog


#: a transfer's instruction, the matching one on the other rank, and which neighbour
MATCH = {"send_act": ("recv_act", 1), "recv_act": ("send_act", -1), "send_grad": ("recv_grad", -1), "recv_grad": ("send_grad", 1)}


def replay(progs: list[list[tuple[str, int]]], f: list[float], b: list[float], transfer: float) -> float:
    """Seconds from the first instruction to the last: computes take ``f``/``b`` of their
    stage; a send and its receive start when both ranks have reached them and hold both
    for ``transfer``."""
    stages = len(progs)
    clock, pc = [0.0] * stages, [0] * stages
    left = sum(len(p) for p in progs)
    while left:
        moved = False
        for s in range(stages):
            while pc[s] < len(progs[s]):
                op, k = progs[s][pc[s]]
                if op in ("fwd", "bwd"):
                    clock[s] += f[s] if op == "fwd" else b[s]
                    pc[s], left, moved = pc[s] + 1, left - 1, True
                    continue
                other, side = MATCH[op]
                o = s + side
                if pc[o] >= len(progs[o]) or progs[o][pc[o]] != (other, k):
                    break
                clock[s] = clock[o] = max(clock[s], clock[o]) + transfer
                pc[s], pc[o], left, moved = pc[s] + 1, pc[o] + 1, left - 2, True
        if not moved:
            raise RuntimeError("the replay deadlocked: the instruction order does not pair up")
    return max(clock)


# --------------------------------------------------------------------------------------
# the items


@dataclass
class Item:
    """What one piece of the code adds: seconds to every forward / backward of the stages
    ``where`` names, to every transfer, and once at the step's end."""

    name: str
    code: str
    on: str
    f: float = 0.0
    b: float = 0.0
    where_f: str = "all"
    where_b: str = "all"
    transfer: float = 0.0
    end: float = 0.0
    priced: bool = False
    extra: dict = field(default_factory=dict)


def stage_mask(where: str, stages: int) -> list[bool]:
    return {
        "all": [True] * stages,
        "not-first": [s > 0 for s in range(stages)],
        "not-last": [s < stages - 1 for s in range(stages)],
        "ends": [s in (0, stages - 1) for s in range(stages)],
        "last": [s == stages - 1 for s in range(stages)],
    }[where]


def items(m, c, t, lay) -> list[Item]:
    T, h, tp = lay.tokens(t.seq), m.hidden, lay.tp
    full = T * h * 2  # one micro-batch's hidden states, fp16
    part = full / tp  # a PartitionedTensor's local piece
    hbm = hbm_rate(c, t)
    tp_where = lay.span("tp", c.domain)
    gather = nccl.collective_seconds(c, "all_gather", full, tp, tp_where)
    # PartitionedTensor.full(): zeros the flat buffer (write), copies the local piece in
    # (read, write), all-gathers, returns a clone (read, write)
    rebuild = (full + 2 * part + 2 * full) / hbm
    issue = host_floor(t, 1)  # the host's issue of one kernel, what a drained queue waits for
    # a host sync drains the GPU's queue; the kernels up to the layer's first multiply
    # (input clones, zeros, copy, all-gather, clone, the layer norm: 7) then run as the
    # host issues them
    sync = 7 * issue
    stage_params = m.layers // lay.pp * 12 * h * h / tp  # a middle stage's layers (the head's table aside)
    shard = stage_params / lay.dp
    grads_rs = ring_seconds(c, lay, "cpdp", "reduce_scatter", stage_params * t.grad_reduce_bytes)
    dp_where, pp_where = lay.span("cpdp", c.domain), lay.span("pp", c.domain)
    fk, bk, wk = layer_kernels(m, 0, t)
    per_stage_layers = m.layers // lay.pp
    mask_bytes = 17 * t.seq * t.seq  # tril(ones) fp32 written, read and written, compared, bool written
    return [
        Item(
            "stage output sent as a 1/tp piece, receiver all-gathers it",
            f"{DS} engine.py:613-625,648-654; utils.py:703-731",
            "always with tp > 1 (is_pipe_partitioned = is_model_parallel, engine.py:131)",
            transfer=p2p_seconds(m, c, t, lay),
            priced=True,
        ),
        Item(
            "PartitionedTensor meta (a LongTensor) sent before each piece",
            f"{DS} engine.py:929-932,986-989; utils.py:733-748",
            "always with tp > 1",
            transfer=t.p2p_latency_us * 1e-6,
        ),
        Item(
            "receiver's copies: recv clone, input clone, full()'s zeros/copy/clone",
            f"{DS} engine.py:608,1033; utils.py:709-731",
            "always with tp > 1",
            f=(2 * part + 2 * part + full + 2 * part + 2 * full) / hbm,
            where_f="not-first",
            b=rebuild,
            where_b="not-last",
        ),
        Item(
            "backward re-gathers its own partitioned output",
            f"{DS} engine.py:705-713 (output data freed at 651)",
            "always with tp > 1 (is_grad_partitioned)",
            b=gather + rebuild,
            where_b="not-last",
        ),
        Item(
            "sender's partition clone (output forward, input gradient backward)",
            f"{DS} utils.py:692-701; engine.py:648,966",
            "always with tp > 1",
            f=2 * part / hbm,
            where_f="not-last",
            b=2 * part / hbm,
            where_b="not-first",
        ),
        Item(
            "ThroughputTimer.start's torch.cuda.synchronize at every forward (twice)",
            f"{DS} engine.py:604, runtime/engine.py:1603-1604 -> utils/timer.py:161-166",
            "never runs: it syncs only once stop() has counted start_step = 2 steps, and only DeepSpeedEngine.step "
            "calls stop() (runtime/engine.py:1913); the pipeline engine steps through _take_model_step (engine.py:1124)",
            f=2 * sync,
            extra={"off": True},
        ),
        Item(
            "mem_status's torch.cuda.synchronize before each forward, backward and step",
            f"{DS} engine.py:605,686,1121,1221-1237",
            "never runs: mem_status returns on its first line (engine.py:1222)",
            f=sync,
            b=sync,
            extra={"off": True},
        ),
        Item(
            "host sync of PartitionedTensor.from_meta's meta.tolist()",
            f"{DS} utils.py:672; engine.py:614,707,721",
            "always with tp > 1",
            f=sync,
            where_f="not-first",
            b=2 * sync,
            where_b="not-last",
        ),
        Item(
            "micro-batch load: TP broadcasts (+ .cpu() sync), mask built each time",
            f"{MDS} pretrain_gpt.py:118-150; mpu/data.py:50-54,104; utils.py:147-202",
            "always (first and last stage)",
            f=2 * nccl.collective_seconds(c, "all_gather", 64 * tp, tp, tp_where) + sync + mask_bytes / hbm,
            where_f="ends",
        ),
        Item(
            "loss summed per micro-batch; per step dp all-reduce + pipe broadcast",
            f"{DS} engine.py:673,516-546",
            "always",
            f=kernel_floor(t),
            where_f="last",
            end=nccl.collective_seconds(c, "all_reduce", 4, lay.dp, dp_where)
            + nccl.collective_seconds(c, "all_reduce", 8, lay.pp, pp_where),
        ),
        Item(
            "tied embedding gradient all-reduce (first <-> last stage)",
            f"{DS} pipe/module.py:416-420; engine.py:233-244",
            "always (TiedLayerSpec 'embed', gpt_model.py:197,238)",
            end=tied_embedding_sync(m, c, t, lay),
            priced=True,
        ),
        Item(
            "ZeRO-1 on stage2.py all-reduces every gradient (not a reduce-scatter)",
            f"{DS} zero/stage2.py:1179-1194,1306-1326,1378-1389; runtime/engine.py:1357-1359",
            "ZeRO stage 1 without legacy_stage1 (the default from v0.4.0, May 2021): contiguous_gradients "
            "forced off, so reduce_ipg_grads takes buffered_reduce_fallback",
            end=ring_seconds(c, lay, "cpdp", "all_reduce", stage_params * t.grad_reduce_bytes) - grads_rs,
            priced=t.zero1_allreduce,  # the rows pin zero1_allreduce (training.py)
        ),
        Item(
            "ZeRO-1 bucket copies: flatten, divide by dp, copy back; the partition's flat copy",
            f"{DS} zero/stage2.py:1306-1322,1344-1357,645-666",
            "as above",
            end=(3 * 2 * 2 * stage_params + 2 * 2 * shard) / hbm,
        ),
        Item(
            "fp16 overflow check (x.float().sum() per grad), fp64 norm, fp32 cast, unscale",
            f"{DS} zero/stage2.py:1473-1522,1611-1700,1787-1860",
            "always with fp16 (ds config fp16.enabled, loss_scale 0)",
            end=shard * (10 + 18 + 10 + 8) / hbm,
        ),
        Item(
            "checkpointing partition_activations: per layer 1/tp clone, backward all-gather",
            f"{DS} checkpointing.py:259-288,367-431,560-591",
            "unknown for MT-NLG (Megatron-DeepSpeed --partition-activations, off by default; the example omits it)",
            f=per_stage_layers * 2 * part / hbm,
            b=per_stage_layers * (gather + rebuild),
            extra={"conditional": True},
        ),
        Item(
            "checkpointing synchronize: torch.cuda.synchronize around each layer",
            f"{DS} checkpointing.py:513-514,603-604,630-631,726-727",
            "unknown (--synchronize-each-layer, off by default)",
            f=per_stage_layers * 2 * sync,
            b=per_stage_layers * 2 * sync,
            extra={"conditional": True},
        ),
        Item(
            "wall_clock_breakdown: a synchronized timer around each instruction",
            f"{DS} engine.py:697-701,742-746,911-944,947-1003,1006-1048,1051-1115; utils/timer.py",
            "unknown for MT-NLG (ds config wall_clock_breakdown; false in Megatron-DeepSpeed's example config)",
            f=4 * sync,
            b=4 * sync,
            extra={"conditional": True},
        ),
        Item(
            "CUDA_LAUNCH_BLOCKING=1: every kernel's issue exposed",
            "BLOOM's tr11-176B-ml.slurm sets it",
            "unknown for MT-NLG",
            f=per_stage_layers * fk * issue,
            b=per_stage_layers * (fk + bk + wk) * issue,
            extra={"conditional": True},
        ),
    ]


def stage_times(m, c, t, lay) -> tuple[list[float], list[float]]:
    """pipesim's forward and backward (input and weight gradient) of a micro-batch on each
    stage, without the blocking-transfer pseudo-layer the replay replaces."""
    costs = component_costs(m, c, t, lay, lay.pp, "full")
    f, b = [], []
    for row in costs.stages:
        layers = row[:-1] if not t.p2p_overlap and lay.pp > 1 else row
        f.append(sum(x.attn_f + x.mlp_f + x.dispatch_f + x.combine_f for x in layers))
        b.append(sum(x.attn_b + x.mlp_b + x.attn_w + x.mlp_w + x.dispatch_b + x.combine_b for x in layers))
    return f, b


def with_item(f, b, it: Item) -> tuple[list[float], list[float]]:
    mf, mb = stage_mask(it.where_f, len(f)), stage_mask(it.where_b, len(b))
    return [x + it.f * k for x, k in zip(f, mf)], [x + it.b * k for x, k in zip(b, mb)]


def print_scaling() -> None:
    """The gap on the three MT-NLG rows against their slots (M + S - 1): a cost paid per
    micro-batch grows with them, one paid per step does not. The 2800- and 3360-GPU rows
    are read off the paper's scaling figure (less certain), so the split is rough."""
    rows = [r for r in tomllib.loads(DATA.read_text())["run"] if r["name"].startswith("MT-NLG")]
    print("| row | M | slots M + S - 1 | published (s) | pipesim (s) | gap (s) | gap per slot (ms) |")
    print("|---|---|---|---|---|---|---|")
    points = []
    for r in rows:
        m, c, t = specs(r)
        lay = r["layout"]
        M = t.global_batch // (lay["dp"] * lay["micro_batch"])
        slots = M + lay["pp"] - 1
        pub, pred = published_step(r, m, c, t), evaluate_layout(m, c, t, dict(lay)).step_time
        points.append((slots, pub - pred))
        print(f"| {r['name']} | {M} | {slots} | {pub:.2f} | {pred:.2f} | {pub - pred:.2f} | {(pub - pred) / slots * 1e3:.1f} |")
    (s0, g0), (s1, g1) = points[0], points[-1]
    per_slot = (g0 - g1) / (s0 - s1)
    print(
        f"\nThrough the first and last rows the gap is {per_slot * 1e3:.0f} ms a slot plus {g0 - per_slot * s0:.1f} s a "
        f"step: at {s0} slots {per_slot * s0:.1f} s of it grows with the micro-batches and {g0 - per_slot * s0:.1f} s "
        "comes once a step; every per-step item below is under 0.2 s.\n"
    )


def main() -> None:
    row = next(r for r in tomllib.loads(DATA.read_text())["run"] if r["name"] == ROW)
    m, c, t = specs(row)
    lay = check_layout(m, c, t, dict(row["layout"]))
    M = t.global_batch // (lay.dp * lay.micro_batch)
    published = published_step(row, m, c, t)
    predicted = evaluate_layout(m, c, t, dict(row["layout"])).step_time
    gap = published - predicted
    progs = [ds_program(s, lay.pp, M) for s in range(lay.pp)]
    f, b = stage_times(m, c, t, lay)
    p2p = p2p_seconds(m, c, t, lay)
    free = replay(progs, f, b, 0.0)
    base = replay(progs, f, b, p2p)
    ideal = (M - 1) * max(x + y for x, y in zip(f, b)) + sum(f) + sum(b)

    print(f"# {ROW}: tp{lay.tp} pp{lay.pp} dp{lay.dp} mb{lay.micro_batch} M{M}, seq {t.seq}, hidden {m.hidden}\n")
    print(f"published step {published:.2f} s, pipesim {predicted:.2f} s: gap {gap:.2f} s ({predicted / published - 1:+.1%})\n")
    print_scaling()
    print("DeepSpeed's instruction order, replayed on pipesim's stage times (no other item):\n")
    print("| replay | step (s) |")
    print("|---|---|")
    print(f"| transfers free | {free:.3f} |")
    print(f"| (M-1) x slowest stage + every stage once (1F1B, transfers free) | {ideal:.3f} |")
    print(f"| blocking transfers of {p2p * 1e3:.3f} ms (pipesim's p2p_seconds) | {base:.3f} |")
    print(
        f"| pipesim's own price of the blocking transfers: 4 per slot on a middle stage x (M + S - 1) | {4 * p2p * (M + lay.pp - 1):.3f} |"
    )
    print()
    print(
        "| item | code | on in MT-NLG's run? | per micro-batch (ms) F / B / transfer | per step end (ms) | s per step | share of the gap | priced by pipesim |"
    )
    print("|---|---|---|---|---|---|---|---|")
    proven = conditional = 0.0
    listed = items(m, c, t, lay)
    for it in listed:
        step = priced_alone(progs, f, b, p2p, base, it)
        if it.priced:
            step = (base - free) if it.transfer else it.end
        elif it.extra.get("off"):
            step = 0.0
        elif it.extra.get("conditional"):
            conditional += step
        else:
            proven += step
        per = f"{it.f * 1e3:.3f} / {it.b * 1e3:.3f} / {it.transfer * 1e3:.3f}"
        print(
            f"| {it.name} | {it.code} | {it.on} | {per} | {it.end * 1e3:.2f} | {step:.3f} | {step / gap:.1%} | {'yes' if it.priced else 'never runs' if it.extra.get('off') else 'no'} |"
        )
    together = [it for it in listed if not it.priced and not it.extra]
    f2, b2, extra_transfer, end = f, b, 0.0, 0.0
    for it in together:
        f2, b2 = with_item(f2, b2, it)
        extra_transfer, end = extra_transfer + it.transfer, end + it.end
    joint = replay(progs, f2, b2, p2p + extra_transfer) - base + end
    slot = gap / (M + lay.pp - 1)
    print()
    print(
        f"Unpriced items the code runs in every step: {proven:.3f} s per step one by one, {joint:.3f} s "
        f"all together in one replay: {joint / gap:.1%} of the {gap:.2f} s gap. The switches nobody "
        f"can say were on (rows marked unknown) add {conditional:.3f} s more. To close the gap a "
        f"stall of {slot * 1e3:.1f} ms would be needed in each of the M + S - 1 = {M + lay.pp - 1} "
        f"slots ({slot / (f[-1] + b[-1]):.0%} of the last stage's forward and backward)."
    )


def priced_alone(progs, f, b, p2p: float, base: float, it: Item) -> float:
    """Seconds ``it`` adds to the replayed step on its own."""
    f2, b2 = with_item(f, b, it)
    return replay(progs, f2, b2, p2p + it.transfer) - base + it.end


if __name__ == "__main__":
    main()
