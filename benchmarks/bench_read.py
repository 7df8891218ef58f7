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

``--process``: the reading target (issue 29: ≥ 150 MB/s on a 100 MB shard set, the whole process
minus learning), on 4 shards of 64,000 rows × 20 columns (100 MB). Each row of its table is the wall
time of whole processes, timed from outside (interpreter start, imports, reading, exit), median of
``--reps``, the rows measured in turn in every repetition so that a busy machine slows them alike:

- ``read``: a process that does what ``bnsl learn`` does before it learns — imports the CLI and reads
  the shards with ``read_shards`` as learn calls it — and exits;
- ``learn - learning``: ``bnsl learn -q --out DIR`` on the shards, minus the learning's own wall time
  (report.json's ``timing.wall_s``); the rest is the interpreter, every import (the learners' too),
  the reading and the writing of the outputs;
- ``learn's imports``: a process that only imports what ``bnsl learn`` imports (the CLI, the method
  registry and the learners) and exits: the part of the row above that is not reading;
- ``--before DIR``: the same three for another tree's ``bnsl_cli`` (``DIR/bnsl_cli``, e.g. made with
  ``git archive HEAD bnsl_cli | tar -x -C DIR``), side by side;
- ``--pyarrow DIR``: a plain ``pyarrow.csv.read_csv`` into the same float64 array, with ``DIR`` (where
  ``pip install --target DIR pyarrow`` put it) on the path: what a pyarrow engine could cost at best
  (no validation); ``pandas``: a plain ``pandas.read_csv(path).to_numpy()``, the same for pandas.

    python benchmarks/bench_read.py --process --before /tmp/before --pyarrow /tmp/pa --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


PROCESS_READ = r"""
import sys
import bnsl_cli.cli.app  # what bnsl learn imports before it reads
from bnsl_cli.io.shards import read_shards
tables = read_shards(sys.argv[1:])
"""

PROCESS_IMPORTS = r"""
import bnsl_cli.cli.app, bnsl_cli.cli.learn, bnsl_cli.cli.output
from bnsl_cli.federated.methods.registry import method_spec  # what bnsl learn imports before it reads
import bnsl_cli.learn, bnsl_cli.plan.run_plan  # and before it learns
"""

PROCESS_PANDAS = r"""
import sys
import numpy as np, pandas as pd
arrays = [np.ascontiguousarray(pd.read_csv(p).to_numpy(dtype=np.float64)) for p in sys.argv[1:]]
"""

PROCESS_PYARROW = r"""
import sys
import numpy as np
import pyarrow.csv as pc
for p in sys.argv[1:]:
    t = pc.read_csv(p)
    X = np.empty((t.num_rows, t.num_columns))
    for j, col in enumerate(t.columns):
        X[:, j] = col.to_numpy()
"""


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU) seconds of the process ``cmd``, run in a scratch folder (so that the current folder,
    first on ``sys.path``, never chooses which ``bnsl_cli`` is imported: ``PYTHONPATH`` does). CPU is
    user + system time of the process and its threads: on a busy machine wall time grows, CPU much less."""
    with tempfile.TemporaryDirectory() as cwd:
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=cwd)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def learn_minus_learning(paths: list[str], env: dict, out: Path) -> tuple[float, float]:
    """Wall (and CPU) time of a ``bnsl learn -q`` process minus the learning's own wall time
    (report.json timing.wall_s; the learning runs in one thread, so that is its CPU time too)."""
    wall, cpu = timed([sys.executable, "-m", "bnsl_cli", "learn", *paths, "-q", "--out", str(out), "--force"], env)
    learning = json.loads((out / "report.json").read_text())["timing"]["wall_s"]
    return wall - learning, cpu - learning


def process_table(args, tmpdir: Path) -> None:
    paths = [str(p) for p in write_shards(args.dir, 4, 64_000, 20)]
    mb = sum(os.path.getsize(p) for p in paths) / 1e6
    root = Path(__file__).resolve().parent.parent
    base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    base_env.setdefault("OPENBLAS_NUM_THREADS", "1")

    def env(path: Path | None) -> dict:
        return {**base_env, "PYTHONPATH": str(path)} if path is not None else base_env

    rows: dict[str, callable] = {}
    trees = [("this tree", root)] + ([("before", args.before)] if args.before else [])
    for name, tree in trees:
        rows[f"read ({name})"] = lambda tree=tree: timed([sys.executable, "-c", PROCESS_READ, *paths], env(tree))
    for name, tree in trees:
        out = tmpdir / f"learn-{name.replace(' ', '-')}"
        rows[f"learn - learning ({name})"] = lambda tree=tree, out=out: learn_minus_learning(paths, env(tree), out)
    for name, tree in trees:
        rows[f"learn's imports ({name})"] = lambda tree=tree: timed([sys.executable, "-c", PROCESS_IMPORTS], env(tree))
    rows["pandas read_csv"] = lambda: timed([sys.executable, "-c", PROCESS_PANDAS, *paths], env(None))
    if args.pyarrow:
        rows["pyarrow read_csv"] = lambda: timed([sys.executable, "-c", PROCESS_PYARROW, *paths], env(args.pyarrow))
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in rows}
    for _ in range(args.reps):
        for k, fn in rows.items():
            times[k].append(fn())
    print(f"\nwhole processes on 4 × 64000 × 20 ({mb:.1f} MB), median of {args.reps} (OPENBLAS_NUM_THREADS="
          f"{base_env['OPENBLAS_NUM_THREADS']}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})")
    print(f"{'process':<30} {'MB':>7} {'s':>7} {'MB/s':>7} {'min s':>7} {'max s':>7} {'CPU s':>7}")
    for k, ts in times.items():
        med = statistics.median(t for t, _ in ts)
        cpu = statistics.median(c for _, c in ts)
        lo, hi = min(t for t, _ in ts), max(t for t, _ in ts)
        print(f"{k:<30} {mb:7.1f} {med:7.3f} {mb / med:7.0f} {lo:7.3f} {hi:7.3f} {cpu:7.3f}")


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
    ap.add_argument("--process", action="store_true", help="only the whole-process table on 100 MB (see above)")
    ap.add_argument("--before", type=Path, default=None, help="--process: another tree holding bnsl_cli/, side by side")
    ap.add_argument("--pyarrow", type=Path, default=None, help="--process: a directory holding pyarrow, side by side")
    args = ap.parse_args()
    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory()
        args.dir = Path(tmp.name)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.process:
        with tempfile.TemporaryDirectory() as work:
            process_table(args, Path(work))
        if tmp is not None:
            tmp.cleanup()
        return
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
