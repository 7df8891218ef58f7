"""Helpers shared by the example scripts: options, data, metrics, CSV tables and figures.

Import this module before numpy: it caps BLAS/OpenMP at one thread (on a shared 2-core machine a
multi-threaded BLAS makes the small matrix products of these experiments much slower).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from a source checkout without installing
    sys.path.insert(0, str(HERE.parent))

from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.metrics import structure_metrics  # noqa: E402
from bnsl_cli.simulate import simulate  # noqa: E402

METRICS = ("shd", "tpr", "fdr")
LABELS = {
    "fed-sparse": "Fed-Sparse-BNSL",
    "fed-bnsl": "Fed-BNSL",
    "notears": "NOTEARS (pooled)",
    "local-notears": "local NOTEARS",
    "dp-fed-sparse": "DP-Fed-Sparse-BNSL",
    "dp-fed-bnsl": "DP-Fed-BNSL",
}
AXIS = {"shd": "SHD (edges)", "tpr": "TPR (fraction of true edges)", "fdr": "FDR (fraction of predicted edges)"}


# ----------------------------------------------------------------------------------------------
# options


def parse_seeds(text: str) -> list[int]:
    """``"5"`` → seeds 0…4; ``"3,7,11"`` → those seeds."""
    text = text.strip()
    if "," in text:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    else:
        k = int(text)
        if k < 1:
            raise argparse.ArgumentTypeError("--seeds must be >= 1")
        seeds = list(range(k))
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds needs at least one seed")
    return seeds


def parse_dims(text: str) -> tuple[int, ...]:
    """``"10,20,50"`` → ``(10, 20, 50)``."""
    return tuple(int(v) for v in text.split(",") if v.strip())


def add_dims_option(p: argparse.ArgumentParser, default: Sequence[int], quick: Sequence[int]) -> None:
    """The ``--dims`` option of the scripts that sweep the number of variables."""
    fmt = ",".join
    p.add_argument("--dims", type=parse_dims, default=None,
                   help=f"comma list of d (default {fmt(map(str, default))}; quick {fmt(map(str, quick))})")


def start(args: argparse.Namespace, default_seeds: int) -> tuple[list[int], "Log"]:
    """The seeds to run (``--seeds`` or ``0…default_seeds-1``) and the progress log; silences the
    library's warnings (the scripts report convergence themselves)."""
    quiet_warnings()
    if args.out is None:  # --quick results never replace the full-size ones in the repository
        args.out = quick_or_full_out(args._name, args.quick)
    return args.seeds or list(range(default_seeds)), Log(args.quiet)


def quick_or_full_out(name: str, quick: bool) -> Path:
    """The default output folder: ``examples/results/NAME`` (tracked, full-size results), or
    ``examples/results/quick/NAME`` (ignored by git) with ``--quick``."""
    return HERE / "results" / "quick" / name if quick else HERE / "results" / name


