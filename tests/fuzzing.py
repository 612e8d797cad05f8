"""Hostile inputs for every command and file format, and the one verdict on each run.

A case is an argv for ``pipesim`` plus the files it names, drawn through a ``Pick``
(hypothesis in tests/test_fuzz.py, a seeded ``random.Random`` in benchmarks/fuzz.py).
``run_case`` runs it in-process (``cli.main`` with captured streams) in a fresh folder
and ``verdict`` says what went wrong, if anything: a traceback, a hang, a rejection that
is not exactly one ``pipesim: error:`` line, an invalid output, or a file that was
clobbered or left half-written.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import signal
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

PRESETS = Path(__file__).resolve().parents[1] / "src" / "pipesim" / "planner" / "presets"
SCHEMA = Path(__file__).resolve().parents[1] / "src" / "pipesim" / "schedule.schema.json"

# numbers as a hostile user types them: valid small ones, edges, overflow, non-finite, junk
NUMBERS = [
    "0", "1", "2", "3", "4", "8", "-1", "0.5", "1.5", "1e15", "1e16", "1e21", "1e308", "-1e308",
    "inf", "-inf", "nan", "NaN", "1e-300", "999999999999999999999", "16000001", "0x10", " ", "abc",
    "1,2", "1,inf", "2,2,2,2", "4,4", "1,,2", "1e400", "-0",
]  # fmt: skip
TOML_VALUES = NUMBERS[:20] + ["nan", "inf", "-inf", "true", '"x"', "[1, 2]", "{a = 1}"]
# issue 23's classes, which the pools above never drew: integers too long for int()
# (Python's limit is 4,300 digits) or too wide for the engine's int32 and numpy's int64,
# zeros and denormals where a rate divides, and negative or zero counts
DIGIT_HEAVY = ["9" * 5000, "9" * 400, "1" + "0" * 30, "-" + "9" * 4301, "0" * 40 + "1"]
BOUNDARIES = ["2147483647", "2147483648", "-2147483648", "-2147483649", "4294967296", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551616"]  # fmt: skip
TINY = ["0", "0.0", "-0.0", "5e-324", "1e-310", "2.2250738585072014e-308", "1e-300"]
COUNTS = ["0", "-1", "-3", "-2147483648"]
NEW_CLASSES = {"digits": DIGIT_HEAVY, "boundary": BOUNDARIES, "tiny": TINY, "count": COUNTS}
NEW_VALUES = {v: k for k, pool in NEW_CLASSES.items() for v in pool}
SMALL = ["1", "2", "3", "4", "6", "8"]
SCHEDULES = ["1f1b", "gpipe", "zb-h1", "zb-h2", "interleaved-1f1b", "dualpipe", "dualpipev", "zb-v", "v-half", "chimera", "zb-auto", "nonesuch", "1F1B"]  # fmt: skip
OUTPUT_NAMES = ["out.png", "out.svg", "out.json", "out.pdf", "out.csv", "out.html", "out.md", "out.txt", "-", "dir", "fifo", "nowhere/x.svg", "link.svg", "in.json", "existing.svg"]  # fmt: skip
SPECIAL_INPUTS = ["/dev/zero", "/dev/null", "dir", "fifo", "missing.json", "link.json", "-"]


class Pick:
    """What a case generator draws from; subclasses wrap hypothesis or random."""

    tame = False  # this case draws valid values only (the success paths need cover too)
    huge = False  # draw legal-but-huge sizes too (benchmarks/fuzz.py --huge)

    def __init__(self):
        self.tags: set[str] = set()  # the new classes (NEW_CLASSES, "huge") this case drew from

    def new(self, p: float = 0.5) -> str | None:
        """A value of one of issue 23's classes, with chance ``p`` (never in a tame case)."""
        if self.tame or not self.chance(p):
            return None
        kind = self.one(list(NEW_CLASSES))
        self.tags.add(kind)
        return self.one(NEW_CLASSES[kind])

    def one(self, seq):  # pragma: no cover - interface
        raise NotImplementedError

    def chance(self, p: float) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


class RandomPick(Pick):
    def __init__(self, rng):
        super().__init__()
        self.rng = rng

    def one(self, seq):
        return self.rng.choice(list(seq))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


