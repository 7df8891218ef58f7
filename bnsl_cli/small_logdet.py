"""Log-det acyclicity on cyclic blocks of at most :data:`BATCHED_UPTO` nodes without a LAPACK call per
block (:class:`bnsl_cli.numerics.BlockAcyclicity` uses it): the LU factorisation and inverse of ``sI − A``
by the operations OpenBLAS's ``dgetrf``/``dtrtri`` and LAPACK's ``dgetri`` perform for these sizes, in
their order, so the results are the bits of the per-block LAPACK path (on OpenBLAS; to rounding on any
BLAS) — many blocks of one size as one array batch (:func:`logdet_small`), a few one by one on Python
floats (:func:`lu_inverse_small`, :func:`lu_inverse_2`)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BATCHED_UPTO", "BATCH_FROM", "logdet_small", "lu_inverse_2", "lu_inverse_small"]


#: Cyclic blocks of at most this many nodes: log-det blocks evaluated without a LAPACK call per
#: block (:func:`logdet_small`, :func:`lu_inverse_small`). From 5 rows on, OpenBLAS's ``dgemv``
#: kernels sum with fused multiply-adds in an order NumPy does not reproduce (measured), so larger
#: blocks keep the LAPACK calls and their bits.
BATCHED_UPTO = 4

_SFMIN = float(np.finfo(float).tiny)  # LAPACK's dlamch("S") in double precision

#: Batches of fewer blocks than this (by block size) go block by block on Python floats
#: (:func:`lu_inverse_small`): the array version's fixed cost of some hundred array calls pays
#: only from about this many blocks (measured break-even, 2-core machine: 2 nodes ≈ 40 blocks,
#: 3 and 4 nodes ≈ 10–14).
BATCH_FROM = {2: 40, 3: 12, 4: 12}


def _seq_dot(xs: list, ys: list):
    """``Σ_k xs[k] ys[k]`` summed left to right from the first product (no fused multiply-add)."""
    t = xs[0] * ys[0]
    for x, y in zip(xs[1:], ys[1:]):
        t = t + x * y
    return t


def _swap_rows(vec: list, i: int, to: np.ndarray) -> None:
    """Exchange ``vec[i]`` and ``vec[to]`` in place, per batch member (``to ≥ i`` an index array)."""
    for r in range(i + 1, len(vec)):
        m = to == r
        if m.any():
            vec[i], vec[r] = np.where(m, vec[r], vec[i]), np.where(m, vec[i], vec[r])


def logdet_small(A: np.ndarray, s: float):
    """:func:`logdet_core` on ``k`` blocks of ``n ≤ 4`` nodes at once: ``A`` is ``(k, n, n)``; returns
    ``(h, Z, redo)`` with ``h[b] = −log det(sI − A_b) + n log s`` (``inf`` outside the domain),
    ``Z[b] = (sI − A_b)⁻¹`` as ``(k, n·n)`` rows (row-major) and ``redo[b]`` true where block ``b``
    must be evaluated by :func:`logdet_core` instead (a non-finite entry, or a pivot below LAPACK's
    safe minimum, where ``dgetf2`` divides instead of multiplying by the reciprocal).

    The operations are those of OpenBLAS's ``dgetrf`` (left-looking ``getf2``: earlier interchanges
    on column j, ``b_i −= L[i, :i]·b[:i]``, ``b[j:] −= L[j:, :j] b[:j]``, the first largest pivot,
    rows scaled by its reciprocal), ``dtrtri`` (``trti2``: ``u_jj ← 1/u_jj``, the column above it
    multiplied by the inverted leading triangle, then by ``−u_jj``) and LAPACK's unblocked
    ``dgetri`` (``Z[:, j] −= Z[:, j+1:] L[j+1:, j]``, then the column interchanges), each sum
    left to right without fused multiply-add — on a 4-row ``dgemv`` in the column groups (2, 1) of
    its kernel. For these sizes the results are the same bits as the LAPACK calls (tested against
    them); the per-block domain test is :func:`logdet_core`'s."""
    k, n, _ = A.shape
    a = [[(s - A[:, r, c]) if r == c else -A[:, r, c] for c in range(n)] for r in range(n)]
    redo = ~np.isfinite(A).reshape(k, -1).all(axis=1)
    piv = []
    with np.errstate(all="ignore"):
        # LU with partial pivoting, column by column
        for j in range(n):
            b = [a[r][j] for r in range(n)]
            for i in range(j):
                _swap_rows(b, i, piv[i])
            for i in range(1, j):
                b[i] = b[i] - _seq_dot([a[i][q] for q in range(i)], b[:i])
            if j:
                for r in range(j, n):
                    b[r] = b[r] - _seq_dot([a[r][q] for q in range(j)], b[:j])
            jp = np.full(k, j)
            best = np.abs(b[j])
            for r in range(j + 1, n):
                mag = np.abs(b[r])
                bigger = mag > best
                jp = np.where(bigger, r, jp)
                best = np.where(bigger, mag, best)
            piv.append(jp)
            _swap_rows(b, j, jp)
            for q in range(j):
                col = [a[r][q] for r in range(n)]
                _swap_rows(col, j, jp)
                for r in range(n):
                    a[r][q] = col[r]
            redo |= ~(np.abs(b[j]) >= _SFMIN)
            recip = 1.0 / b[j]
            for r in range(j + 1, n):
                b[r] = b[r] * recip
            for r in range(n):
                a[r][j] = b[r]
        diag = [a[j][j] for j in range(n)]
        swaps = sum((piv[j] != j).astype(np.int64) for j in range(n))
        negative = sum((x < 0).astype(np.int64) for x in diag)
        logsum = np.log(np.abs(diag[0]))
        for x in diag[1:]:
            logsum = logsum + np.log(np.abs(x))
        h = n * np.log(s) - logsum
        inside = ((swaps + negative) % 2 == 0) & np.isfinite(np.array(diag)).all(axis=0)
        redo |= ~np.isfinite(np.array([a[r][c] for r in range(n) for c in range(n)])).all(axis=0)
        # U⁻¹ in place (trti2, upper, non-unit diagonal)
        for j in range(n):
            ajj = 1.0 / a[j][j]
            a[j][j] = ajj
            x = [a[i][j] for i in range(j)]
            for i in range(j):
                for q in range(i):
                    x[q] = x[q] + x[i] * a[q][i]
                x[i] = x[i] * a[i][i]
            for i in range(j):
                a[i][j] = x[i] * -ajj
        # Z = U⁻¹ L⁻¹ (getri, unblocked), then the column interchanges
        zero = np.zeros(k)
        for j in range(n - 2, -1, -1):
            work = [a[i][j] for i in range(j + 1, n)]
            for i in range(j + 1, n):
                a[i][j] = zero
            groups = [list(range(j + 1, n))]
            if n >= 4:  # OpenBLAS's dgemv_n kernel on 4 rows: 2 columns at a time, then 1
                cols = groups[0]
                groups = [cols[i : i + 2] for i in range(0, len(cols) - 1, 2)] + ([cols[-1:]] if len(cols) % 2 else [])
            for r in range(n):
                y = a[r][j]
                for g in groups:
                    y = y - _seq_dot([a[r][c] for c in g], [work[c - j - 1] for c in g])
                a[r][j] = y
        for j in range(n - 2, -1, -1):
            for r in range(n):
                _swap_rows(a[r], j, piv[j])
        Z = np.stack([a[r][c] for r in range(n) for c in range(n)], axis=1)
        redo |= ~np.isfinite(Z).all(axis=1)
        lo, hi = Z.min(axis=1), Z.max(axis=1)
        inside &= ~(lo < -1e-10 * np.maximum(hi, -lo))
    h = np.where(inside, np.maximum(h, 0.0), np.inf)
    return h, Z, redo


