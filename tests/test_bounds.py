"""Issue 23, hardening round two: the inputs the first fuzzer never drew. Integers too
long or too wide, zeros where a rate divides, non-finite times, files read around the
input layer, outputs that are inputs under another name, and the environment (a
compiler that never returns, a full stdout, no command). Each ends in one line naming
the field, the value and the accepted range, exit 2, with no input changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipesim import build, kernel
from pipesim.files import timeline_to_dict
from pipesim.simulate import simulate
from test_hardening import one_line, run, schedule_json

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "src" / "pipesim" / "planner" / "presets"
H100 = (PRESETS / "clusters" / "h100.toml").read_text()
LLAMA = (PRESETS / "models" / "llama3-8b.toml").read_text()
DEEPSEEK = (PRESETS / "models" / "deepseek-v3.toml").read_text()
TRAINING = 'seq = 1024\nglobal_batch = 64\nprecision = "bf16"\nzero = 1\n'
COSTS = "[layer]\nattn_f = 1\nmlp_f = 1\ndispatch_f = 1\ncombine_f = 1\n"
DIGITS = "9" * 5000  # past Python's int() limit of 4,300 digits
PLAN = ["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8"]


def with_op(token: str) -> str:
    d = build("1f1b", 2, 4).to_dict()
    d["ranks"][0] = d["ranks"][0].replace("F0.0", token, 1) if isinstance(d["ranks"][0], str) else [token, *d["ranks"][0][1:]]
    return json.dumps(d)


def trace(ts) -> str:
    event = {"ph": "X", "cat": "user_annotation", "name": "attn(F)", "ts": 0, "dur": 5, "pid": 1, "tid": 1}
    return json.dumps({"traceEvents": [event]}).replace('"ts": 0', f'"ts": {ts}')


def timeline_file(start: float) -> str:
    s = build("1f1b", 2, 4)
    d = timeline_to_dict(s, simulate(s))
    d["timeline"]["events"][0][0][1] = start
    return json.dumps(d)


# (files, argv, what the one line must say): each a case of issue 23 that was a
# traceback, a nonsense answer or a refusal naming the wrong thing
CASES = [
    # integers too long: refused before int(), naming the key
    ({"m.toml": LLAMA.replace("layers = 32", f"layers = {DIGITS}")}, ["plan", "--model", "m.toml", "--cluster", "h100", "--gpus", "8"],
     "m.toml: layers is '99999999"),
    ({"m.toml": LLAMA.replace("layers = 32", f"layers = {'9' * 400}")}, ["memory", "--model", "m.toml", "--pp", "2"],
     "m.toml: layers is an integer of 400 digits"),
    ({"s.json": schedule_json().replace('"pp": 2', f'"pp": {DIGITS}')}, ["validate", "-s", "s.json"],
     "s.json: pp is '9999999999999999999...9999999' (5,000 characters), an integer of 5,000 digits"),
    ({"s.json": schedule_json().replace('"microbatches": 4', f'"microbatches": {DIGITS}')}, ["simulate", "-s", "s.json"],
     "microbatches is"),
    ({"s.json": schedule_json().replace('"pp": 2', f'"pp": {DIGITS}')}, ["export", "-s", "s.json"], "pp is"),
    ({"s.json": schedule_json().replace('"pp": 2', f'"pp": {DIGITS}')}, ["draw", "-s", "s.json", "-o", "x.svg"], "pp is"),
    ({"a.csv": f"0F{DIGITS},0B0\n"}, ["import", "--csv", "a.csv"], "micro-batch must be a whole number from 0 to 16,000,000"),
    ({}, [*PLAN, "--measured-step", "10", "--measured-on", f"pp{DIGITS},dp8"], "--measured-on: pp must be a whole number from 1 to"),
    ({}, ["simulate", "-s", "1f1b", "--pp", DIGITS], "--pp: expected a whole number from 1 to 16,000,000, got '9999"),
    ({}, ["simulate", "-s", "1f1b", "--width", DIGITS], "--width: expected a whole number of terminal columns from 0 to"),
    # indices too wide for the engine's int32 arrays
    ({"s.json": with_op(f"F{2**31}.0")}, ["simulate", "-s", "s.json"], "op 'F2147483648.0': chunk must be a whole number from 0 to 16,000,000"),
    ({"s.json": with_op("F0.99999999999")}, ["draw", "-s", "s.json", "-o", "x.svg"], "micro-batch must be a whole number from 0 to 16,000,000"),
    ({"s.json": schedule_json(placement={"routes": [[[0, 2**31], [1, 0]]] * 2})}, ["simulate", "-s", "s.json"],
     "route chunk must be a whole number from 0 to 16,000,000, got 2147483648"),
    ({"s.json": schedule_json(placement={"routes": [[[0, 1e308], [1, 0]]] * 2})}, ["draw", "-s", "s.json", "-o", "x.svg"],
     "route chunk must be a whole number from 0 to 16,000,000, got 1e+308"),
    # zeros and denormals where a rate divides
    ({"c.toml": H100.replace("sms = 132", "sms = 0")}, ["plan", "--model", "llama3-8b", "--cluster", "c.toml", "--gpus", "8"],
     "c.toml: sms must be a whole number from 1 to 100,000, got 0"),
    ({"c.toml": H100.replace("bf16_tflops = 989", "bf16_tflops = 1e-300")}, ["plan", "--model", "llama3-8b", "--cluster", "c.toml", "--gpus", "8"],
     "bf16_tflops must be a number from 0.01 to 1e+07, got 1e-300"),
    ({"t.toml": TRAINING + "attention_efficiency = 0\n"}, [*PLAN, "--training", "t.toml"], "attention_efficiency must be a number from 0.01 to 1, got 0"),
    ({"t.toml": TRAINING + "hbm_efficiency = 0\n"}, [*PLAN, "--training", "t.toml"], "hbm_efficiency must be a number from 0.01 to 1, got 0"),
    # nonsense that was accepted, or refused naming what the user never typed
    ({"c.toml": H100.replace("sms = 132", "sms = 10")}, ["plan", "--model", "llama3-8b", "--cluster", "c.toml", "--gpus", "8"],
     "c.toml: sms = 10 leaves none for compute beside the training's comm_sms = 20; give sms from 21 up"),
    ({"m.toml": LLAMA.replace("kv_heads = 8", "kv_heads = 64")}, ["plan", "--model", "m.toml", "--cluster", "h100", "--gpus", "8"],
     "kv_heads must divide heads = 32 (from 1 to 32), got 64"),
    # a dense layer with no width named the key alone; the line says what to write, and where
    ({"m.toml": LLAMA.replace("dense_ffn = 14336", "")}, ["plan", "--model", "m.toml", "--cluster", "h100", "--gpus", "8"],
     "m.toml [mlp]: every layer is dense, so give dense_ffn = <width>, the dense MLP's inner width in elements\n"),
    # DeepSeek-V3's first three of 61 layers are dense (arXiv 2412.19437, section 4.2)
    ({"m.toml": DEEPSEEK.replace("dense_ffn = 18432", "")}, ["plan", "--model", "m.toml", "--cluster", "h800-2048"],
     "m.toml [mlp]: 3 of its 61 layers are dense, so give dense_ffn = <width>"),
    ({}, [*PLAN, "--measured-step", "inf", "--measured-on", "pp1,dp8"], "--measured-step: expected a number > 0"),
    ({}, ["import", "--torch", "Interleaved1F1B", "--pp", "2", "-m", "4", "--stages-per-rank", "-3"],
     "--stages-per-rank: expected a whole number from 1 to"),
    ({}, ["import", "--torch", "Interleaved1F1B", "--pp", "2", "-m", "4", "--stages-per-rank", "0"], "got '0'"),
    # the file named as given, not as the schedule it would become
    ({"a.csv": "\n"}, ["import", "--csv", "a.csv", "-m", "4", "-o", "o.json"], "a.csv: 1 row(s) but no actions"),
    ({"a.csv": ",,\n,\n"}, ["import", "--csv", "a.csv", "-o", "o.json"], "a.csv: 2 row(s) but no actions"),
    ({"a.csv": "0F0,zz\n"}, ["import", "--csv", "a.csv"], "a.csv: rank 0 cell 1: cannot read 'zz'"),
    # times that are not finite or past any chart's range
    ({"t.json": trace("1" + "0" * 400)}, ["profile", "t.json"], "t.json: ts is '1000000000000000000...0000000' (401 characters), an integer of 401 digits"),
    ({"t.json": trace("1e30")}, ["profile", "t.json"], "expected a start from -1e+17 to 1e+17"),
    ({"tl.json": timeline_file(1e308)}, ["draw", "--measured", "tl.json", "-o", "x.svg"], "rank 0: F0.0: start must be a number from -1e+15 to 1e+15, got 1e+308"),
]  # fmt: skip


@pytest.mark.parametrize("files,argv,needle", CASES)
def test_round_two_inputs_are_one_line_exit_2(capsys, tmp_path, monkeypatch, files, argv, needle):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    code, _, err = run(capsys, *argv)
    one_line(code, err, needle)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_small_measured_timeline_still_draws(capsys, tmp_path, monkeypatch):
    """The bound refuses what no chart can show, not a real timeline."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tl.json").write_text(timeline_file(0.0))
    assert run(capsys, "draw", "--measured", "tl.json", "-o", "x.svg")[0] == 0 and (tmp_path / "x.svg").exists()


