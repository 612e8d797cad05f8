"""The runtime's plain-data parts, without torch: who sends what to whom, who holds which
stage, the PyTorch action rows both ways, and duration parsing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from conftest import registry_schedules
from pipesim import REGISTRY, Op, Pair, PipesimError, Placement, Schedule, build, simulate, summarize
from pipesim.deps import produces
from pipesim.ir import ops_of, parse_rank
from pipesim.runtime.commands import parse_duration, timeout_value
from pipesim.runtime.plan import comm_plan, data_needs, held_stages, holders, shared_groups
from pipesim.runtime.torch_export import from_torch_rows, read_csv, rows_to_csv, to_torch_rows, torch_action, why_not_torch


@pytest.mark.parametrize("pp", [2, 4])
@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_needed_tensor_has_exactly_one_way_there(name, pp):
    """Each data key an op consumes is either local or carried by one link to that rank,
    and a rank's receives are posted in each sender's own production order."""
    s = registry_schedules(pp).get(name)
    if s is None:
        pytest.skip(f"{name} cannot be built at pp={pp} with default options")
    plan = comm_plan(s)
    consumed = {}
    for r, item in s.items():
        for op in ops_of(item):
            for key in data_needs(s, r, op):
                assert key not in consumed, f"{key} consumed twice"
                consumed[key] = r
                if key[1] == r:
                    assert key in plan.local
                else:
                    link = plan.sends[key]
                    assert (link.src, link.dst) == (key[1], r)
    assert set(plan.sends) | plan.local == set(consumed)
    assert len({link.tag for link in plan.sends.values()}) == len(plan.sends)
    produced_at = {}
    for r, items in enumerate(s.ranks):
        for i, item in enumerate(items):
            for op in ops_of(item):
                for k in produces(r, op):
                    produced_at[k] = i
    for r in range(s.pp):
        for src in range(s.pp):
            from_src = [produced_at[link.key] for link in plan.recvs[r] if link.src == src]
            assert from_src == sorted(from_src)


def test_data_needs_by_hand():
    """V placement, pp=2: the turn at rank 1 is local; the backward on chunk 0 of rank 1
    takes its gradient from chunk 1 of the same rank, and rank 0's from rank 1."""
    s = build("dualpipev", 2, 4)
    assert data_needs(s, 1, Op("F", 1, 0)) == (("F", 1, 0, 0),)
    assert data_needs(s, 1, Op("F", 0, 0)) == (("F", 0, 0, 0),)
    assert data_needs(s, 0, Op("F", 1, 0)) == (("F", 1, 1, 0),)
    assert data_needs(s, 0, Op("B", 1, 0)) == ()  # the last stage starts from its loss
    assert data_needs(s, 1, Op("B", 0, 0)) == (("B", 1, 1, 0),)
    assert data_needs(s, 0, Op("W", 0, 0)) == ()
    plan = comm_plan(s)
    assert ("F", 1, 0, 0) in plan.local and ("B", 1, 1, 0) in plan.local
    assert plan.sends[("F", 0, 0, 0)].dst == 1 and plan.sends[("B", 0, 1, 0)].dst == 1


def test_dual_placement_holds_each_stage_twice():
    s = build("dualpipe", 4, 8)
    assert held_stages(s, 0) == {0: 0, 1: 3}
    assert held_stages(s, 2) == {0: 2, 1: 1}
    assert holders(s) == {0: ((0, 0), (3, 1)), 1: ((1, 0), (2, 1)), 2: ((1, 1), (2, 0)), 3: ((0, 1), (3, 0))}
    assert shared_groups(s) == [(0, 3), (1, 2), (1, 2), (0, 3)]
    assert shared_groups(build("dualpipev", 4, 8)) == []


def test_a_position_that_is_two_stages_is_refused():
    routes = (((0, 0), (1, 0)), ((1, 0), (0, 0)))
    s = Schedule("x", 2, 2, Placement("custom", 2, 1, routes, (0, 1)), ((), ()))
    with pytest.raises(PipesimError, match="rank 0 chunk 0 is stage 0 on one route and stage 1 on route 1"):
        held_stages(s, 0)