@dataclass
class Case:
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # name -> content written before the run
    outputs: tuple[str, ...] = ()  # paths the command may write
    tags: tuple[str, ...] = ()  # the new classes drawn (NEW_CLASSES, "huge")


def num(pick: Pick, pool: list[str] = NUMBERS) -> str:
    """A number flag's value: hostile (a third of them from issue 23's classes), or a
    small valid one in a tame case."""
    return pick.new(0.33) or pick.one(SMALL if pick.tame else pool)


# --------------------------------------------------------------------------------------
# files


def _mutate_text(pick: Pick, text: str) -> bytes:
    """A TOML file with one hostile change."""
    lines = text.splitlines()
    if pick.tame:
        return text.encode()
    how = pick.one(["value", "value", "value", "drop", "unknown", "syntax", "bytes", "table", "same"])
    keyed = [i for i, line in enumerate(lines) if re.match(r"^\w+\s*=", line)]
    if pick.huge and pick.chance(0.3) and keyed:
        # a size that every reader accepts (the top of its range), that may cost the most
        i = pick.one(keyed)
        key = lines[i].split("=")[0].strip()
        pick.tags.add("huge")
        lines[i] = f"{key} = {HUGE.get(key, pick.one(['16000000', '10000', '1e15']))}"
        return ("\n".join(lines) + "\n").encode()
    if how == "value" and keyed:
        i = pick.one(keyed)
        key = lines[i].split("=")[0].strip()
        lines[i] = f"{key} = {pick.new(0.4) or pick.one(TOML_VALUES)}"
    elif how == "drop" and keyed:
        del lines[pick.one(keyed)]
    elif how == "unknown":
        lines.insert(0 if pick.chance(0.5) else len(lines), f"{pick.one(['layer', 'hiden', 'bogus', 'gpus_per_nod'])} = 1")
    elif how == "syntax":
        lines.append(pick.one(["= 1", "[[", "x = ", 'a = "unterminated']))
    elif how == "bytes":
        return "\n".join(lines).encode() + pick.one([b"\xff\xfe", b"\x00", b"\xc3"])
    elif how == "table":
        lines.append(pick.one(["[moe]\nexperts = 0\nexpert_ffn = 1\ntop_k = 1", "[attention]\nkind = 'mla'", "[mlp]\nx = 1"]))
    return ("\n".join(lines) + "\n").encode()


# the top of each spec field's accepted range (planner/specs.py BOUNDS, costfile.py)
HUGE = {
    "layers": "10000", "dense_layers": "10000", "hidden": "10000000", "heads": "1000000", "vocab": "100000000",
    "dense_ffn": "10000000", "expert_ffn": "10000000", "experts": "1000000", "top_k": "1000000", "gpus": "10000000",
    "gpus_per_node": "1024", "sms": "100000", "comm_sms": "100000", "seq": "100000000", "global_batch": "16000000",
    "mtp": "16000000", "tokens": "1e18", "bf16_tflops": "1e7", "hbm_gb": "1e7", "kv_heads": "1000000",
}  # fmt: skip