def lu_inverse_2(s: float, entries: list, values: list):
    """:func:`lu_inverse_small` for ``n = 2`` written out: ``sI − A`` with ``A``'s ``values`` at
    ``entries``. With the larger of the first column as pivot row ``(p₀, p₁)``, the other ``(q₀, q₁)``:
    ``l = q₀ (1/p₀)``, ``u = q₁ − l p₁``; ``U⁻¹ = [[1/p₀, −(p₁/p₀)(1/u)], [0, 1/u]]`` and
    ``Z = U⁻¹ L⁻¹`` with the columns exchanged back after a row exchange."""
    m = [-0.0, -0.0, -0.0, -0.0]  # −A row-major: off the diagonal, zeros of sI − A are −0.0
    m[0] = m[3] = s
    for (r, c), x in zip(entries, values):
        m[2 * r + c] = -x + s if r == c else -x
    swap = abs(m[2]) > abs(m[0])
    if swap:
        p0, p1, q0, q1 = m[2], m[3], m[0], m[1]
    else:
        p0, p1, q0, q1 = m[0], m[1], m[2], m[3]
    if not abs(p0) >= _SFMIN:
        return None
    lo = q0 * (1.0 / p0)
    u = q1 - lo * p1
    if not (abs(u) >= _SFMIN and math.isfinite(p0 + p1 + lo + u)):
        return None
    i0 = 1.0 / p0
    i1 = 1.0 / u
    i01 = (p1 * i0) * -i1
    z00 = i0 - i01 * lo
    z10 = 0.0 - i1 * lo
    z = [i01, z00, i1, z10] if swap else [z00, i01, z10, i1]
    if not math.isfinite(z00 + i01 + z10 + i1):
        return None
    return [p0, u], int(swap), z


