"""Privacy–utility sweep of DP-Fed-Sparse-BNSL: SHD/TPR/FDR against ε (δ = 1/n_p²).

d = 20, ER1, P = 8, 5000 rows each (the paper's setting), one BLAS thread; every run in its own
forked process. Prints mean SHD/TPR/FDR and the median time per ε, with the non-private
fed-sparse result of the same seeds as the reference row.

    python benchmarks/eps_sweep.py                       # ε ∈ {0.5,1,2,5,10,25,50}, 10 seeds
    python benchmarks/eps_sweep.py --seeds 3 --eps 1,10  # smaller
    python benchmarks/eps_sweep.py --method fed-bnsl     # DP-Fed-BNSL instead
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import print_table, run_one, summarise  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eps", default="0.5,1,2,5,10,25,50")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--method", default="fed-sparse")
    ap.add_argument("--quick", action="store_true", help="d = 10, 2 seeds, ε ∈ {1, 10}")
    args = ap.parse_args(argv)
    eps_list = [float(e) for e in args.eps.split(",")]
    d, seeds = args.d, args.seeds
    if args.quick:
        d, seeds, eps_list = 10, 2, [1.0, 10.0]
    rows = []
    for seed in range(seeds):
        rows.append(run_one(d, seed, args.method))
    for eps in eps_list:
        for seed in range(seeds):
            r = run_one(d, seed, args.method, eps)
            rows.append(r)
            print(f"  ε={eps:g} seed={seed}: shd={r['shd']} tpr={r['tpr']:.3f} {r['time_s']:.2f}s "
                  f"(spent ε={r['epsilon_spent']:.4g})", file=sys.stderr, flush=True)
    summary = summarise(rows)
    print_table(summary, f"privacy–utility sweep, {args.method}, d = {d}, ER1, P = 8, 5000 rows, δ = 1/5000², {seeds} seeds")
    ref = summary[0]["shd"]
    print("\nSHD minus the non-private SHD of the same seeds:")
    for s in summary[1:]:
        print(f"  {s['method']}: {s['shd'] - ref:+.2f}")


if __name__ == "__main__":
    main()
