"""Communication cost: megabytes sent up (participants → server) and down per method and dimension.

Homogeneous data (ER1, P = 8, n_p = 5000) for d ∈ {10, 20, 50, 100, 200}; non-private Fed-Sparse-BNSL
(sparse messages: the coordinates each participant changed, W as its cheapest encoding) against
Fed-BNSL (dense d × d messages both ways). Bytes are those of the encoded messages that the protocol
counts in ``report["communication"]`` (1 MB = 10⁶ bytes), summed over all rounds and participants
until each run stops (it may stop early, so the number of rounds is reported too).

Writes ``communication.csv`` (method, d, mean/std of MB up/down/total, rounds, SHD),
``communication_runs.csv`` and ``communication.png`` (bars: up and down stacked, ±1 std on the total).
"""

from __future__ import annotations

import _common as C  # first: caps BLAS threads

import numpy as np
import pandas as pd

from bnsl_cli.learn import LearnConfig, learn

METHODS = ("fed-sparse", "fed-bnsl")


def settings(quick: bool) -> dict:
    if quick:
        return dict(dims=(5, 10), participants=4, samples=500, seeds=1)
    return dict(dims=(10, 20, 50, 100, 200), participants=8, samples=5000, seeds=2)


def main(argv=None) -> int:
    p = C.parser("communication", __doc__, settings(False)["seeds"])
    C.add_dims_option(p, settings(False)["dims"], settings(True)["dims"])
    args = p.parse_args(argv)
    cfg = settings(args.quick)
    dims = args.dims or cfg["dims"]
    seeds, log = C.start(args, cfg["seeds"])
    rows = []
    for d in dims:
        for seed in seeds:
            sim, tables = C.simulated(d, seed, cfg)
            for method in METHODS:
                res = learn(tables, LearnConfig(method=method, seed=seed))
                comm = res.report["communication"]
                rows.append(dict(
                    method=method, d=d, seed=seed, rounds=res.report["rounds"],
                    mb_up=comm["bytes_up"] / 1e6, mb_down=comm["bytes_down"] / 1e6, mb_total=comm["bytes_total"] / 1e6,
                    wall_s=res.report["timing"]["wall_s"], **C.metrics(res.W, sim.W),
                ))
                r = rows[-1]
                log(f"d = {d} seed {seed} {method}: {r['mb_total']:.3f} MB in {r['rounds']} rounds, SHD {r['shd']}")
    runs = pd.DataFrame(rows)
    summary = C.summarise(runs, ["method", "d"], ["mb_up", "mb_down", "mb_total", "rounds", "shd", "wall_s"])
    base = summary[summary["method"] == "fed-bnsl"].set_index("d")["mb_total_mean"]
    summary["total_vs_fed_bnsl"] = summary["mb_total_mean"].to_numpy() / base.reindex(summary["d"]).to_numpy()
    out = args.out
    files = [
        C.write_csv(summary, out / "communication.csv"),
        C.write_csv(runs, out / "communication_runs.csv"),
        bars(summary, out / "communication.png", cfg, len(seeds)),
    ]
    log("\n" + summary[["method", "d", "mb_up_mean", "mb_down_mean", "mb_total_mean", "rounds_mean", "total_vs_fed_bnsl"]].to_string(index=False))
    C.done(log, out, files)
    return 0


def bars(summary: pd.DataFrame, path, cfg, n_seeds):
    plt = C.pyplot()
    if plt is None:
        return None
    dims = sorted(summary["d"].unique())
    x = np.arange(len(dims))
    width = 0.2
    fig, ax = plt.subplots(figsize=(9, 4.4))
    colours = {"fed-sparse": "#3182bd", "fed-bnsl": "#e6550d"}
    k = 0
    for method in METHODS:
        sub = summary[summary["method"] == method].set_index("d").reindex(dims)
        for part, alpha, hatch in (("up", 1.0, None), ("down", 0.45, "//")):
            pos = x + (k - 1.5) * width
            ax.bar(pos, sub[f"mb_{part}_mean"], width, yerr=sub[f"mb_{part}_std"], capsize=2, color=colours[method],
                   alpha=alpha, hatch=hatch, label=f"{C.LABELS[method]}: {part}")
            k += 1
        top = np.maximum(sub["mb_up_mean"] + sub["mb_up_std"], sub["mb_down_mean"] + sub["mb_down_std"])
        for xi, tot, y in zip(x, sub["mb_total_mean"], top):
            off = -width if method == "fed-sparse" else width
            ax.annotate(f"Σ {tot:.3g}", (xi + off, y * 1.05), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [f"d = {d}" for d in dims])
    ax.set_xlabel("number of variables d (Σ: total MB, up + down)")
    ax.set_ylabel("data sent over the whole run (MB, log scale)")
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi * 2.0)
    ax.set_title(f"ER1, P = {cfg['participants']}, n_p = {cfg['samples']}; mean ± std over {n_seeds} seed(s)", fontsize=9)
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3, axis="y")
    return C.save(fig, path)


if __name__ == "__main__":
    C.run_main(main)