def schedule_file(pick: Pick) -> bytes:
    from pipesim import build

    name = pick.one(["1f1b", "zb-h1", "dualpipev", "interleaved-1f1b"])
    pp = int(pick.one(["1", "2", "4"]))
    s = build(name, pp, 2 * pp, **({"chunks": 2} if name == "interleaved-1f1b" else {}))
    d: dict = s.to_dict()
    if pick.tame:
        return json.dumps(d).encode()
    how = pick.one(
        ["same", "value", "value", "drop", "unknown", "op", "deep", "bytes", "truncate", "nan", "big", "stages", "placement"]
    )
    wide = pick.new(0.3)
    if wide is not None and not wide.lstrip("-").replace(".", "").replace("e", "").isdigit():
        wide = None
    if wide is not None and how in ("value", "op", "big"):
        # a JSON number (or an op index) of issue 23's classes, written as text
        text = json.dumps(d)
        if how == "op":
            digits = wide.lstrip("-") if wide.lstrip("-").isdigit() else "0"
            return text.replace('"F0.0', f'"F{digits}.0' if pick.chance(0.5) else f'"F0.{digits}', 1).encode()
        key = pick.one(["pp", "microbatches"])
        return re.sub(rf'"{key}": -?\d+', f'"{key}": {wide}', text, count=1).encode()
    if how == "value":
        d[pick.one(list(d))] = pick.one([0, -1, 1.5, 1e21, 10**30, None, "x", [], {}, True, [[]], "F0.0"])
    elif how == "drop":
        d.pop(pick.one(list(d)))
    elif how == "unknown":
        d[pick.one(["microbatch", "rank", "bogus", "formats"])] = 1
    elif how == "op":
        row = d["ranks"][0]
        row[0] = pick.one(["Q0.0", "F9.0", "F0.99", "F0.-1", "F0.0&F0.1", "", "F" + "9" * 30 + ".0", "BW0.0&F0.1"])
    elif how == "deep":
        return ("[" * pick.one([40, 2000, 100_000]) + "]" * 3).encode()
    elif how == "bytes":
        return json.dumps(d).encode()[:-2] + b'\xff"}'
    elif how == "truncate":
        return json.dumps(d).encode()[: pick.one([0, 1, 10, 50])]
    elif how == "nan":
        return json.dumps(d).replace('"pp": ', '"pp": NaN, "x": ').encode()
    elif how == "big":
        d["microbatches"] = pick.one([10**9, 10**7, 16_000_001])
    elif how == "stages":
        d.pop("placement")
        d["stages"] = pick.one([pp, 2 * pp, 3, 10**12, "two"])
        d["schedule"] = pick.one(["custom", name])
    elif how == "placement":
        d["placement"] = pick.one(
            [
                {"kind": "zigzag"},
                {"kind": "v", "chunks": 10**9},
                {"routes": [[[0, 0]]]},
                "prose",
                7,
                {"routes": "x"},
                {"routes": [[[0, 2**31]]] * 2 * pp},
                {"routes": [[[0, 1e308]]]},
                {"routes": [[[-1, 0]]]},
            ]
        )
    if pick.chance(0.2):
        d["format"] = pick.one([1, 2, 0, "1", 1.0])
    return json.dumps(d).encode()


def cost_file(pick: Pick) -> bytes:
    base = "layers = 2\np2p = 0.05\ncomm_sms = 20\ntotal_sms = 132\n[layer]\nattn_f = 1.0\nmlp_f = 1.0\ndispatch_f = 1.0\ncombine_f = 1.0\n"
    if pick.chance(0.4):
        base += "[memory]\nhidden = 64\nheads = 4\nseq = 128\ndp = 2\nzero = 1\n"
    return _mutate_text(pick, base)


def spec_file(pick: Pick, kind: str) -> bytes:
    if kind == "training":
        return _mutate_text(
            pick, 'seq = 1024\nglobal_batch = 64\nprecision = "bf16"\nzero = 1\nrecompute = "auto"\ntokens = 1e9\n'
        )
    if kind == "model":
        text = 'name = "tiny"\nlayers = 4\nhidden = 256\nheads = 4\nvocab = 1000\n[attention]\nkind = "gqa"\n[mlp]\ndense_ffn = 1024\n'
        if pick.chance(0.3):
            text = (PRESETS / "models" / f"{pick.one(['llama3-8b', 'deepseek-v3', 'mixtral-8x22b'])}.toml").read_text()
        return _mutate_text(pick, text)
    text = 'name = "c"\ngpu = "G"\ngpus = 8\ngpus_per_node = 8\nbf16_tflops = 989\nfp8_tflops = 0\nmemory_mib = 81559\nnvlink_gbps = 360\nnetwork_gbps = 50\n'
    return _mutate_text(pick, text)


def timeline_file(pick: Pick) -> bytes:
    """A measured timeline (what profile --timeline writes), one time made hostile."""
    from pipesim import build
    from pipesim.files import timeline_to_dict
    from pipesim.simulate import simulate

    s = build("1f1b", 2, 4)
    text = json.dumps(timeline_to_dict(s, simulate(s)))
    if pick.tame:
        return text.encode()
    value = pick.new(0.5) or pick.one(["1e308", "-1e308", "1e16", "NaN", '"x"', "null", "-1"])
    return re.sub(r'(\["F0\.0", )[-0-9.e]+', lambda m: m.group(1) + value, text, count=1).encode()


