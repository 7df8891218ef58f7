"""Reading speed and memory of ``bnsl_cli.io.data.read_shards`` against plain ``pandas.read_csv``,
and the start-up time of ``bnsl --help``.

Two timings per reader: ``warm`` with numpy and pandas imported before the clock starts (the
parser's own speed), and ``cold`` with only numpy imported (what a ``bnsl learn`` process pays: an
input of at most 32 MB is parsed by numpy and never imports pandas, about 0.25 s).

Each measurement runs in a fresh Python process (so peak RSS is that reader's alone), several times;
the table shows medians. Data: simulated float columns written like ``bnsl simulate`` writes them
(shortest round-trip repr), in ``--dir`` (default: a temporary directory).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        python benchmarks/bench_read.py                 # 8 × 2 MB and 4 × 75 MB, 3 repetitions
    python benchmarks/bench_read.py --quick            # small sizes only (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
which, cold, paths = sys.argv[1], sys.argv[2] == "cold", sys.argv[3:]
import numpy  # not reading time
if not cold:
    import pandas  # not reading time either ("warm")
t0 = time.perf_counter()
if which == "bnsl":
    from bnsl_cli.io.shards import read_shards
    tables = read_shards(paths)
    n = sum(t.X.shape[0] for t in tables); cells = sum(t.X.size for t in tables)
else:
    import numpy as np, pandas as pd
    arrays = [pd.read_csv(p).to_numpy(dtype=np.float64) for p in paths]
    n = sum(a.shape[0] for a in arrays); cells = sum(a.size for a in arrays)
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"wall": wall, "rss": rss, "rows": n, "cells": cells}))
"""

BASELINE = r"""
import json, resource, sys
import numpy, pandas
print(json.dumps({"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def write_shards(directory: Path, files: int, rows: int, d: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(files):
        p = directory / f"p{files}x{rows}-{k + 1:02d}.csv"
        if not p.exists():
            X = rng.normal(size=(rows, d)) @ np.triu(rng.normal(size=(d, d)) * 0.3, 1) + rng.normal(size=(rows, d))
            with open(p, "w") as fh:
                fh.write(",".join(f"x{j:02d}" for j in range(1, d + 1)) + "\n")
                for s in range(0, rows, 4096):
                    fh.write("".join(",".join(map(repr, r)) + "\n" for r in X[s : s + 4096].tolist()))
        paths.append(p)
    return paths


def run_child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def help_time(reps: int) -> float:
    exe = [sys.executable, "-m", "bnsl_cli", "--help"]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(exe, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="where the generated CSVs are kept (reused)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="only the 8 × 2 MB case")
    args = ap.parse_args()
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory()
        args.dir = Path(tmp.name)
    args.dir.mkdir(parents=True, exist_ok=True)
    cases = [("8 × 5000 × 20", 8, 5000, 20)]
    if not args.quick:
        cases.append(("4 × 200000 × 20", 4, 200_000, 20))
    base = run_child(BASELINE)["rss"]
    print(f"python: {sys.version.split()[0]}, threads: OMP={os.environ.get('OMP_NUM_THREADS')}, "
          f"interpreter + numpy + pandas baseline RSS {base / 1e6:.0f} MB, {args.reps} repetitions (medians)")
    print(f"{'case':<18} {'MB':>7} {'float64 MB':>10} {'reader':<12} {'s':>7} {'MB/s':>7} {'peak RSS MB':>11} {'limit MB':>9}")
    for label, files, rows, d in cases:
        paths = [str(p) for p in write_shards(args.dir, files, rows, d)]
        mb = sum(os.path.getsize(p) for p in paths) / 1e6
        for which, mode in (("bnsl", "warm"), ("pandas", "warm"), ("bnsl", "cold"), ("pandas", "cold")):
            res = [run_child(CHILD, which, mode, *paths) for _ in range(args.reps)]
            wall = statistics.median(r["wall"] for r in res)
            rss = statistics.median(r["rss"] for r in res)
            data = res[0]["cells"] * 8 / 1e6
            limit = 1.5 * data + 150
            print(f"{label:<18} {mb:7.1f} {data:10.1f} {which + ' ' + mode:<12} {wall:7.3f} {mb / wall:7.0f} {rss / 1e6:11.0f} {limit:9.0f}")
    print(f"bnsl --help: {help_time(max(args.reps, 5)):.3f} s (median of {max(args.reps, 5)})")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
