"""``--method fed-moments``: one exchange of second moments, then NOTEARS on the pooled moments.

Each participant sends once (:class:`~bnsl_cli.federated.messages.MomentReply`) its row count
``n_p``, its column sums ``s_p`` and the upper triangle of ``M_p = Σ_rows (x − c_p)(x − c_p)ᵀ`` about
its centre ``c_p = s_p / n_p``. The coordinator pools them exactly,

    μ = Σ_p s_p / n,        n·S = Σ_p [M_p + n_p (c_p − μ)(c_p − μ)ᵀ]

(the pooled centred second-moment matrix: with exact own means this is ``X_cᵀX_c`` of all rows,
centred with the pooled mean), and runs :func:`bnsl_cli.notears.notears_linear` on ``S`` — the
same solver, λ and tolerances as ``--method notears`` on the pooled rows. With ``--standardize``
the coordinator uses ``D⁻¹ S D⁻¹`` (``D`` the pooled standard deviations, the square roots of
``diag S``): the same as standardising every row with the pooled statistics, with no extra message.

Under ``--dp`` each participant makes the one-off releases of DP-Fed-BNSL (noisy column means ``ĉ_p``
and second moments ``v̂_p``, each with its noisy range bound unless ``--value-bound``), then one
Gaussian release of ``Σ_rows z zᵀ`` of its rows centred at ``ĉ_p`` and scaled column-wise by the
released ``√v̂_p`` (``z_j = (x_j − ĉ_j)/√v̂_j``, so the clip and the noise are the same on every
column whatever its units), each row clipped to ℓ₂ norm ``C_x = c·√d`` (replace-one sensitivity
``√2·C_x²``; symmetric Gaussian noise), release kind ``moment-matrix``. The coordinator projects the
pooled sum to PSD once (projecting every participant's matrix rectified the noise P times: d = 50
ER2, ε = 10, seed 1: SHD 88 → 80). It sends
``diag(√v̂) M_z diag(√v̂)`` and ``n_p ĉ_p`` as its sums. Everything the coordinator computes from
these is post-processing.

Orientation: ``W[i, j]`` is the edge ``i → j``.
"""

from __future__ import annotations

import time
import warnings
from typing import Optional

import numpy as np

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.messages import MomentReply, MomentRequest, message_kind
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = [
    "upper_triangle",
    "from_upper_triangle",
    "pool_moments",
    "centred_moments",
    "pooled_moments_of_blocks",
    "standardized",
    "MomentSite",
    "make_moment_site",
    "drive_moments",
    "dp_fed_moments_releases",
]


def upper_triangle(M: np.ndarray) -> np.ndarray:
    """Row-major upper triangle (diagonal included) of a symmetric ``M``: d(d+1)/2 values."""
    return np.asarray(M, dtype=float)[np.triu_indices(M.shape[0])]


def from_upper_triangle(u: np.ndarray, d: int) -> np.ndarray:
    """The symmetric d × d matrix of :func:`upper_triangle` values."""
    M = np.zeros((d, d))
    r, c = np.triu_indices(d)
    M[r, c] = u
    M[c, r] = u
    return M


