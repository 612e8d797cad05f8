"""Memory of ``pipesim profile`` on a large trace, against ``json.load`` of the same file.

    python benchmarks/profile_memory.py [--mb 300]

Writes a synthetic Kineto trace of about ``--mb`` megabytes (mostly operator events, as
real traces are, with component annotations, launches and kernels among them), plain and
gzipped, then reads each in a fresh process and prints its peak resident memory: the
reader keeps only what attribution needs, so its peak stays far below the file's size,
while ``json.load`` (the peer) holds the whole document.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

PROBE = """
import resource, sys, time
t = time.process_time()
if sys.argv[1] == "profile":
    from pipesim.profile.measure import profile
    p = profile(sys.argv[2])
    what = f"{p.kernels} kernels, {len(p.rows)} components"
else:
    import gzip, json
    opener = gzip.open if sys.argv[2].endswith(".gz") else open
    with opener(sys.argv[2], "rt") as f:
        what = f"{len(json.load(f)['traceEvents'])} events"
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, time.process_time() - t, what)
"""


def write_trace(path: Path, mb: int) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as f:
        f.write('{"schemaVersion": 1, "deviceProperties": [{"name": "synthetic", "numSms": 132}], "traceEvents": [\n')
        t, corr, first, written = 0, 0, True, 0
        while written < mb * 1_000_000:  # characters of JSON, before any compression
            events = [{"ph": "X", "cat": "user_annotation", "name": "attn(F)", "pid": 1, "tid": 1, "ts": t, "dur": 90}]
            for i in range(20):  # operators, which name nothing
                events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + i, "dur": 1,
                               "args": {"External id": t + i, "Sequence number": i}})  # fmt: skip
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 30,
                           "dur": 2, "args": {"correlation": corr}})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 40, "dur": 50,
                           "args": {"correlation": corr, "stream": 7, "grid": [132, 1, 1]}})  # fmt: skip
            for e in events:
                written += f.write(("" if first else ",\n") + json.dumps(e))
                first = False
            t += 100
        f.write("\n]}\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    args = ap.parse_args()
    out = Console(width=160)
    t = Table(title="peak resident memory of one read (fresh process each)")
    for col in ("file", "size MB (on disk)", "reader", "peak RSS MB", "CPU s", "found"):
        t.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("big.json", "big.json.gz"):
            path = Path(tmp) / name
            t0 = time.perf_counter()
            write_trace(path, args.mb)
            size = path.stat().st_size / 1e6
            out.print(f"wrote {name}: {size:.0f} MB in {time.perf_counter() - t0:.0f} s")
            for reader in ("profile", "json.load"):
                res = subprocess.run([sys.executable, "-c", PROBE, reader, str(path)], capture_output=True, text=True)
                if res.returncode != 0:
                    t.add_row(name, f"{size:.0f}", reader, "failed", "", res.stderr.strip().splitlines()[-1][:60])
                    continue
                rss, cpu, *found = res.stdout.split()
                t.add_row(name, f"{size:.0f}", reader, f"{float(rss):.0f}", f"{float(cpu):.1f}", " ".join(found))
    out.print(t)


if __name__ == "__main__":
    main()
