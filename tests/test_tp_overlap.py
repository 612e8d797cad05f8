"""Tensor parallelism's collectives and the multiplies that hide them (``tp_overlap``):
"none", "backward" (Megatron-LM's and Transformer Engine's asynchronous backward
collectives), "all" (userbuffers, AsyncTP), and the switch's old true/false spelling."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.ir import Op
from pipesim.planner.compute import attention_shapes, gemms, mlp_shapes
from pipesim.planner.layer_costs import head_costs, layer_costs
from pipesim.planner.layout import Layout
from pipesim.planner.specs import Training, load_cluster, load_model, load_training
from pipesim.planner.stages import component_costs
from pipesim.planner.tp_overlap import column_exposed

M, C = load_model("llama3-8b"), load_cluster("h100")
LAY = Layout(pp=1, dp=1, tp=8)
# whole-GPU numbers without the small-kernel floors, which would scale the parts they bind
T = Training(seq=4096, global_batch=8, kernel_floor_us=0, host_us_per_kernel=0)


def _ring(passes: int, c=C, lay: Layout = LAY) -> float:
    """One ring collective of a micro-batch's hidden states (4096 tokens x 4096 x 2 bytes)
    over tp8 inside a node, by hand as NCCL's tuning model prices it (nccl.py): under
    each protocol the base latency and a hop per ring step, then ``passes`` x 7/8 of the
    buffer at its share of NVLink's rate, the fastest protocol taken (LL: the h100
    preset's 6.6 and 0.6 us, half the rate; LL128: 14 and 1.9 us, 0.92 of it; Simple: 8.4
    and 3.4 us, all of it). An all-reduce makes 2 passes, an all-gather or a
    reduce-scatter 1."""
    size = lay.tokens(T.seq) * M.hidden * 2
    steps = passes * (lay.tp - 1)
    bus = passes * (lay.tp - 1) / lay.tp * size
    ring = ((c.nccl_base_us, c.nvlink_hop_us, 0.5), (14.0, 1.9, 0.92), (8.4, 3.4, 1.0))
    return min((base + steps * hop) * 1e-6 + bus / (c.nvlink_gbps * 1e9 * share) for base, hop, share in ring)


def _ar(c=C) -> float:
    return _ring(2, c)


def _ag(c=C) -> float:
    return _ring(1, c)


def _backward(mode: str, **kw) -> float:
    t = replace(T, tp_overlap=mode, **kw)
    return component_costs(M, C, t, LAY, 1, "none").op_time(Op("BW", 0, 0), 0)


@pytest.mark.parametrize("sp", [False, True])
def test_backward_mode_lies_between_none_and_all(sp):
    """Hiding the backward's asynchronous collectives takes time off none's backward, and
    overlapping every collective takes off more."""
    none, backward, every = (_backward(mode, sequence_parallel=sp) for mode in ("none", "backward", "all"))
    assert none > backward > every


def test_forward_is_the_same_in_backward_mode_as_in_none():
    """Only the backward's collectives run asynchronously: the forward waits for its own."""
    none, backward = (component_costs(M, C, replace(T, tp_overlap=x), LAY, 1, "none") for x in ("none", "backward"))
    assert none.op_time(Op("F", 0, 0), 0) == backward.op_time(Op("F", 0, 0), 0)


def test_a_tiny_weight_gradient_hides_almost_nothing():
    """Without sequence parallelism the input gradient's all-reduce hides only under the
    weight-gradient multiply: on a link 10,000 times slower than NVLink (the all-reduce
    some 10 ms, the multiplies well under 1) backward mode's backward is none's within
    what the multiplies take."""
    slow = replace(C, nvlink_gbps=C.nvlink_gbps / 1e4)
    t = replace(T, sequence_parallel=False)
    none, backward = (layer_costs(M, 0, slow, replace(t, tp_overlap=x), LAY, "none") for x in ("none", "backward"))
    w_qkv = gemms(slow, t, attention_shapes(M, t, LAY)[:1])[2]
    w_fc1 = gemms(slow, t, mlp_shapes(M, 0, t, LAY)[:1])[2]
    assert none.dispatch_b == none.combine_b == pytest.approx(_ar(slow))
    assert backward.dispatch_b == pytest.approx(none.dispatch_b - w_qkv)
    assert backward.combine_b == pytest.approx(none.combine_b - w_fc1)
    assert backward.backward_comm == pytest.approx(none.backward_comm, rel=1e-3)


