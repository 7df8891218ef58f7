"""Sachs protein-signalling data (d = 11, n = 7466) split across P = 3 participants: every method.

Data ``examples/sachs/sachs.csv`` as shipped (raw values: no log, no standardisation — the library
never standardises), rows split at random into 3 shards with seed 0 (``bnsl_cli.split.split_indices``,
as ``bnsl split --participants 3 --seed 0`` does). Methods with their library defaults: Fed-Sparse-BNSL,
Fed-BNSL, centralized NOTEARS (all rows pooled), and DP-Fed-Sparse-BNSL / DP-Fed-BNSL at ε = 5,
δ = 1/n_p² (column means and value ranges released privately: real data, nothing declared public).
The non-private methods are deterministic (one run); the DP runs are repeated over the seeds of their
noise (mean ± std).

Scored against the acyclic 18-edge consensus DAG ``examples/sachs/sachs_truth_18edges.csv`` (SHD, TPR,
FDR, nnz, correct skeleton edges out of 18) and, as ``shd_cdt``, against cdt's 18-edge graph (which has
a cycle; ``allow_cyclic_truth``) that the paper most likely used. The paper's numbers are in the
``paper_*`` columns.

Writes ``sachs.csv``, ``sachs_runs.csv`` and ``sachs.png``.
"""

from __future__ import annotations

import _common as C  # first: caps BLAS threads

import numpy as np
import pandas as pd

from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.metrics import structure_metrics
from bnsl_cli.learn import DPConfig
from bnsl_cli.split import split_indices

DATA = C.HERE / "sachs"
EPSILON = 5.0
#: (method, private?) in table order
RUNS = (("fed-sparse", False), ("fed-bnsl", False), ("notears", False), ("fed-sparse", True), ("fed-bnsl", True))
#: the paper's Sachs results (SHD, correct skeleton edges of 18, edges predicted); NOTEARS as the paper quotes it
PAPER = {
    "fed-sparse": (20, 12, 18),
    "fed-bnsl": (23, 8, 18),
    "notears": (22, None, 16),
    "dp-fed-sparse": (21, 11, None),
    "dp-fed-bnsl": (25, 8, 19),
}


def settings(quick: bool) -> dict:
    return dict(seeds=1 if quick else 10)


def skeleton_correct(W, truth) -> int:
    E, T = W != 0, truth != 0
    return int(np.triu((E | E.T) & (T | T.T), k=1).sum())


def main(argv=None) -> int:
    args = C.parser("sachs", __doc__, settings(False)["seeds"]).parse_args(argv)
    seeds, log = C.start(args, settings(args.quick)["seeds"])
    table = read_table(DATA / "sachs.csv")
    names = table.names
    truth = read_graph(DATA / "sachs_truth_18edges.csv").reorder(names).W
    truth_cdt = read_graph(DATA / "sachs_truth_18edges_cdt.csv").reorder(names).W
    parts = split_indices(table.n, 3, seed=0)
    tables = C.tables_of([table.X[idx] for idx in parts], names, tag="sachs-participant")
    rows = []
    for method, private in RUNS:
        label = ("dp-" if private else "") + method
        for seed in (seeds if private else [0]):
            dp = DPConfig(epsilon=EPSILON) if private else None
            res = learn(tables, LearnConfig(method=method, seed=seed, dp=dp))
            m = C.metrics(res.W, truth)
            m_cdt = structure_metrics(res.W, truth_cdt, allow_cyclic_truth=True)
            rows.append(dict(
                method=label, epsilon=EPSILON if private else np.inf, seed=seed if private else np.nan,
                shd=m["shd"], tpr=m["tpr"], fdr=m["fdr"], nnz=m["nnz"], skeleton_correct=skeleton_correct(res.W, truth),
                shd_cdt=m_cdt["shd"], v_structures_correct=structure_metrics(res.W, truth)["v_structures_correct"],
                mb_total=res.report["communication"]["bytes_total"] / 1e6, wall_s=res.report["timing"]["wall_s"],
            ))
            r = rows[-1]
            log(f"{label}{'' if not private else f' seed {seed}'}: SHD {r['shd']}, skeleton {r['skeleton_correct']}/18, "
                f"{r['nnz']} edges ({r['wall_s']:.1f} s)")
    runs = pd.DataFrame(rows)
    summary = C.summarise(runs, ["method", "epsilon"],
                          ["shd", "tpr", "fdr", "nnz", "skeleton_correct", "shd_cdt", "v_structures_correct", "mb_total"])
    summary["paper_shd"] = [PAPER[m][0] for m in summary["method"]]
    summary["paper_skeleton_correct"] = [PAPER[m][1] for m in summary["method"]]
    summary["paper_nnz"] = [PAPER[m][2] for m in summary["method"]]
    out = args.out
    files = [
        C.write_csv(summary, out / "sachs.csv"),
        C.write_csv(runs, out / "sachs_runs.csv"),
        figure(summary, out / "sachs.png", len(seeds)),
    ]
    log("\n" + summary[["method", "shd_mean", "shd_std", "skeleton_correct_mean", "nnz_mean", "shd_cdt_mean",
                        "paper_shd", "paper_skeleton_correct"]].to_string(index=False))
    C.done(log, out, files)
    return 0


def figure(summary: pd.DataFrame, path, n_seeds):
    plt = C.pyplot()
    if plt is None:
        return None
    labels = [C.LABELS[m].replace(" (", "\n(") + (f"\n(ε = {EPSILON:g})" if m.startswith("dp-") else "") for m in summary["method"]]
    x = np.arange(len(summary))
    w = 0.38
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, key, ylabel in (
        (axes[0], "shd", "SHD vs 18-edge truth (edges)"),
        (axes[1], "skeleton_correct", "correct skeleton edges (of 18)"),
    ):
        ax.bar(x - w / 2, summary[f"{key}_mean"], w, yerr=summary[f"{key}_std"], capsize=3, color="#3182bd",
               label=f"bnsl (DP: mean ± std over {n_seeds} noise seed(s))")
        paper = pd.to_numeric(summary[f"paper_{key}"], errors="coerce")
        ax.bar(x + w / 2, paper, w, color="#bdbdbd", label="paper")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    fig.suptitle("Sachs (d = 11, n = 7466, P = 3 random shards, seed 0); paper's NOTEARS value as quoted there", fontsize=9)
    return C.save(fig, path)


if __name__ == "__main__":
    C.run_main(main)
