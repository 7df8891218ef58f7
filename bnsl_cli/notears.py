"""Linear NOTEARS (Zheng et al. 2018), written against the second-moment matrix.

Solves ``min_W ½ tr((I − W)ᵀ S (I − W)) + λ ‖W‖₁  s.t.  h(W) = 0`` with ``S = XᵀX / n`` of centred
data, which equals ``1/(2n) ‖X − XW‖²_F + λ‖W‖₁``. ``W[i, j]`` is the weight of the edge ``i → j``.

Augmented Lagrangian ``F + α h + ρ/2 h²``: ρ₀ = 1, ρ ← 10ρ while h did not fall below 0.25 of its
previous value, α ← α + ρh; stop at h ≤ h_tol or ρ ≥ ρ_max; inner problems by L-BFGS-B on
``W = W⁺ − W⁻`` with ``W⁺, W⁻ ≥ 0`` and the diagonal fixed at 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import scipy.optimize

from bnsl_cli.numerics import acyclicity

__all__ = ["NotearsResult", "notears_linear", "NotearsSite", "drive_notears"]


@dataclass
class NotearsResult:
    W: np.ndarray
    h: float
    outer_steps: int
    converged: bool
    history: list = field(default_factory=list)
    wall_s: float = 0.0
    #: inner L-BFGS-B solves that did not report success (outer step, status, message)
    solver_issues: list = field(default_factory=list)


def notears_linear(
    S: np.ndarray,
    lam: float = 0.1,
    *,
    max_outer: int = 100,
    h_tol: float = 1e-8,
    rho_max: float = 1e16,
    progress: Optional[Callable[[dict], None]] = None,
) -> NotearsResult:
    """NOTEARS on the second-moment matrix ``S`` (d × d). See the module docstring."""
    t0 = time.perf_counter()
    S = np.asarray(S, dtype=float)
    d = S.shape[0]
    eye = np.eye(d)
    bounds = [(0.0, 0.0) if i == j else (0.0, None) for _ in range(2) for i in range(d) for j in range(d)]
    w_est = np.zeros(2 * d * d)
    rho, alpha, h = 1.0, 0.0, np.inf
    history = []

    def unpack(w):
        return (w[: d * d] - w[d * d :]).reshape(d, d)

    def fun(w):
        W = unpack(w)
        R = eye - W
        SR = S @ R
        loss = 0.5 * float(np.sum(R * SR))
        hv, gh = acyclicity(W)
        if not np.isfinite(hv):
            return np.inf, np.zeros_like(w)
        obj = loss + 0.5 * rho * hv * hv + alpha * hv + lam * float(w.sum())
        g = -SR + (rho * hv + alpha) * gh
        gflat = g.ravel()
        return obj, np.concatenate([gflat + lam, -gflat + lam])

    outer = 0
    converged = False
    issues = []
    for outer in range(1, max_outer + 1):
        while rho < rho_max:
            sol = scipy.optimize.minimize(fun, w_est, jac=True, method="L-BFGS-B", bounds=bounds)
            if not sol.success:
                issues.append({"outer": outer, "status": int(sol.status), "message": str(sol.message)})
            w_new = sol.x
            h_new = acyclicity(unpack(w_new))[0]
            if h_new > 0.25 * h:
                rho *= 10.0
            else:
                break
        w_est, h = w_new, h_new
        alpha += rho * h
        history.append({"outer": outer, "h": h, "rho": rho})
        if progress is not None:
            progress({"round": outer, "h": h, "rho": rho})
        if h <= h_tol:
            converged = True
            break
        if rho >= rho_max:
            break
    return NotearsResult(unpack(w_est), float(h), outer, converged, history, time.perf_counter() - t0, issues)


class NotearsSite:
    """The site side of ``notears`` / ``local-notears``: NOTEARS on this site's rows (for
    ``notears``, the one site holding every row pooled). Nothing is exchanged; the fitted graph is
    in its :meth:`summary`."""

    report_B = False

    def __init__(self, pid: int, X: np.ndarray, lam: float, standardize: bool = False, blocks=None):
        from bnsl_cli.federated.moments import pooled_moments_of_blocks, standardized

        self.pid = int(pid)
        # pooled rows: the moments of each participant's block, pooled exactly as fed-moments pools
        # its messages (so the two see bit-for-bit the same matrix)
        self._S = pooled_moments_of_blocks(X, [X.shape[0]] if blocks is None else blocks)
        self.sd = np.sqrt(np.maximum(np.diag(self._S), 0.0))
        if standardize:  # local arithmetic on this site's rows (the correlation matrix)
            from bnsl_cli.federated.standardize import check_scales

            check_scales(np.zeros_like(self.sd), self.sd, [f"column {j + 1}" for j in range(self.sd.size)])
            self._S, self.sd = standardized(self._S)
        self.n_rows = int(X.shape[0])
        self.lam = float(lam)

    def handle(self, data: bytes):
        raise ValueError("a NOTEARS site exchanges no messages")

    def summary(self) -> dict:
        res = notears_linear(self._S, self.lam)
        return {
            "participant": self.pid + 1,
            "rows": self.n_rows,
            "W": res.W.tolist(),
            "h": res.h,
            "outer_steps": res.outer_steps,
            "converged": res.converged,
            "history": res.history,
            "compute_s": res.wall_s,
            "solver_issues": res.solver_issues,
            "events": [],
            "sd": self.sd.tolist(),
        }


def drive_notears(plan, fleet, progress=None):
    """Coordinator side of ``notears`` (a fleet of one site with the pooled rows) and
    ``local-notears`` (one graph per site): collect the sites' fits and finish each graph."""
    import warnings

    from bnsl_cli.errors import ConvergenceWarning
    from bnsl_cli.federated.roles import Outcome
    from bnsl_cli.run import finish_graph

    summaries = fleet.finish()
    warn_list = []

    def check(s, where):
        if not s["converged"]:
            warn_list.append(
                f"{where}: NOTEARS stopped with h(W) = {s['h']:.2e} > 1e-8 after {s['outer_steps']} outer steps; "
                "the thresholded graph was made acyclic by dropping the weakest edges"
            )
        if s["solver_issues"]:
            first = s["solver_issues"][0]
            warn_list.append(
                f"{where}: {len(s['solver_issues'])} L-BFGS-B solve(s) inside NOTEARS did not report success "
                f"(first: outer step {first['outer']}, {first['message']})"
            )

    if plan.method == "notears":
        s = summaries[0]
        if progress is not None:
            for h in s["history"]:
                progress({"round": h["outer"], "h": h["h"], "rho": h["rho"]})
        W_raw = np.array(s["W"], dtype=float)
        W, removed = finish_graph(W_raw, plan.threshold, "notears", plan.names)
        check(s, "notears")
        for w in warn_list:
            warnings.warn(w, ConvergenceWarning, stacklevel=2)
        report = {
            "rounds": s["outer_steps"],
            "converged": s["converged"],
            "final": {"h": s["h"]},
            "history": s["history"],
            "communication": {"bytes_up": 0, "bytes_down": 0, "bytes_total": 0, "note": "centralized: all rows pooled"},
            "timing": {"compute_s": s["compute_s"]},
            "removed_for_acyclicity": removed,
            "solver_issues": s["solver_issues"],
            "warnings": warn_list,
        }
        return Outcome(W_raw, W, report, summaries)
    local, per = [], []
    for s in summaries:
        where = f"participant {s['participant']} ({plan.participants[s['participant'] - 1].label})"
        W, removed = finish_graph(np.array(s["W"], dtype=float), plan.threshold, where, plan.names)
        check(s, where)
        local.append(W)
        per.append({
            "participant": s["participant"],
            "outer_steps": s["outer_steps"],
            "h": s["h"],
            "converged": s["converged"],
            "removed_for_acyclicity": removed,
            "W": W,
        })
    for w in warn_list:
        warnings.warn(w, ConvergenceWarning, stacklevel=2)
    report = {
        "rounds": max(p["outer_steps"] for p in per),
        "converged": all(p["converged"] for p in per),
        "local": per,
        "communication": {"bytes_up": 0, "bytes_down": 0, "bytes_total": 0, "note": "local: nothing is sent"},
        "timing": {"compute_s": sum(s["compute_s"] for s in summaries)},
        "warnings": warn_list,
    }
    return Outcome(None, local[0], report, summaries, local=local)
