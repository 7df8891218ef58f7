"""Benchmark every method: time, peak memory, rounds, SHD/TPR/FDR, bytes up/down.

ER1 graphs, P = 8 participants with 5000 rows each, one BLAS thread, each run in its own forked
process (peak memory = that process's max RSS, data included). Medians of time and memory over
seeds, means of the accuracy figures; ratios are computed inside this one run.

    python benchmarks/bench_learn.py                 # d = 20, 50, 100 (3 seeds) + fed-sparse d = 200
    python benchmarks/bench_learn.py --dims 20 --seeds 5 --methods fed-sparse,fed-bnsl,notears
    python benchmarks/bench_learn.py --dp            # adds DP rows (ε = 10) for both DP methods
    python benchmarks/bench_learn.py --methods fed-sparse,fed-sparse-plain   # with and without the polish
    python benchmarks/bench_learn.py --quick         # d = 10, 1 seed: a smoke test
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import print_table, run_one, summarise  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dims", default="20,50,100")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="fed-sparse,fed-bnsl,notears")
    ap.add_argument("--big", type=int, default=200, help="extra fed-sparse dimension (0: none)")
    ap.add_argument("--big-seeds", type=int, default=1)
    ap.add_argument("--big-methods", default="fed-sparse,fed-bnsl")
    ap.add_argument("--dp", action="store_true", help="add DP-Fed-Sparse-BNSL and DP-Fed-BNSL rows")
    ap.add_argument("--dp-methods", default="fed-sparse,fed-bnsl", help="DP rows for these (fed-sparse-plain: no polish)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", type=Path, help="also write every run as CSV")
    args = ap.parse_args(argv)
    dims = [int(x) for x in args.dims.split(",") if x]
    methods = [m for m in args.methods.split(",") if m]
    seeds = args.seeds
    if args.quick:
        dims, seeds, args.big = [10], 1, 0

    rows = []
    plan = [(d, m, None) for d in dims for m in methods]
    if args.dp:
        plan += [(d, m, args.epsilon) for d in dims for m in args.dp_methods.split(",") if m]
    for d, method, eps in plan:
        for seed in range(seeds):
            r = run_one(d, seed, method, eps)
            rows.append(r)
            print(f"  d={d} {r['method']} seed={seed}: {r['time_s']:.2f}s shd={r['shd']} "
                  f"tpr={r['tpr']:.3f} total={r['total_mb']:.3f}MB", file=sys.stderr, flush=True)
    if args.big:
        for seed in range(args.big_seeds):
            for method in [m for m in args.big_methods.split(",") if m]:
                r = run_one(args.big, seed, method)
                rows.append(r)
                print(f"  d={args.big} {method} seed={seed}: {r['time_s']:.2f}s shd={r['shd']}", file=sys.stderr, flush=True)
    summary = summarise(rows)
    print_table(summary, "bnsl learn benchmark (ER1, P = 8, 5000 rows each, one BLAS thread)")
    by = {(s["d"], s["method"]): s for s in summary}
    print("\nratios measured in this run")
    for d in sorted({s["d"] for s in summary}):
        fs, fb, nt = by.get((d, "fed-sparse")), by.get((d, "fed-bnsl")), by.get((d, "notears"))
        if fs and fb:
            print(f"  d={d}: fed-sparse / fed-bnsl bytes up {fs['up_mb'] / fb['up_mb']:.4f} (1/{fb['up_mb'] / fs['up_mb']:.0f}), "
                  f"total {fs['total_mb'] / fb['total_mb']:.4f} (1/{fb['total_mb'] / fs['total_mb']:.0f}); "
                  f"time {fs['time_s'] / fb['time_s']:.2f}x")
        if fs and nt:
            print(f"  d={d}: fed-sparse time / pooled notears time {fs['time_s'] / nt['time_s']:.2f}; "
                  f"SHD gap {fs['shd'] - nt['shd']:+.2f}")
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
