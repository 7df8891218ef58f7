"""Accuracy probe: fed-sparse (with / without the polish) against pooled NOTEARS on harder cells.

Methods: fed-sparse, fed-sparse-plain (no polish), fed-sparse-legacy (the polish before the
accuracy work), fed-sparse-thr (the weight threshold applied after the search), notears, fed-bnsl.

Simulates a linear Gaussian SEM with :mod:`bnsl_cli.simulate` (ER or scale-free graph, optional
unequal noise sds drawn uniformly per variable, optional weak weights), splits the same rows over
``P`` participants, runs the methods and prints SHD / TPR / FDR and the skeleton recall per cell.

    OMP_NUM_THREADS=1 python benchmarks/accuracy_probe.py --graph er --k 2 --d 50 --P 8 --seeds 1 2
    python benchmarks/accuracy_probe.py --graph sf --k 2 --d 50 --noise 0.5,2 --methods fed-sparse notears
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

import bnsl_cli.federated.polish as polish_mod  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.plan.options import LearnConfig  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.simulate import node_names, random_dag, random_weights, simulate_sem  # noqa: E402


def make_cell(graph: str, k: float, d: int, P: int, n_total: int, noise, weights, seed: int):
    """``(W_true, tables)``: one DAG, ``n_total`` rows split evenly over ``P`` participants."""
    rng = np.random.default_rng(seed)
    B = random_dag(d, k * d, graph, rng)
    W = random_weights(B, weights[0], weights[1], rng)
    scale = rng.uniform(noise[0], noise[1], size=d) if noise[1] > noise[0] else noise[0]
    X = simulate_sem(W, n_total, "gaussian", scale, rng)
    names = node_names(d)
    parts = np.array_split(np.arange(n_total), P)
    return W, [Table(X[idx], tuple(names), f"p{p}") for p, idx in enumerate(parts)]


def skeleton_recall(W_est, W_true) -> float:
    T = (W_true != 0) | (W_true != 0).T
    E = (W_est != 0) | (W_est != 0).T
    iu = np.triu_indices_from(T, 1)
    return float((T & E)[iu].sum() / max(T[iu].sum(), 1))


class _LegacyStage:
    """The polish as it was before the accuracy work: equal-variance score, candidate additions
    only, the 0.3 weight threshold after the search (for before/after tables)."""

    def __new__(cls, threshold, n_total, candidate=polish_mod.POLISH_CANDIDATES, noise=None, **_):
        return _ORIGINAL_STAGE(threshold, n_total, candidate, noise, score="equal", full=False,
                               final_threshold=threshold)


class _ThresholdStage:
    """Today's polish with the weight threshold applied after the search (as with ``--threshold``)."""

    def __new__(cls, threshold, n_total, candidate=polish_mod.POLISH_CANDIDATES, noise=None, **kw):
        kw["final_threshold"] = threshold
        return _ORIGINAL_STAGE(threshold, n_total, candidate, noise, **kw)


_ORIGINAL_STAGE = polish_mod.PolishStage


def run_method(method: str, tables, seed: int, extra: dict):
    polish = True
    m = method
    polish_mod.PolishStage = _ORIGINAL_STAGE
    if m.endswith("-plain"):
        m, polish = m[: -len("-plain")], False
    if m.endswith("-legacy"):
        m = m[: -len("-legacy")]
        polish_mod.PolishStage = _LegacyStage
    if m.endswith("-thr"):
        m = m[: -len("-thr")]
        polish_mod.PolishStage = _ThresholdStage
    kw = dict(extra)
    if m != "fed-sparse":
        kw = {k: v for k, v in kw.items() if k in ("threshold", "lam")}
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(tables, LearnConfig(method=m, seed=seed, polish=polish, **kw))
    return res, time.perf_counter() - t0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="er", choices=("er", "sf"))
    ap.add_argument("--k", type=float, default=1.0, help="expected edges per node")
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--P", type=int, nargs="+", default=[8])
    ap.add_argument("--n", type=int, default=40000, help="total rows")
    ap.add_argument("--noise", default="1,1", help="LOW,HIGH noise sd (uniform per variable)")
    ap.add_argument("--weights", default="0.5,2", help="LOW,HIGH |weight|")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--methods", nargs="+", default=["fed-sparse-plain", "fed-sparse", "notears"])
    ap.add_argument("--threshold", type=float, default=None)
    ap.add_argument("--lam", type=float, default=None)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--score", default=None, choices=("equal", "node", "auto"), help="non-private polish score")
    ap.add_argument("--verbose", action="store_true", help="print every run")
    a = ap.parse_args(argv)
    noise = tuple(float(x) for x in a.noise.split(","))
    noise = noise if len(noise) == 2 else (noise[0], noise[0])
    weights = tuple(float(x) for x in a.weights.split(","))
    extra = {}
    for key in ("threshold", "lam", "rounds"):
        if getattr(a, key) is not None:
            extra[key] = getattr(a, key)
    if a.score:
        polish_mod.POLISH_SCORE = a.score
    print(f"# {a.graph.upper()}{a.k:g} d={a.d} n={a.n} noise={a.noise} weights={a.weights} seeds={a.seeds} {extra}")
    print("| P | method | SHD | TPR | FDR | skel. recall | edges (true) | s |")
    print("|---|---|---|---|---|---|---|---|")
    for P in a.P:
        cells = {m: [] for m in a.methods}
        for seed in a.seeds:
            W_true, tables = make_cell(a.graph, a.k, a.d, P, a.n, noise, weights, seed)
            for m in a.methods:
                res, sec = run_method(m, tables, seed, extra)
                met = structure_metrics(res.W, W_true)
                row = (met["shd"], met["tpr"] or 0.0, met["fdr"] or 0.0, skeleton_recall(res.W, W_true),
                       int((res.W != 0).sum()), int((W_true != 0).sum()), sec)
                cells[m].append(row)
                if a.verbose:
                    print(f"  seed {seed} P={P} {m}: SHD {row[0]} TPR {row[1]:.2f} FDR {row[2]:.2f} "
                          f"edges {row[4]}/{row[5]} {sec:.1f}s", flush=True)
        for m, rows in cells.items():
            mean = [statistics.mean(c) for c in zip(*rows)]
            print(f"| {P} | {m} | {mean[0]:.1f} | {mean[1]:.2f} | {mean[2]:.2f} | {mean[3]:.2f} | "
                  f"{mean[4]:.0f} ({mean[5]:.0f}) | {mean[6]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
