"""The device synchronize Megatron's pipeline runs after each stage-to-stage exchange.

Megatron's ``_communicate`` sends and receives a stage's activations and gradients with
``torch.distributed.batch_isend_irecv``, waits for them, and then calls
``torch.cuda.synchronize()`` "to protect against race condition when using
batch_isend_irecv()" (``Training.p2p_sync``):

- ``"megatron-2021"``: after every call, whatever the schedule (NVIDIA/Megatron-LM
  de7dc40f88, the SC21 launch script's tree, megatron/p2p_communication.py). Its 1F1B
  skips the call where a stage has no neighbour (``recv_forward`` on the first stage,
  ``send_backward_recv_forward`` there, ``send_forward_recv_backward`` on the last:
  megatron/schedules.py ``forward_backward_pipelining_without_interleaving``); its
  interleaved schedule calls it every time, once per forward in the warm-up
  (``send_forward_recv_forward``), once per forward-backward pair in the steady state
  (``send_forward_backward_recv_forward_backward`` after the pair's backward, before the
  next forward) and once per backward in the cool-down (``send_backward_recv_backward``).
- ``"megatron-core"``: only where ``batch_p2p_comm`` and ``batch_p2p_sync`` are both set
  (Megatron-Core core_v0.14.0 and 0d8e0714c, the NeMo 25.11 container's,
  megatron/core/pipeline_parallel/p2p_communication.py ``_communicate``:395-398;
  model_parallel_config.py defaults both true, and Megatron-LM has no flag for
  batch_p2p_sync). ``batch_p2p_comm`` is ``not overlap_p2p_comm``, and both Megatron-LM
  (training/arguments.py: ``overlap_p2p_comm`` false without virtual stages, on by default
  with them) and Megatron-Bridge (training/comm_overlap.py at v0.1.0rc4 and v0.2.1: pp > 1
  without virtual stages sets batch_p2p_comm, with them overlap_p2p_comm) leave it set for
  1F1B without virtual stages alone. Its 1F1B makes the same calls as 2021's.

A synchronize drains the GPU and leaves the host with nothing queued: the next kernel
starts only once the host has returned from the synchronize and issued it. NVIDIA's
"Getting Started with CUDA Graphs" (developer.nvidia.com/blog/cuda-graphs) measures a
short kernel (2.9 us) at 9.6 us each when the host synchronizes after every launch and
3.8 us each when it launches them back to back: the synchronize and the exposed launch
cost 9.6 - 3.8 = 5.8 us (``SYNC_EXPOSED_US``; a stream synchronize there, Megatron's waits
for the whole device, its NCCL stream too, which the dependencies already order). An eager framework's first kernel after it
also pays PyTorch's dispatch (``host_us_per_kernel``, or a graph launch under CUDA
graphs: ``floors.host_floor``) before that launch. Once the first kernel runs, the host
issues the rest ahead of the GPU where the pass is GPU-bound, and where it is host-bound
its op time (``floors.floored``) is already the host's: one kernel's issue is exposed,
the least a synchronize costs. The schedule's own Python between the synchronize and that
kernel is not priced.

Each op that a synchronize precedes starts that much later, so its price rides on the op,
a pseudo-layer on the stage like ``layer_costs.blocking_p2p``. In 1F1B a stage's forward
follows its receive from the stage before it (none on the first stage) and its backward
the receive from the stage after it (none on the last): the steady state exactly. The
warm-up's sends and the cool-down's (``send_forward`` before the next ``recv_forward``,
``send_backward`` before the next ``recv_backward``: pp - 1 - s of each on stage s) also
synchronize; they are left out, as is interleaved 2021's cool-down (its backwards).
"""

from __future__ import annotations

from ..components import LayerCosts
from .floors import host_floor
from .training import Training

#: microseconds a synchronize costs a kernel that follows it: 9.6 us a launch with a
#: synchronize after each, 3.8 us back to back (NVIDIA, "Getting Started with CUDA Graphs")
SYNC_EXPOSED_US = 9.6 - 3.8


def sync_seconds(t: Training) -> float:
    """Seconds one synchronize delays the op after it: the synchronize and the exposed
    launch, and the host's issue of that first kernel."""
    return SYNC_EXPOSED_US * 1e-6 + host_floor(t, 1)


def syncs_before(t: Training, stage: int, stages: int, pp: int) -> tuple[int, int]:
    """(synchronizes before each forward, before each backward) of model stage ``stage``
    of ``stages`` on ``pp`` pipeline ranks (more stages than ranks: virtual stages)."""
    if t.p2p_sync == "none" or stages <= 1:
        return 0, 0
    if stages == pp:  # 1F1B: the receive before each op, none where no neighbour sends
        return int(stage > 0), int(stage < stages - 1)
    if t.p2p_sync == "megatron-2021":  # interleaved: one a forward (warm-up) or forward-backward pair
        return 1, 0
    return 0, 0  # Megatron-Core's interleaved schedule overlaps its transfers: no batch, no synchronize


def sync_costs(t: Training, stage: int, stages: int, pp: int) -> LayerCosts | None:
    """The synchronizes before a stage's ops as a pseudo-layer (``syncs_before``), or None
    where there are none."""
    f, b = syncs_before(t, stage, stages, pp)
    if not f and not b:
        return None
    c = sync_seconds(t)
    return LayerCosts(attn_f=f * c, mlp_f=0.0, attn_b=b * c, attn_w=0.0, mlp_b=0.0, mlp_w=0.0)


def applies(t: Training, stages: int, pp: int) -> bool:
    """Whether any stage of this layout synchronizes (the report's line)."""
    return any(syncs_before(t, s, stages, pp) != (0, 0) for s in range(stages))


def sync_text(t: Training, stages: int, pp: int) -> str:
    """The report's words for the synchronizes on this layout, empty where there are none."""
    if not applies(t, stages, pp):
        return ""
    where, left = (
        (
            "1F1B's receives: before each forward but the first stage's and each backward but the last stage's",
            "the warm-up's and cool-down's sends, which synchronize too",
        )
        if stages == pp
        else (
            "one before each forward (interleaved: the warm-up's exchanges and each forward-backward pair's)",
            "the cool-down's, one before each of its backwards",
        )
    )
    return (
        f"torch.cuda.synchronize() after each stage-to-stage exchange (p2p_sync = {t.p2p_sync}), {where}: the op "
        f"after it starts {sync_seconds(t) * 1e6:.3g} us later (the synchronize and the exposed launch, "
        f"{SYNC_EXPOSED_US:.2g} us: NVIDIA's CUDA Graphs blog, 9.6 against 3.8 us a kernel; its first kernel's issue, "
        f"host_us_per_kernel); {left}, not priced"
    )
