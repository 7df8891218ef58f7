"""Structure learning front door: runs a method on participant tables and builds the run report.

Methods:

- ``fed-sparse`` — Fed-Sparse-BNSL: ADMM consensus, each participant solving its ℓ₁ problem by
  PGCD and sending only the coordinates it changed (private variant: DP-PGCD, see ``dp=``);
- ``fed-bnsl`` — Fed-BNSL (Ng & Zhang 2022): closed-form local updates, ℓ₁ on W, dense messages
  (private variant: DP-Fed-BNSL, one noisy covariance per participant);
- ``notears`` — centralized NOTEARS on all rows pooled (the accuracy ceiling; not federated);
- ``local-notears`` — NOTEARS on each participant's rows alone (one graph per participant).

Orientation: ``W[i, j]`` is the weight of the edge ``i → j``.
"""

from __future__ import annotations

import platform
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from bnsl_cli import __version__
from bnsl_cli.dag import threshold_to_dag
from bnsl_cli.errors import BnslError, ConvergenceWarning, NoDagError
from bnsl_cli.io.data import Table
from bnsl_cli.io.graphs import ORIENTATION, graph_to_json
from bnsl_cli.numerics import single_blas_thread

__all__ = ["METHODS", "LearnConfig", "LearnResult", "learn", "default_lambda", "default_steps", "SCHEMA_VERSION"]

SCHEMA_VERSION = 1
METHODS = ("fed-sparse", "fed-bnsl", "notears", "local-notears")

#: Default λ per method. For the federated methods the local losses are normalised by the public
#: total n, so Fed-Sparse-BNSL's per-participant λ acts as P·λ in centralized NOTEARS units.
_DEFAULT_LAMBDA = {"fed-sparse": 0.005, "fed-bnsl": 0.03, "notears": 0.1, "local-notears": 0.1}


def default_lambda(method: str) -> float:
    return _DEFAULT_LAMBDA[method]


def default_steps(d: int) -> int:
    """PGCD steps per round (non-private): ``3d``. Measured at d = 20 (ER1, P = 8, 5000 rows,
    5 seeds): mean SHD 3.0 / 2.6 / 2.0 / 1.4 with T = d / 2d / 3d / 5d, bytes rising with T
    (CHANGELOG)."""
    return 3 * d


@dataclass
class LearnConfig:
    """Options of a learning run (``None`` means the method's default)."""

    method: str = "fed-sparse"
    lam: Optional[float] = None
    threshold: float = 0.3
    rounds: Optional[int] = None
    steps: Optional[int] = None
    rho1: float = 1e-3
    rho2: float = 1e-3
    rho1_growth: float = 1.75
    rho2_growth: float = 1.25
    rho_max: float = 1e16
    tol: float = 1e-5
    h_tol: float = 1e-8
    gap_tol: float = 1e-3
    seed: Optional[int] = None
    #: fed-sparse: consensus entries |W_ij| < snap are set to exactly 0 before the broadcast (a hard
    #: threshold inside the ADMM, far below the output threshold). Measured (CHANGELOG): 0.05 against
    #: 1e-3 gives the same or lower SHD with about 3× fewer bytes down and fewer rounds; 0.1 costs
    #: accuracy.
    snap: float = 0.05
    #: fed-sparse: after the rounds, a score-based local search on the consensus DAG with pooled
    #: second moments on the pairs it needs (:mod:`bnsl_cli.federated.polish`). Measured
    #: (CHANGELOG, benchmarks/bench_learn.py): mean SHD 1.8 → 0.6 at d = 20 (5 seeds), 26.7 → 4.7 at
    #: d = 200 (3 seeds), for about 2 % more bytes.
    polish: bool = True
    server_ftol: float = 1e-6
    workers: Optional[int] = 1  # participant worker processes (None: one per available CPU, at most P)
    personal: bool = False
    dp: Optional[object] = None  # a bnsl_cli.private.DPConfig when the run is private

    def resolved(self, d: int) -> "LearnConfig":
        """A copy with every default filled in for ``d`` variables."""
        if self.method not in METHODS:
            raise BnslError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        c = LearnConfig(**{k: getattr(self, k) for k in self.__dataclass_fields__})
        if c.lam is None:
            c.lam = default_lambda(c.method)
            if c.dp is not None and c.method == "fed-sparse":
                from bnsl_cli.privacy.defaults import DP_LAMBDA

                c.lam = DP_LAMBDA
        if c.dp is not None:
            from bnsl_cli.privacy.defaults import DP_ROUNDS, dp_steps

            c.rounds = DP_ROUNDS if c.rounds is None else c.rounds
            c.steps = dp_steps(d) if c.steps is None else c.steps
        if c.rounds is None:
            c.rounds = 80
        if c.steps is None:
            c.steps = default_steps(d)
        return c