def lu_inverse_small(a: list, n: int):
    """:func:`logdet_small`'s factorisation and inverse of one block ``a = sI − A`` (a list of ``n``
    rows of Python floats, overwritten), the same operations in the same order on Python floats
    (IEEE doubles, no fused multiply-add): ``(diag, swaps, Z)`` with the diagonal of U, the number of
    row interchanges and ``Z = (sI − A)⁻¹`` row-major, or ``None`` where :func:`logdet_core` must
    decide (a pivot below the safe minimum or a non-finite factor). Cheaper than the batch for a
    few blocks: no array calls at all."""
    piv = []
    for j in range(n):
        b = [a[r][j] for r in range(n)]
        for i in range(j):
            q = piv[i]
            if q != i:
                b[i], b[q] = b[q], b[i]
        for i in range(1, j):
            row = a[i]
            t = row[0] * b[0]
            for q in range(1, i):
                t = t + row[q] * b[q]
            b[i] = b[i] - t
        if j:
            for r in range(j, n):
                row = a[r]
                t = row[0] * b[0]
                for q in range(1, j):
                    t = t + row[q] * b[q]
                b[r] = b[r] - t
        jp, best = j, abs(b[j])
        for r in range(j + 1, n):
            if abs(b[r]) > best:
                jp, best = r, abs(b[r])
        piv.append(jp)
        if jp != j:
            b[j], b[jp] = b[jp], b[j]
            a[j][:j], a[jp][:j] = a[jp][:j], a[j][:j]
        if not abs(b[j]) >= _SFMIN:
            return None
        recip = 1.0 / b[j]
        for r in range(j + 1, n):
            b[r] = b[r] * recip
        for r in range(n):
            a[r][j] = b[r]
    if not math.isfinite(sum(sum(row) for row in a)):
        return None
    diag = [a[j][j] for j in range(n)]
    for j in range(n):
        ajj = 1.0 / a[j][j]
        a[j][j] = ajj
        x = [a[i][j] for i in range(j)]
        for i in range(j):
            for q in range(i):
                x[q] = x[q] + x[i] * a[q][i]
            x[i] = x[i] * a[i][i]
        for i in range(j):
            a[i][j] = x[i] * -ajj
    for j in range(n - 2, -1, -1):
        work = [a[i][j] for i in range(j + 1, n)]
        for i in range(j + 1, n):
            a[i][j] = 0.0
        cols = list(range(j + 1, n))
        if n >= 4:  # as in logdet_small: the 4-row dgemv kernel takes 2 columns at a time, then 1
            groups = [cols[i : i + 2] for i in range(0, len(cols) - 1, 2)] + ([cols[-1:]] if len(cols) % 2 else [])
        else:
            groups = [cols]
        for r in range(n):
            row = a[r]
            y = row[j]
            for g in groups:
                t = row[g[0]] * work[g[0] - j - 1]
                for c in g[1:]:
                    t = t + row[c] * work[c - j - 1]
                y = y - t
            row[j] = y
    for j in range(n - 2, -1, -1):
        q = piv[j]
        if q != j:
            for row in a:
                row[j], row[q] = row[q], row[j]
    Z = [x for row in a for x in row]
    if not math.isfinite(sum(Z)):
        return None
    swaps = sum(1 for j in range(n) if piv[j] != j)
    return diag, swaps, Z