def test_one_layer_half_by_hand():
    """Stated numbers, tp8 of 4096 tokens x 4096 hidden in one H100 node: an all-gather
    or a reduce-scatter goes by Simple, 8.4 + 7 x 3.4 = 32.2 us of latency and 7/8 x 32 MiB
    at 360 GB/s = 81.6 us, 113.8 us in all (LL128: 27.3 + 88.6; LL: 10.8 + 163.1); an
    all-reduce by LL128, 14 + 14 x 1.9 = 40.6 us and 2 x 7/8 x 32 MiB at 0.92 x 360 GB/s
    = 177.3 us, 217.9 us (Simple: 56 + 163.1). The collectives hold 20 of the 132 SMs
    (share 0.1515). With sequence parallelism (Megatron's, the input's shard kept) the
    half's backward all-gathers the row-parallel multiply's output gradient (113.8,
    exposed), re-gathers the column-parallel multiply's input beside its 40 us
    input-gradient multiply (that multiply ends 113.8 - 40 = 73.8 us late) and
    reduce-scatters its input gradient beside its 100 us weight-gradient multiply, which,
    slowed to 0.848 of its rate for 113.8 us, ends 0.1515 x 113.8 = 17.2 us late: 204.8
    us. With DTensor's gathered input no re-gather: 131.0. Without sequence parallelism
    the all-reduce beside the 100 us multiply: 117.9 us. In "none" all of it, 341.3 us."""
    assert _ag() == pytest.approx(113.76e-6, rel=1e-3) and _ar() == pytest.approx(217.9e-6, rel=1e-3)
    back = replace(T, tp_overlap="backward")
    assert back.comm_sms == 20 and C.sms == 132
    assert column_exposed(M, C, back, LAY, 40e-6, 100e-6) == pytest.approx(204.8e-6, rel=1e-3)
    assert column_exposed(M, C, replace(back, sp_saves_gathered=True), LAY, 40e-6, 100e-6) == pytest.approx(131.0e-6, rel=1e-3)
    assert column_exposed(M, C, replace(back, sequence_parallel=False), LAY, 40e-6, 100e-6) == pytest.approx(117.9e-6, rel=1e-3)
    none = replace(T, tp_overlap="none")
    assert column_exposed(M, C, none, LAY, 40e-6, 100e-6) == pytest.approx(341.3e-6, rel=1e-3)
    # multiplies far longer than their collectives: each collective costs its SMs' share
    assert column_exposed(M, C, back, LAY, 1.0, 1.0) == pytest.approx(_ag() + 2 * 20 / 132 * _ag())
    # and with no SMs held, nothing
    assert column_exposed(M, C, replace(back, comm_sms=0), LAY, 1.0, 1.0) == pytest.approx(_ag())


def test_sequence_parallel_backward_regathers_the_kept_shard():
    """Megatron-LM's sequence parallelism keeps each column-parallel multiply's input
    shard and all-gathers it again in the backward (layers.py: ``save_for_backward(input,
    ...)``, then ``all_gather`` in ``backward``), half an all-reduce per half of the layer
    beside the output gradient's all-gather and the input gradient's reduce-scatter;
    DTensor keeps the gathered input and does not."""
    none = replace(T, tp_overlap="none")
    kept = layer_costs(M, 0, C, none, LAY, "none")
    assert kept.dispatch_b == kept.combine_b == pytest.approx(3 * _ag())
    gathered = layer_costs(M, 0, C, replace(none, sp_saves_gathered=True), LAY, "none")
    assert gathered.dispatch_b == gathered.combine_b == pytest.approx(2 * _ag())
    assert kept.dispatch_f == gathered.dispatch_f == pytest.approx(2 * _ag())  # the forward's are unchanged


def test_head_backward_hides_under_its_own_multiplies():
    """The output layer is column-parallel too: under "backward" its input gradient's
    all-reduce hides under the vocabulary-wide weight-gradient multiply (far longer),
    costing only its SMs' share of its time."""
    t = replace(T, sequence_parallel=False)
    assert head_costs(M, C, replace(t, tp_overlap="none"), LAY).dispatch_b == pytest.approx(_ar())
    assert head_costs(M, C, replace(t, tp_overlap="backward"), LAY).dispatch_b == pytest.approx(20 / 132 * _ar())