def torch_csv(pick: Pick) -> bytes:
    rows = pick.one(
        [
            "0F0,0B0\n1F0,1B0\n",
            "0F0,0I0,0W0\n1F0,1I0,1W0\n",
            "0F0,0B0\n",
            "x,y\n",
            "",
            "0F99999999999,0B0\n",
            "0F0\xff\n",
            "\n",
            ",,\n,\n",
        ]
    )
    wide = pick.new(0.3)
    if wide is not None and wide.lstrip("-").isdigit():
        rows = pick.one([f"0F{wide.lstrip('-')},0B0\n", f"{wide.lstrip('-')}F0,0B0\n", f"0F0,0B0\n1F0,1B{wide.lstrip('-')}\n"])
    return rows.encode("utf-8", "surrogateescape") if isinstance(rows, str) else rows


def profile_trace(pick: Pick) -> bytes:
    """A small torch.profiler trace (component annotations, their launches, the kernels
    they launched), one field of it made hostile, or the file's form broken."""
    events = [{"ph": "X", "cat": "user_annotation", "name": name, "ts": 100 * i, "dur": 90, "pid": 1, "tid": 1}
              for i, name in enumerate(["attn(F)", "mlp(F)", "dispatch(B)", "attn(B)"])]  # fmt: skip
    for i in range(4):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 100 * i + 1, "dur": 2, "pid": 1, "tid": 1, "args": {"correlation": i}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 100 * i + 5, "dur": 50, "pid": 0, "tid": 7, "args": {"correlation": i, "stream": 7 if i != 2 else 27}})  # fmt: skip
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": "GPU", "numSms": 132}], "traceEvents": events}
    wide = pick.new(0.25)
    if wide is not None:  # a number of issue 23's classes as JSON text (int() could not even make it)
        text = json.dumps(doc)
        if pick.chance(0.3) and wide.lstrip("-").isdigit():  # a label naming a stage or micro-batch that wide
            text = text.replace('"attn(F)"', pick.one([f'"PP:{wide.lstrip("-")}F0"', f'"PP:0F{wide.lstrip("-")}"', f'"pipesim/F0.0 rank={wide.lstrip("-")} stage=0"']))  # fmt: skip
        else:
            field_ = pick.one(['"ts": 100', '"dur": 90', '"pid": 1', '"correlation": 1', '"numSms": 132', '"stream": 7'])
            text = text.replace(field_, f"{field_.split(':')[0]}: {wide}", 1)
        return text.encode()
    if not pick.tame:
        how = pick.one(["field", "field", "field", "drop", "event", "form", "form", "gzip"])
        e = pick.one(events)
        if how == "field":
            key = pick.one(["ts", "dur", "name", "cat", "ph", "args", "tid", "pid"])
            e[key] = pick.one([-1, 0, 1e308, -1e308, float("nan"), "abc", None, [], {}, 2**70, True])
        elif how == "drop":
            del e[pick.one([k for k in e])]
        elif how == "event":
            events.append(pick.one([1, "x", None, [], {"ph": "X"}, {"ph": "X", "cat": 5, "ts": 1}]))
        elif how == "gzip":
            data = gzip.compress(json.dumps(doc).encode())
            return data[: pick.one([len(data), len(data) // 2, 10])]
        else:
            return pick.one([b"", b"[1, 2]", b"[" * 100_000, b'{"traceEvents": 5}', b"{}", b"\x00\xff", json.dumps(doc).encode()[:-40]])  # fmt: skip
    return json.dumps(doc).encode()


# --------------------------------------------------------------------------------------
# argv


def _input(pick: Pick, files: dict, make, name: str) -> str:
    """A file input: usually a fuzzed file, sometimes a special path."""
    if pick.chance(0.15) and not pick.tame:
        return pick.one(SPECIAL_INPUTS)
    files[name] = make()
    return name


def _shape(pick: Pick, argv: list[str], sizes: list[str] = SMALL) -> None:
    for flag in ("--pp", "-m", "--chunks"):
        if pick.chance(0.5 if flag != "--chunks" else 0.1):
            argv += [flag, pick.one(sizes if pick.chance(0.8) or pick.tame else NUMBERS)]


def _costs(pick: Pick, argv: list[str], files: dict) -> None:
    if pick.chance(0.6):
        for flag in ("--f", "--b", "--w", "--bw", "--pair", "--comm"):
            if pick.chance(0.25):
                argv += [flag, pick.one(NUMBERS if pick.chance(0.5) and not pick.tame else ["1", "2", "0.5", "1,2", "0"])]
        if pick.chance(0.3):
            argv += ["--costs-per", pick.one(["chunk", "stage", "layer"])]
    elif pick.chance(0.5):
        if pick.chance(0.5):
            argv += ["--preset", pick.one(["ep-1to1", "nope"])]
        elif pick.chance(0.7):
            argv += ["--components", _input(pick, files, lambda: cost_file(pick), "costs.toml")]
        for flag in ("--attn", "--mlp", "--dispatch", "--combine", "--layers", "--p2p", "--comm-sms", "--total-sms"):
            if pick.chance(0.15):
                argv += [flag, num(pick)]
        if pick.chance(0.2):
            argv.append("--lone-overlap")


def _schedule(pick: Pick, files: dict) -> str:
    if pick.chance(0.3):
        return _input(pick, files, lambda: schedule_file(pick), "in.json")
    return pick.one(SCHEDULES + [""])


TAME_OUTPUTS = {"draw": ["out.png", "out.svg", "out.json"], "pair": ["out.svg", "out.png"], "sweep": ["out.csv", "out.svg"], "report": ["out.html"], "plan": ["out.md", "out.json", "-"], "export": ["out.csv", "-"]}  # fmt: skip


def _out(pick: Pick, argv: list[str], outs: list[str], flag: str = "-o") -> None:
    tame = TAME_OUTPUTS.get(argv[0], ["out.json", "-"]) if flag == "-o" else ["out.csv"]
    name = pick.one(tame if pick.tame else OUTPUT_NAMES + [""])
    argv += [flag, name]
    outs.append(name)


def _specs(pick: Pick, argv: list[str], files: dict) -> None:
    for kind in ("model", "cluster"):
        if pick.chance(0.6):
            argv += [f"--{kind}", _input(pick, files, lambda k=kind: spec_file(pick, k), f"{kind}.toml")]
        else:
            argv += [
                f"--{kind}",
                pick.one({"model": ["llama3-8b", "mixtral-8x22b", "gpt5"], "cluster": ["h100", "a100", "h10"]}[kind]),
            ]
    argv += ["--gpus", pick.one(["8", "16"] if pick.chance(0.85) else NUMBERS)]
    if pick.chance(0.3):
        argv += ["--training", _input(pick, files, lambda: spec_file(pick, "training"), "training.toml")]
    for flag, values in (
        ("--seq", ["512", "1024"]),
        ("--global-batch", ["8", "64"]),
        ("--tokens", ["1e9", "inf", "nan", "-1", "1e308"]),
        ("--zero", ["0", "3", "4"]),
        ("--precision", ["bf16", "fp8", "fp4"]),
        ("--recompute", ["none", "full", "half"]),
    ):
        if pick.chance(0.15):
            argv += [flag, pick.one(values + NUMBERS[:6])]


# every flag that takes a count or a size, per command (negative and zero counts, long
# and wide integers, denormals are drawn for them)
COUNT_FLAGS = {
    "simulate": ["--pp", "-m", "--chunks", "--group-size", "--width", "--layers", "--comm-sms", "--total-sms"],
    "compare": ["--pp", "-m", "--chunks", "--group-size", "--width"],
    "ops": ["--pp", "-m", "--chunks", "--group-size"],
    "validate": ["--pp", "-m", "--chunks"],
    "export": ["--pp", "-m", "--chunks", "--group-size"],
    "draw": ["--pp", "-m", "--chunks", "--width"],
    "report": ["--pp", "-m", "--chunks"],
    "pair": ["--layers", "--width", "--comm-sms", "--total-sms"],
    "sweep": ["--pp", "--chunks"],
    "plan": [
        "--gpus",
        "--seq",
        "--global-batch",
        "--zero",
        "--top",
        "--layout",
        "--tp",
        "--pp",
        "--dp",
        "--ep",
        "--chunks",
        "--micro-batch-size",
        "--microbatches",
        "--measured-step",
        "--tokens",
    ],  # fmt: skip
    "memory": ["--pp", "--tp", "--dp", "--ep", "--cp", "--etp", "--micro-batch-size", "-m", "--gpus", "--seq"],
    "import": ["--pp", "-m", "--stages-per-rank"],
}


def _count_flags(pick: Pick, argv: list[str]) -> None:
    for _ in range(2 if argv[0] in COUNT_FLAGS else 0):
        value = pick.new(0.3)
        if value is not None:
            argv += [pick.one(COUNT_FLAGS[argv[0]]), value]


def case(pick: Pick) -> Case:
    """One hostile command line, of any command, with the files it names."""
    files: dict[str, bytes] = {}
    outs: list[str] = []
    pick.tags = set()
    pick.tame = pick.chance(0.35)
    if pick.chance(0.25):  # the planner's recent keys, counts and pins (fuzzing_planner.py)
        from fuzzing_planner import planner_case

        return planner_case(pick)
    command = pick.one(["simulate"] * 3 + ["compare"] * 2 + ["ops", "validate", "pair", "draw", "sweep", "report", "plan", "memory", "export", "import", "schedules", "profile"])  # fmt: skip
    argv = [command]
    if command in ("simulate", "ops", "validate", "export"):
        argv += ["--schedule", _schedule(pick, files)]
        _shape(pick, argv)
        if command == "simulate":
            _costs(pick, argv, files)
            if pick.chance(0.2):
                argv += ["--memory-limit", num(pick)]
            argv += pick.one([["--json"], ["--no-timeline"], ["--width", pick.one(["0", "40", "-3", "99999999"])], []])
        if command in ("ops", "export") and pick.chance(0.6):
            _out(pick, argv, outs)
        if command == "ops" and pick.chance(0.3):
            argv.append("--json")
    elif command == "compare":
        _shape(pick, argv)
        _costs(pick, argv, files)
        if pick.chance(0.5):
            argv += ["--schedules", pick.one(["1f1b,zb-h1", "1f1b,,dualpipe", ",", "", "nonesuch", "zb-auto,1f1b"])]
        if pick.chance(0.2):
            argv += ["--memory-limit", num(pick)]
        argv += pick.one([["--json"], ["--timelines", "--width", "60"], []])
    elif command == "pair":
        _costs(pick, argv, files)
        argv += pick.one([["--json"], ["--backward", pick.one(["B", "BW", "W"])], ["--width", num(pick)], []])
        if pick.chance(0.3):
            _out(pick, argv, outs)
    elif command == "draw":
        if pick.chance(0.15):  # a measured timeline, its times hostile
            argv += ["--measured", _input(pick, files, lambda: timeline_file(pick), "tl.json")]
        elif pick.chance(0.7):
            argv += ["--schedule", _schedule(pick, files)]
        else:
            argv += ["--schedules", pick.one(["1f1b,zb-h1", "dualpipe,in.json", ",", ""])]
            if "in.json" in argv[-1]:
                files["in.json"] = schedule_file(pick)
        _shape(pick, argv)
        _costs(pick, argv, files)
        for _ in range(1 + pick.chance(0.3)):
            _out(pick, argv, outs)
        if pick.chance(0.2):
            argv += ["--time-unit", pick.one(["us", "ms", "hours"])]
    elif command == "sweep":
        argv += ["--pp", pick.one(SMALL[:4] if pick.chance(0.8) else NUMBERS if not pick.tame else SMALL)]
        argv += ["-m", pick.one(["2:8", "4,8", "8", "1:16000000:1", "0:4", "8:2", "1:2:0", "1:99999999999999", "a:b", ","])]
        if pick.chance(0.4):
            argv += ["--schedules", pick.one(["1f1b,zb-h1", "dualpipe", ","])]
        _costs(pick, argv, files)
        if pick.chance(0.5):
            _out(pick, argv, outs)
        if pick.chance(0.2):
            _out(pick, argv, outs, "--csv")
    elif command == "report":
        _shape(pick, argv)
        _costs(pick, argv, files)
        argv += ["--schedules", pick.one(["1f1b,zb-h1", "dualpipe", ","])]
        _out(pick, argv, outs)
    elif command in ("plan", "memory"):
        _specs(pick, argv, files)
        if command == "plan":
            argv += ["--schedules", pick.one(["1f1b", "1f1b,dualpipe", "nonesuch"])]
            if pick.chance(0.3):
                _out(pick, argv, outs)
            if pick.chance(0.3):
                argv.append("--json")
        else:
            argv += ["--pp", pick.one(["1", "2", "4"] if pick.chance(0.8) else NUMBERS)]
            for flag in ("--tp", "--ep", "--dp", "--cp", "--etp", "--micro-batch-size", "-m"):
                if pick.chance(0.15):
                    argv += [flag, num(pick, NUMBERS[:8])]
            if pick.chance(0.3):
                argv.append("--json")
    elif command == "import" and not pick.tame and pick.chance(0.1):
        # refused before torch is imported, or a real (slow: torch) import
        argv += ["--torch", "Interleaved1F1B", "--pp", "2", "-m", "4", "--stages-per-rank", pick.one(COUNTS)]
        pick.tags.add("count")
    elif command == "import":
        argv += ["--csv", _input(pick, files, lambda: torch_csv(pick), "in.csv")]
        if pick.chance(0.3):
            argv += ["-m", num(pick, NUMBERS[:8])]
        if pick.chance(0.6):
            _out(pick, argv, outs)
    elif command == "profile":
        argv.append(_input(pick, files, lambda: profile_trace(pick), pick.one(["trace.json", "trace.json.gz"])))
        if pick.chance(0.3):
            argv += ["--map", pick.one(["attn=self_attn", "attn_f='fwd*'", "=", "attn=", "x=y=z", "mlp=moe,,", ""])]
        elif pick.chance(0.2):  # a [map] file: read through the same checks as every file
            argv += ["--map", _input(pick, files, lambda: _mutate_text(pick, '[map]\nattn = "self_attn"\nmlp = ["moe", "ffn"]\n'), "map.toml")]  # fmt: skip
        if pick.chance(0.4):
            argv += ["-o", pick.one(["out.toml"] if pick.tame else ["out.toml", "out.txt", "-", "dir", "nowhere/c.toml"])]
            outs.append(argv[-1])
        if pick.chance(0.3):
            argv += ["--timeline", pick.one(["out.json"] if pick.tame else ["out.json", "out.txt", "dir", "fifo"])]
            outs.append(argv[-1])
        argv += pick.one([["--json"], ["--flags"], []])
    elif command == "schedules" and pick.chance(0.5):
        argv.append("--json")
    _count_flags(pick, argv)
    if command == "plan" and not pick.tame and pick.chance(0.05):
        argv += ["--measured-step", pick.new(1.0) or "10", "--measured-on", f"pp{pick.one(DIGIT_HEAVY + BOUNDARIES)},dp8"]
        pick.tags.add("digits")
    if pick.chance(0.03) and not pick.tame:
        argv.append(pick.one(["--bogus", "--pp", "-o"]))
    if "existing.svg" in outs or "link.svg" in outs:
        files.setdefault("existing.svg", b"<svg xmlns='http://www.w3.org/2000/svg'/>")
    return Case(argv, files, tuple(outs), tuple(sorted(pick.tags)))


# --------------------------------------------------------------------------------------
# running and judging


class Hang(BaseException):
    """A case ran past its time limit (BaseException: main must not swallow it)."""


@dataclass
class Result:
    rc: int | str  # an exit status, "traceback" or "hang"
    out: str
    err: str
    before: dict
    after: dict
    detail: str = ""


def _snapshot(folder: Path) -> dict:
    out = {}
    for p in folder.rglob("*"):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(folder))] = p.read_bytes()
    return out


def prepare(folder: Path, c: Case) -> None:
    (folder / "dir").mkdir(exist_ok=True)
    if not (folder / "fifo").exists():
        os.mkfifo(folder / "fifo")
    for name, data in c.files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)  # a config.json in its folder
        (folder / name).write_bytes(data)
    if not (folder / "link.json").exists():
        (folder / "link.json").symlink_to("in.json")
        (folder / "link.svg").symlink_to("existing.svg")


