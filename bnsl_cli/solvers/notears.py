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

from bnsl_cli.numerics import acyclicity

__all__ = ["NotearsResult", "notears_linear"]


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
    forbidden: Optional[np.ndarray] = None,
    required: Optional[np.ndarray] = None,
) -> NotearsResult:
    """NOTEARS on the second-moment matrix ``S`` (d × d). See the module docstring.

    Prior knowledge: the entries of the bool mask ``forbidden`` are fixed at 0 through the bounds
    (like the diagonal); the entries of ``required`` carry no ℓ₁ penalty."""
    # deferred on purpose: a third-party import of about 0.25 s that fed-sparse runs never need
    # (tests/cli/test_app.py keeps a small fed-sparse learn free of it)
    import scipy.optimize

    t0 = time.perf_counter()
    S = np.asarray(S, dtype=float)
    d = S.shape[0]
    eye = np.eye(d)
    bounds = [(0.0, 0.0) if i == j else (0.0, None) for _ in range(2) for i in range(d) for j in range(d)]
    lam_vec = None
    if forbidden is not None:
        F = np.asarray(forbidden, dtype=bool)
        bounds = [(0.0, 0.0) if F[i, j] or i == j else (0.0, None) for _ in range(2) for i in range(d) for j in range(d)]
    if required is not None:
        lam_vec = np.tile(np.where(np.asarray(required, dtype=bool), 0.0, lam).ravel(), 2)
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
        g = -SR + (rho * hv + alpha) * gh
        gflat = g.ravel()
        if lam_vec is not None:
            obj = loss + 0.5 * rho * hv * hv + alpha * hv + float(lam_vec @ w)
            return obj, np.concatenate([gflat, -gflat]) + lam_vec
        obj = loss + 0.5 * rho * hv * hv + alpha * hv + lam * float(w.sum())
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