# ---------------------------------------------------------------------------------------
# PyTorch action rows


def test_torch_actions_use_global_stage_indices():
    """Interleaved chunk c of rank r is stage c*pp + r; the V's chunk 1 of rank r is
    stage 2pp-1-r; B is PyTorch's I, BW its B; a pair is OVERLAP_F_B."""
    inter = build("interleaved-1f1b", 4, 8)
    assert torch_action(inter, 3, Op("F", 1, 2)) == "7F2"
    assert torch_action(inter, 1, Op("BW", 0, 5)) == "1B5"
    v = build("dualpipev", 4, 8)
    assert torch_action(v, 0, Op("B", 1, 3)) == "7I3"
    assert torch_action(v, 1, Op("W", 1, 3)) == "6W3"
    assert torch_action(v, 0, Pair(Op("F", 0, 7), Op("BW", 1, 3))) == "(0F7;7B3)OVERLAP_F_B"


@pytest.mark.parametrize("name", list(REGISTRY))
def test_export_then_import_is_the_same_schedule(name):
    s = registry_schedules(4).get(name)
    if s is None:
        pytest.skip(f"{name} cannot be built at pp=4 with default options")
    reason = why_not_torch(s)
    if reason:
        with pytest.raises(PipesimError):
            to_torch_rows(s)
        return
    back = from_torch_rows(read_csv(rows_to_csv(to_torch_rows(s))), s.name, s.microbatches)
    assert back.ranks == s.ranks
    assert back.placement.routes == s.placement.routes
    assert back.placement.kind == s.placement.kind


def test_dual_placements_are_refused_with_the_reason():
    assert "two copies of the model" in why_not_torch(build("dualpipe", 4, 8))
    assert why_not_torch(build("dualpipev", 4, 8)) is None


def test_last_stage_forwards_out_of_order_are_refused():
    """PyTorch keeps losses in forward order and reads them by micro-batch."""
    s = Schedule("swap", 1, 2, Placement.flat(1, 2), (parse_rank("F0.1 F0.0 BW0.0 BW0.1"),))
    assert "forward of micro-batch 0 after 1" in why_not_torch(s)


def test_import_reads_comm_actions_and_bubbles_away():
    rows = [["0F0", "", "0SEND_F0", "1RECV_B0", "0B0", "0REDUCE_GRAD"], ["None", "1RECV_F0", "1F0", "1B0", "1SEND_B0"]]
    s = from_torch_rows(rows, "t")
    assert s.to_notation() == [["F0.0", "BW0.0"], ["F0.0", "BW0.0"]]
    assert s.placement.kind == "flat" and s.microbatches == 1


def test_import_finds_a_custom_placement():
    """Stages 0, 1 on rank 0 and 2, 3 on rank 1 is neither looped (0, 2 / 1, 3) nor a V
    (0, 3 / 1, 2); one micro-batch through four stages takes 4 F + 4 BW = 12."""
    rows = [["0F0", "1F0", "1B0", "0B0"], ["2F0", "3F0", "3B0", "2B0"]]
    s = from_torch_rows(rows, "t")
    assert s.placement.kind == "custom"
    assert s.placement.routes == (((0, 0), (0, 1), (1, 0), (1, 1)),)
    assert summarize(s, simulate(s)).makespan == 12


@pytest.mark.parametrize(
    "rows, message",
    [
        ([["0F0", "0X0"]], "cannot read '0X0'"),
        ([["0F0"], ["0B0"]], "stage 0 appears on rank 0 and on rank 1"),
        ([["(0I0;1F1)OVERLAP_F_B"]], "must overlap a forward with a backward"),
        ([["0F0"], ["2F0"]], "stage 1 appears on no rank"),
    ],
)
def test_import_errors_name_the_cell(rows, message):
    with pytest.raises(PipesimError, match=message.replace("(", r"\(")):
        from_torch_rows(rows, "t")