def run_case(c: Case, folder: Path, timeout: float = 20) -> Result:
    """Run ``c`` in ``folder`` (made ready by ``prepare``) with ``cli.main`` in-process."""
    from pipesim.cli import main

    prepare(folder, c)
    before = _snapshot(folder)
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()

    def alarm(signum, frame):
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    detail = ""
    try:
        os.chdir(folder)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc: int | str = main(list(c.argv))
    except Hang:
        rc = "hang"
    except SystemExit as e:  # argparse's --help/--version
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException as e:  # noqa: BLE001 - the fuzz records every escape
        rc, detail = "traceback", f"{type(e).__name__}: {e}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(here)
    return Result(rc, out.getvalue(), err.getvalue(), before, _snapshot(folder), detail)


def verdict(c: Case, r: Result) -> tuple[str, str] | None:
    """None when the run was right; else (kind, why): kind is traceback, hang, bad-error,
    bad-output, clobbered or partial."""
    if r.rc in ("traceback", "hang"):
        return str(r.rc), r.detail
    temp = [n for n in r.after if n.endswith(".tmp")]
    if temp:
        return "partial", f"temporary files left: {temp}"
    changed = {n for n in set(r.before) | set(r.after) if r.before.get(n) != r.after.get(n)}
    if r.rc == 2:
        lines = r.err.splitlines()
        if len(lines) != 1 or not lines[0].startswith("pipesim: error: ") or not r.err.endswith("\n"):
            return "bad-error", repr(r.err[:300])
        if changed:
            return "clobbered", f"exit 2 but changed {sorted(changed)}"
        return None
    if r.rc != 0:
        return "bad-error", f"exit {r.rc}: {r.err[:200]!r}"
    targets = {os.path.normpath(o) for o in c.outputs}
    targets |= {"existing.svg" for o in c.outputs if o == "link.svg"}
    stray = sorted(n for n in changed if n not in targets)
    if stray:
        return "clobbered", f"exit 0 but changed {stray} (outputs {sorted(targets)})"
    for name in targets & set(r.after):
        why = check_output(name, r.after[name], OUTPUT_KIND.get(c.argv[0]))
        if why:
            return "bad-output", f"{name}: {why}"
    if "--json" in c.argv and "-o" not in c.argv:
        why = check_json(r.out.encode())
        if why:
            return "bad-output", f"stdout: {why}"
    return None


