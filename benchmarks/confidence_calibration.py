"""Edge-confidence calibration (issue 29): are edges of strength ≥ 0.9 right ≥ 90 % of the time?

Grid cells (ER2 / SF2, d = 20 and 50, 5 × 1,000 and 8 × 5,000 rows; seeds 1…S) learned with
``--bootstrap B`` without DP (the default learner, rows resampled at each site) and at ε = 5
(fed-suffstats, its releases resampled). Every edge of the output graph is scored by its strength
band: *precision* counts it right when the truth has the pair either way, *directed* when the truth
has the same direction. Prints one reliability table per privacy level (edges and precision by band,
pooled over the cells) and the per-cell SHD, then Sachs (P = 3, as benchmarks/private_sachs.py):
the run's graph and the averaged network at the estimated threshold and at 0.5, 0.7, 0.9.

  python benchmarks/confidence_calibration.py [--seeds 1 2] [--B 30] [--quick]

One BLAS thread; replicates run in --workers processes (default 2).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bnsl_cli.confidence import averaged_network  # noqa: E402
from bnsl_cli.io.csv_reader import read_table  # noqa: E402
from bnsl_cli.io.graph_formats import read_graph  # noqa: E402
from bnsl_cli.io.strength import STRENGTH_BANDS  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.simulate import simulate  # noqa: E402
from bnsl_cli.split import split_indices  # noqa: E402


def band_of(s: float) -> int:
    for k, (low, high) in enumerate(STRENGTH_BANDS):
        if low - 1e-9 <= s < (high - 1e-9 if high < 1 else 2.0):
            return k
    raise ValueError(s)


def score(W, counts, truth, tally):
    S = counts.strength
    T = truth != 0
    for i, j in zip(*np.nonzero(W)):
        k = band_of(S[i, j])
        tally[k][0] += 1
        tally[k][1] += bool(T[i, j] or T[j, i])
        tally[k][2] += bool(T[i, j])


def table(title, tally):
    print(f"\n{title}")
    print("| strength band | edges | precision (pair) | precision (direction) |")
    print("|---|---:|---:|---:|")
    for (low, high), (n, ok, ok_dir) in zip(STRENGTH_BANDS, tally):
        band = f"[{low:g}, {high:g}{']' if high >= 1 else ')'}"
        if n:
            print(f"| {band} | {n} | {ok / n:.3f} | {ok_dir / n:.3f} |")
        else:
            print(f"| {band} | 0 | – | – |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--B", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="d = 20 only")
    ap.add_argument("--no-sachs", action="store_true")
    ap.add_argument("--only", choices=["plain", "dp"], default=None)
    a = ap.parse_args(argv)
    cells = [(g, d, P, n) for g in ("er", "sf") for d in ((20,) if a.quick else (20, 50))
             for P, n in ((5, 1000), (8, 5000))]
    levels = [lv for lv in ("plain", "dp") if a.only in (None, lv)]
    print("level,graph,d,P,n,seed,shd,edges,strong_edges,strong_precision,seconds", flush=True)
    tallies = {lv: [[0, 0, 0] for _ in STRENGTH_BANDS] for lv in levels}
    for lv in levels:
        for g, d, P, n in cells:
            for seed in a.seeds:
                sim = simulate(d, 2 * d, participants=P, samples=n, graph_type=g, seed=seed)
                tables = [Table(X, sim.names, f"p{k + 1}") for k, X in enumerate(sim.shards)]
                dp = DPConfig(epsilon=5.0) if lv == "dp" else None
                cfg = LearnConfig(dp=dp, seed=seed, bootstrap=a.B, workers=a.workers)
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = learn(tables, cfg)
                m = structure_metrics(res.W, sim.W)
                S = res.confidence.strength
                E = res.W != 0
                strong = E & (S >= 0.9 - 1e-9)
                T = sim.W != 0
                sp = float((T | T.T)[strong].mean()) if strong.any() else float("nan")
                score(res.W, res.confidence, sim.W, tallies[lv])
                print(f"{lv},{g},{d},{P},{n},{seed},{m['shd']},{int(E.sum())},{int(strong.sum())},{sp:.3f},"
                      f"{time.perf_counter() - t0:.1f}", flush=True)
    for lv in levels:
        table(f"Reliability, {'without DP' if lv == 'plain' else 'ε = 5 (fed-suffstats)'}, B = {a.B}, "
              f"seeds {a.seeds}", tallies[lv])
    if not a.no_sachs:
        sachs(a)
    return 0


def sachs(a) -> None:
    data = ROOT / "examples" / "sachs"
    t = read_table(data / "sachs.csv")
    names = list(t.names)
    truth = read_graph(data / "sachs_truth_18edges.csv").reorder(names).W
    parts = split_indices(t.n, 3, seed=0)
    tables = [Table(t.X[idx], tuple(names), f"sachs-{k + 1}") for k, idx in enumerate(parts)]
    print("\nSachs (P = 3, 18-edge consensus truth; empty graph SHD 18)")
    print("| run | edges | SHD |")
    print("|---|---:|---:|")
    for label, dp in (("default", None), ("ε = 5", DPConfig(epsilon=5.0))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = learn(tables, LearnConfig(dp=dp, seed=1, bootstrap=a.B, workers=a.workers))
        c = res.confidence
        est = res.report["confidence"]["estimated_threshold"]
        print(f"| {label}: the run's graph | {int((res.W != 0).sum())} | {structure_metrics(res.W, truth)['shd']} |")
        for thr, strict, tag in ((est, True, f"estimated ({est:.3f})"), (0.5, False, "0.5"), (0.7, False, "0.7"),
                                 (0.9, False, "0.9")):
            A = averaged_network(c, thr, strict=strict)
            print(f"| {label}: averaged, strength > {tag} | {int((A != 0).sum())} | "
                  f"{structure_metrics(A, truth)['shd']} |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
