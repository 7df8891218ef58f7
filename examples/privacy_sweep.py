"""Privacy–utility trade-off: DP-Fed-Sparse-BNSL's SHD, TPR and FDR against ε (mean ± std over seeds).

Homogeneous data as in the paper: ER1, d = 20, P = 8, n_p = 5000; ε ∈ {0.5, 1, 2, 5, 10, 25, 50},
δ = 1/n_p² (bnsl's default), the library's default DP settings (K = 50 rounds, T = dp_steps(d), clip 1.5).
The non-private Fed-Sparse-BNSL on the same data is the dashed reference.

Centring: the simulated variables have mean 0 by construction, so the means are declared public
(``DPConfig(public_means=True)``: no mean release). At small ε the private estimate of the value
range can be pure noise (bnsl then refuses to run); for those runs a public bound on |x| is passed
instead: ``value_bound = 3 × max_j sd_j`` with ``sd_j`` computed from the generating model (not from
the rows). The ``value_bound`` column says which runs needed it (empty = estimated privately).

Writes ``privacy_sweep.csv`` (method, epsilon, mean/std of shd/tpr/fdr/nnz, runs that needed the public
bound), ``privacy_sweep_runs.csv`` (one row per run) and ``privacy_sweep.png``.
"""

from __future__ import annotations

import _common as C  # first: caps BLAS threads

import numpy as np
import pandas as pd

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.learn import DPConfig

EPSILONS = (0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0)


def settings(quick: bool) -> dict:
    if quick:
        return dict(d=10, participants=4, samples=1000, epsilons=(0.5, 5.0, 50.0), seeds=1)
    return dict(d=20, participants=8, samples=5000, epsilons=EPSILONS, seeds=10)


def private_run(tables, method: str, eps: float, seed: int, bound: float):
    """A DP run with private range estimation; on failure, with the model's public bound."""
    try:
        dp = DPConfig(epsilon=eps, public_means=True)
        return learn(tables, LearnConfig(method=method, seed=seed, dp=dp)), None
    except PrivacyBudgetError:
        dp = DPConfig(epsilon=eps, public_means=True, value_bound=bound)
        return learn(tables, LearnConfig(method=method, seed=seed, dp=dp)), bound


def main(argv=None) -> int:
    args = C.parser("privacy_sweep", __doc__, settings(False)["seeds"]).parse_args(argv)
    cfg = settings(args.quick)
    seeds, log = C.start(args, cfg["seeds"])
    d = cfg["d"]
    rows = []
    for seed in seeds:
        sim, tables = C.simulated(d, seed, cfg)
        bound = 3.0 * float(C.model_sd(sim.W).max())
        res = learn(tables, LearnConfig(method="fed-sparse", seed=seed))
        rows.append(dict(seed=seed, method="fed-sparse", epsilon=np.inf, delta=0.0, value_bound=np.nan,
                         spent_epsilon=np.nan, wall_s=res.report["timing"]["wall_s"], **C.metrics(res.W, sim.W)))
        for eps in cfg["epsilons"]:
            res, used = private_run(tables, "fed-sparse", eps, seed, bound)
            pv = res.report["privacy"]
            rows.append(dict(seed=seed, method="dp-fed-sparse", epsilon=eps, delta=pv["delta"],
                             value_bound=np.nan if used is None else used, spent_epsilon=pv["epsilon"],
                             wall_s=res.report["timing"]["wall_s"], **C.metrics(res.W, sim.W)))
            log(f"seed {seed} ε = {eps:g}: SHD {rows[-1]['shd']}" + ("" if used is None else f" (public bound {used:.3g})"))
    runs = pd.DataFrame(rows)
    dp_runs = runs[runs["method"] == "dp-fed-sparse"]
    summary = C.summarise(dp_runs, ["method", "epsilon"], ["shd", "tpr", "fdr", "nnz", "spent_epsilon"])
    summary.insert(2, "delta", dp_runs.groupby("epsilon", sort=False)["delta"].first().to_numpy())
    summary["runs_with_public_bound"] = dp_runs.groupby("epsilon", sort=False)["value_bound"].count().to_numpy()
    ref_runs = runs[runs["method"] == "fed-sparse"]
    ref = C.summarise(ref_runs, ["method", "epsilon"], ["shd", "tpr", "fdr", "nnz"])
    ref["delta"], ref["runs_with_public_bound"] = 0.0, 0
    table = pd.concat([summary, ref], ignore_index=True)[list(summary.columns)]
    reference = {
        "Fed-Sparse-BNSL (non-private)": {
            m: (float(ref[f"{m}_mean"].iloc[0]), float(ref[f"{m}_std"].iloc[0])) for m in C.METRICS
        }
    }
    out = args.out
    files = [
        C.write_csv(table, out / "privacy_sweep.csv"),
        C.write_csv(runs, out / "privacy_sweep_runs.csv"),
        C.metric_panels(
            summary, "epsilon", "method", "privacy budget ε (log scale; δ = 1/n_p²)", out / "privacy_sweep.png",
            logx=True, reference=reference,
            title=f"ER1, d = {d}, P = {cfg['participants']}, n_p = {cfg['samples']}; mean ± std over {len(seeds)} seed(s)",
        ),
    ]
    log("\n" + table[["method", "epsilon", "shd_mean", "shd_std", "tpr_mean", "fdr_mean"]].to_string(index=False))
    C.done(log, out, files)
    return 0


if __name__ == "__main__":
    C.run_main(main)
