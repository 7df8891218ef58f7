"""Proximal greedy coordinate descent (PGCD), the local solver of Fed-Sparse-BNSL.

Participant ``p`` minimises over ``B`` (diagonal fixed at 0; ``B[i, j]`` is the edge ``i → j``)

    f_p(B) + λ‖B‖₁,   f_p(B) = ½ tr((I − B)ᵀ S (I − B)) + ⟨β, B − W⟩ + ρ₂/2 ‖B − W‖²_F

with ``S = X_pᵀX_p / n`` (n = the public total number of rows). The gradient of the smooth part is
``G = S (B − I) + β + ρ₂ (B − W)`` and its exact coordinate curvature is ``M_ij = S_ii + ρ₂``.
For every off-diagonal coordinate the candidate and its score are

    B̃_ij = ST_{λ/M_ij}(B_ij − G_ij / M_ij),   score_ij = √M_ij · |B̃_ij − B_ij|

and each step applies the best-scoring candidate (the exact minimiser along that coordinate; the
objective falls by at least score²/2). Changing ``B_mn`` by δ changes only column ``n`` of ``G``:
``G[:, n] += δ (S[:, m] + ρ₂ e_m)``, so a step costs O(d) with per-column maxima of the scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

__all__ = [
    "soft_threshold",
    "times_sparse",
    "smooth_gradient",
    "local_objective",
    "PGCDResult",
    "pgcd",
]


def soft_threshold(x, tau):
    """``ST_τ(x) = sign(x) · max(|x| − τ, 0)`` elementwise."""
    return np.sign(x) * np.maximum(np.abs(x) - tau, 0.0)


def times_sparse(S, B):
    """``S @ B`` for a symmetric ``S``; with ``B`` sparse (few non-zeros) in O(d · nnz(B)) through
    ``(Bᵀ S)ᵀ`` on a CSR copy of ``Bᵀ`` instead of the dense O(d³) product."""
    d = B.shape[0]
    nnz = int(np.count_nonzero(B))
    if d < 64 or nnz * 8 > d * d:
        return S @ B
    r, c = np.nonzero(B.T)
    Bt = scipy.sparse.csr_matrix((B.T[r, c], (r, c)), shape=(d, d))
    return np.ascontiguousarray((Bt @ S).T)


def smooth_gradient(S, B, beta, W, rho2):
    """Full gradient ``G = S (B − I) + β + ρ₂ (B − W)`` of the smooth part (``S`` symmetric; O(d · nnz(B))
    for a sparse ``B``)."""
    return times_sparse(S, B) - S + beta + rho2 * (B - W)


def local_objective(S, B, beta, W, rho2, lam) -> float:
    """``f_p(B) + λ‖B‖₁`` (see the module docstring), with
    ``tr((I − B)ᵀ S (I − B)) = tr S − 2 ⟨S, B⟩ + ⟨B, S B⟩`` (``S`` symmetric)."""
    D = B - W
    SB = times_sparse(S, B)
    quad = float(np.trace(S)) - 2.0 * float(np.vdot(S, B)) + float(np.vdot(B, SB))
    return float(0.5 * quad + np.vdot(beta, D) + 0.5 * rho2 * np.vdot(D, D) + lam * np.abs(B).sum())


@dataclass
class PGCDResult:
    B: np.ndarray
    changed: np.ndarray  # boolean d × d mask of coordinates whose value differs from the start
    steps: int
    max_step: float  # largest remaining candidate step |B̃ − B| when the solver stopped
    G: np.ndarray  # the incrementally maintained gradient at the returned B


def pgcd(
    S, B, beta, W, rho2: float, lam: float, max_steps: int, tol: float = 1e-8, forbidden=None, required=None
) -> PGCDResult:
    """Run at most ``max_steps`` PGCD steps from ``B`` (not modified); stop early when every
    candidate step ``|B̃_ij − B_ij|`` is below ``tol``.

    Prior knowledge (d × d bool masks): a ``forbidden`` coordinate is never selected (its candidate
    step is held at 0); a ``required`` one carries no ℓ₁ penalty (its soft threshold is 0)."""
    d = S.shape[0]
    B = np.array(B, dtype=float, copy=True)
    G = smooth_gradient(S, B, beta, W, rho2)
    m_row = np.diag(S) + rho2  # M_ij = S_ii + ρ₂ depends on the row only
    inv_m = 1.0 / m_row
    sqrt_m = np.sqrt(m_row)
    thr = lam * inv_m
    # per coordinate, transposed like ``stept`` (row n = column n): only with required edges
    thr_t = None if required is None else np.ascontiguousarray(np.where(np.asarray(required, bool), 0.0, thr[:, None]).T)
    off_t = None if forbidden is None else np.ascontiguousarray(np.asarray(forbidden, bool).T)
    # candidate steps and scores for every coordinate, diagonal excluded; kept transposed (row n
    # of ``stept`` is column n), so that a step touches contiguous rows only
    stept = np.ascontiguousarray(
        (soft_threshold(B - G * inv_m[:, None], thr[:, None] if thr_t is None else thr_t.T) - B).T
    )
    np.fill_diagonal(stept, 0.0)
    if off_t is not None:
        stept[off_t] = 0.0
    score = np.abs(stept) * sqrt_m[None, :]
    col_arg = np.argmax(score, axis=1)
    col_max = score[np.arange(d), col_arg]
    # every remaining step is below tol once the best score is below tol · min √M
    stop_score = tol * float(sqrt_m.min())
    steps = 0
    S_cols = np.ascontiguousarray(S.T)  # row m of S_cols is column m of S
    Bt = np.ascontiguousarray(B.T)  # work on columns as contiguous rows
    Gt = np.ascontiguousarray(G.T)
    neg_thr = -thr
    t = np.empty(d)
    z = np.empty(d)
    # the candidate of a coordinate: ST_τ(b − g/M) − b = −g/M − clip(b − g/M, −τ, τ)
    mul, sub, add, maximum, minimum, absolute = np.multiply, np.subtract, np.add, np.maximum, np.minimum, np.absolute
    col_max_argmax, z_argmax = col_max.argmax, z.argmax  # the methods: no dispatch wrapper per call
    for _ in range(max_steps):
        n = int(col_max_argmax())
        if col_max[n] <= stop_score:
            break
        m = int(col_arg[n])
        bcol = Bt[n]
        gcol = Gt[n]
        new = stept[n]
        delta = new[m]
        bcol[m] += delta
        mul(S_cols[m], delta, out=t)
        add(gcol, t, out=gcol)
        gcol[m] += rho2 * delta
        steps += 1
        # refresh column n's candidates
        mul(gcol, inv_m, out=t)
        sub(bcol, t, out=z)
        if thr_t is None:
            maximum(z, neg_thr, out=z)
            minimum(z, thr, out=z)
        else:
            maximum(z, -thr_t[n], out=z)
            minimum(z, thr_t[n], out=z)
        add(t, z, out=t)
        np.negative(t, out=new)
        new[n] = 0.0
        if off_t is not None:
            new[off_t[n]] = 0.0
        absolute(new, out=z)
        mul(z, sqrt_m, out=z)
        k = int(z_argmax())
        col_arg[n] = k
        col_max[n] = z[k]
    B_new = Bt.T.copy()
    changed = B_new != B
    B = B_new
    return PGCDResult(B, changed, steps, float(np.max(np.abs(stept))) if d > 1 else 0.0, Gt.T.copy())
