"""What a new user met walking the command line: refusals that sent them to a flag the
next run refused too, and flags one command spelled differently from the others."""

from __future__ import annotations

import pytest

from pipesim.cli import main


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code, out, err) -> None:
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


def test_a_pin_that_does_not_divide_a_given_gpu_count_says_which_counts_do(capsys):
    # plan said "(or give --gpus)" to a user who had given --gpus 6
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--pp", 4]
    code, out, err = _run(capsys, *argv, "--gpus", 6)
    _one_line(code, out, err)
    assert "give --gpus a multiple of 4" in err and "(or give --gpus)" not in err


def test_plan_takes_m_for_microbatches_as_every_other_command_does(capsys):
    from pipesim.parser import make_parser

    # every command that takes --microbatches, read from the parsers themselves
    parser = make_parser()
    commands = parser._subparsers._group_actions[0].choices
    takers = {name: c for name, c in commands.items() if "--microbatches" in c._option_string_actions}
    assert {"plan", "memory", "simulate", "compare"} <= set(takers)
    for name, c in takers.items():
        assert c._option_string_actions.get("-m") is c._option_string_actions["--microbatches"], name
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", 64, "--pp", 4, "--schedules", "1f1b", "--json"]
    code, out, err = _run(capsys, *argv, "--micro-batch-size", 4, "-m", 32)  # 2048 sequences over dp16
    assert code == 0, err
    assert '"microbatches": 32' in out


def test_a_bad_stage_split_flag_is_blamed_on_the_flag_not_the_training_file(capsys, tmp_path):
    good = tmp_path / "t.toml"
    good.write_text('stage_split = "even"\n')
    for command in (["memory", "--pp", 4], ["plan", "--cluster", "h100"]):
        code, out, err = _run(capsys, *command, "--model", "llama3-8b", "--training", good, "--stage-split", "evne")
        _one_line(code, out, err)
        assert "--stage-split" in err and "t.toml" not in err and "'evne'" in err
    # the file's own bad value is still the file's
    good.write_text('stage_split = "evne"\n')
    code, out, err = _run(capsys, "memory", "--pp", 4, "--model", "llama3-8b", "--training", good)
    _one_line(code, out, err)
    assert "t.toml: stage_split" in err


def test_every_flag_a_help_group_names_is_a_flag_of_its_command():
    import re

    from pipesim.parser import make_parser

    # pair's component costs said "instead of --f/--b/--w", which pair does not take
    for name, command in make_parser()._subparsers._group_actions[0].choices.items():
        for group in command._action_groups:
            for flag in re.findall(r"--[a-z][a-z-]*", group.title or ""):
                assert flag in command._option_string_actions, f"pipesim {name}: {group.title!r} names {flag}"