# --------------------------------------------------------------------------------------
# one reader for every file


def _hostile(tmp_path: Path, kind: str, ext: str) -> str:
    """A file of ``kind``, named with extension ``ext``."""
    p = tmp_path / f"{kind}{ext}"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "zero":
        p.symlink_to("/dev/zero")
    elif kind == "bytes":
        p.write_bytes(b"a = 1\n\xff\xfe\n")
    else:  # deep nesting, in the file's own syntax
        p.write_text("a = " + "[" * 100_000 if ext == ".toml" else "[" * 100_000)
    return p.name


# every command option that names a file pipesim reads, with the rest of a valid argv
FILE_OPTIONS = [
    (["validate", "-s", "{}"], ".json"),
    (["simulate", "-s", "1f1b", "--components", "{}"], ".toml"),
    (["plan", "--model", "{}", "--cluster", "h100", "--gpus", "8"], ".toml"),
    (["plan", "--model", "llama3-8b", "--cluster", "{}", "--gpus", "8"], ".toml"),
    (["plan", "--model", "llama3-8b", "--cluster", "h100", "--gpus", "8", "--training", "{}"], ".toml"),
    (["plan", *PLAN[1:], "--calibrate", "{}", "--measured-on", "pp1,dp8"], ".toml"),
    (["draw", "--measured", "{}", "-o", "x.svg"], ".json"),
    (["import", "--csv", "{}"], ".csv"),
    (["profile", "{}"], ".json"),
    (["profile", "t.json", "--map", "{}"], ".toml"),
]


