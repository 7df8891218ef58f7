"""Ground statistics: column statistics, sum-shaped shares and their sums, scale checks and the
quantisation of standardised values. Arrays in, arrays out; no messages, no plan.

Every value the coordinator pools is a plain sum of per-participant shares
(:func:`sum_shares`, added left to right so that a coordinator and a single site pooling the same
blocks get the same bits). Orientation: ``W[i, j]`` is the edge ``i → j``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from bnsl_cli.errors import InputDataError

__all__ = [
    "SCALE_WARN_RATIO",
    "QUANTUM_BITS",
    "column_stats",
    "variance_share",
    "check_scales",
    "scale_warning",
    "exact_scale_warning",
    "quantise",
    "to_original_units",
    "upper_triangle",
    "from_upper_triangle",
    "mean_share",
    "scatter_share",
    "sum_shares",
    "pooled_moments_of_blocks",
    "standardized",
]

#: Columns whose standard deviations differ by more than this factor trigger the scale warning.
SCALE_WARN_RATIO = 100.0

#: Standardised values are rounded to multiples of 2^-QUANTUM_BITS (6e-8, far below any sampling
#: error). Rescaling a column changes the standardised values only in their last bits (about 1e-16
#: relative), and the ADMM path can amplify such differences near ties (an edge orientation flipped
#: at d = 8); after the rounding the participants' inputs are identical except for a value that lies
#: within rounding error of a multiple of the quantum (probability about 1e-9 per value).
QUANTUM_BITS = 24


# ----------------------------------------------------------------------------------------------
# column statistics and scales
# ----------------------------------------------------------------------------------------------


def column_stats(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, Σ x_j, Σ (x_j − x̄_j)²)`` of one participant's rows."""
    X = np.asarray(X, dtype=float)
    n = X.shape[0]
    sums = X.sum(axis=0)
    dev = X - sums[None, :] / n
    return n, sums, np.einsum("ij,ij->j", dev, dev)


def variance_share(rows: int, sums: np.ndarray, m2: np.ndarray, mean: np.ndarray, n_total: int) -> np.ndarray:
    """One participant's share ``[m2 + rows (sums/rows − mean)²] / n`` of the pooled variances about
    the pooled ``mean`` (``m2`` its sums of squares about its own mean)."""
    off = np.asarray(sums, float) / float(rows) - np.asarray(mean, float)
    return (np.asarray(m2, float) + float(rows) * off * off) / float(n_total)


def check_scales(mean: np.ndarray, sd: np.ndarray, names: Sequence[str], where: str = "--standardize") -> None:
    """Raise :class:`InputDataError` when a column cannot be standardised (constant or non-finite)."""
    bad = np.flatnonzero(~(np.isfinite(sd) & np.isfinite(mean)) | ~(sd > 0))
    if bad.size:
        cols = ", ".join(repr(str(names[j])) for j in bad[:5]) + (" …" if bad.size > 5 else "")
        raise InputDataError(
            f"{where}: column(s) {cols} have no spread (standard deviation 0 or not finite) over the pooled rows; "
            "drop them from the shards"
        )


def scale_warning(sd: np.ndarray, names: Sequence[str]) -> Optional[str]:
    """The one-line warning when the columns' spreads differ by more than :data:`SCALE_WARN_RATIO`."""
    sd = np.asarray(sd, dtype=float)
    ok = np.isfinite(sd) & (sd > 0)
    if ok.sum() < 2:
        return None
    s = sd[ok]
    ratio = float(s.max() / s.min())
    if not ratio > SCALE_WARN_RATIO:
        return None
    idx = np.flatnonzero(ok)
    hi, lo = names[idx[int(np.argmax(s))]], names[idx[int(np.argmin(s))]]
    return (
        f"the columns' spreads differ {ratio:.3g}-fold ({hi!s} sd {s.max():.3g}, {lo!s} sd {s.min():.3g}); "
        "the graph depends on their units; --standardize makes it unit-free, but on simulated data whose "
        "units carry information it was worse about as often as better — use it when the units are arbitrary, "
        "else compare both"
    )


