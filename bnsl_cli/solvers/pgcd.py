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

import threading
from dataclasses import dataclass

import numpy as np
import scipy.sparse

try:  # the ufunc behind np.clip (np.clip itself adds a Python wrapper's cost to every call); a private
    # name of numpy's, so where it is missing the two public ufuncs do the same (one call more per step)
    from numpy._core.umath import clip as _clip
except ImportError:  # pragma: no cover - another numpy layout

    def _clip(z, lo, hi, out):
        np.maximum(z, lo, out)
        return np.minimum(out, hi, out)

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
    ``(Bᵀ S)ᵀ`` on a CSR copy of ``Bᵀ`` instead of the dense O(d³) product.

    Column ``j`` of the sparse product is ``Σ_i B_ij S[i, :]``, accumulated from 0 over ascending ``i``
    (scipy's CSR-times-dense kernel, row ``j`` of ``Bᵀ``)."""
    return np.ascontiguousarray(_times_sparse_t(S, B).T)


def _times_sparse_t(S, B, Bt=None):
    """``(S @ B)ᵀ`` as :func:`times_sparse` computes it (the same doubles), C-ordered on its sparse path
    (the CSR product comes out transposed); ``Bt``: a C-ordered ``Bᵀ`` the caller holds (else one is
    written into this thread's first scratch buffer)."""
    d = B.shape[0]
    if d < 64:
        return (S @ B).T
    if Bt is None:
        Bt = _scratch(d, 1)[0]
        np.copyto(Bt, B.T)
    # The CSR arrays straight from a C-ordered Bᵀ: its flat non-zeros are row-major, i.e. the rows and
    # column indices sorted (the canonical CSR that a COO → CSR conversion also gives), at a fraction
    # of the cost of ``np.nonzero`` on the strided view ``B.T`` and of the COO route; the non-zeros of
    # a float array are those of ``!= 0`` (NaN included, ±0 not), found faster on the mask.
    nz = Bt != 0
    flat = np.flatnonzero(nz)
    if flat.size * 8 > d * d:
        return (S @ B).T
    indptr = np.zeros(d + 1, dtype=flat.dtype)
    np.cumsum(np.count_nonzero(nz, axis=1), out=indptr[1:])
    csr = scipy.sparse.csr_matrix((Bt.ravel()[flat], flat % d, indptr), shape=(d, d))
    return csr @ S


def smooth_gradient(S, B, beta, W, rho2, SB=None):
    """Full gradient ``G = S (B − I) + β + ρ₂ (B − W)`` of the smooth part (``S`` symmetric; O(d · nnz(B))
    for a sparse ``B``). ``SB``: ``times_sparse(S, B)`` when the caller already holds it."""
    if SB is None:
        SB = times_sparse(S, B)
    return SB - S + beta + rho2 * (B - W)


def local_objective(S, B, beta, W, rho2, lam, SB=None) -> float:
    """``f_p(B) + λ‖B‖₁`` (see the module docstring), with
    ``tr((I − B)ᵀ S (I − B)) = tr S − 2 ⟨S, B⟩ + ⟨B, S B⟩`` (``S`` symmetric). ``SB``:
    ``times_sparse(S, B)`` when the caller already holds it."""
    if SB is None:
        SB = times_sparse(S, B)
    # D = B − W and |B| in this thread's scratch buffers (see :func:`_scratch`); ``vdot`` flattens in C
    # order whatever the layout, a sum follows the layout, so |B| goes there only when B is C-ordered
    d = B.shape[0]
    D, absB = _scratch(d)[3:5] if d <= KEEP_SCRATCH_UPTO else _scratch(d, 2)
    np.subtract(B, W, out=D)
    l1 = np.absolute(B, out=absB).sum() if B.flags.c_contiguous and B.dtype == absB.dtype else np.abs(B).sum()
    quad = float(np.trace(S)) - 2.0 * float(np.vdot(S, B)) + float(np.vdot(B, SB))
    return float(0.5 * quad + np.vdot(beta, D) + 0.5 * rho2 * np.vdot(D, D) + lam * l1)


_work = threading.local()


#: Scratch buffers are kept between calls up to this d (5 · d² floats: 40 MB at d = 1,000); above it
#: they are made per call, so that a process that once learned a wide graph does not hold them for good.
KEEP_SCRATCH_UPTO = 1000


def _scratch(d: int, count: int = 5) -> list:
    """Five d × d float buffers of this thread, kept from one call to the next (the sites of a run
    share d) up to :data:`KEEP_SCRATCH_UPTO`, and the lists of the first four's rows: a fresh d × d array
    costs its page faults again, as much as the arithmetic on it. Nothing this module returns is one of
    them or a view of one. ``count``: how many of them the caller uses (above the limit only those are made)."""
    if d > KEEP_SCRATCH_UPTO:
        return [np.empty((d, d)) for _ in range(count)]
    bufs = getattr(_work, "bufs", None)
    if bufs is None or bufs[0].shape != (d, d):
        bufs = [np.empty((d, d)) for _ in range(5)]
        _work.bufs = bufs
        _work.rows = [list(b) for b in bufs[:4]]
    return bufs


def _scratch_rows(bufs) -> list:
    """The row views of the first four of ``bufs`` (:func:`_scratch`), made once while they are kept."""
    if getattr(_work, "bufs", None) is bufs:
        return _work.rows
    return [list(b) for b in bufs[:4]]


@dataclass
class PGCDResult:
    B: np.ndarray
    changed: np.ndarray  # boolean d × d mask of coordinates whose value differs from the start
    steps: int
    max_step: float  # largest remaining candidate step |B̃ − B| when the solver stopped
    G: np.ndarray  # the incrementally maintained gradient at the returned B


def pgcd(
    S, B, beta, W, rho2: float, lam: float, max_steps: int, tol: float = 1e-8, forbidden=None, required=None,
    SB=None,
) -> PGCDResult:
    """Run at most ``max_steps`` PGCD steps from ``B`` (not modified); stop early when every
    candidate step ``|B̃_ij − B_ij|`` is below ``tol``.

    Prior knowledge (d × d bool masks): a ``forbidden`` coordinate is never selected (its candidate
    step is held at 0); a ``required`` one carries no ℓ₁ penalty (its soft threshold is 0).
    ``SB``: ``times_sparse(S, B)`` when the caller already holds it (bit for bit: it enters ``G``)."""
    d = S.shape[0]
    B = np.asarray(B, dtype=float)
    # The set-up works on transposed (column-major) copies, so that every row of Bt, Gt and stept is a
    # column of B, G and the candidates, in this thread's scratch buffers, written in place: a fresh
    # d × d array costs its page faults again, as much as the arithmetic on it. Elementwise operations
    # do not depend on the layout, so every value is the one of the plain expressions in the comments.
    bufs = _scratch(d)
    Bt, S_cols, Gt, X, A = bufs
    np.copyto(Bt, B.T)
    np.copyto(S_cols, S.T)  # row m of S_cols is column m of S
    SB_t = _times_sparse_t(S, B, Bt) if SB is None else np.asarray(SB).T
    # G = S B − S + β + ρ₂ (B − W), evaluated left to right
    np.subtract(SB_t, S_cols, out=Gt)
    np.add(Gt, beta.T, out=Gt)
    np.subtract(Bt, W.T, out=X)
    np.multiply(X, rho2, out=X)
    np.add(Gt, X, out=Gt)
    m_row = np.diag(S) + rho2  # M_ij = S_ii + ρ₂ depends on the row only
    inv_m = 1.0 / m_row
    sqrt_m = np.sqrt(m_row)
    thr = lam * inv_m
    # per coordinate, transposed like ``stept`` (row n = column n): only with required edges
    thr_t = None if required is None else np.ascontiguousarray(np.where(np.asarray(required, bool), 0.0, thr[:, None]).T)
    off_t = None if forbidden is None else np.ascontiguousarray(np.asarray(forbidden, bool).T)
    # candidate steps and scores for every coordinate, diagonal excluded; kept transposed (row n
    # of ``stept`` is column n), so that a step touches contiguous rows only:
    # stept = ST_thr(x) − B with x = B − G / M, ST_τ(x) = sign(x) · max(|x| − τ, 0) (:func:`soft_threshold`)
    stept = X
    np.multiply(Gt, inv_m, out=stept)
    np.subtract(Bt, stept, out=stept)
    np.absolute(stept, out=A)
    np.subtract(A, thr if thr_t is None else thr_t, out=A)
    np.maximum(A, 0.0, out=A)
    np.sign(stept, out=stept)
    np.multiply(stept, A, out=stept)
    np.subtract(stept, Bt, out=stept)
    np.fill_diagonal(stept, 0.0)
    if off_t is not None:
        stept[off_t] = 0.0
    score = np.absolute(stept, out=A)
    np.multiply(score, sqrt_m, out=score)
    col_arg = np.argmax(score, axis=1).tolist()  # a list: read and written once per step
    col_max = score[np.arange(d), col_arg]
    # every remaining step is below tol once the best score is below tol · min √M
    stop_score = tol * float(sqrt_m.min())
    steps = 0
    # The loop is ten numpy calls on length-d rows per step, so their fixed cost is the running
    # time: the rows are taken from lists of views made once (no view object per step), the ufuncs are
    # called with a positional ``out`` and a 0-d array for the scalar step (both cheaper to dispatch),
    # and the clip of the candidate is one ufunc.
    B_rows, S_rows, G_rows, step_rows = _scratch_rows(bufs)
    if thr_t is None:
        lo_rows, hi_rows = [-thr] * d, [thr] * d
    else:
        lo_rows, hi_rows = list(-thr_t), list(thr_t)
    off_rows = None if off_t is None else list(off_t)
    neg_inv_m = -inv_m
    t = np.empty(d)
    z = np.empty(d)
    dz = np.empty(())
    mul, add, sub, absolute = np.multiply, np.add, np.subtract, np.absolute
    col_max_argmax, z_argmax = col_max.argmax, z.argmax  # the methods: no dispatch wrapper per call
    for _ in range(max_steps):
        n = int(col_max_argmax())
        if col_max[n] <= stop_score:
            break
        m = col_arg[n]
        bcol = B_rows[n]
        gcol = G_rows[n]
        new = step_rows[n]
        delta = new[m]
        bcol[m] += delta
        dz[()] = delta
        mul(S_rows[m], dz, t)
        add(gcol, t, gcol)
        gcol[m] += rho2 * delta
        steps += 1
        # refresh column n's candidates: ST_τ(b − g/M) − b = −g/M − clip(b − g/M, −τ, τ), here as
        # t − clip(b + t, −τ, τ) with t = g · (−1/M): negation is exact and round-to-nearest symmetric,
        # so every non-zero value is the same double (a zero may change sign; its score is 0 either way)
        mul(gcol, neg_inv_m, t)
        add(bcol, t, z)
        _clip(z, lo_rows[n], hi_rows[n], z)
        sub(t, z, new)
        new[n] = 0.0
        if off_rows is not None:
            new[off_rows[n]] = 0.0
        absolute(new, z)
        mul(z, sqrt_m, z)
        k = int(z_argmax())
        col_arg[n] = k
        col_max[n] = z[k]
    B_new = Bt.T.copy()
    max_step = float(np.absolute(stept, out=A).max()) if d > 1 else 0.0
    return PGCDResult(B_new, B_new != B, steps, max_step, Gt.T.copy())
