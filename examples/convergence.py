"""Convergence: SHD, TPR and FDR per ADMM round of Fed-Sparse-BNSL and Fed-BNSL (mean ± std over seeds).

Homogeneous data as in the paper: ER1 DAG with d = 20 nodes, P = 8 participants with n_p = 5000 rows
each. The per-round metrics come from each run's report (``history[k]["support"]``: the consensus W of
round k thresholded at ω = 0.3) — one run per method and seed, no re-runs. A run that stops early
keeps its last graph for the remaining rounds.

Writes ``convergence.csv`` (method, round, mean/std of shd/tpr/fdr/nnz), ``convergence_runs.csv``
(one row per seed, method and round) and ``convergence.png``.
"""

from __future__ import annotations

import _common as C  # first: caps BLAS threads

import numpy as np
import pandas as pd

from bnsl_cli.learn import LearnConfig, learn

METHODS = ("fed-sparse", "fed-bnsl")


def settings(quick: bool) -> dict:
    if quick:
        return dict(d=10, participants=4, samples=500, rounds=30, seeds=2)
    return dict(d=20, participants=8, samples=5000, rounds=80, seeds=10)


def main(argv=None) -> int:
    args = C.parser("convergence", __doc__, settings(False)["seeds"]).parse_args(argv)
    cfg = settings(args.quick)
    seeds, log = C.start(args, cfg["seeds"])
    d, R = cfg["d"], cfg["rounds"]
    rows = []
    for seed in seeds:
        sim, tables = C.simulated(d, seed, cfg)
        for method in METHODS:
            res = learn(tables, LearnConfig(method=method, rounds=R, seed=seed, trace=True))
            hist = res.report["history"]
            last = None
            for k in range(R):
                if k < len(hist):
                    last = C.metrics(C.support_matrix(hist[k]["support"], d), sim.W)
                rows.append(dict(seed=seed, method=method, round=k + 1, **last))
            log(
                f"seed {seed} {method}: {len(hist)} rounds, final SHD {rows[-1]['shd']}, "
                f"{res.report['timing']['wall_s']:.1f} s"
            )
    runs = pd.DataFrame(rows)
    summary = C.summarise(runs, ["method", "round"], ["shd", "tpr", "fdr", "nnz"])
    out = args.out
    files = [
        C.write_csv(summary, out / "convergence.csv"),
        C.write_csv(runs, out / "convergence_runs.csv"),
        C.metric_panels(
            summary,
            "round",
            "method",
            "ADMM round",
            out / "convergence.png",
            title=f"ER1, d = {d}, P = {cfg['participants']}, n_p = {cfg['samples']}; mean ± std over {len(seeds)} seed(s)",
        ),
    ]
    final = summary[summary["round"] == R][["method", "shd_mean", "shd_std", "tpr_mean", "fdr_mean"]]
    log("final round:\n" + final.to_string(index=False))
    C.done(log, out, files)
    return 0


if __name__ == "__main__":
    C.run_main(main)