@dataclass
class LearnResult:
    """``W`` is the final DAG (thresholded, cycles broken); ``W_raw`` the consensus before that."""

    names: tuple[str, ...]
    W: np.ndarray
    W_raw: np.ndarray
    report: dict
    personal: Optional[list] = None  # per-participant B_p (fed-sparse/fed-bnsl with personal=True)
    local: Optional[list] = None  # per-participant DAGs (local-notears)


def _versions() -> dict:
    import scipy

    return {
        "bnsl": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
    }


def _finish_graph(W_raw: np.ndarray, threshold: float, where: str) -> tuple[np.ndarray, list]:
    if not np.all(np.isfinite(W_raw)):
        raise NoDagError(
            f"{where}: the estimate diverged (non-finite weights); no DAG can be produced. "
            "Try fewer --rounds or a smaller --rho2-growth."
        )
    return threshold_to_dag(W_raw, threshold)


def _removed_json(removed, names):
    return [{"source": names[i], "target": names[j], "weight": w} for i, j, w in removed]


def learn(
    tables: Sequence[Table],
    config: LearnConfig = LearnConfig(),
    progress: Optional[Callable[[dict], None]] = None,
) -> LearnResult:
    """Learn a DAG from participant tables (one table = one participant, same columns)."""
    t0 = time.perf_counter()
    names = tables[0].names
    d = len(names)
    cfg = config.resolved(d)
    n_total = int(sum(t.n for t in tables))
    report: dict = {
        "schema_version": SCHEMA_VERSION,
        "orientation": ORIENTATION,
        "method": cfg.method + ("" if cfg.dp is None else " (dp)"),
        "options": {k: v for k, v in asdict(cfg).items() if k != "dp"},
        "seed": cfg.seed,
        "versions": _versions(),
        "data": {
            "participants": [{"participant": k + 1, "file": str(t.path), "rows": t.n} for k, t in enumerate(tables)],
            "n_total": n_total,
            "d": d,
            "nodes": list(names),
        },
    }
    with single_blas_thread():
        if cfg.method in ("notears", "local-notears"):
            result = _run_notears(tables, cfg, names, report, progress)
        elif cfg.dp is not None:
            from bnsl_cli.private import run_private

            result = run_private(tables, cfg, names, report, progress)
        else:
            result = _run_federated(tables, cfg, names, report, progress)
    report["timing"]["wall_s"] = time.perf_counter() - t0
    return result


