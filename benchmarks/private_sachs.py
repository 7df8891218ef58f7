"""Sachs (d = 11, n = 7466, raw values) over P = 3 sites, private and not (issue 19's Sachs cells).

As ``examples/sachs.py``: rows split at random into 3 shards with seed 0, scored against the
acyclic 18-edge consensus DAG ``examples/sachs/sachs_truth_18edges.csv``; the empty graph has SHD 18.
Runs: fed-sparse without DP (the non-private default, deterministic), fed-suffstats without DP,
and under ``--dp`` fed-suffstats at ε ∈ {1, 5} and fed-sparse at ε = 5, each over noise seeds 1–3.

  python benchmarks/private_sachs.py [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bnsl_cli.io.csv_reader import read_table  # noqa: E402
from bnsl_cli.io.graph_formats import read_graph  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.split import split_indices  # noqa: E402

DATA = ROOT / "examples" / "sachs"
RUNS = (("fed-sparse", None), ("fed-suffstats", None), ("fed-suffstats", 1.0), ("fed-suffstats", 5.0), ("fed-sparse", 5.0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    a = ap.parse_args(argv)
    table = read_table(DATA / "sachs.csv")
    names = list(table.names)
    truth = read_graph(DATA / "sachs_truth_18edges.csv").reorder(names).W
    parts = split_indices(table.n, 3, seed=0)
    tables = [Table(table.X[idx], tuple(names), f"sachs-{k + 1}") for k, idx in enumerate(parts)]
    print("method,epsilon,seed,shd,tpr,skeleton_recall,seconds")
    for method, eps in RUNS:
        shds = []
        for seed in (a.seeds if eps is not None else [0]):
            dp = None if eps is None else DPConfig(epsilon=eps)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = learn(tables, LearnConfig(method=method, dp=dp, seed=None if eps is None else seed))
            m = structure_metrics(res.W, truth)
            shds.append(m["shd"])
            print(f"{method},{eps or 'none'},{seed},{m['shd']},{m['tpr']:.3f},{m.get('skeleton_recall', float('nan')):.3f},"
                  f"{time.perf_counter() - t0:.1f}", flush=True)
        print(f"# {method} eps={eps}: mean SHD {statistics.fmean(shds):.2f} over {len(shds)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