@pytest.mark.parametrize("kind", ["fifo", "zero", "bytes", "deep"])
@pytest.mark.parametrize("argv,ext", FILE_OPTIONS, ids=[" ".join(a[:2]) + " " + a[a.index("{}") - 1] for a, _ in FILE_OPTIONS])
def test_every_file_option_gets_the_same_checks(capsys, tmp_path, monkeypatch, argv, ext, kind):
    """A FIFO blocked, /dev/zero grew without end, a non-UTF-8 byte and deep nesting were
    tracebacks for the files read around the input layer (--map first of all)."""
    if kind == "deep" and ext == ".csv":
        pytest.skip("CSV has no nesting")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_text(trace(0))
    name = _hostile(tmp_path, kind, ext)
    t = time.monotonic()
    code, _, err = run(capsys, *[name if a == "{}" else a for a in argv])
    needle = {
        "fifo": "not a regular file",
        "zero": "not a regular file",
        "bytes": "not UTF-8",
        "deep": "nested",
    }[kind]
    if kind == "deep" and ext == ".json" and argv[0] == "profile":
        needle = "nested too deeply"
    one_line(code, err, needle)
    assert time.monotonic() - t < 30  # not a hang on the FIFO


# --------------------------------------------------------------------------------------
# outputs are checked against inputs by file identity