def _run_notears(tables, cfg, names, report, progress) -> LearnResult:
    from bnsl_cli.notears import notears_linear

    def fit(X):
        Xc = X - X.mean(axis=0, keepdims=True)
        return notears_linear((Xc.T @ Xc) / X.shape[0], cfg.lam, progress=progress)

    t0 = time.perf_counter()
    if cfg.method == "notears":
        X = np.vstack([t.X for t in tables])
        res = fit(X)
        W, removed = _finish_graph(res.W, cfg.threshold, "notears")
        if not res.converged:
            warnings.warn(
                f"NOTEARS stopped with h(W) = {res.h:.2e} > 1e-8 after {res.outer_steps} outer steps; "
                "the thresholded graph was made acyclic by dropping the weakest edges",
                ConvergenceWarning,
                stacklevel=3,
            )
        report.update(
            rounds=res.outer_steps,
            converged=res.converged,
            final={"h": res.h},
            history=res.history,
            communication={"bytes_up": 0, "bytes_down": 0, "bytes_total": 0, "note": "centralized: all rows pooled"},
            timing={"compute_s": time.perf_counter() - t0},
            graph=graph_to_json(W, names),
            removed_for_acyclicity=_removed_json(removed, names),
            privacy=None,
        )
        return LearnResult(names, W, res.W, report)
    local, per = [], []
    for k, t in enumerate(tables):
        res = fit(t.X)
        W, removed = _finish_graph(res.W, cfg.threshold, f"participant {k + 1}")
        local.append(W)
        per.append(
            {
                "participant": k + 1,
                "outer_steps": res.outer_steps,
                "h": res.h,
                "converged": res.converged,
                "graph": graph_to_json(W, names),
                "removed_for_acyclicity": _removed_json(removed, names),
            }
        )
    report.update(
        rounds=max(p["outer_steps"] for p in per),
        converged=all(p["converged"] for p in per),
        local=per,
        communication={"bytes_up": 0, "bytes_down": 0, "bytes_total": 0, "note": "local: nothing is sent"},
        timing={"compute_s": time.perf_counter() - t0},
        graph=None,
        privacy=None,
    )
    return LearnResult(names, local[0], local[0], report, local=local)


def _workers_used(cfg, P: int) -> int:
    from bnsl_cli.federated.fleet import default_workers

    return default_workers(P) if cfg.workers is None else max(1, min(cfg.workers, P))


def communication_report(log) -> dict:
    """Bytes up/down per participant and per round, from the encoded message lengths."""
    up, down = log.bytes_up, log.bytes_down
    P = up.shape[1]
    pu = log.polish_up if log.polish_up is not None else np.zeros(P, dtype=np.int64)
    pd = log.polish_down if log.polish_down is not None else np.zeros(P, dtype=np.int64)
    total_up, total_down = int(up.sum() + pu.sum()), int(down.sum() + pd.sum())
    return {
        "bytes_up": total_up,
        "bytes_down": total_down,
        "bytes_total": total_up + total_down,
        "polish": {"bytes_up": int(pu.sum()), "bytes_down": int(pd.sum())},
        "per_participant": [
            {
                "participant": p + 1,
                "bytes_up": int(up[:, p].sum() + pu[p]),
                "bytes_down": int(down[:, p].sum() + pd[p]),
            }
            for p in range(P)
        ],
        "per_round": [
            {"round": r + 1, "bytes_up": int(up[r].sum()), "bytes_down": int(down[r].sum())}
            for r in range(up.shape[0])
        ]
        + ([{"round": "polish", "bytes_up": int(pu.sum()), "bytes_down": int(pd.sum())}] if pd.sum() else [])
        + [{"round": "final", "bytes_up": 0, "bytes_down": int(down[-1].sum())}],
        "encoding": "18-byte header per message; entries as int32 flat index + float64 value; W as the smallest of dense, sparse pairs and support delta",
    }


def convergence_check(log, cfg, report, method_label: str) -> None:
    """Warn (with the numbers and what to change) when the run stopped unconverged."""
    last = log.history[-1] if log.history else {"h": float("nan"), "gap": float("nan")}
    converged = bool(last["h"] <= cfg.h_tol and last["gap"] <= cfg.gap_tol)
    report["converged"] = converged
    if not converged and not log.stopped_early:
        what = []
        if not last["h"] <= cfg.h_tol:
            what.append(f"h(W) = {last['h']:.2e} > {cfg.h_tol:g}")
        if not last["gap"] <= cfg.gap_tol:
            what.append(f"consensus gap max|B_p − W| = {last['gap']:.2e} > {cfg.gap_tol:g}")
        warnings.warn(
            f"{method_label} did not converge in {log.rounds} rounds ({'; '.join(what)}); "
            f"the graph was thresholded and made acyclic anyway. Raise --rounds (now {cfg.rounds}) "
            f"or --steps (now {cfg.steps}) for a converged result.",
            ConvergenceWarning,
            stacklevel=3,
        )


