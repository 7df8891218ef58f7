"""The Gaussian score on a moment matrix, one home for both score searches: the polish's
(:mod:`bnsl_cli.solvers.score_search`) and the noise-aware one on released moments (:mod:`bnsl_cli.solvers.moment_search`).
Arrays in, arrays out.

``G`` is a ``d × d`` second-moment matrix (per row, ``Σ x xᵀ / n``) and ``E[i, j]`` the edge ``i → j``.
The least-squares fit of node ``j`` on a parent set ``S`` is ``β = G_SS⁻¹ G_Sj``, its residual
variance ``RSS_j(S) = G_jj − G_jS β`` (:func:`family_rss`; for every node at once:
:func:`fit_on_parents`). A DAG's Gaussian model has the score ``equal``: one noise variance for all
nodes, ``n·d/2·log Σ_j RSS_j``, or ``node``: one per node, ``Σ_j n/2·log RSS_j``, and a penalty per
edge: the BIC's ``log(n)/2`` or the extended BIC's ``log(n)/2 + log d`` (:func:`ebic_penalty`; Chen &
Chen 2008). :func:`bic_of` compares the two models with their variances counted;
:func:`least_squares_weights` gives a DAG's weights. The searches evaluate the *changes* of the score
from these residual variances in their own loops.

The two searches evaluated some of these quantities in different floating-point orders. Every graph
and weight they produce is kept to the bit, so each such quantity has one function here and the two
orders are its explicit ``form``:

- weights: ``"solve"`` (``numpy.linalg.solve`` per family, least squares where ``G_SS`` is singular;
  the polish) or ``"lstsq"`` (``numpy.linalg.lstsq`` for every family; the noise-aware search);
- a residual variance and the BIC: ``"solve"`` (one solve per family, ``inf`` where ``G_SS`` is
  singular or an entry is missing; the polish) or ``"inverse"`` (from :func:`fit_on_parents` with
  ``G_SS``'s inverse, its pseudo-inverse where singular, as the noise-aware statistics compute it;
  the noise-aware search).

The extended BIC's level has one formula in two units (:func:`ebic_penalty`): the penalty per edge
``log(n)/2 + log d`` (the polish) and ``κ = log n + 2 log d``, the level an edge's squared test
statistic must exceed (the noise-aware search's edge test), which is twice the penalty to the bit (doubling is
exact in binary floating point) with ``n`` taken at least 2.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = [
    "SCORES",
    "check_score",
    "residual_floor",
    "fit_on_parents",
    "added_residuals",
    "family_rss",
    "dropped_residuals",
    "least_squares_weights",
    "ebic_penalty",
    "bic_of",
]

#: The scores of a search: one noise variance for all nodes, one per node, or the better of the two by BIC.
SCORES = ("equal", "node", "auto")

_RSS_FORMS = ("solve", "inverse")
_WEIGHT_FORMS = ("solve", "lstsq")


def check_score(score: str, auto: bool = True) -> None:
    """Refuse a score that is not one of :data:`SCORES` (without ``"auto"`` when ``auto`` is false)."""
    if auto:
        if score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
    elif score not in ("equal", "node"):
        raise ValueError(f"score must be 'equal' or 'node', got {score!r}")


def _check_form(form: str, forms) -> None:
    if form not in forms:
        raise ValueError(f"form must be one of {', '.join(forms)}, got {form!r}")


def residual_floor(G: np.ndarray, j: int) -> float:
    """The smallest residual variance of node ``j``: ``1e-12·|G_jj|`` (a fit that explains ``j``
    exactly leaves rounding, not a variance of zero)."""
    return 1e-12 * max(abs(float(G[j, j])), 1e-300)


def fit_on_parents(G: np.ndarray, j: int, S: np.ndarray, singular: str = "pinv", mask_missing: bool = False):
    """The least-squares fit of every node on the parents ``S`` (a sorted index array) of node ``j``:
    ``(Ainv, K, C, Cd)`` with ``Ainv = G_SS⁻¹``, ``K = Ainv·G_S·`` (column ``i``: the coefficients
    ``β_i`` of ``i`` on ``S``), ``C = G_·j − G_·S β_j`` (the partial covariances with ``j`` given
    ``S``; ``C_j = RSS_j(S)``) and ``Cd = diag(G) − diag(G_·S K)`` (the partial variances). With no
    parents ``Ainv`` and ``K`` are ``None`` and ``C``, ``Cd`` the moments themselves.

    ``singular``: where ``G_SS`` is singular, ``"pinv"`` uses its pseudo-inverse and ``"none"``
    returns ``None``. ``mask_missing``: a non-finite entry of ``G_S·`` counts as 0 in the products
    and its column's ``C`` and ``Cd`` are NaN (the polish's moments hold only the pairs exchanged)."""
    if S.size == 0:
        return None, None, G[:, j].copy(), np.diag(G).copy()
    if singular not in ("pinv", "none"):
        raise ValueError(f"singular must be 'pinv' or 'none', got {singular!r}")
    A = G[np.ix_(S, S)]
    GS = G[S, :]
    try:
        Ainv = np.linalg.inv(A)
    except np.linalg.LinAlgError:
        if singular == "none":
            return None
        Ainv = np.linalg.pinv(A)
    if mask_missing:
        missing = ~np.isfinite(GS)
        GS = np.where(missing, 0.0, GS)
    K = Ainv @ GS
    C = G[:, j] - GS.T @ K[:, j]
    Cd = np.diag(G) - np.einsum("ki,ki->i", GS, K)
    if mask_missing:
        bad = missing.any(axis=0)
        C[bad] = np.nan
        Cd[bad] = np.nan
    return Ainv, K, C, Cd


def added_residuals(R: float, C: np.ndarray, Cd: np.ndarray, floor: float) -> np.ndarray:
    """``RSS_j(S ∪ {i})`` for every ``i`` from the fit on ``S`` (:func:`fit_on_parents`):
    ``R − C_i² / Cd_i``, floored (the caller masks the nodes where it does not apply and chooses
    how division warnings are handled)."""
    return np.maximum(R - C**2 / Cd, floor)


def family_rss(G: np.ndarray, j: int, parents, form: str = "solve") -> float:
    """``RSS_j(S) = G_jj − G_jS G_SS⁻¹ G_Sj``, the per-row residual variance of ``j`` on the
    ``parents`` ``S``, floored at :func:`residual_floor`.

    ``form="solve"``: one solve; ``inf`` when ``G_SS`` is singular or an entry is missing.
    ``form="inverse"``: ``C_j`` of :func:`fit_on_parents` (pseudo-inverse where singular), the
    residual variance of the noise-aware search's statistics."""
    _check_form(form, _RSS_FORMS)
    idx = sorted(parents)
    if form == "inverse":
        C = fit_on_parents(G, j, np.asarray(idx, dtype=int), singular="pinv")[2]
        return max(float(C[j]), residual_floor(G, j))
    if not idx:
        r = float(G[j, j])
    else:
        A = G[np.ix_(idx, idx)]
        b = G[idx, j]
        try:
            r = float(G[j, j] - b @ np.linalg.solve(A, b))
        except np.linalg.LinAlgError:
            return np.inf
    if not np.isfinite(r):
        return np.inf
    return max(r, residual_floor(G, j))


