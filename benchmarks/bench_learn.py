"""Benchmark ``bnsl learn``: wall time, peak memory, the time split, rounds, evaluations of h, bytes,
SHD/TPR/FDR — per dimension and method.

ER1 graphs, P = 8 participants (``--participants``) with 5000 rows each (``--samples``; d = 1000 uses
2000 unless ``--samples`` is given), one BLAS thread, each run in its own forked process (peak
memory = that process's max RSS, data included). Time split: ``read_s`` (the shards written as CSV
and read back with the library's reader; only with ``--read``), ``participants_s`` (the local
solves, summed), ``coordinator_s`` (W-step, duals), ``polish_s`` (everything after the rounds: the
polish exchange and search, the stop broadcast). ``h_evals``: evaluations of the acyclicity function
in the coordinator. Medians of times and memory over seeds, means of the accuracy figures; ratios
are computed inside this one run.

    python benchmarks/bench_learn.py                         # d = 20, 50, 100 (3 seeds), fed-sparse
    python benchmarks/bench_learn.py --dims 200,400 --seeds 1
    python benchmarks/bench_learn.py --dims 20 --compare     # + fed-bnsl on the same data, ratios
    python benchmarks/bench_learn.py --acyclicity expm,logdet --dims 20,50,100   # both h functions
    python benchmarks/bench_learn.py --methods fed-sparse,fed-sparse-plain        # with/without polish
    python benchmarks/bench_learn.py --dp --epsilon 10       # DP rows for both DP methods
    python benchmarks/bench_learn.py --quick                 # d = 10, 1 seed: a smoke test
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import print_table, run_one, summarise  # noqa: E402


def _samples(d: int, given) -> int:
    if given is not None:
        return given
    return 2000 if d >= 1000 else 5000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="20,50,100", help="comma-separated d (20,50,100,200,400,1000)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="fed-sparse")
    ap.add_argument("--compare", action="store_true", help="also run fed-bnsl on the same data; print time/byte ratios")
    ap.add_argument("--acyclicity", default="", help="coordinator h function(s) to compare: expm,logdet (default: the coordinator's)")
    ap.add_argument("--screen", default="", help="coordinator screen value(s) to compare, e.g. 0,0.01 (default: the coordinator's)")
    ap.add_argument("--coord", default="", help='coordinator option sets as JSON, e.g. \'[{"acyclicity": "logdet", "maxiter": 50}]\'')
    ap.add_argument("--participants", type=int, default=8)
    ap.add_argument("--samples", type=int, default=None, help="rows per participant (default 5000; 2000 for d ≥ 1000)")
    ap.add_argument("--read", action="store_true", help="write the shards as CSV and time the library's reader")
    ap.add_argument("--dp", action="store_true", help="add DP rows (--dp-methods)")
    ap.add_argument("--dp-methods", default="fed-sparse,fed-bnsl", help="DP rows for these (fed-sparse-plain: no polish)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", type=Path, help="also write every run as CSV")
    args = ap.parse_args(argv)
    dims = [int(x) for x in args.dims.split(",") if x]
    methods = [m for m in args.methods.split(",") if m]
    if args.compare and "fed-bnsl" not in methods:
        methods.append("fed-bnsl")
    seeds = args.seeds
    if args.quick:
        dims, seeds = [10], 1
    coords = [{}]
    if args.acyclicity:
        coords = [{"acyclicity": a} for a in args.acyclicity.split(",") if a]
    if args.screen:
        coords = [{**c, "screen": float(s)} for c in coords for s in args.screen.split(",") if s]
    if args.coord:
        coords = json.loads(args.coord)

    print(f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}, "
          f"BLAS threads {os.environ.get('OPENBLAS_NUM_THREADS')}", file=sys.stderr)
    rows = []
    plan = [(d, m, None, c) for d in dims for m in methods for c in (coords if m.startswith("fed-") else [{}])]
    if args.dp:
        plan += [(d, m, args.epsilon, c) for d in dims for m in args.dp_methods.split(",") if m for c in coords]
    for d, method, eps, coord in plan:
        for seed in range(seeds):
            r = run_one(d, seed, method, eps, participants=args.participants, samples=_samples(d, args.samples),
                        read=args.read, coord=coord)
            rows.append(r)
            print(f"  d={d} {r['method']} seed={seed}: {r['time_s']:.2f}s (coordinator {r['coordinator_s']:.2f}s, "
                  f"{r['h_evals']} h evals, participants {r['participants_s']:.2f}s, polish {r['polish_s']:.2f}s) "
                  f"{r['peak_mb']:.0f} MB rounds={r['rounds']} shd={r['shd']} tpr={r['tpr']:.3f} "
                  f"total={r['total_mb']:.3f}MB issues={r['solver_issues']}", file=sys.stderr, flush=True)
    summary = summarise(rows)
    print_table(summary, f"bnsl learn benchmark (ER1, P = {args.participants}, one BLAS thread)")
    by = {(s["d"], s["method"]): s for s in summary}
    print("\nratios measured in this run")
    for d in sorted({s["d"] for s in summary}):
        for s in summary:  # fed-sparse against fed-bnsl with the same coordinator options
            if s["d"] != d or not s["method"].startswith("fed-sparse") or s["method"].startswith("fed-sparse-plain"):
                continue
            fs, fb = s, by.get((d, "fed-bnsl" + s["method"][len("fed-sparse"):]))
            if fb:
                print(f"  d={d}: {fs['method']} / {fb['method']} time {fs['time_s'] / fb['time_s']:.2f}x, "
                      f"bytes total {fs['total_mb'] / fb['total_mb']:.4f}, SHD {fs['shd']:.2f} vs {fb['shd']:.2f}")
        for s in summary:  # logdet against expm, same method and other options
            if s["d"] != d or "acyclicity=logdet" not in s["method"]:
                continue
            b = by.get((d, s["method"].replace("acyclicity=logdet", "acyclicity=expm")))
            if b:
                print(f"  d={d}: {s['method']} / {b['method']} time {s['time_s'] / b['time_s']:.2f}x, "
                      f"coordinator {s['coordinator_s'] / max(b['coordinator_s'], 1e-9):.2f}x, "
                      f"h evals {s['h_evals']:.0f} vs {b['h_evals']:.0f}, SHD {s['shd']:.2f} vs {b['shd']:.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