# what a command writes whatever the extension; the others write by extension
OUTPUT_KIND = {"ops": ".json", "import": ".json", "export": ".csv"}


def check_json(data: bytes, schedule: bool = False) -> str | None:
    def no_constant(name):
        raise ValueError(f"{name} in strict JSON")

    try:
        d = json.loads(data, parse_constant=no_constant)
    except ValueError as e:
        return f"not strict JSON: {e}"
    if not isinstance(d, dict) or d.get("format") != 1:
        return "no format 1 key"
    if schedule:
        errors = schema_errors(d, json.loads(SCHEMA.read_text()))
        if errors:
            return f"schedule file against the schema: {errors[0]}"
    return None


def check_output(name: str, data: bytes, kind: str | None = None) -> str | None:
    ext = kind or Path(name).suffix.lower()
    if not data:
        return "empty"
    if ext == ".json":
        return check_json(data, schedule=kind == ".json")
    if ext == ".png":
        return None if data.startswith(b"\x89PNG\r\n\x1a\n") else "not a PNG"
    if ext == ".pdf":
        return None if data.startswith(b"%PDF") and b"%%EOF" in data[-64:] else "not a whole PDF"
    if ext in (".svg", ".html"):
        if ext == ".html":
            return None if data.rstrip().endswith(b"</html>") else "not a whole HTML page"
        try:
            ET.fromstring(data)
        except ET.ParseError as e:
            return f"not XML: {e}"
    if ext == ".csv":
        return None if data.splitlines()[0].startswith(b"schedule,") or b"," in data else "not CSV"
    return None


# --------------------------------------------------------------------------------------
# a validator for the JSON Schema subset schedule.schema.json uses


def schema_errors(value, schema: dict, where: str = "$") -> list[str]:
    errs: list[str] = []
    types = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float)}
    t = schema.get("type")
    if t is not None:
        ok = isinstance(value, types[t]) and not isinstance(value, bool)
        if not ok:
            return [f"{where}: expected {t}, got {type(value).__name__}"]
    if "anyOf" in schema:
        if all(schema_errors(value, s, where) for s in schema["anyOf"]):
            errs.append(f"{where}: matches none of anyOf")
    if "minimum" in schema and value < schema["minimum"]:
        errs.append(f"{where}: {value} < minimum {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errs.append(f"{where}: {value} > maximum {schema['maximum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errs.append(f"{where}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errs.append(f"{where}: {len(value)} items out of range")
        if "items" in schema:
            for i, v in enumerate(value):
                errs += schema_errors(v, schema["items"], f"{where}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errs += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in props:
                errs += schema_errors(v, props[k], f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{where}: unexpected key {k!r}")
    return errs