def dropped_residuals(G: np.ndarray, j: int, S: np.ndarray, R: float) -> np.ndarray:
    """The residual variance of ``j`` on ``S`` without ``S_k``, for every ``k``: ``R + b_k² / (A⁻¹)_kk``
    (``A = G_SS``, ``b = A⁻¹ G_Sj``; the residual grows by the squared coefficient over its
    variance factor), each refitted (``family_rss(form="inverse")``) where ``A`` is singular."""
    if not S.size:
        return np.zeros(0)
    floor = residual_floor(G, j)
    try:
        Ainv = np.linalg.inv(G[np.ix_(S, S)])
    except np.linalg.LinAlgError:
        Ainv = None
    dg = None if Ainv is None else np.diag(Ainv)
    if dg is None or not np.all(dg > 0) or not np.all(np.isfinite(Ainv)):
        return np.array([family_rss(G, j, np.delete(S, k), form="inverse") for k in range(S.size)])
    b = Ainv @ G[S, j]
    C = float(G[j, j]) - float(G[S, j] @ b)
    return np.maximum(C + b**2 / dg, floor)


def least_squares_weights(G: np.ndarray, E: np.ndarray, form: str = "solve") -> np.ndarray:
    """Least-squares weights of every family of the DAG ``E`` from the second moments ``G``.
    ``form="solve"``: ``numpy.linalg.solve``, least squares where ``G_SS`` is singular;
    ``form="lstsq"``: ``numpy.linalg.lstsq`` for every family."""
    _check_form(form, _WEIGHT_FORMS)
    d = G.shape[0]
    W = np.zeros((d, d))
    for j in range(d):
        S = np.flatnonzero(E[:, j])
        if not S.size:
            continue
        if form == "solve":
            try:
                W[S, j] = np.linalg.solve(G[np.ix_(S, S)], G[S, j])
                continue
            except np.linalg.LinAlgError:
                pass
        W[S, j] = np.linalg.lstsq(G[np.ix_(S, S)], G[S, j], rcond=None)[0]
    return W