def test_compare_runs_a_schedule_file_beside_names_built_at_its_size(capsys, tmp_path):
    # compare refused a file that simulate, draw and run read; it now compares it as read,
    # the names beside it built at its pp and M
    path = tmp_path / "mine.json"
    assert main(["ops", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", str(path)]) == 0
    capsys.readouterr()
    code, out, err = _run(capsys, "compare", "--schedules", f"1f1b,{path}", "--json")
    assert code == 0, err
    import json

    doc = json.loads(out)
    assert (doc["pp"], doc["microbatches"]) == (2, 2)
    # 1F1B at unit F, B, W: (M + pp - 1) slots of F + BW = 3 x 3
    assert [(r["schedule"], r["makespan"]) for r in doc["schedules"]] == [("1f1b", 9.0), (str(path), 9.0)]


def test_a_near_twin_of_a_missing_required_flag_is_named(capsys):
    # argparse reports the missing flag first, so the typo behind it went unsaid
    for argv, typed, meant in (
        (["simulate", "--schedules", "1f1b"], "--schedules", "--schedule"),
        (["memory", "--model", "llama3-8b", "--ppp=4"], "--ppp", "--pp"),
        (["plan", "--modle", "llama3-8b", "--cluster", "h100"], "--modle", "--model"),
    ):
        code, out, err = _run(capsys, *argv)
        _one_line(code, out, err)
        assert f"{typed} is no flag of {argv[0]} (did you mean {meant}?)" in err
    code, out, err = _run(capsys, "simulate")  # nothing typed amiss: nothing guessed
    _one_line(code, out, err)
    assert "did you mean" not in err


def test_a_component_file_key_named_as_its_flag_is_pointed_at_the_forward_time(capsys, tmp_path):
    # --attn and --mlp set the forward times (attn_f, mlp_f); a file that wrote the flags'
    # names was pointed at attn_w and mlp_w, difflib's alphabetical last of three ties
    for key in ("attn", "mlp"):
        path = tmp_path / f"{key}.toml"
        path.write_text(f"[layer]\n{key} = 2\n")
        code, out, err = _run(capsys, "simulate", "-s", "1f1b", "--components", path)
        _one_line(code, out, err)
        assert f"unknown key '{key}' (did you mean {key}_f?)" in err


def test_plan_top_counts_the_recommendation_as_its_help_says(capsys):
    from pipesim.parser import make_parser

    command = make_parser(["plan"])._subparsers._group_actions[0].choices["plan"]
    assert "the recommendation first" in command._option_string_actions["--top"].help  # was "runners-up to show"
    code, out, err = _run(capsys, "plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", 64, "--top", 2)
    assert code == 0, err
    table = out.split("## Runners-up")[1].split("##")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["1", "2"]  # the recommendation and one runner-up


def test_activation_bytes_without_a_memory_limit_is_refused(capsys):
    # it sets the unit of --memory-limit (zb_auto.py: limit = memory_limit / activation_bytes);
    # alone, the run was the same as without it
    code, out, err = _run(capsys, "simulate", "-s", "zb-auto", "--activation-bytes", 10, "--no-timeline")
    _one_line(code, out, err)
    assert "--activation-bytes" in err and "--memory-limit" in err
    # with a limit in bytes it runs: 8 bytes a forward, 40 bytes = 5 activations
    code, _, err = _run(capsys, "simulate", "-s", "zb-auto", "--activation-bytes", 8, "--memory-limit", 40, "--no-timeline")
    assert code == 0, err


def test_ops_refuses_json_beside_an_output_file_it_would_ignore(capsys, tmp_path):
    out_file = tmp_path / "s.json"
    code, out, err = _run(capsys, "ops", "-s", "1f1b", "--json", "-o", out_file)
    _one_line(code, out, err)
    assert "--json" in err and "-o" in err and not out_file.exists()
    code, out, err = _run(capsys, "ops", "-s", "1f1b", "--pp", 2, "-m", 2, "--json")
    assert code == 0 and '"ranks"' in out  # --json alone prints the ranks


@pytest.mark.parametrize(
    ("flag", "text", "said"),
    [
        ("--schedules", ",", "names no schedule"),  # searched every schedule, unsaid
        ("--compare", "1f1b,1F1B", "names the same schedule as 1f1b"),  # 1f1b against itself
        ("--schedules", "1f1b,1f1b", "is given twice"),
    ],
)
def test_plan_reads_schedule_lists_as_compare_does(capsys, flag, text, said):
    argv = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", 64, flag, text]
    code, out, err = _run(capsys, *argv)
    _one_line(code, out, err)
    assert f"{flag} {text!r}" in err and said in err
    code, out, err = _run(capsys, "compare", "--schedules", text)  # the same words as compare's
    _one_line(code, out, err)
    assert said in err


def test_import_takes_chunks_as_every_other_command_does(capsys, tmp_path):
    pytest.importorskip("torch")
    import json

    # import spelled a rank's chunks --stages-per-rank; every other command says --chunks
    base = ["import", "--torch", "Interleaved1F1B", "--pp", 2, "-m", 4]
    code, new, err = _run(capsys, *base, "--chunks", 3)
    assert code == 0, err
    code, old, err = _run(capsys, *base, "--stages-per-rank", 3)  # the old name still works
    assert code == 0, err
    assert new == old
    # 3 stages per rank on 2 ranks: 6 stages, and each rank runs a forward of each of its
    # 3 chunks for each of the 4 micro-batches (F<chunk>.<micro-batch>)
    s = json.loads(new)
    assert s["stages"] == 6 and s["placement"]["chunks"] == 3
    for rank in s["ranks"]:
        assert sorted(op for op in rank if op.startswith("F")) == sorted(f"F{c}.{m}" for c in range(3) for m in range(4))
    code, out, err = _run(capsys, *base, "--chunks", 3, "--stages-per-rank", 2)
    _one_line(code, out, err)
    assert "--chunks 3 and --stages-per-rank 2 are the same flag" in err


def test_run_of_schedules_of_different_sizes_names_each(capsys, tmp_path):
    # said "got [(2, 1), (4, 1)]"; the files bring their own pp, which the line does not show
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["ops", "-s", "1f1b", "--pp", "2", "-m", "4", "-o", str(a)]) == 0
    assert main(["ops", "-s", "interleaved-1f1b", "--pp", "4", "-m", "4", "-o", str(b)]) == 0
    capsys.readouterr()
    code, out, err = _run(capsys, "run", "--schedules", f"{a},{b}", "--synthetic")
    _one_line(code, out, err)
    # 1F1B: a stage per rank; interleaved 1F1B: 2 chunks per rank by default, 4 x 2 stages
    assert f"{a} (1f1b) runs on 2 ranks (2 stages); {b} (interleaved-1f1b) runs on 4 ranks (8 stages)" in err
    assert "[(" not in err


def test_simulate_refuses_no_timeline_beside_json(capsys):
    # --json prints no timeline: --no-timeline beside it changed nothing, unsaid (as
    # --width beside --json is refused)
    code, out, err = _run(capsys, "simulate", "-s", "1f1b", "--json", "--no-timeline")
    _one_line(code, out, err)
    assert "drop --no-timeline" in err


def test_the_trade_off_line_says_one_stage_not_one_stages(capsys):
    code, out, err = _run(capsys, "compare", "--schedules", "1f1b,gpipe", "--pp", 1, "-m", 1)
    assert code == 0, err
    assert "1f1b (1 stage, 0.0%)" in out and "1 stages" not in out


def test_an_output_that_is_a_pipe_by_a_proc_link_is_refused_as_not_a_file():
    # /dev/stdout on a pipe links to /proc/N/fd/pipe:[M], which realpath makes a path
    # that names nothing: it was taken for a new file in /proc/N/fd, and the probe then
    # said "No such file or directory"
    import os

    from pipesim.errors import PipesimError
    from pipesim.files import output_target

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc")
    r, w = os.pipe()
    try:
        with pytest.raises(PipesimError, match="it is not a regular file"):
            output_target(f"/proc/self/fd/{w}")
    finally:
        os.close(r)
        os.close(w)


def test_pair_and_bw_costs_for_schedules_that_run_none_are_refused(capsys, tmp_path):
    # 1F1B runs no overlapped pair and ZB-H1 no fused backward: --pair and --bw changed
    # nothing of them, unsaid
    for argv, said in (
        (["simulate", "-s", "1f1b", "--pair", 3], "--pair prices overlapped F&B pairs, and 1f1b runs none"),
        (["simulate", "-s", "zb-h1", "--bw", 3], "--bw prices fused backwards (BW), and zb-h1 runs none"),
        (["draw", "-s", "zb-h1", "--bw", 3, "-o", tmp_path / "x.svg"], "and zb-h1 runs none"),
        (["compare", "--schedules", "1f1b,zb-h1", "--pair", 3], "and 1f1b, zb-h1 run none"),
        (["report", "--schedules", "zb-h1,zb-v", "--bw", 3, "-o", tmp_path / "r.html"], "and zb-h1, zb-v run none"),
    ):
        code, out, err = _run(capsys, *argv, "--pp", 2, "-m", 4)
        _one_line(code, out, err)
        assert said in err, argv
    assert list(tmp_path.iterdir()) == []
    # where one schedule runs them, they price it
    code, out, err = _run(capsys, "compare", "--schedules", "1f1b,1f1b-overlap", "--pair", 3, "--pp", 2, "-m", 4)
    assert code == 0, err


def test_a_report_of_one_schedule_too_large_says_schedule(capsys, tmp_path):
    # zb-v at pp=64, M=3907: 3 ops x 3907 x 128 stages = 1,500,288, past the page's 1,500,000
    code, out, err = _run(capsys, "report", "--pp", 64, "-m", 3907, "--schedules", "zb-v", "-o", tmp_path / "r.html")
    _one_line(code, out, err)
    assert "report of 1 schedule too large" in err and "1,500,288 ops" in err, err
    assert list(tmp_path.iterdir()) == []


def test_zero_costs_leave_no_time_to_share_and_say_so(capsys):
    # every item takes no time: the makespan is 0, and a 0% bubble beside a 0% utilization
    # said nothing true (bubble and utilization are shares of the makespan)
    code, out, err = _run(capsys, "simulate", "-s", "1f1b", "--f", 0, "--b", 0, "--w", 0, "--no-timeline")
    assert code == 0, err
    assert "makespan 0   bubble n/a   span bubble n/a" in out and "min rank utilization n/a" in out, out
    assert "0.0%" not in out and "some rank is idle at every moment" not in out, out
    code, out, err = _run(capsys, "compare", "--schedules", "1f1b,gpipe", "--f", 0, "--b", 0, "--w", 0)
    assert code == 0, err
    assert "0.0%" not in out and "trade-off" not in out, out
    # a cost that takes time still gives shares: comm alone, every rank idle at all times
    code, out, err = _run(capsys, "simulate", "-s", "1f1b", "--f", 0, "--b", 0, "--w", 0, "--comm", 1, "--no-timeline")
    assert code == 0, err
    assert "bubble 100.0%" in out and "min rank utilization 0.0%" in out, out


@pytest.mark.parametrize("text", ["4,,8", "4,8,", ",4", ","])
def test_a_sweep_range_with_an_empty_item_is_refused(capsys, tmp_path, text):
    # 4,,8 ran 4 and 8, the empty item dropped unsaid
    code, out, err = _run(capsys, "sweep", "-m", text, "--schedules", "1f1b", "-o", tmp_path / "s.csv")
    _one_line(code, out, err)
    assert f"--microbatches {text!r}: an empty item" in err, err
    assert list(tmp_path.iterdir()) == []


def test_sweep_refuses_pair_and_bw_costs_its_schedules_never_use(capsys, tmp_path):
    # as simulate, draw, compare and report refuse them
    for argv, said in (
        (["--schedules", "1f1b,zb-h1", "--pair", 3], "--pair prices overlapped F&B pairs, and 1f1b, zb-h1 run none"),
        (["--schedules", "zb-h1", "--bw", 3], "--bw prices fused backwards (BW), and zb-h1 runs none"),
    ):
        code, out, err = _run(capsys, "sweep", *argv, "--pp", 2, "-m", "4,8", "-o", tmp_path / "s.csv")
        _one_line(code, out, err)
        assert said in err, argv
    assert list(tmp_path.iterdir()) == []
    # where one swept schedule runs them, they price it
    code, out, err = _run(
        capsys, "sweep", "--schedules", "1f1b,1f1b-overlap", "--pair", 3, "--pp", 2, "-m", "4,8", "-o", tmp_path / "s.csv"
    )
    assert code == 0, err


def test_a_compare_of_one_schedule_says_schedule_and_cuts(capsys):
    # "compare of 1 schedules too large"; "zb-v cut the model ... compares them"
    code, out, err = _run(capsys, "compare", "--schedules", "zb-v", "--pp", 64, "-m", 70000)
    _one_line(code, out, err)
    assert "compare of 1 schedule too large" in err, err  # 3 x 70,000 x 128 stages = 26,880,000 ops
    code, out, err = _run(capsys, "compare", "--schedules", "zb-v", "--pp", 4, "-m", 8)
    assert code == 0, err
    assert "zb-v cuts the model" in out and "compares it on one model" in out, out
    code, out, err = _run(capsys, "compare", "--schedules", "zb-v,v-half", "--pp", 4, "-m", 8)
    assert "zb-v, v-half cut the model" in out and "compares them on one model" in out, out


def test_a_timeline_file_of_one_rank_or_event_says_so_in_the_singular(capsys, tmp_path):
    import json

    from pipesim import build, simulate
    from pipesim.files import timeline_to_dict

    s = build("1f1b", 2, 1)
    d = timeline_to_dict(s, simulate(s))
    d["timeline"]["events"] = d["timeline"]["events"][:1]
    (tmp_path / "t.json").write_text(json.dumps(d))
    code, out, err = _run(capsys, "draw", "--measured", tmp_path / "t.json", "-o", tmp_path / "t.svg")
    _one_line(code, out, err)
    assert "timeline has 1 rank, the schedule pp=2" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


@pytest.mark.parametrize(
    "command", [["compare"], ["sweep", "-o", "s.csv"], ["plan", "--model", "llama3-8b", "--cluster", "h100"]]
)
def test_a_schedule_list_with_an_empty_item_is_refused(capsys, tmp_path, command):
    # 1f1b,,gpipe ran 1f1b and gpipe, the empty item dropped unsaid (as -m 4,,8 was)
    if "-o" in command:
        command = [*command[:-1], tmp_path / command[-1]]
    code, out, err = _run(capsys, *command, "--schedules", "1f1b,,gpipe")
    _one_line(code, out, err)
    assert "--schedules '1f1b,,gpipe': an empty item" in err, err
    assert list(tmp_path.iterdir()) == []


def test_compare_counts_each_schedule_at_its_chunks_against_the_work_limit(capsys):
    """Two interleaved orders at --chunks 8, pp 8 and M 100,000: each alone is 3 x 100,000 x
    64 = 19.2M ops, under the 24M limit, but the comparison builds and keeps both, 38.4M.
    compare counted two chunks a schedule (9.6M) and went on to build them; report and
    sweep counted --chunks."""
    argv = ["compare", "--schedules", "interleaved-1f1b,looped-bfs", "--chunks", "8", "--pp", "8", "-m", "100000"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "compare of 2 schedules too large" in err and "38,400,000 ops" in err, err


@pytest.mark.parametrize("given", ["0.5", "0.999", "1e-9"])
def test_activation_bytes_under_a_byte_is_refused_by_its_flag(capsys, given):
    # 0 < x < 1 passed the flag (a number > 0) and was refused by zb-auto's own check
    # (a forward adds at least a byte) once the build began; the flag now says the range
    code, out, err = _run(capsys, "simulate", "-s", "zb-auto", "--activation-bytes", given, "--memory-limit", 40)
    _one_line(code, out, err)
    assert f"argument --activation-bytes: expected a number from 1 to 1e+15, got '{given}'" in err