def parser(name: str, doc: str, default_seeds: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"examples/{name}.py",
        description=(doc or "").strip().splitlines()[0] if doc else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=None,
                   help=f"output directory (default examples/results/{name}; with --quick "
                   f"examples/results/quick/{name}, not tracked by git)")
    p.set_defaults(_name=name)
    p.add_argument("--quick", action="store_true", help="small sizes (for CI): finishes in well under 2 min")
    p.add_argument(
        "--seeds",
        type=parse_seeds,
        default=None,
        help=f"number of seeds N (seeds 0…N-1) or a comma list; default {default_seeds} (quick: fewer)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


class Log:
    """Progress lines on stderr with the elapsed time."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:7.1f} s] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# data and metrics


def tables_of(shards: Sequence[np.ndarray], names: Sequence[str], tag: str = "participant") -> list[Table]:
    """In-memory participant tables (one per shard) for :func:`bnsl_cli.learn.learn`."""
    return [Table(np.asarray(X, dtype=float), tuple(names), Path(f"{tag}-{k + 1:02d}")) for k, X in enumerate(shards)]


def simulated(d: int, seed: int, cfg: dict, **kw):
    """``(sim, tables)``: an ER1 draw with ``d`` variables and ``cfg``'s participants × samples."""
    sim = simulate(d, d, participants=cfg["participants"], samples=cfg["samples"], seed=seed, **kw)
    return sim, tables_of(sim.shards, sim.names)


def model_sd(W: np.ndarray, noise_scale: float = 1.0) -> np.ndarray:
    """Standard deviation of every variable of the linear SEM ``X = XW + N`` (from the model, not data)."""
    d = W.shape[0]
    A = np.linalg.inv(np.eye(d) - W)
    return noise_scale * np.sqrt(np.diag(A.T @ A))


def support_matrix(support: Iterable, d: int) -> np.ndarray:
    """A ``d × d`` matrix from a history ``support`` list ``[[i, j, w], ...]``."""
    W = np.zeros((d, d))
    for i, j, w in support:
        W[int(i), int(j)] = float(w)
    return W


def metrics(W_est, W_true, **kw) -> dict:
    m = structure_metrics(W_est, W_true, **kw)
    return {k: m[k] for k in ("shd", "tpr", "fdr", "nnz", "skeleton_recall", "tp", "reversed")}


def quiet_warnings() -> None:
    """Convergence and seeded-noise warnings are expected here; the tables hold the numbers that matter."""
    import warnings

    from bnsl_cli.errors import ConvergenceWarning, ReproducibleNoiseWarning

    # seeded DP noise is what makes these experiments repeatable; they are not private releases
    warnings.filterwarnings("ignore", category=ReproducibleNoiseWarning)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    warnings.filterwarnings("ignore", category=RuntimeWarning)


# ----------------------------------------------------------------------------------------------
# tables


def summarise(df: pd.DataFrame, by: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Mean and standard deviation (ddof = 1; 0 with one seed) of ``cols`` per group, plus ``n_seeds``."""
    g = df.groupby(list(by), sort=False)
    out = g[list(cols)].mean().add_suffix("_mean")
    sd = g[list(cols)].std(ddof=1).fillna(0.0).add_suffix("_std")
    res = pd.concat([out, sd], axis=1)
    res["n_seeds"] = g.size()
    ordered = list(by) + [c for k in cols for c in (f"{k}_mean", f"{k}_std")] + ["n_seeds"]
    return res.reset_index()[ordered]


def write_csv(df: pd.DataFrame, path: Path) -> Path:
    from bnsl_cli.io.atomic import atomic_write_text

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, df.to_csv(index=False, float_format="%.6g", lineterminator="\n"))
    return path


def markdown(df: pd.DataFrame, floatfmt: str = ".3g") -> str:
    """A GitHub table (no tabulate dependency)."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "" if np.isnan(v) else format(float(v), floatfmt)
        return str(v)

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


# ----------------------------------------------------------------------------------------------
# figures


def pyplot():
    """matplotlib.pyplot with the Agg backend, or None (and a one-line note on stderr) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is not installed; wrote tables only (pip install 'bnsl-cli[plots]')", file=sys.stderr)
        return None
    return plt


def band(ax, x, mean, std, label: str, *, marker: Optional[str] = "o", **kw):
    """A line with a shaded ±1 std band."""
    x, mean, std = (np.asarray(v, dtype=float) for v in (x, mean, std))
    if len(x) > 25:
        marker = None
    (line,) = ax.plot(x, mean, marker=marker, label=label, **kw)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
    return line


def save(fig, path: Path) -> Path:
    from bnsl_cli.io.atomic import atomic_write_bytes
    import io

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=120)
    atomic_write_bytes(path, buf.getvalue())
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def metric_panels(
    summary: pd.DataFrame,
    x: str,
    group: str,
    xlabel: str,
    path: Path,
    *,
    title: str = "",
    logx: bool = False,
    reference: Optional[dict] = None,
    groups: Optional[Sequence[str]] = None,
) -> Optional[Path]:
    """One panel per metric (SHD, TPR, FDR): mean ± std against ``x``, one line per ``group`` value.

    ``reference`` maps a label to ``{metric: (mean, std)}`` drawn as a dashed horizontal line."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, m in zip(axes, METRICS):
        for gname in groups or list(dict.fromkeys(summary[group])):
            sub = summary[summary[group] == gname].sort_values(x)
            band(ax, sub[x], sub[f"{m}_mean"], sub[f"{m}_std"], LABELS.get(gname, gname))
        for label, vals in (reference or {}).items():
            mu, sd = vals[m]
            line = ax.axhline(mu, linestyle="--", color="0.3", label=label)
            if sd:
                ax.axhspan(mu - sd, mu + sd, color=line.get_color(), alpha=0.1)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(AXIS[m])
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return save(fig, path)


def done(log: Log, out: Path, files: Sequence[Optional[Path]]) -> None:
    names = ", ".join(Path(f).name for f in files if f is not None)
    log(f"wrote {out}/: {names}")


def run_main(main: Callable[[list[str] | None], int]) -> None:
    sys.exit(main(None))