def ebic_penalty(n: float, d: int, units: str = "likelihood") -> float:
    """The extended BIC's level for one edge (Chen & Chen 2008; Foygel & Drton 2010, γ = 1/2 for
    graphs). With every one of the ~d² pairs open to an addition, the plain BIC lets through about
    ``d²·P(χ²₁ > log n)`` spurious edges (≈ 20 at d = 200, n = 40 000); the ``log d`` term keeps
    that below one.

    ``units="likelihood"``: the penalty per edge on the log-likelihood, ``log(n)/2 + log d``;
    ``units="statistic"``: ``κ = log n + 2 log d`` with ``n`` at least 2, the level an edge's squared
    test statistic must exceed: twice the penalty. Doubling is exact in binary floating point, so
    ``2·fl(log(n)/2 + log d)`` has the bits of ``fl(log n + 2 log d)``."""
    if units == "statistic":
        return 2.0 * ebic_penalty(max(n, 2.0), d)
    if units != "likelihood":
        raise ValueError(f"units must be 'likelihood' or 'statistic', got {units!r}")
    return float(np.log(n) / 2.0 + np.log(max(d, 2)))


def bic_of(G: np.ndarray, n: float, E: np.ndarray, score: str, penalty: Optional[float] = None,
           form: str = "solve") -> float:
    """BIC (lower is better) of the DAG ``E`` as a Gaussian model, variances included:
    ``equal``: ``n·d/2·log(Σ RSS_j / d) + log(n)/2·(|E| + 1)``;
    ``node``: ``n/2·Σ log RSS_j + log(n)/2·(|E| + d)``. Comparable across the two models.
    ``penalty`` replaces ``log(n)/2`` for the edges (the variances keep the BIC's). ``form``: how
    each ``RSS_j`` is computed (:func:`family_rss`; ``"inverse"`` also keeps it at least ``1e-300``)."""
    _check_form(form, _RSS_FORMS)
    d = G.shape[0]
    if form == "solve":
        R = np.array([family_rss(G, j, np.flatnonzero(E[:, j])) for j in range(d)])
    else:
        R = np.array([max(family_rss(G, j, np.flatnonzero(E[:, j]), form="inverse"), 1e-300) for j in range(d)])
    k = float(E.sum())
    pen = np.log(n) / 2.0 if penalty is None else float(penalty)
    if score == "equal":
        return n * d / 2.0 * np.log(R.sum() / d) + pen * k + np.log(n) / 2.0
    return n / 2.0 * np.log(R).sum() + pen * k + np.log(n) / 2.0 * d
