"""Personalisation on heterogeneous data: per-participant weight error of three approaches.

Heterogeneous data as in the paper's personalisation study: one ER1 DAG shared by P = 20 participants
with n_p = 50 rows each and participant-specific weights (``simulate(..., heterogeneous=True)``:
|w_p| = |w| + U[−0.5, 0.5], sign kept). For every participant p the normalised MSE
‖Ŵ_p − W*_p‖²_F / ‖W*_p‖²_F of

  (i)   consensus — the shared DAG of Fed-Sparse-BNSL with its consensus weights (the same Ŵ for all p);
  (ii)  fed-sparse + refit — that DAG with weights refitted by least squares on p's own rows
        (:func:`bnsl_cli.refit.refit_participants`, what ``bnsl refit`` does);
  (iii) local NOTEARS — NOTEARS on p's 50 rows alone (λ = 0.1, ω = 0.3);

plus two references that are not part of the paper's comparison: (iv) the ADMM's personalised B_p
(``personal=True``, unthresholded) and (v) refit on the *true* DAG (oracle structure).
Fed-Sparse-BNSL uses λ = 0.08 / P per participant (so that P·λ, the penalty at consensus in
centralized units, is 0.08 as with the default λ = 0.01 at P = 8) and T = 3d PGCD steps per round
(``--steps``): with 50 rows per participant the default T = max(20, d) left the d = 20 consensus
unconverged after 80 rounds (max|B_p − W| = 0.39, SHD 8 on seed 0; T = 60: converged, SHD 4).

Writes ``personalisation.csv`` (approach, median/mean/std/quartiles of the MSE over participants and
seeds), ``personalisation_runs.csv`` (one row per seed, participant and approach),
``personalisation_structure.csv`` (SHD/TPR/FDR of the shared DAG and of the local NOTEARS DAGs) and
``personalisation.png`` (boxplot).
"""

from __future__ import annotations

import _common as C  # first: caps BLAS threads

import numpy as np
import pandas as pd

from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.refit import normalised_mse, refit_participants
from bnsl_cli.simulate import simulate

APPROACHES = {
    "consensus": "(i) consensus W",
    "fed-sparse+refit": "(ii) Fed-Sparse-BNSL + refit",
    "local-notears": "(iii) local NOTEARS",
    "fed-sparse-personal-Bp": "(iv) ADMM B_p (ref.)",
    "oracle-refit": "(v) refit on true DAG (ref.)",
}


def settings(quick: bool) -> dict:
    if quick:
        return dict(d=8, participants=6, samples=50, seeds=1)
    return dict(d=10, participants=20, samples=50, seeds=5)


