"""benchmarks/b200_collectives.py: pipesim's price of one NVLink collective at the sizes the
measured B200 tensor-parallel rows move, beside SimuMax's fitted line and any measured
nccl-tests table the checkout holds. Expected values are worked by hand from NCCL's tuner
constants and the cases' shapes. (No accuracy asserts: the comparison is the benchmark's.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_script, printed

BENCH = Path(__file__).parent.parent / "benchmarks" / "b200_collectives.py"
MIB = 2**20


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def test_the_rows_move_a_sequence_of_hidden_states_in_bf16(bench):
    import tomllib

    sizes = bench.row_sizes(tomllib.loads(bench.DATA.read_text()))
    # 4096 tokens x hidden x 2 bytes: Llama 3 70B (8192) and 405B (16384)
    assert sorted(sizes) == [4096 * 8192 * 2, 4096 * 16384 * 2] == [64 * MIB, 128 * MIB]
    assert "llama3_70b_l12_tp8_pp1_dp1_mbc4_cef" in sizes[64 * MIB]
    assert all(name.startswith("llama3_405b") for name in sizes[128 * MIB])


def test_pipesims_price_is_nccls_simple_ring_at_606_gbps(bench):
    from pipesim.planner.specs import load_cluster

    c = load_cluster("b200")
    seconds, pick = bench.pipesim_price(c, "all_gather", 64 * MIB, 8)
    # tuning.cc's Ring/Simple: 8.4 us + 7 steps x 3.4 us, then 7/8 of 64 MiB at 606 GB/s
    assert pick == "Ring/Simple"
    assert seconds == pytest.approx((8.4 + 7 * 3.4) * 1e-6 + 7 / 8 * 67108864 / 606e9)
    assert seconds * 1e6 == pytest.approx(129.1, abs=0.05)


def test_bus_bandwidth_is_nccl_tests_definition(bench):
    # all-gather: (n-1)/n of the whole buffer over the time; all-reduce twice that
    assert bench.busbw("all_gather", 64 * MIB, 8, 100e-6) == pytest.approx(587.2, abs=0.05)
    assert bench.busbw("all_reduce", 64 * MIB, 8, 100e-6) == pytest.approx(2 * 587.2, abs=0.1)


def test_without_simumax_one_line_says_so_and_pipesims_prices_stand_alone(bench):
    code, text = printed(bench.main, [])
    lines = text.splitlines()
    assert code == 0
    assert lines[0] == "SimuMax not available (no --simumax-src given): printing pipesim's prices only."
    rows = [line for line in lines if line.startswith("| all_") or line.startswith("| reduce_")]
    # 3 collectives x tp 2, 4, 8 x the context sizes (4, 16, 64, 128, 256 MiB; the rows' two among them)
    assert len(rows) == 3 * 3 * 5
    marked = {(r.split("|")[3].strip(), r.split("|")[4].strip()) for r in rows if r.split("|")[4].strip()}
    assert marked == {("64", "tp rows: llama3_70b"), ("128", "tp rows: llama3_405b")}
    assert all(r.rstrip().endswith("| | |") for r in rows)  # SimuMax's columns empty


def test_a_directory_that_is_not_simumax_is_named(bench, tmp_path):
    code, text = printed(bench.main, ["--simumax-src", str(tmp_path)])
    assert code == 0
    assert text.splitlines()[0].startswith(f"SimuMax not available ({tmp_path} is not a SimuMax checkout")


def test_an_unknown_flag_exits_2(bench, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--case", "llama3_70b"])
    assert e.value.code == 2
    assert "unrecognized arguments: --case" in capsys.readouterr().err


ROWS = """\
     1048576         65536  bfloat16    none      -1    47.14   22.24   19.46      0    45.43   23.08   20.20      0
    67108864       4194304  bfloat16    none      -1    211.3  317.59  277.88      0    210.9  318.2   278.4       0
"""


def test_nccl_tests_output_is_found_with_the_device_its_file_names(bench, tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "ag.txt").write_text("#  Rank  0 Group  0 device  0 [0x0a] NVIDIA B200\n" + ROWS)
    (tmp_path / "notes.md").write_text("B200 all-gather reaches 0.67 of 900 GB/s\n")  # a fitted figure, no rows
    assert bench.measured_tables(tmp_path) == [("logs/ag.txt", 2, "B200")]


def test_the_fit_examples_runs_are_read_by_op_and_ranks(bench, tmp_path):
    script = tmp_path / bench.FIT_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text(f"get_bws(data='''{ROWS}''', scale = 1, ranks = 8, title = 'all_gather_nccl_test')\n")
    assert bench.fit_script_runs(tmp_path) == {("all_gather", 8): [(1048576, 47.14), (67108864, 211.3)]}
    assert bench.fit_script_runs(tmp_path / "absent") == {}