def test_import_of_a_file_the_csv_module_cannot_read_is_one_line(tmp_path, capsys):
    """A field past the csv module's 131072-character limit raised _csv.Error as a traceback."""
    from pipesim.cli import main

    path = tmp_path / "huge.csv"
    path.write_text("[" * 200_000 + "\n")
    assert main(["import", "--csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: not a schedule CSV (field larger than field limit" in err


@pytest.mark.parametrize(
    "head, tail, says",
    [
        # blank lines at the end: two ranks with no actions to PyTorch's _load_csv too
        ("", "\n\n", "2 blank line(s) after the last of its 2 rows, which PyTorch's _load_csv reads as ranks"),
        ("", "\n,,\n", "2 blank line(s) after the last of its 2 rows"),  # a row of empty cells is blank too
        # Excel's "CSV UTF-8": was "cannot read '\\ufeff0F0'"
        ("\ufeff", "", "starts with a byte-order mark (U+FEFF), which PyTorch's _load_csv reads into rank 0's first"),
    ],
)
def test_import_names_what_pytorch_would_misread_in_a_saved_csv(head, tail, says, tmp_path, capsys):
    """1F1B at pp=2, M=2 as PyTorch's compute-only CSV (a row of actions per rank), saved
    with a byte-order mark or blank lines at the end: PyTorch's _load_csv (torch 2.13)
    opens it plainly and makes a rank of every row, so it would fail on a group of 2. The
    trailing blank lines read as pp=4 here, and --pp 2 'disagreed with the CSV's 4 rows'
    of a file showing 2. Each is one line naming it, nothing written."""
    from pipesim.cli import main

    path, out = tmp_path / "o.csv", tmp_path / "o.json"
    path.write_text(head + "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n" + tail, encoding="utf-8")
    assert main(["import", "--csv", str(path), "--pp", "2", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: {says}" in err, err
    assert not out.exists()
    path.write_text("0F0,0F1,0B0,0B1\n\n1F0,1B0,1F1,1B1\n")  # a blank row between ranks is an idle rank, as PyTorch reads it
    assert main(["import", "--csv", str(path), "-o", str(out)]) == 0
    assert "pp=3" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# durations and the command line without torch


@pytest.mark.parametrize("text, seconds", [("20ms", 0.02), ("0.02s", 0.02), ("20", 0.02), ("500us", 0.0005), ("1e1ms", 0.01)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["fast", "20 m", "-3ms", "", "1e999"])
def test_bad_durations_say_what_is_expected(text):
    with pytest.raises(argparse.ArgumentTypeError, match="duration"):
        parse_duration(text)


def test_a_bare_time_limit_is_seconds():
    assert timeout_value("120") == 120 and timeout_value("500ms") == 0.5


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--schedule", "1f1b", "--f", "fast", "--synthetic"], "expected a duration like 20ms"),
        (["run", "--schedule", "1f1b", "--f", "20ms"], "--f sets a synthetic duration; add --synthetic"),
        (["run", "--schedule", "1f1b", "--check", "--synthetic"], "drop one of them"),
        (["run", "--pp", "2"], "give --schedule NAME"),
        (["run", "-s", "1f1b", "--dim", "15"], "expected an even width"),
        (["run", "-s", "1f1b", "--timeout", "0"], "expected a time limit > 0"),
        pytest.param(
            ["run", "-s", "1f1b", "--pp", "2", "--backend", "nccl"],
            "--backend nccl needs a GPU per rank",
            marks=pytest.mark.skipif(os.path.exists("/dev/nvidia1"), reason="two GPUs here: nccl can run"),
        ),
        (["run", "--schedule", "zz-top", "--pp", "2"], "unknown schedule 'zz-top'"),
        (["run", "--schedule", "dualpipe", "--pp", "3"], "dualpipe needs an even --pp, got 3"),
        (["export", "--schedule", "dualpipe", "--pp", "4", "-m", "8"], "two copies of the model"),
        (["import", "--csv", "/nonexistent.csv"], "cannot read --csv"),
        (["import"], "give --torch CLASS"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pipesim.cli", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_core_and_cli_import_without_torch():
    """The core, and the CLI with the runtime's commands registered, never import torch."""
    code = "import sys, pipesim, pipesim.cli; pipesim.cli.make_parser(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