def main(argv=None) -> int:
    p = C.parser("personalisation", __doc__, settings(False)["seeds"])
    p.add_argument("--nodes", type=int, default=None, help="d (default 10; quick 8)")
    p.add_argument("--steps", type=int, default=None, help="PGCD steps per round for Fed-Sparse-BNSL (default 3d)")
    args = p.parse_args(argv)
    cfg = settings(args.quick)
    d = args.nodes or cfg["d"]
    P, n_p = cfg["participants"], cfg["samples"]
    seeds, log = C.start(args, cfg["seeds"])
    lam = 0.08 / P
    steps = args.steps or 3 * d
    rows, struct = [], []
    for seed in seeds:
        sim = simulate(d, d, participants=P, samples=n_p, heterogeneous=True, seed=seed)
        tables = C.tables_of(sim.shards, sim.names)
        fed = learn(tables, LearnConfig(method="fed-sparse", lam=lam, steps=steps, seed=seed, personal=True))
        struct.append(dict(seed=seed, approach="fed-sparse (shared DAG)", **C.metrics(fed.W, sim.W)))
        refits = refit_participants(sim.shards, fed.W, sim.names, truths=sim.weights)
        oracle = refit_participants(sim.shards, sim.W, sim.names, truths=sim.weights)
        loc = learn(tables, LearnConfig(method="local-notears", seed=seed))
        for k in range(P):
            Wk = sim.weights[k]
            struct.append(dict(seed=seed, approach="local-notears", participant=k + 1, **C.metrics(loc.local[k], sim.W)))
            for key, mse in (
                ("consensus", normalised_mse(fed.W, Wk)),
                ("fed-sparse+refit", refits[k].mse),
                ("local-notears", normalised_mse(loc.local[k], Wk)),
                ("fed-sparse-personal-Bp", normalised_mse(fed.personal[k], Wk)),
                ("oracle-refit", oracle[k].mse),
            ):
                rows.append(dict(seed=seed, participant=k + 1, approach=key, mse=mse))
        r = pd.DataFrame([x for x in rows if x["seed"] == seed]).groupby("approach", sort=False)["mse"].median()
        log(f"seed {seed}: shared DAG SHD {struct[-P - 1]['shd']}; median MSE " +
            ", ".join(f"{k} {v:.3f}" for k, v in r.items()))
    runs = pd.DataFrame(rows)
    g = runs.groupby("approach", sort=False)["mse"]
    summary = pd.DataFrame({
        "approach": list(g.groups.keys()),
        "label": [APPROACHES[a] for a in g.groups.keys()],
        "median_mse": g.median().to_numpy(),
        "mean_mse": g.mean().to_numpy(),
        "std_mse": g.std(ddof=1).fillna(0.0).to_numpy(),
        "q25_mse": g.quantile(0.25).to_numpy(),
        "q75_mse": g.quantile(0.75).to_numpy(),
        "n": g.size().to_numpy(),
    })
    # median over participants per seed, then mean ± std of that over seeds
    per_seed = runs.groupby(["approach", "seed"], sort=False)["mse"].median().groupby("approach", sort=False)
    summary["seed_median_mean"] = per_seed.mean().to_numpy()
    summary["seed_median_std"] = per_seed.std(ddof=1).fillna(0.0).to_numpy()
    summary["d"], summary["participants"], summary["rows_each"] = d, P, n_p
    summary["lambda_fed_sparse"], summary["steps_fed_sparse"] = lam, steps
    sdf = pd.DataFrame(struct)
    structure = C.summarise(sdf, ["approach"], ["shd", "tpr", "fdr", "nnz"]).rename(columns={"n_seeds": "n_graphs"})
    out = args.out
    files = [
        C.write_csv(summary, out / "personalisation.csv"),
        C.write_csv(runs, out / "personalisation_runs.csv"),
        C.write_csv(structure, out / "personalisation_structure.csv"),
        boxplot(runs, out / "personalisation.png", d, P, n_p, len(seeds)),
    ]
    log("\n" + summary[["approach", "median_mse", "q25_mse", "q75_mse", "mean_mse"]].to_string(index=False))
    log("\n" + structure.to_string(index=False))
    C.done(log, out, files)
    return 0


def boxplot(runs: pd.DataFrame, path, d, P, n_p, n_seeds):
    plt = C.pyplot()
    if plt is None:
        return None
    keys = list(APPROACHES)
    data = [runs.loc[runs["approach"] == k, "mse"].to_numpy() for k in keys]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    bp = ax.boxplot(data, showfliers=True, patch_artist=True, medianprops=dict(color="black"))
    colours = ["#9ecae1", "#3182bd", "#fdae6b", "#d9d9d9", "#d9d9d9"]
    for patch, c in zip(bp["boxes"], colours):
        patch.set_facecolor(c)
    ax.set_xticks(range(1, len(keys) + 1), [APPROACHES[k].replace(" (", "\n(", 1) if "ref." in APPROACHES[k] else APPROACHES[k] for k in keys], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("normalised MSE ‖Ŵ_p − W*_p‖² / ‖W*_p‖² (log scale)")
    ax.set_title(f"heterogeneous ER1, d = {d}, P = {P}, n_p = {n_p}: one box = {P} participants × {n_seeds} seed(s)", fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(facecolor=c, label=l) for c, l in zip(colours[:4], ["consensus", "federated + local refit", "local only", "references (not compared)"])], fontsize=7, loc="upper right")
    return C.save(fig, path)


if __name__ == "__main__":
    C.run_main(main)
