"""Issue 13: every hostile input of the issue ends in one line and exit 2, no file is
clobbered, JSON is strict and versioned, the package is complete, and the words a
learner reads are right. Each failure the issue lists is a case here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from fuzzing import SCHEMA, schema_errors
from pipesim import REGISTRY, build
from pipesim.cli import main
from pipesim.errors import PipesimError
from pipesim.files import load_schedule, write_bytes_atomic
from pipesim.inputs import MAX_OPS

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ROOT / "src" / "pipesim" / "planner" / "presets"
H100 = (PRESETS / "clusters" / "h100.toml").read_text()
LLAMA = (PRESETS / "models" / "llama3-8b.toml").read_text()
COSTS = "[layer]\nattn_f = 1\nmlp_f = 1\ndispatch_f = 1\ncombine_f = 1\n"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code, err, needle):
    assert code == 2, err
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1, err
    assert needle in err, err


def schedule_json(**change) -> str:
    d = build("1f1b", 2, 4).to_dict()
    d.update(change)
    return json.dumps(d)


# (files to write, argv, what the one line must say); every row is a traceback, a hang
# or an accepted infinity of the issue
ISSUE_CASES = [
    ({"m.toml": LLAMA.replace("layers = 32", "layers = nan")}, ["memory", "--model", "m.toml", "--pp", "2"], "layers must be"),
    ({"m.toml": LLAMA.replace("layers = 32", "layers = 1e308")}, ["memory", "--model", "m.toml", "--pp", "2"], "from 1 to 500"),
    ({"m.toml": LLAMA.replace("dense_ffn = 14336", "dense_ffn = 1e308")}, ["memory", "--model", "m.toml", "--pp", "2"], "dense_ffn"),
    ({"c.toml": H100.replace("fp8_tflops = 1979\n", "")}, ["memory", "--model", "llama3-8b", "--cluster", "c.toml", "--pp", "2"],
     "missing key 'fp8_tflops': give dense FP8 peak"),
    ({"c.toml": H100.replace("memory_mib = 81559", "memory_mib = nan")}, ["memory", "--model", "llama3-8b", "--cluster", "c.toml", "--pp", "2"],
     "memory_mib must be a number from 0 to"),
    ({"c.toml": H100.replace("memory_mib = 81559", "hbm_gb = 80")}, ["memory", "--model", "llama3-8b", "--cluster", "c.toml", "--pp", "2"],
     "hbm_gb is ambiguous"),
    ({"t.toml": "allocator_fragmentation = 1\n"}, ["plan", "--model", "llama3-8b", "--cluster", "h100", "--training", "t.toml"],
     "allocator_fragmentation must be a share from 0 up to (not including) 1, got 1"),
    ({"c.toml": COSTS.replace("attn_f = 1", "attn_f = inf")}, ["simulate", "-s", "1f1b", "--components", "c.toml"], "layer.attn_f"),
    ({"c.toml": "layers = nan\n" + COSTS}, ["simulate", "-s", "1f1b", "--components", "c.toml"], "layers must be a whole number"),
    ({"c.toml": "p2p = inf\n" + COSTS}, ["simulate", "-s", "1f1b", "--components", "c.toml", "--json"], "p2p must be"),
    ({"s.json": b'{"pp": 1, "microbatches": 1, "ranks": ["F0.0 \xff"]}'}, ["validate", "-s", "s.json"], "not UTF-8 text (byte 45"),
    ({"s.json": "[" * 100_000 + "]" * 100_000}, ["validate", "-s", "s.json"], "nested deeper than 32"),
    ({"s.json": schedule_json(microbatches=10**9)}, ["validate", "-s", "s.json"], "microbatches must be a whole number"),
    ({"s.json": schedule_json(microbatches=10**7, pp=2)}, ["validate", "-s", "s.json"], f"limit of {MAX_OPS:,}"),
    # under the limit, but claiming far more micro-batches than it lists (fuzz seed 11's hang)
    (
        {"s.json": json.dumps({"pp": 1, "microbatches": 5 * 10**6, "ranks": [["F0.0", "BW0.0", "F0.1", "BW0.1"]]})},
        ["validate", "-s", "s.json"],
        "lists 4 items, too few for microbatches = 5,000,000 on 1 ranks",
    ),
    ({"s.json": schedule_json().replace('"pp": 2', '"pp": NaN')}, ["validate", "-s", "s.json"], "NaN is not a JSON number"),
    ({}, ["validate", "-s", "/dev/zero"], "it is not a regular file"),
    ({}, ["run", "--schedule", ""], "--schedule '' is empty"),
    ({}, ["pair", "--layers", "999999999999999999999"], "--layers: expected a whole number from 1 to"),
    ({}, ["simulate", "-s", "1f1b", "--pp", "1000000000000000000000"], "--pp: expected a whole number from 1 to"),
    ({}, ["simulate", "-s", "1f1b", "--pp", "1e21"], "--pp: expected a whole number"),
    ({}, ["simulate", "-s", "1f1b", "-m", "1e21"], "-m: expected a whole number"),
    ({}, ["simulate", "-s", "1f1b", "--pp", "1024", "-m", "100000"], "1f1b too large: pp=1024, M=100000, 1024 stages is up to 307,200,000 ops"),
    ({}, ["sweep", "--pp", "4", "-m", "1:16000000:1"], "more than 10,000 values"),
    ({}, ["simulate", "-s", "1f1b", "--f", "inf"], "--f: costs must be from 0 to 1e+15"),
    ({}, ["simulate", "-s", "1f1b", "--comm", "1e308", "--json"], "--comm: expected a number from 0 to 1e+15"),
    ({}, ["plan", "--model", "llama3-8b", "--cluster", "h100", "--tokens", "inf"], "--tokens: expected a number > 0"),
    ({}, ["run", "--schedule", "1f1b", "--synthetic", "--f", "1e308"], "--f: expected a duration up to 86400 s"),
    ({}, ["ops", "-s", "1f1b", "-o", ""], "--output '' is empty"),
    ({}, ["ops", "-s", "1f1b", "-o", "x.pdf"], "-o x.pdf: unknown extension '.pdf'; use .json for a schedule file"),
    ({}, ["import", "--torch", "GPipe", "-o", "x.csv"], "-o x.csv: unknown extension '.csv'; use .json"),
    ({}, ["compare", "--schedules", ""], "--schedules '' is empty"),
    ({}, ["compare", "--schedules", ","], "names no schedule"),
    ({"s.json": schedule_json(microbatch=4)}, ["validate", "-s", "s.json"], "unknown key 'microbatch' (did you mean microbatches?)"),
    ({"c.toml": COSTS + "atn_b = 1\n"}, ["pair", "--components", "c.toml"], "unknown key 'atn_b' (did you mean attn_b?)"),
    ({"m.toml": LLAMA.replace("hidden =", "hiden =")}, ["memory", "--model", "m.toml", "--pp", "2"], "did you mean hidden?"),
    ({}, ["plan", "--model", "lama3-8b", "--cluster", "h100"], "(did you mean llama3-8b?)"),
    # the preset the name begins, not the one a letter away: h800 was offered h200, gb200 b200
    ({}, ["plan", "--model", "llama3-8b", "--cluster", "h800"], "unknown cluster 'h800' (did you mean h800-2048?)"),
    ({}, ["plan", "--model", "llama3-8b", "--cluster", "gb200"], "unknown cluster 'gb200' (did you mean gb200-nvl72?)"),
]  # fmt: skip


@pytest.mark.parametrize("files,argv,needle", ISSUE_CASES)
def test_issue_inputs_are_one_line_exit_2(capsys, tmp_path, monkeypatch, files, argv, needle):
    monkeypatch.chdir(tmp_path)
    for name, text in files.items():
        (tmp_path / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    before = sorted(os.listdir(tmp_path))
    t = time.process_time()
    code, out, err = run(capsys, *argv)
    one_line(code, err, needle)
    assert time.process_time() - t < 5  # refused up front, not after the work
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["-s", "zb-h1", "--pp", "8", "-m", "3", "--b", "1e15"],
        ["-s", "dualpipe", "--pair", "16000001"],
        ["-s", "dualpipe", "--pair", "1e15", "--width", "99999999"],
    ],
)
def test_a_huge_cost_ratio_squeezes_the_timeline(capsys, argv):
    """Found by benchmarks/fuzz.py: one column per shortest op made a line of 1e15 columns."""
    t = time.process_time()
    code, out, _ = run(capsys, "simulate", *argv)
    assert code == 0 and "squeezed to" in out
    assert max(len(line) for line in out.splitlines()) < 4100 and time.process_time() - t < 5


def test_sweep_takes_the_component_preset(capsys):
    code, out, err = run(capsys, "sweep", "--preset", "ep-1to1", "--pp", "2", "-m", "4", "--schedules", "1f1b,dualpipe")
    assert code == 0 and "costs per layer" in out and "dualpipe" in out


def test_stages_without_placement_is_honoured_or_refused(capsys, tmp_path):
    d = build("dualpipev", 2, 4).to_dict()
    del d["placement"]
    f = tmp_path / "v.json"
    f.write_text(json.dumps(d))  # the name tells the V placement: 4 stages agree
    assert load_schedule(f).placement.stages == 4
    d["stages"] = 6
    f.write_text(json.dumps(d))
    with pytest.raises(PipesimError, match="stages = 6 disagrees with the v placement's 4 stages"):
        load_schedule(f)
    flat = build("1f1b", 2, 4).to_dict()
    del flat["placement"]
    flat.update(schedule="mine", stages=4)  # every op on chunk 0 means flat: 2 stages, not 4
    f.write_text(json.dumps(flat))
    with pytest.raises(PipesimError, match="stages = 4 disagrees with the flat placement's 2 stages"):
        load_schedule(f)


# --------------------------------------------------------------------------------------
# output


def test_output_refuses_fifos_and_devices_and_follows_symlinks(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "ops", "-s", "1f1b", "-o", fifo)
    one_line(code, err, "it is not a regular file")
    assert fifo.is_fifo()
    code, _, err = run(capsys, "ops", "-s", "1f1b", "-o", "/dev/full")
    one_line(code, err, "cannot write '/dev/full': it is not a regular file")
    assert Path("/dev/full").is_char_device()
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    assert run(capsys, "ops", "-s", "zb-h1", "--pp", "2", "-m", "2", "-o", link)[0] == 0
    assert link.is_symlink() and load_schedule(target).name == "zb-h1"
    code, _, err = run(capsys, "ops", "-s", "1f1b", "-o", tmp_path)
    one_line(code, err, "it is a folder")


def test_output_dash_is_stdout(capsys):
    code, out, err = run(capsys, "ops", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", "-")
    assert code == 0 and err == ""
    d = json.loads(out)
    assert d["format"] == 1 and schema_errors(d, json.loads(SCHEMA.read_text())) == []
    code, out, err = run(capsys, "export", "-s", "1f1b", "--pp", "2", "-m", "2", "-o", "-")
    # the CSV alone on stdout; stderr says which torchtitan schedule runs it, and no 'wrote -'
    assert code == 0 and out.splitlines()[0].startswith("0F0")
    assert err.startswith("torchtitan:") and err.count("\n") == 1 and "wrote" not in err


def test_an_output_never_replaces_an_input(capsys, tmp_path, monkeypatch):
    """The README's old example: the edited schedule must survive."""
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "ops", "-s", "zb-h1", "--pp", "2", "-m", "4", "-o", "mine.json")[0] == 0
    edited = (tmp_path / "mine.json").read_bytes()
    code, _, err = run(capsys, "draw", "--schedule", "mine.json", "-o", "mine.svg", "-o", "mine.json")
    one_line(code, err, "-o mine.json would overwrite the input --schedule mine.json")
    assert (tmp_path / "mine.json").read_bytes() == edited and not (tmp_path / "mine.svg").exists()
    (tmp_path / "c.toml").write_text(COSTS)
    code, _, err = run(capsys, "sweep", "--pp", "2", "-m", "4", "--components", "c.toml", "--csv", "c.toml")
    one_line(code, err, "would overwrite the input --components c.toml")


