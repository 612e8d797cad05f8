"""PyTorch's schedule names give PyTorch 2.13's orders, op for op.

The expected orders come from torch itself: each class is built with stand-in stages (it
only reads how many stages there are and which it holds) and its ``pipeline_order`` is
read; for the single-stage classes, whose ``pipeline_order`` is only a picture, the order
their runtime executes is recorded by running ``_step_microbatches`` on a stage that
logs each forward and backward it is asked for. Skipped without torch.
"""

from __future__ import annotations

import pytest

from pipesim import PipesimError, build, validate
from pipesim.cli import main
from pipesim.runtime.torch_export import order_of_torch_class, torch_action
from pipesim.schedules import TORCH_NAMES, canonical

torch = pytest.importorskip("torch")
from torch.distributed.pipelining import schedules as S  # noqa: E402

NO_OPS = ("UNSHARD", "RESHARD", "REDUCE_GRAD")  # inserted by PyTorch even without FSDP

# (class, stages per rank) -> the sizes compared: every (pp, M) of the grid the class
# accepts; pp up to 6 and M up to 4pp + 2 cover warm-up-only runs (M < pp), partial
# rounds (M not a multiple of pp) and steady states, in about a second
MULTI = [
    ("Interleaved1F1B", 1),
    ("Interleaved1F1B", 2),
    ("Interleaved1F1B", 3),
    ("LoopedBFS", 1),
    ("LoopedBFS", 2),
    ("LoopedBFS", 3),
    ("InterleavedZeroBubble", 1),
    ("InterleavedZeroBubble", 2),
    ("InterleavedZeroBubble", 4),
    ("ZBVZeroBubble", 2),
    ("DualPipeV", 2),
]


def sizes():
    return [(pp, M) for pp in range(1, 7) for M in range(1, 4 * pp + 3)]


def compute_only(rows: list[list[str]]) -> list[list[str]]:
    """PyTorch's rows without idle slots and its no-op UNSHARD/RESHARD/REDUCE_GRAD."""
    return [[a for a in row if a and not any(x in a for x in NO_OPS)] for row in rows]


def _kind(action: str) -> str:
    return action.strip("0123456789")


def pipesim_rows(name: str, pp: int, M: int, k: int) -> list[list[str]]:
    opts = {"chunks": k} if "chunks" in _options(name) else {}
    s = build(name, pp, M, **opts)
    validate(s)
    return [[torch_action(s, r, item) for item in items] for r, items in enumerate(s.ranks)]


def _options(name: str) -> dict:
    from pipesim.schedules import family

    return family(name).options


@pytest.mark.parametrize("cls, k", MULTI)
def test_multi_stage_classes_op_for_op(cls, k):
    compared = 0
    for pp, M in sizes():
        try:
            want = compute_only(order_of_torch_class(cls, pp, M, k))
        except PipesimError:  # the class refuses this size: so must pipesim
            with pytest.raises(PipesimError):
                pipesim_rows(cls, pp, M, k)
            continue
        assert pipesim_rows(cls, pp, M, k) == want, (cls, k, pp, M)
        compared += 1
    assert compared >= 60


class _Recorder:
    """A stage for PyTorch's single-stage runtime that computes nothing and logs the
    order it is driven in, in PyTorch's action notation."""

    def __init__(self, rank: int, pp: int, log: list[str]):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = rank, pp, pp, rank
        self.is_first, self.is_last = rank == 0, rank == pp - 1
        self.submod, self.log = None, log

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(f"{self.stage_index}F{mb}")
        return mb

    def backward_one_chunk(self, mb, loss=None, last_backward=False):
        self.log.append(f"{self.stage_index}B{mb}")

    def get_fwd_recv_ops(self, mb):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def perform_reduce_grad(self, scale):
        pass


def executed(cls, pp: int, M: int) -> list[list[str]]:
    rows = []
    for rank in range(pp):
        log: list[str] = []
        sched = cls(_Recorder(rank, pp, log), M, loss_fn=lambda out, target: out)
        sched._initialize_stage = lambda *a, **k: None  # shapes: nothing to infer here
        sched._step_microbatches(target_mbs=[0] * M)
        rows.append(log)
    return rows