def run_fleet(coord, parts, cfg, progress, polish=None):
    """Run the ADMM rounds (and the polish exchange, if any) with the participants in worker
    processes (``cfg.workers``) or here; returns the run log and the participants with their final
    state."""
    from bnsl_cli.federated.fleet import make_fleet
    from bnsl_cli.federated.protocol import run_admm

    fleet = make_fleet(parts, cfg.workers)
    try:
        log = run_admm(
            coord, fleet, cfg.rounds, h_tol=cfg.h_tol, gap_tol=cfg.gap_tol, threshold=cfg.threshold,
            progress=progress, polish=polish,
        )
        parts = fleet.finish()
    finally:
        if hasattr(fleet, "close"):
            fleet.close()
    return log, parts


def polish_stage(cfg, n_total: int, noise=None):
    """The polish stage of a fed-sparse run (``None`` when switched off or for fed-bnsl); ``noise``
    as in :class:`~bnsl_cli.federated.polish.PolishStage` for a private run."""
    if cfg.method != "fed-sparse" or not cfg.polish:
        return None
    from bnsl_cli.federated.polish import PolishStage

    return PolishStage(cfg.threshold, n_total, noise=noise)


def apply_polish(stage, W: np.ndarray, cfg) -> tuple[np.ndarray, Optional[dict]]:
    """The polished DAG and the report's ``polish`` entry (the thresholded consensus when off)."""
    if stage is None:
        return W, ({"applied": False, "reason": "--no-polish"} if cfg.method == "fed-sparse" else None)
    if stage.result is None:
        return W, {"applied": False, "reason": "nothing to polish (no edges or candidates, or a diverged run)"}
    info = dict(stage.result.info)
    if info.get("applied"):
        return stage.result.W, info
    return W, info


def _run_federated(tables, cfg, names, report, progress) -> LearnResult:
    from bnsl_cli.federated.coordinator import Coordinator, PenaltySchedule
    from bnsl_cli.federated.participant import DenseParticipant, SparseParticipant

    d, P = len(names), len(tables)
    n_total = sum(t.n for t in tables)
    schedule = PenaltySchedule(cfg.rho1, cfg.rho2, cfg.rho1_growth, cfg.rho2_growth, cfg.rho_max)
    if cfg.method == "fed-sparse":
        parts = [SparseParticipant(k, t.X, n_total, cfg.lam, cfg.steps, cfg.tol) for k, t in enumerate(tables)]
        coord = Coordinator(d, P, schedule, snap=cfg.snap, ftol=cfg.server_ftol)
    else:
        parts = [DenseParticipant(k, t.X, n_total) for k, t in enumerate(tables)]
        coord = Coordinator(d, P, schedule, l1=cfg.lam, dense=True, ftol=cfg.server_ftol)
    stage = polish_stage(cfg, n_total)
    log, parts = run_fleet(coord, parts, cfg, progress, polish=stage)
    W_raw = coord.W.copy()
    W, removed = _finish_graph(W_raw, cfg.threshold, cfg.method)
    W, report["polish"] = apply_polish(stage, W, cfg)
    convergence_check(log, cfg, report, cfg.method)
    last = log.history[-1]
    report.update(
        rounds=log.rounds,
        stopped_early=log.stopped_early,
        final={"h": last["h"], "gap": last["gap"], "objective": last["objective"]},
        history=log.history,
        communication=communication_report(log),
        timing={
            "workers": _workers_used(cfg, len(parts)),
            "participants_s": [p.compute_s for p in parts],
            "server_s": coord.server_s, "server_evaluations": coord.lbfgs_evals,
            "protocol_s": log.wall_s,
        },
        graph=graph_to_json(W, names),
        removed_for_acyclicity=_removed_json(removed, names),
        privacy=None,
    )
    personal = [p.B.copy() for p in parts] if cfg.personal else None
    return LearnResult(names, W, W_raw, report, personal=personal)