def test_concurrent_writers_of_one_path_never_collide(tmp_path):
    """Unique temporary names: every write succeeds and a reader sees a whole file."""
    path, errors, seen = tmp_path / "x.json", [], []
    payloads = [json.dumps({"writer": i, "pad": "x" * 20_000}).encode() for i in range(8)]

    def writer(data):
        try:
            for _ in range(15):
                write_bytes_atomic(path, data)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def reader():
        for _ in range(200):
            if path.exists():
                seen.append(path.read_bytes())

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads] + [threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(s in payloads for s in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left


def test_a_failed_write_leaves_nothing(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(PipesimError, match="cannot write"):
            write_bytes_atomic(folder / "x.json", b"{}")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


# --------------------------------------------------------------------------------------
# strict JSON, versions, schema


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "-s", "1f1b", "--pp", "2", "-m", "2", "--f", "0", "--b", "0", "--w", "0", "--json"],
        ["compare", "--pp", "2", "-m", "4", "--f", "0", "--b", "0", "--w", "0", "--json"],
        ["schedules", "--json"],
        ["pair", "--preset", "ep-1to1", "--json"],
        ["memory", "--model", "llama3-8b", "--pp", "2", "--gpus", "8", "--json"],
    ],
)
def test_json_output_is_strict_and_versioned(capsys, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0

    def refuse(name):
        raise AssertionError(f"{name} in the output")

    d = json.loads(out, parse_constant=refuse)
    assert next(iter(d)) == "format" and d["format"] == 1


def test_written_schedules_validate_against_the_shipped_schema(capsys, tmp_path):
    schema = json.loads(SCHEMA.read_text())
    for name, fam in REGISTRY.items():
        pp = 4
        M = 8
        opts = {"chunks": 2} if "chunks" in fam.options else {}
        path = tmp_path / f"{name}.json"
        assert (
            run(capsys, "ops", "-s", name, "--pp", pp, "-m", M, *sum((["--chunks", "2"] for _ in opts), []), "-o", path)[0] == 0
        )
        d = json.loads(path.read_text())
        assert schema_errors(d, schema) == [], name
    # the schema refuses what the loader refuses
    assert schema_errors({"pp": 0, "microbatches": 1, "ranks": []}, schema)
    assert schema_errors({"pp": 1, "microbatches": 1, "ranks": [["Q0.0"]]}, schema)
    assert schema_errors({"pp": 1, "microbatches": 1, "ranks": [], "microbatch": 1}, schema)


def test_format_versions(tmp_path):
    f = tmp_path / "s.json"
    d = json.loads(schedule_json())
    assert "format" not in d  # Schedule.to_dict, as pipesim 0.1 wrote files before format existed
    f.write_text(json.dumps(d))
    assert load_schedule(f).pp == 2
    d["format"] = 2
    f.write_text(json.dumps(d))
    with pytest.raises(PipesimError, match="format 2 is newer than this pipesim reads"):
        load_schedule(f)


def test_schema_ships_with_the_package():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "schedule.schema.json" in pyproject["tool"]["setuptools"]["package-data"]["pipesim"]
    assert json.loads(SCHEMA.read_text())["$schema"].startswith("https://json-schema.org/")


def test_the_c_sources_ship_with_the_package():
    """An installed pipesim compiles its C loops from the sources beside kernel.py; one left out
    of the package data would leave every install on the Python loops, unsaid."""
    from pipesim import kernel

    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["pipesim"]
    assert all(path.exists() and path.name in shipped for path in kernel._SOURCES)


# --------------------------------------------------------------------------------------
# packaging and the process


def test_packaging_metadata():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert pyproject["license"] == "MIT" and pyproject["license-files"] == ["LICENSE"]
    assert "MIT License" in (ROOT / "LICENSE").read_text() and "pipesim contributors" in (ROOT / "LICENSE").read_text()
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in pyproject["classifiers"])
    # the project has no public home yet: no URL rather than a placeholder that reads as one
    assert "urls" not in pyproject
    assert (ROOT / "src" / "pipesim" / "py.typed").exists()