@pytest.mark.parametrize("cls, name", [(S.Schedule1F1B, "1F1B"), (S.ScheduleGPipe, "GPipe")])
def test_single_stage_classes_give_the_order_their_runtime_executes(cls, name):
    compared = 0
    for pp, M in sizes():
        if cls is S.Schedule1F1B and M < pp:
            with pytest.raises(ValueError):  # Schedule1F1B refuses M < pp
                executed(cls, pp, M)
            continue
        assert pipesim_rows(name, pp, M, 1) == executed(cls, pp, M), (name, pp, M)
        compared += 1
    assert compared >= 60


def test_schedule1f1b_displays_a_wrong_order_that_its_runtime_does_not_run():
    """The defect import explains: torch 2.13's Schedule1F1B.pipeline_order has no F0 on
    its last rank and a forward of micro-batch M, unlike what its runtime executes."""
    shown = compute_only(order_of_torch_class("1F1B", 4, 8))
    last = [a for a in shown[3] if _kind(a) == "F"]
    assert last == [f"3F{i}" for i in range(1, 9)]
    assert executed(S.Schedule1F1B, 4, 8)[3][:4] == ["3F0", "3B0", "3F1", "3B1"]


def test_import_of_1f1b_explains_the_defect(capsys):
    code = main(["import", "--torch", "1F1B", "--pp", "4", "-m", "8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "rank 3 lists forwards of micro-batches 1..8 (no 0, and 8 does not exist)" in err
    assert "--schedule 1F1B" in err


def test_names_match_without_regard_to_case():
    for torch_name, ours in TORCH_NAMES.items():
        assert canonical(torch_name) == canonical(torch_name.lower()) == canonical(torch_name.upper()) == ours
        assert S.get_schedule_class(torch_name)  # PyTorch spells them so
    assert canonical("ZB-H1") == "zb-h1" and canonical("nonsense") is None


@pytest.mark.parametrize(
    "typed, suggested",
    [
        ("DualPipeVV", "DualPipeV"),
        ("dualpipe-v", "dualpipev"),
        ("ZBVZeroBuble", "ZBVZeroBubble"),
        ("interleaved1f1", "Interleaved1F1B"),
    ],
)
def test_did_you_mean_suggests_the_right_schedule(typed, suggested):
    with pytest.raises(PipesimError, match=f"did you mean {suggested}\\?"):
        build(typed, 4, 8)


def test_pytorch_names_work_on_the_command_line(capsys):
    assert main(["ops", "--schedule", "ZBVZeroBubble", "--pp", "4", "-m", "8"]) == 0
    assert main(["ops", "--schedule", "interleaved1f1b", "--pp", "5", "-m", "6"]) == 0
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--schedules", "Interleaved1F1B,1F1B"]) == 0
    out = capsys.readouterr().out
    assert "interleaved-1f1b" in out


def test_interleaved_1f1b_takes_the_microbatch_counts_pytorch_takes():
    for pp, M in ((5, 6), (8, 10), (4, 10), (4, 3)):
        s = validate(build("interleaved-1f1b", pp, M))
        assert s.microbatches == M
    with pytest.raises(PipesimError, match="multiple of its 2 rounds"):
        build("interleaved-1f1b", 4, 9)  # PyTorch refuses it too


# ---------------------------------------------------------------------------------------
# export says the truth


def torch_order(cls: str, pp: int, M: int, k: int) -> list[list[str]] | None:
    """What PyTorch's class runs: its pipeline_order, or for the single-stage classes the
    order its runtime executes; None where it refuses the size."""
    single = {"1F1B": S.Schedule1F1B, "GPipe": S.ScheduleGPipe}
    try:
        if cls in single:
            return executed(single[cls], pp, M)
        return compute_only(order_of_torch_class(cls, pp, M, k))
    except (PipesimError, ValueError):
        return None


@pytest.mark.parametrize("pp, M", [(2, 4), (4, 8), (3, 7)])
def test_export_names_the_class_that_runs_the_order_or_none(pp, M):
    """For every registry schedule PyTorch can run: the class the export names runs
    exactly the exported actions, and when it names none, no class with that placement
    does (all seven were asked)."""
    from pipesim.runtime.torch_export import to_torch_rows, torch_class_of, why_not_torch
    from pipesim.schedules import REGISTRY

    named = set()
    for name in REGISTRY:
        try:
            s = build(name, pp, M)
        except PipesimError:
            continue
        if why_not_torch(s):
            continue
        rows = to_torch_rows(s)
        k = s.placement.chunks
        cls = torch_class_of(s)
        if cls:
            assert torch_order(cls, pp, M, k) == rows, (name, cls)
            named.add(cls)
        else:
            for other in TORCH_NAMES:
                assert torch_order(other, pp, M, k) != rows, (name, other)
    if M % pp == 0:  # every class takes this size
        assert {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"} <= named
        assert torch_class_of(build("zb-h1", pp, M)) == "InterleavedZeroBubble"  # on one stage per rank


def test_export_of_zb_v_says_no_class_runs_it_and_how_to_run_the_csv(tmp_path, capsys):
    # below M = 2pp - 1 pipesim's ZB-V is searched (PyTorch's pattern leaves idle time there)
    path = tmp_path / "zbv.csv"
    assert main(["export", "-s", "zb-v", "--pp", "4", "-m", "6", "-o", str(path)]) == 0
    err = capsys.readouterr().err
    assert "no PyTorch schedule class runs this order" in err
    assert f'pipeline_parallel_schedule_csv = "{path}"' in err and '"ZBVZeroBubble" (a V) only to place the stages' in err
    # from M = 2pp - 1 on it is the authors' pattern, which PyTorch's class runs
    for name in ("ZBVZeroBubble", "zb-v"):
        assert main(["export", "-s", name, "--pp", "4", "-m", "8"]) == 0
        assert 'pipeline_parallel_schedule = "ZBVZeroBubble" runs this order exactly' in capsys.readouterr().err


def test_plan_recipe_names_a_class_only_where_pytorchs_class_runs_the_planned_order():
    """The planner's torchtitan block gives a schedule name without a CSV exactly where
    PyTorch's class, asked for its own order, runs the plan's order (ZB-V at pp=8 is the
    authors' pattern from M = 15, searched below it)."""
    from pipesim.planner.layout import Layout
    from pipesim.planner.recipe import recipe
    from pipesim.planner.search import Candidate, Plan, Result
    from pipesim.planner.specs import load_cluster, load_model, load_training
    from pipesim.runtime.torch_export import to_torch_rows

    rows = [("zb-v", None, 60), ("zb-v", None, 12), ("interleaved-1f1b", 2, 64), ("zb-h1", None, 32), ("1f1b", None, 4)]
    plan = Plan(load_model("llama3-70b"), load_cluster("h100", 512), load_training(seq=4096, global_batch=512))
    for schedule, chunks, M in rows:
        cand = Candidate(Layout(pp=8, dp=8, tp=8, ep=1), schedule, chunks, "full", M)
        plan.results.append(Result(cand, True, step_time=1.0))
    named = []
    for n, (schedule, chunks, M) in enumerate(rows, 1):
        par = recipe(plan, n)["torchtitan"]["parallelism"]
        cls = par["pipeline_parallel_schedule"]
        planned = to_torch_rows(build(schedule, 8, M, **({"chunks": chunks} if chunks else {})))
        runs = torch_order(cls, 8, M, chunks or (2 if cls == "ZBVZeroBubble" else 1)) == planned
        assert runs == ("pipeline_parallel_schedule_csv" not in par), (schedule, M, cls)
        named.append((cls, runs))
    assert named == [
        ("ZBVZeroBubble", True),
        ("ZBVZeroBubble", False),
        ("Interleaved1F1B", True),
        ("1F1B", False),  # InterleavedZeroBubble runs it on one stage per rank, which torchtitan does not build
        ("1F1B", False),  # Schedule1F1B refuses M < pp
    ]