def centred_moments(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, Σ x, M)`` of one block of rows, ``M = Σ (x − x̄)(x − x̄)ᵀ`` about the block's own mean,
    exactly symmetric (the upper triangle mirrored). ``--method notears`` computes its pooled
    moments from the same blocks with this function and :func:`pool_moments`, so a non-private
    fed-moments run sees bit-for-bit the same matrix."""
    X = np.asarray(X, dtype=float)
    n = int(X.shape[0])
    sums = X.sum(axis=0)
    Xc = X - (sums / n)[None, :]
    M = Xc.T @ Xc
    return n, sums, from_upper_triangle(upper_triangle(M), M.shape[0])


def pooled_moments_of_blocks(X: np.ndarray, rows) -> np.ndarray:
    """The pooled ``S`` of ``X`` whose consecutive row blocks have sizes ``rows`` (what fed-moments
    computes from those blocks' messages)."""
    parts, start = [], 0
    for r in rows:
        parts.append(centred_moments(X[start : start + int(r)]))
        start += int(r)
    if start != X.shape[0]:
        raise ValueError(f"blocks of {sum(int(r) for r in rows)} rows given for {X.shape[0]} rows")
    return pool_moments([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])[0]


def standardized(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(D⁻¹ S D⁻¹, sd)`` with ``sd = √diag S`` (the correlation matrix), its entries rounded to
    multiples of ``2**-24`` (:func:`~bnsl_cli.federated.standardize.quantise`): a change of a column's
    units moves them only in their last bits, which NOTEARS' solver could otherwise amplify into a
    different graph."""
    from bnsl_cli.federated.standardize import quantise

    sd = np.sqrt(np.maximum(np.diag(S), 0.0))
    return quantise(S / np.outer(sd, sd)), sd


def pool_moments(rows, sums, mats) -> tuple[np.ndarray, np.ndarray]:
    """``(S, μ)``: the pooled centred second-moment matrix ``S`` (divisor n) and the pooled mean from
    per-participant counts, column sums and second-moment matrices about ``sums / rows``."""
    rows = np.asarray(rows, dtype=float)
    n = float(rows.sum())
    Ssum = np.vstack([np.asarray(s, float)[None, :] for s in sums])
    mu = Ssum.sum(axis=0) / n
    D = Ssum / rows[:, None] - mu[None, :]  # c_p − μ
    total = np.sum(mats, axis=0) + (D * rows[:, None]).T @ D
    return total / n, mu


# ----------------------------------------------------------------------------------------------
# privacy: the release list
# ----------------------------------------------------------------------------------------------


def dp_fed_moments_releases(rho_star: float, *, mean_share: float, moment_share: float, value_bound_given: bool) -> list:
    """DP fed-moments' releases: DP-Fed-BNSL's one-offs, then the moment matrix with the rest of ``rho_star``."""
    from bnsl_cli.privacy.release_plan import dp_fed_bnsl_releases
    from bnsl_cli.privacy.releases import PlannedRelease

    out = []
    for r in dp_fed_bnsl_releases(rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given):
        kind = ReleaseKind.MOMENT_MATRIX if r.kind == ReleaseKind.COVARIANCE else r.kind
        out.append(PlannedRelease(kind, r.mechanism, r.multiplier, r.count))
    return out


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


def _private_moment_matrix(Z: np.ndarray, clip: float, multiplier: float, rng):
    """``Σ_rows z zᵀ`` with rows clipped to ℓ₂ norm ``C = clip·√d``, plus symmetric Gaussian noise
    (replace-one sensitivity ``√2·C²``). Not projected here: the coordinator projects the pooled sum
    once (post-processing), which keeps the noise of P participants from being rectified P times."""
    from bnsl_cli.privacy.mechanisms import symmetric_gaussian_matrix

    d = Z.shape[1]
    c_x = clip * float(np.sqrt(d))
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    Zs = Z * np.minimum(1.0, c_x / np.maximum(norms, 1e-300))[:, None]
    sens = float(np.sqrt(2.0) * c_x**2)
    std = multiplier * sens
    return Zs.T @ Zs + symmetric_gaussian_matrix(d, std, rng), PrivacyEvent(ReleaseKind.MOMENT_MATRIX, "gaussian", sens, std, 1)


class MomentSite:
    """A fed-moments participant: answers one :class:`MomentRequest` with its moments."""

    report_B = False

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None):
        t0 = time.perf_counter()
        self.pid = int(pid)
        X = np.asarray(X, dtype=float)
        self.n_rows, self.d = int(X.shape[0]), int(X.shape[1])
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(self.pid)
        self.notes: dict = {}
        self.sent = False
        if privacy is None:
            _, self._sums, self._M = centred_moments(X)
        else:
            from bnsl_cli.federated.dp_participant import _one_off_multipliers, private_preprocessing

            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            centre, v_hat, events, notes = private_preprocessing(
                X, _one_off_multipliers(privacy), privacy.value_bound, rng, label or f"participant {pid + 1}"
            )
            for ev in events:
                self.ledger.record(self.pid, ev)
            self.notes = notes
            mult = privacy.multiplier(ReleaseKind.MOMENT_MATRIX)
            if mult is None:
                raise PrivacyBudgetError(f"participant {pid + 1}: the plan calibrated no moment-matrix release")
            # rows scaled column-wise by the released spreads √v̂ (post-processing of a release), so the
            # clip and the noise do not depend on the columns' units; the matrix is scaled back
            s = np.sqrt(np.asarray(v_hat, float))
            Z = (X - np.asarray(centre)[None, :]) / s[None, :]
            M, ev = _private_moment_matrix(Z, privacy.clip, mult, rng)
            self.ledger.record(self.pid, ev)
            self._sums = self.n_rows * np.asarray(centre, float)
            self._M = M * np.outer(s, s)
        self.compute_s = time.perf_counter() - t0

    def handle(self, data: bytes) -> Optional[bytes]:
        if message_kind(data) != MomentRequest.kind:
            raise ValueError(f"participant {self.pid + 1}: fed-moments answers only a moment request")
        req = MomentRequest.decode(data)
        if self.sent:
            raise PrivacyBudgetError(f"participant {self.pid + 1}: its moments were already sent once")
        self.sent = True
        return MomentReply(req.round, self.pid, self.d, self.n_rows, self._sums, upper_triangle(self._M)).encode()

    def summary(self) -> dict:
        return {
            "participant": self.pid + 1,
            "rows": self.n_rows,
            "B": None,
            "compute_s": self.compute_s,
            "events": [ev.to_dict() for ev in self.ledger.events(self.pid)],
            "notes": dict(self.notes),
        }


def make_moment_site(plan, pid: int, X: np.ndarray, rng) -> MomentSite:
    """The site side of ``fed-moments`` from the run plan."""
    return MomentSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label)


# ----------------------------------------------------------------------------------------------
# the coordinator side
# ----------------------------------------------------------------------------------------------


def drive_moments(plan, fleet, progress=None):
    """Coordinator side: one exchange, the pooled moments, NOTEARS, the finished graph."""
    from bnsl_cli.errors import ConvergenceWarning
    from bnsl_cli.federated.roles import Outcome
    from bnsl_cli.federated.standardize import check_scales
    from bnsl_cli.notears import notears_linear
    from bnsl_cli.run import finish_graph

    req = MomentRequest(0, plan.d).encode()
    raw = fleet.exchange(req)
    replies = [MomentReply.decode(r) for r in raw]
    up = sum(len(r) for r in raw)
    down = len(req) * len(raw)
    d = plan.d
    S, mu = pool_moments(
        [r.rows for r in replies], [r.sums for r in replies], [from_upper_triangle(r.upper, d) for r in replies]
    )
    if plan.private:
        from bnsl_cli.privacy.mechanisms import project_psd

        S = project_psd(S)  # post-processing of the pooled noisy releases
    sd = np.sqrt(np.maximum(np.diag(S), 0.0))
    if not np.all(np.isfinite(S)):
        from bnsl_cli.errors import NoDagError

        raise NoDagError("fed-moments: the pooled second moments are not finite (values too large); no DAG can be produced")
    std = {
        "applied": bool(plan.standardize),
        "source": "the pooled moment matrix (no extra message" + (", no extra release)" if plan.private else ")"),
        "mean": mu.tolist(),
        "sd": sd.tolist(),
    }
    if plan.standardize:
        check_scales(mu, sd, plan.names)
        S, sd = standardized(S)
    res = notears_linear(S, plan.lam, progress=progress)
    W, removed = finish_graph(res.W, plan.threshold, "fed-moments", plan.names)
    summaries = fleet.finish()
    warn_list = []
    if not res.converged:
        warn_list.append(
            f"fed-moments: NOTEARS stopped with h(W) = {res.h:.2e} > 1e-8 after {res.outer_steps} outer steps; "
            "the thresholded graph was made acyclic by dropping the weakest edges"
        )
    if res.solver_issues:
        first = res.solver_issues[0]
        warn_list.append(
            f"fed-moments: {len(res.solver_issues)} L-BFGS-B solve(s) inside NOTEARS did not report success "
            f"(first: outer step {first['outer']}, {first['message']})"
        )
    for w in warn_list:
        warnings.warn(w, ConvergenceWarning, stacklevel=2)
    report = {
        "rounds": res.outer_steps,
        "converged": res.converged,
        "final": {"h": res.h},
        "history": res.history,
        "communication": {
            "bytes_up": up,
            "bytes_down": down,
            "bytes_total": up + down,
            "exchanges": 1,
            "note": "one exchange: each participant's counts, column sums and upper-triangle moment matrix",
        },
        "timing": {"compute_s": res.wall_s + sum(s["compute_s"] for s in summaries)},
        "removed_for_acyclicity": removed,
        "solver_issues": res.solver_issues,
        "warnings": warn_list,
        "standardize": std,
    }
    return Outcome(res.W, W, report, summaries)