def test_version_from_metadata(capsys):
    import pipesim

    assert pipesim.__version__ == version("pipesim")
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"pipesim {version('pipesim')}"


def _pipesim(*argv, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.Popen([sys.executable, "-m", "pipesim.cli", *argv], env=env, **kw)


def test_missing_matplotlib_is_a_one_line_hint(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from pipesim.cli import main\n"
        f"sys.exit(main(['draw', '-s', '1f1b', '-o', {str(tmp_path / 'x.png')!r}]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr == "pipesim: error: pipesim draw needs matplotlib: pip install 'pipesim[plot]'\n"
    assert not (tmp_path / "x.png").exists()


def test_broken_pipe_exits_0_quietly():
    p = _pipesim("ops", "-s", "1f1b", "--pp", "64", "-m", "512", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()  # like | head -1
    err = p.stderr.read()
    assert p.wait(timeout=120) == 0 and err == b""


def test_ctrl_c_says_what_was_interrupted():
    # about 10M ops, inside the work limit that holds for the whole comparison: seconds of work
    argv = ("compare", "--pp", "64", "-m", "20000", "--schedules", "1f1b,zb-h1,dualpipev")
    p = _pipesim(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    p.send_signal(signal.SIGINT)
    err = p.stderr.read()
    assert p.wait(timeout=60) == 130
    assert err == "pipesim: interrupted: pipesim compare stopped by Ctrl-C (no file is left half-written)\n"


# --------------------------------------------------------------------------------------
# the wrong words


def test_parameter_copies_in_the_schedule_table_match_the_placements(capsys):
    """`pipesim schedules` said DualPipeV needs 2x parameters; its placement holds one copy."""
    import re

    code, out, _ = run(capsys, "schedules", "--json")
    rows = json.loads(out)["schedules"]
    checked = 0
    for r in rows:
        for text in (r["bubble"] or "", r["activations"] or ""):
            for m in re.finditer(r"(\d)x parameters", text):
                pp = 4
                s = build(r["name"], pp, 2 * pp)
                assert int(m.group(1)) == s.placement.parameter_copies, r["name"]
                checked += 1
    assert checked >= 3  # chimera, dualpipe, dualpipev say it
    dpv = next(r for r in rows if r["name"] == "dualpipev")
    assert "1x parameters" in dpv["activations"]


def test_report_settings_say_per_stage_under_costs_per_stage(capsys, tmp_path):
    out = tmp_path / "r.html"
    pytest.importorskip("matplotlib")
    assert run(capsys, "report", "--pp", "2", "-m", "4", "--schedules", "1f1b", "--costs-per", "stage", "-o", out)[0] == 0
    html = out.read_text()
    assert "F, B, W are one 1F1B stage" in html and "F, B, W are per chunk" not in html


def test_memory_with_ep_1_does_not_speak_of_one_of_1_gpus(capsys):
    code, out, _ = run(capsys, "memory", "--model", "mixtral-8x22b", "--pp", "4", "--gpus", "64", "--ep", "1")
    assert code == 0
    assert "one of 1 GPUs" not in out and "With ep=1 every GPU keeps all 8 routed experts" in out


def test_nothing_fits_is_an_error(capsys, tmp_path):
    c = tmp_path / "tiny.toml"
    c.write_text(H100.replace("memory_mib = 81559", "memory_mib = 953.67431640625").replace("gpus = 1024", "gpus = 8"))
    code, out, err = run(capsys, "plan", "--model", "llama3-8b", "--cluster", c, "--schedules", "1f1b")
    one_line(code, err, "nothing fits llama3-8b on h100 (1 GB per GPU)")
    assert out == ""


def test_memory_is_gb_everywhere(capsys, tmp_path):
    (tmp_path / "c.toml").write_text(COSTS + "[memory]\nhidden = 4096\nheads = 32\nseq = 4096\n")
    code, out, _ = run(capsys, "simulate", "-s", "1f1b", "--pp", "2", "-m", "2", "--components", tmp_path / "c.toml")
    assert code == 0 and "memory per rank (GB)" in out and "GiB" not in out
    # parameters of one 4096-wide layer: 12 * 4096^2 = 201M; x 2 bytes = 0.4 GB (0.37 GiB)
    assert "parameters 0.4 " in out
    code, out, _ = run(capsys, "memory", "--model", "llama3-8b", "--pp", "2", "--gpus", "8")
    assert " GB" in out and "GiB" not in out


def test_readme_examples_are_right():
    readme = (ROOT / "README.md").read_text()
    draw = [line for line in readme.splitlines() if line.startswith("pipesim draw --schedule mine.json")]
    assert draw and all("-o mine.json" not in line for line in draw)
    first_picture = next(line for line in readme.splitlines() if line.startswith("![") and "schedules_pp4_m8" in line)
    assert "--costs-per stage" in first_picture or "one model" in first_picture


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead
    except OSError:
        return False


@pytest.mark.runtime
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_forkserver_dies_with_a_killed_launcher():
    """The forkserver used to import torch for seconds (20 under load) before it noticed
    its launcher was gone; now it dies with it."""
    pytest.importorskip("torch")
    p = _pipesim(
        "run", "--schedule", "1f1b", "--pp", "2", "-m", "2", "--check", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    server, deadline = None, time.monotonic() + 120
    while server is None and time.monotonic() < deadline and p.poll() is None:
        for child in _children(p.pid):
            if b"forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
                server = child
        time.sleep(0.05)
    if server is None:
        p.kill()
        pytest.skip("the run ended before its forkserver was seen")
    p.kill()  # SIGKILL: the launcher cannot clean up
    p.wait()
    gone = time.monotonic() + 3
    while _alive(server) and time.monotonic() < gone:
        time.sleep(0.05)
    assert not _alive(server)
