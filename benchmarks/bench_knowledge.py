"""Prior knowledge: SHD with and without it on simulated data.

One case per seed: ER2 with d = 20 (40 expected edges), P participants, a random 20 % of the true
edges required and a random 20 % of the ordered non-edge pairs (reversed true edges included)
forbidden. Prints one line per (method, seed) and the means.

    python benchmarks/bench_knowledge.py [--seeds 3] [--methods fed-sparse,notears] [--epsilon 5]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from bnsl_cli.io.table import Table
from bnsl_cli.knowledge import KnowledgeSource
from bnsl_cli.learn import DPConfig, LearnConfig, learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.simulate import simulate


def knowledge_for(W: np.ndarray, names, share: float, rng) -> KnowledgeSource:
    d = W.shape[0]
    true = [(i, j) for i in range(d) for j in range(d) if W[i, j] != 0]
    non = [(i, j) for i in range(d) for j in range(d) if i != j and W[i, j] == 0]
    req = [true[k] for k in rng.choice(len(true), int(round(share * len(true))), replace=False)]
    forb = [non[k] for k in rng.choice(len(non), int(round(share * len(non))), replace=False)]
    return KnowledgeSource.from_options(
        require=[f"{names[i]}->{names[j]}" for i, j in req], forbid=[f"{names[i]}->{names[j]}" for i, j in forb]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--methods", default="fed-sparse,notears")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--participants", type=int, default=4)
    ap.add_argument("--samples", type=int, default=500, help="rows per participant")
    ap.add_argument("--share", type=float, default=0.2)
    ap.add_argument("--epsilon", type=float, default=None, help="private runs (--dp) with this ε")
    args = ap.parse_args()
    d = args.nodes
    rows = {}
    for seed in range(args.seeds):
        sim = simulate(d, 2 * d, participants=args.participants, samples=args.samples, seed=seed)
        tables = [Table(X, tuple(sim.names), f"p{k}") for k, X in enumerate(sim.shards)]
        src = knowledge_for(sim.W, sim.names, args.share, np.random.default_rng(1000 + seed))
        for method in args.methods.split(","):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dp = None if args.epsilon is None else DPConfig(epsilon=args.epsilon)
                plain = learn(tables, LearnConfig(method=method, seed=seed, dp=dp))
                known = learn(tables, LearnConfig(method=method, seed=seed, dp=dp, knowledge=src))
            a = structure_metrics(plain.W, sim.W)["shd"]
            b = structure_metrics(known.W, sim.W)["shd"]
            rows.setdefault(method, []).append((a, b))
            print(f"{method:12s} seed {seed}: SHD {a:3d} without, {b:3d} with knowledge "
                  f"({len(src.rules)} statements)", flush=True)
    for method, r in rows.items():
        a, b = np.mean(r, axis=0)
        print(f"{method:12s} mean over {len(r)} seeds: SHD {a:.1f} without, {b:.1f} with knowledge")


if __name__ == "__main__":
    main()