def exact_scale_warning(tables, names: Sequence[str]) -> Optional[str]:
    """:func:`scale_warning` from the pooled spreads of the rows in ``tables`` (arrays or objects
    with ``X``) — for whoever holds the rows (bnsl learn, a site of bnsl join) in a private run,
    where the coordinator's spreads are noisy. Computed and shown locally, it releases nothing."""
    Xs = [np.asarray(getattr(t, "X", t), dtype=float) for t in tables]
    n = np.array([X.shape[0] for X in Xs], dtype=float)
    if n.sum() < 2:
        return None
    shares = [column_stats(X) for X in Xs]
    mean = np.sum([s for _, s, _ in shares], axis=0) / n.sum()
    var = sum(variance_share(k, s, m, mean, int(n.sum())) for k, s, m in shares)
    return scale_warning(np.sqrt(np.maximum(var, 0.0)), names)


def quantise(Z: np.ndarray) -> np.ndarray:
    """``Z`` rounded to the nearest multiple of ``2**-QUANTUM_BITS`` (exact in float64)."""
    q = float(2 ** QUANTUM_BITS)
    return np.round(Z * q) / q


def to_original_units(W: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """``W_orig[i, j] = W_std[i, j] · σ_j / σ_i`` (edge i → j)."""
    sd = np.asarray(sd, dtype=float)
    return np.asarray(W, dtype=float) * (sd[None, :] / sd[:, None])


# ----------------------------------------------------------------------------------------------
# second moments as sum-shaped shares
# ----------------------------------------------------------------------------------------------


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


def mean_share(X: np.ndarray, n_total: int) -> np.ndarray:
    """A block's share ``Σ_rows x / n`` of the pooled column means (``n`` the total row count)."""
    return np.asarray(X, dtype=float).sum(axis=0) / float(n_total)


def scatter_share(X: np.ndarray, centre: np.ndarray, n_total: int) -> np.ndarray:
    """A block's share of the pooled centred second moments about ``centre``: the upper triangle of
    ``Σ_rows (x − centre)(x − centre)ᵀ / n``."""
    Xc = np.asarray(X, dtype=float) - np.asarray(centre, dtype=float)[None, :]
    return upper_triangle(Xc.T @ Xc) / float(n_total)


def sum_shares(shares) -> np.ndarray:
    """``Σ_p shares[p]``, added left to right (the coordinator and :func:`pooled_moments_of_blocks`
    add in the same order, so both get the same bits)."""
    it = iter(shares)
    total = np.array(next(it), dtype=float)
    for v in it:
        total = total + v
    return total


def pooled_moments_of_blocks(X: np.ndarray, rows) -> np.ndarray:
    """The pooled ``S`` of ``X`` whose consecutive row blocks have sizes ``rows``: what fed-moments
    computes from those blocks' shares (the same functions, the same order of addition)."""
    X = np.asarray(X, dtype=float)
    cuts = np.cumsum([0] + [int(r) for r in rows])
    if cuts[-1] != X.shape[0]:
        raise ValueError(f"blocks of {int(cuts[-1])} rows given for {X.shape[0]} rows")
    n = X.shape[0]
    blocks = [X[cuts[k] : cuts[k + 1]] for k in range(len(rows))]
    mu = sum_shares(mean_share(B, n) for B in blocks)
    return from_upper_triangle(sum_shares(scatter_share(B, mu, n) for B in blocks), X.shape[1])


def standardized(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(D⁻¹ S D⁻¹, sd)`` with ``sd = √diag S`` (the correlation matrix), its entries rounded to
    multiples of ``2**-24`` (:func:`quantise`): a change of a column's units moves them only in their
    last bits, which NOTEARS' solver could otherwise amplify into a different graph."""
    sd = np.sqrt(np.maximum(np.diag(S), 0.0))
    return quantise(S / np.outer(sd, sd)), sd


#: A relative eigenvalue floor for :func:`project_psd` that leaves a positive definite matrix (a
#: Cholesky factor exists, a least-squares loss on it is bounded below).
PSD_FLOOR = 1e-9


def project_psd(S: np.ndarray, floor: float = 0.0) -> np.ndarray:
    """Nearest positive semi-definite matrix in Frobenius norm: ``V max(L, f) V^T`` for ``sym(S) = V L V^T``,
    with ``f = floor × max(L, 0)`` (``floor`` > 0: every eigenvalue at least that share of the largest,
    a positive definite result).

    ``S`` is symmetrised first, ``(S + S^T) / 2``; the result is exactly symmetric."""
    A = np.asarray(S, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"project_psd needs a square matrix, got shape {A.shape}")
    A = 0.5 * (A + A.T)
    w, V = np.linalg.eigh(A)
    out = (V * np.maximum(w, floor * max(float(w.max()), 0.0) if floor else 0.0)) @ V.T
    return 0.5 * (out + out.T)