def test_true_and_false_read_as_all_and_none(tmp_path):
    assert load_training(base={"tp_overlap": True}).tp_overlap == "all"
    assert load_training(base={"tp_overlap": False}).tp_overlap == "none"
    f = tmp_path / "old.toml"
    f.write_text("tp_overlap = true\n")
    assert load_training(str(f)).tp_overlap == "all"
    assert load_training().tp_overlap == "all"  # what the printed recipes ask for (test_recipe.py)
    assert load_training(base={"tp_overlap": "backward"}).tp_overlap == "backward"


@pytest.mark.parametrize("bad", ['"sometimes"', "1", '"All"'])
def test_bad_tp_overlap_is_one_line(tmp_path, capsys, bad):
    f = tmp_path / "bad.toml"
    f.write_text(f"tp_overlap = {bad}\n")
    code = main(["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "16", "--training", str(f)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "tp_overlap must be one of none, backward, all, micro_pipeline" in err
    with pytest.raises(PipesimError, match="tp_overlap"):
        load_training(str(f))


@pytest.mark.parametrize("mode", ["none", "backward", "all"])
def test_recipes_ask_for_what_was_priced(mode):
    """Megatron-LM gets --tp-comm-overlap exactly where the plan priced every collective
    overlapped, and a note where it priced them exposed (its backward's are asynchronous
    whatever the flags); torchtitan names AsyncTP for "all" and says it has no "backward"."""
    from pipesim.planner.recipe import recipe
    from pipesim.planner.search import Candidate, Plan, Result

    plan = Plan(load_model("llama3-70b"), load_cluster("h100", 64), load_training(seq=4096, global_batch=64, tp_overlap=mode))
    plan.results.append(Result(Candidate(Layout(pp=2, dp=4, tp=8), "1f1b", None, "full", 16), True, step_time=1.0))
    mg, tt = recipe(plan)["megatron"], recipe(plan)["torchtitan"]
    assert ("--tp-comm-overlap" in mg["flags"]) == (mode == "all")
    assert any("tp_overlap = none" in x for x in mg["notes"]) == (mode == "none")
    assert any("enable_async_tensor_parallel" in x for x in tt["notes"]) == (mode == "all")
    assert any("no backward-only" in x for x in tt["notes"]) == (mode == "backward")


def test_the_assumptions_line_names_the_mode():
    from pipesim.planner.assumptions import assumptions
    from pipesim.planner.search import Plan

    def line(**kw) -> str:
        plan = Plan(load_model("llama3-8b"), load_cluster("h100", 16), load_training(**kw))
        return dict(assumptions(plan))["tensor parallelism"]

    assert "exposed (tp_overlap = none" in line(tp_overlap="none")
    assert "hidden under their own weight- and input-gradient multiplies" in line(tp_overlap="backward")
    assert "overlapped with the multiplies around it (tp_overlap = all" in line()
    assert "gathers each column-parallel multiply's input again" in line()
    assert "again" not in line(sp_saves_gathered=True) and "again" not in line(sequence_parallel=False)


def test_plan_flag_sets_the_mode(capsys):
    """``pipesim plan --tp-overlap backward`` prices the backward's collectives only, and
    its Megatron-LM recipe then asks for no userbuffers overlap; a wrong mode is argparse's
    one line."""
    import json

    argv = "plan --model llama3-8b --cluster h100 --gpus 16 --tp 8 --pp 2 --schedules 1f1b --json".split()
    assert main([*argv, "--tp-overlap", "backward"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "tp_overlap = backward" in out["assumptions"]["tensor parallelism"]
    assert "--tp-comm-overlap" not in out["recipe"]["megatron"]["flags"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert "tp_overlap = all" in out["assumptions"]["tensor parallelism"]
    assert "--tp-comm-overlap" in out["recipe"]["megatron"]["flags"]
    assert main([*argv, "--tp-overlap", "half"]) == 2
    err = capsys.readouterr().err
    assert "--tp-overlap: invalid choice: 'half'" in err and err.count("\n") == 1