def test_outputs_are_compared_with_inputs_by_identity(capsys, tmp_path, monkeypatch):
    """A comma in a path, a symlink, a hard link, and --timeline/--csv as outputs: each
    overwrote its input with exit 0 before."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b.json").write_text(schedule_json())
    (tmp_path / "k,1.toml").write_text("layers = 2\n" + COSTS)
    (tmp_path / "rank0.json").write_text(trace(0))
    (tmp_path / "link.json").symlink_to("a,b.json")
    os.link(tmp_path / "a,b.json", tmp_path / "hard.json")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    cases = [
        (["ops", "-s", "a,b.json", "-o", "a,b.json"], "-o a,b.json would overwrite the input --schedule a,b.json"),
        (["export", "-s", "a,b.json", "-o", "a,b.json"], "-o a,b.json would overwrite the input --schedule a,b.json"),
        (["ops", "-s", "a,b.json", "-o", "link.json"], "-o link.json would overwrite the input --schedule a,b.json"),
        (["ops", "-s", "a,b.json", "-o", "hard.json"], "-o hard.json would overwrite the input --schedule a,b.json"),
        (["ops", "-s", "./a,b.json", "-o", "a,b.json"], "would overwrite the input --schedule ./a,b.json"),
        (["sweep", "--pp", "2", "-m", "2:4", "--components", "k,1.toml", "--csv", "k,1.toml"], "--csv k,1.toml would overwrite"),
        (
            ["profile", "rank0.json", "--timeline", "rank0.json"],
            "--timeline rank0.json would overwrite the input TRACE rank0.json",
        ),
        (["profile", ".", "--timeline", "rank0.json"], "--timeline rank0.json would overwrite the input TRACE ./rank0.json"),
        (
            ["draw", "--schedules", "1f1b,hard.json", "-o", "a,b.json"],
            "-o a,b.json would overwrite the input --schedules hard.json",
        ),
    ]
    for argv, needle in cases:
        code, _, err = run(capsys, *argv)
        one_line(code, err, needle)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_run_profile_never_writes_over_its_schedule(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "rank0.json").write_text(schedule_json())
    before = (tmp_path / "prof" / "rank0.json").read_bytes()
    code, _, err = run(capsys, "run", "-s", "prof/rank0.json", "--profile", "prof", "--synthetic")
    one_line(code, err, "--profile prof/rank0.json would overwrite the input --schedule prof/rank0.json")
    assert (tmp_path / "prof" / "rank0.json").read_bytes() == before


# --------------------------------------------------------------------------------------
# the environment


def test_a_compiler_that_never_returns_is_killed_with_its_children(tmp_path, monkeypatch):
    """The first use compiles the engine: a $CC that hangs (and starts a child that
    would outlive it) is given up on after the timeout, its process group killed."""
    pids = tmp_path / "pids"
    cc = tmp_path / "cc"
    cc.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pids}\nsleep 300\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(kernel, "COMPILE_TIMEOUT", 1.0)
    t = time.monotonic()
    assert kernel._build() is None
    assert time.monotonic() - t < 10
    child = int(pids.read_text())
    time.sleep(0.2)
    try:
        os.kill(child, 0)
        state = Path(f"/proc/{child}/stat").read_text().split()[2] if Path(f"/proc/{child}").exists() else "gone"
        assert state == "Z", f"the compiler's child {child} outlived it ({state})"
    except ProcessLookupError:
        pass


def test_a_full_stdout_is_one_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "pipesim.cli", "ops", "-s", "1f1b"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
    assert r.returncode == 1
    assert r.stderr == "pipesim: error: pipesim ops cannot write its output: No space left on device\n"


def test_no_command_is_a_usage_error(capsys):
    code, out, err = run(capsys)
    assert out == ""
    one_line(code, err, "no command given")
