"""Categorical and mixed data (issue 42): bnsl's default learner against the empty graph and pooled
hill-climbing, per network and seed, on 5 sites x 1,000 rows.

Networks: bnlearn-repository discrete networks from pgmpy 1.1.2's bundled files (sampled here with a fixed
seed; pgmpy is needed for these rows only and is not a dependency of bnsl: ``pip install pgmpy==1.1.2``),
and mixed sets from :func:`bnsl_cli.simulate_mixed.simulate_mixed`. Columns:

- ``empty``: SHD of the empty graph (the truth's edge count);
- ``hc``: pooled hill-climbing on the same rows (pgmpy ``HillClimbSearch``): the multinomial BIC
  (``bic-d``) on discrete networks, the conditional-Gaussian BIC (``bic-cg``, categorical columns as pandas
  categories) on the mixed sets;
- ``bnsl``: ``bnsl learn`` (no options: the default for data with categorical columns) on the shards;
- ``int``: the levels coded as integers and learned as continuous columns (bnsl before issue 42);
- ``s``: bnsl's seconds (one BLAS thread).

SHD counts a reversed edge once. Run: ``python benchmarks/categorical.py [--networks asia,sachs,...]
[--seeds 1,2,3] [--mixed 20,50] [--cg]``; prints a table and the means.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from bnsl_cli.io.kinds import encode  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.plan.options import LearnConfig  # noqa: E402
from bnsl_cli.simulate_mixed import simulate_mixed  # noqa: E402

SITES, ROWS = 5, 1000


def shd(E, truth) -> int:
    return int(structure_metrics(np.asarray(E, float), np.asarray(truth, float))["shd"])


def bnsl_on(names, columns: dict, kinds_cat: list, sites=SITES, rows=ROWS):
    """bnsl's default learner on ``sites`` shards of the pooled ``columns`` (name -> array)."""
    tables = []
    for s in range(sites):
        sl = slice(s * rows, (s + 1) * rows)
        cont = [n for n in names if n not in kinds_cat]
        X = np.column_stack([np.asarray(columns[n][sl], float) for n in cont]) if cont else np.zeros((rows, 0))
        tables.append(Table(X, tuple(cont), f"site{s + 1}.csv", extra={n: np.asarray(columns[n][sl]).astype(str)
                                                                         for n in kinds_cat}))
    enc, _ = encode(tables, kinds_cat, max_levels=64, order=names, missing=("",))  # (child has a level "None")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = learn(enc, LearnConfig(method="fed-suffstats"))
    return res.W != 0, time.perf_counter() - t0


def integer_coded(names, columns: dict, kinds_cat: list, sites=SITES, rows=ROWS):
    """The levels as integer codes, learned as continuous columns by the continuous default."""
    tables = []
    codes = {n: np.unique(np.asarray(columns[n]).astype(str), return_inverse=True)[1] for n in kinds_cat}
    for s in range(sites):
        sl = slice(s * rows, (s + 1) * rows)
        X = np.column_stack([codes[n][sl].astype(float) if n in kinds_cat else np.asarray(columns[n][sl], float)
                             for n in names])
        tables.append(Table(X, tuple(names), f"site{s + 1}.csv"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return learn(tables, LearnConfig()).W != 0
        except Exception:  # noqa: BLE001 - a failed run is reported as such
            return None


def discrete(network: str, seed: int):
    from pgmpy.readwrite import BIFReader
    from pgmpy.sampling import BayesianModelSampling
    from pgmpy.utils import get_example_model

    model = get_example_model(network)
    names = list(model.nodes())
    df = BayesianModelSampling(model).forward_sample(size=SITES * ROWS, seed=seed, show_progress=False)
    idx = {n: k for k, n in enumerate(names)}
    truth = np.zeros((len(names), len(names)), bool)
    for a, b in model.edges():
        truth[idx[a], idx[b]] = True
    cols = {n: df[n].astype(str).to_numpy() for n in names}
    # drop variables constant in the sample (bnsl refuses them, as it should)
    keep = [n for n in names if len(np.unique(cols[n])) > 1]
    k = [idx[n] for n in keep]
    del BIFReader
    return keep, cols, truth[np.ix_(k, k)], df


def hill_climb(df, names, scoring: str = "bic-d") -> np.ndarray:
    from pgmpy.estimators import HillClimbSearch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dag = HillClimbSearch(df[names]).estimate(scoring_method=scoring, show_progress=False)
    idx = {n: k for k, n in enumerate(names)}
    E = np.zeros((len(names), len(names)), bool)
    for a, b in dag.edges():
        E[idx[a], idx[b]] = True
    return E


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--networks", default="asia,sachs,child,survey,cancer,earthquake")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--mixed", default="20,50")
    ap.add_argument("--cg", action="store_true", help="pgmpy's bic-cg hill-climbing on the mixed sets (minutes at d = 50)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",") if s]
    rows = []
    print(f"{'set':<14}{'seed':>5}{'nodes':>6}{'empty':>6}{'hc':>6}{'bnsl':>6}{'int':>6}{'s':>8}")
    for net in [x for x in a.networks.split(",") if x]:
        for seed in seeds:
            names, cols, truth, df = discrete(net, seed)
            E, secs = bnsl_on(names, cols, list(names))
            hc = hill_climb(df, names)
            ic = integer_coded(names, cols, list(names))
            row = (net, seed, len(names), int(truth.sum()), shd(hc, truth), shd(E, truth),
                   None if ic is None else shd(ic, truth), secs)
            rows.append(row)
            print(f"{row[0]:<14}{row[1]:>5}{row[2]:>6}{row[3]:>6}{row[4]:>6}{row[5]:>6}{str(row[6]):>6}{row[7]:>8.2f}",
                  flush=True)
    for d in [int(x) for x in a.mixed.split(",") if x]:
        for seed in seeds:
            sim = simulate_mixed(d, d, share=0.4, participants=SITES, samples=ROWS, seed=seed)
            pooled = {n: np.concatenate([s[n] for s in sim.shards]) for n in sim.names}
            cat = list(sim.levels)
            E, secs = bnsl_on(list(sim.names), pooled, cat)
            ic = integer_coded(list(sim.names), pooled, cat)
            hc = None
            if a.cg:
                import pandas as pd

                df = pd.DataFrame({n: pd.Categorical(np.asarray(pooled[n]).astype(str)) if n in cat
                                   else np.asarray(pooled[n], float) for n in sim.names})
                hc = shd(hill_climb(df, list(sim.names), "bic-cg"), sim.B)
            row = (f"mixed-{d}", seed, d, int(sim.B.sum()), hc, shd(E, sim.B), None if ic is None else shd(ic, sim.B),
                   secs)
            rows.append(row)
            print(f"{row[0]:<14}{row[1]:>5}{row[2]:>6}{row[3]:>6}{str(row[4] if hc is not None else '-'):>6}{row[5]:>6}"
                  f"{str(row[6]):>6}{row[7]:>8.2f}", flush=True)
    print("\nmeans per set (empty / hc / bnsl / integer-coded / seconds):")
    for name in dict.fromkeys(r[0] for r in rows):
        rs = [r for r in rows if r[0] == name]
        m = lambda k: "-" if any(r[k] is None for r in rs) else f"{np.mean([r[k] for r in rs]):.1f}"  # noqa: E731
        print(f"  {name:<14} {m(3):>6} {m(4):>6} {m(5):>6} {m(6):>6} {np.mean([r[7] for r in rs]):>7.2f}")


if __name__ == "__main__":
    main()
