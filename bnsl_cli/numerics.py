"""Numerical building blocks: the acyclicity functions h(W), a small L-BFGS, BLAS thread capping.

Two acyclicity functions, both zero exactly when the weighted graph ``W`` (``W[i, j]`` = edge
``i → j``) is acyclic and positive otherwise, with ``A = W ∘ W``:

- ``"expm"`` (NOTEARS, Zheng et al. 2018): ``h(W) = tr(exp(A)) − d``, ``∇h(W) = exp(A)ᵀ ∘ 2W``;
- ``"logdet"`` (DAGMA, Bello et al. 2022): ``h(W) = −log det(sI − A) + d log s``,
  ``∇h(W) = 2 (sI − A)⁻ᵀ ∘ W``, defined while ``sI − A`` is a non-singular M-matrix (spectral
  radius of ``A`` below ``s``); outside that domain it is ``+inf``. One LU factorisation and one
  inverse instead of a Padé approximant with squarings.

Both equal ``Σ_k c_k tr(A^k)`` over closed walks (``1/k!`` and ``1/(k s^k)``), so both split over
the strongly connected components of W's support (:func:`cyclic_blocks`). The W-step evaluates them
through :class:`BlockAcyclicity` on its variables only; on log-det blocks of :data:`SELECTED_FROM`
nodes or more it reads the gradient entries off the triangular inverses of the LU factors instead
of forming the full inverse; log-det blocks of at most :data:`BATCHED_UPTO` nodes (the many 2–4-node
cycles of a sparse consensus) it evaluates without a LAPACK call per block, with the operations of
that call (:func:`logdet_small`), so the values are the same bits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
import warnings
from typing import Iterator

import numpy as np
import scipy.linalg
import scipy.sparse
import scipy.sparse.csgraph
from scipy.linalg import lapack
from threadpoolctl import threadpool_limits

from bnsl_cli.small_logdet import BATCH_FROM, BATCHED_UPTO, logdet_small, lu_inverse_2, lu_inverse_small

__all__ = [
    "ACYCLICITY",
    "acyclicity",
    "logdet_acyclicity",
    "acyclicity_of",
    "lbfgs",
    "LbfgsResult",
    "cyclic_blocks",
    "acyclicity_blocks",
    "BlockAcyclicity",
    "logdet_core",
    "logdet_selected",
    "logdet_small",
    "BATCHED_UPTO",
    "single_blas_thread",
]


def _expm_core(A: np.ndarray):
    """``(h, E)`` with ``E = exp(A)`` and ``h = tr E − d`` (``∇h(W) = 2 Eᵀ ∘ W``); ``(inf, None)``
    when ``exp`` overflows."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            E = scipy.linalg.expm(A)
        except (ValueError, OverflowError, np.linalg.LinAlgError):
            return float("inf"), None
    if not np.isfinite(E).all():
        return float("inf"), None
    return float(np.trace(E)) - A.shape[0], E


def _lu_logdet(A: np.ndarray, s: float, getrf):
    """``(lu, piv, h)``: the LU factors of ``sI − A`` (``A`` overwritten) and ``h = −log det(sI − A)
    + d log s``; ``None`` when the factorisation fails or the determinant is not positive (a
    non-singular M-matrix has det > 0; det = (−1)^(row swaps) Π diag)."""
    d = A.shape[0]
    M = np.negative(A, out=A)
    M.flat[:: d + 1] += s
    lu, piv, info = getrf(M, overwrite_a=True)
    if info != 0:
        return None
    diag = np.diagonal(lu)
    swaps = int(np.count_nonzero(piv != np.arange(d)))
    negative = (swaps + int(np.count_nonzero(diag < 0))) % 2
    if negative or not np.all(np.isfinite(diag)):
        return None
    return lu, piv, d * np.log(s) - float(np.sum(np.log(np.abs(diag))))


def logdet_core(A: np.ndarray, s: float):
    """``(h, Z)`` with ``Z = (sI − A)⁻¹`` and ``h = −log det(sI − A) + d log s`` (``∇h(W) = 2 Zᵀ ∘ W``);
    ``(inf, None)`` outside the domain. ``A`` is overwritten.

    The domain test: a Z-matrix is a non-singular M-matrix exactly when it is invertible with an
    entrywise non-negative inverse — the inverse that the gradient needs anyway. One LU
    factorisation serves the value (its diagonal) and the inverse (``getri`` on the same factors)."""
    factors = _lu_logdet(A, s, _getrf)
    if factors is None:
        return float("inf"), None
    lu, piv, h = factors  # h before getri overwrites lu
    inv, info = _getri(lu, piv, overwrite_lu=True)
    if info != 0:
        return float("inf"), None
    lo, hi = float(inv.min()), float(inv.max())
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo < -1e-10 * max(hi, -lo):
        return float("inf"), None
    return max(h, 0.0), inv


#: Blocks of at least this many nodes: the log-det gradient from the triangular inverses of the
#: LU factors at the needed entries (:func:`logdet_selected`) instead of the full inverse (``getri``).
SELECTED_FROM = 256


def logdet_selected(A: np.ndarray, s: float, rows: np.ndarray, cols: np.ndarray):
    """``(h, z)`` with ``h = −log det(sI − A) + n log s`` and ``z[k] = Z[rows[k], cols[k]]``,
    ``Z = (sI − A)⁻¹``; ``(inf, None)`` outside the domain. ``A`` is overwritten.

    With ``sI − A = P L U`` (``getrf``): ``Z = U⁻¹ L⁻¹ Pᵀ``; both triangular inverses (``trtri``,
    ⅓ n³ flops each) and one dot product of length n per requested entry, instead of ``getri``'s
    full inverse (measured about 2.5× slower than the LU itself on an 864-node block). The domain
    test without the full inverse: a Z-matrix ``M`` is a non-singular M-matrix exactly when
    ``x = M⁻¹ 1`` is positive (``x > 0`` with ``Mx > 0`` makes a Z-matrix a non-singular
    M-matrix; conversely ``M⁻¹ ≥ 0`` with a positive diagonal gives ``x > 0``)."""
    n = A.shape[0]
    factors = _lu_logdet(A, s, lapack.dgetrf)
    if factors is None:
        return float("inf"), None
    lu, piv, h = factors
    x, info = lapack.dgetrs(lu, piv, np.ones(n))
    if info != 0 or not np.all(x > 0) or not np.all(np.isfinite(x)):
        return float("inf"), None
    U_inv, info_u = lapack.dtrtri(lu, lower=0)
    L_inv, info_l = lapack.dtrtri(lu, lower=1, unitdiag=1)
    if info_u != 0 or info_l != 0:
        return float("inf"), None
    U_inv = np.triu(U_inv)
    L_inv = np.tril(L_inv, -1)
    L_inv.flat[:: n + 1] = 1.0
    # getrf's row interchanges as a permutation: row k of PᵀM is row perm[k] of M
    perm = np.arange(n)
    for k, j in enumerate(piv.tolist()):
        if j != k:
            perm[k], perm[j] = perm[j], perm[k]
    inv_perm = np.empty(n, dtype=np.int64)
    inv_perm[perm] = np.arange(n)
    # Z[r, c] = U⁻¹[r, :] · L⁻¹[:, inv_perm[c]]
    CT = np.ascontiguousarray(L_inv.T)
    z = np.empty(rows.size)
    # ≈ 1 MB of gathered rows per operand at a time: einsum reads them from cache while they are
    # still there (measured: gathers and dot products about twice as fast on 280-node blocks as
    # with all rows gathered first); the rows, and so each dot product, are the same whatever the chunk
    chunk = max(1, (1 << 17) // max(n, 1))
    for start in range(0, rows.size, chunk):
        sl = slice(start, start + chunk)
        z[sl] = np.einsum("ij,ij->i", U_inv[rows[sl]], CT[inv_perm[cols[sl]]])
    return max(h, 0.0), z


def acyclicity(W: np.ndarray) -> tuple[float, np.ndarray]:
    """Return ``(h(W), ∇h(W))``. When ``exp`` overflows, ``h`` is ``+inf`` (gradient zeros), silently."""
    h, E = _expm_core(W * W)
    if E is None:
        return float("inf"), np.zeros_like(W)
    return h, E.T * (2.0 * W)


def logdet_acyclicity(W: np.ndarray, s: float = 1.0) -> tuple[float, np.ndarray]:
    """Return ``(h(W), ∇h(W))`` for ``h(W) = −log det(sI − W∘W) + d log s`` (DAGMA).

    ``+inf`` (gradient zeros), silently, when ``sI − W∘W`` is not a non-singular M-matrix, i.e.
    when the spectral radius of ``W∘W`` is ``≥ s``. The test: a Z-matrix is a non-singular M-matrix
    exactly when it is invertible with an entrywise non-negative inverse — the inverse that the
    gradient needs anyway."""
    d = W.shape[0]
    if d == 0:
        return 0.0, np.zeros_like(W)
    h, Z = logdet_core(W * W, s)
    if Z is None:
        return float("inf"), np.zeros_like(W)
    return h, 2.0 * Z.T * W


def _getrf(a, overwrite_a=False):
    return lapack.dgetrf(a, overwrite_a=overwrite_a)


def _getri(lu, piv, overwrite_lu=False):
    return lapack.dgetri(lu, piv, overwrite_lu=overwrite_lu)


#: The acyclicity functions by name (``acyclicity=`` option of the coordinator).
ACYCLICITY = ("expm", "logdet")


def acyclicity_of(kind: str, s: float = 1.0):
    """The function ``W -> (h(W), ∇h(W))`` named ``kind`` (``"expm"`` or ``"logdet"`` with ``s``)."""
    if kind == "expm":
        return acyclicity
    if kind == "logdet":
        return lambda W: logdet_acyclicity(W, s)
    raise ValueError(f"unknown acyclicity function {kind!r}; choose one of {', '.join(ACYCLICITY)}")


def cyclic_blocks(pattern: np.ndarray) -> list[np.ndarray]:
    """Node sets of the strongly connected components with ≥ 2 nodes of the graph ``pattern != 0``.

    Only closed walks count in ``h``, and a closed walk stays inside one such component, so for any
    ``W`` whose non-zeros lie in ``pattern``: ``h(W) = Σ_C [tr exp(A_CC) − |C|]`` with ``A = W ∘ W``,
    and ``∇h(W)_ij = 2 W_ij exp(A_CC)_ji`` when ``i, j`` lie in one component ``C``, else 0."""
    P = scipy.sparse.csr_matrix(np.asarray(pattern) != 0)
    n_comp, labels = scipy.sparse.csgraph.connected_components(P, directed=True, connection="strong")
    sizes = np.bincount(labels, minlength=n_comp)
    order = np.argsort(labels, kind="stable")
    bounds = np.cumsum(np.concatenate([[0], sizes]))
    return [order[bounds[c] : bounds[c + 1]] for c in range(n_comp) if sizes[c] > 1]


def acyclicity_blocks(W: np.ndarray, blocks: list[np.ndarray], func=acyclicity) -> tuple[float, np.ndarray]:
    """``(h(W), ∇h(W))`` computed on the cyclic blocks of W's support (see :func:`cyclic_blocks`);
    exact when every non-zero of W lies in the pattern the blocks were computed from. ``func`` is
    the acyclicity function (:func:`acyclicity` or one from :func:`acyclicity_of`)."""
    G = np.zeros_like(W)
    h = 0.0
    for idx in blocks:
        sub = np.ix_(idx, idx)
        hb, gb = func(W[sub])
        if not np.isfinite(hb):
            return float("inf"), np.zeros_like(W)
        h += hb
        G[sub] = gb
    return h, G


class BlockAcyclicity:
    """``w -> (h, ∇h)`` for the entries ``w`` of a ``d × d`` matrix at the flat indices ``idx``
    (``a·d + b`` is the edge ``a → b``; every other entry is 0), evaluated on the strongly connected
    components of the pattern ``idx`` (:func:`cyclic_blocks`) without forming ``d × d`` arrays.

    ``kind`` is ``"expm"`` or ``"logdet"`` (with ``s``). Per evaluation and block ``C`` of size
    ``n``: one dense ``n × n`` ``exp`` (or one LU and inverse), and the gradient read off at the
    block's entries only: ``∂h/∂W_ab = 2 W_ab Z_ba`` with ``Z = exp(A_CC)`` or ``(sI − A_CC)⁻¹``.
    Entries outside every block lie on no cycle: their gradient is 0. ``blocks`` lists the block
    sizes, largest first.

    Log-det blocks of ``n ≤`` :data:`BATCHED_UPTO` nodes skip the per-block LAPACK calls and the
    dozen NumPy calls around each (tens of microseconds per block; about 15 such blocks per
    evaluation at d = 400): the blocks of one size form one array batch (:func:`logdet_small`) when
    there are at least ``BATCH_FROM[n]`` of them (``batch_from``: other counts), else they are done one by one on Python floats
    (:func:`lu_inverse_small`). Both perform OpenBLAS's ``dgetrf`` + ``dgetri`` operations in
    their order, and ``h`` adds the block values in the order of the blocks, so ``(h, ∇h)`` are
    those of the per-block path (bit for bit on OpenBLAS; to rounding on any BLAS)."""

    def __init__(self, d: int, idx: np.ndarray, kind: str = "expm", s: float = 1.0, batch_from: dict | None = None):
        if kind not in ACYCLICITY:
            raise ValueError(f"unknown acyclicity function {kind!r}; choose one of {', '.join(ACYCLICITY)}")
        idx = np.asarray(idx, dtype=np.int64)
        self.d, self.size, self.kind, self.s = int(d), int(idx.size), kind, float(s)
        rows, cols = idx // d, idx % d
        self._parts: list[tuple] = []
        self._batches: list[tuple] = []
        self._scalar: list[tuple] = []
        if idx.size == 0:
            self.blocks: list[int] = []
            return
        P = scipy.sparse.csr_matrix((np.ones(idx.size, dtype=np.int8), (rows, cols)), shape=(d, d))
        n_comp, labels = scipy.sparse.csgraph.connected_components(P, directed=True, connection="strong")
        sizes = np.bincount(labels, minlength=n_comp)
        inside = (labels[rows] == labels[cols]) & (sizes[labels[rows]] > 1)
        pos = np.flatnonzero(inside)
        comp = labels[rows[pos]]
        # local node numbers within each component
        order = np.argsort(labels, kind="stable")
        local = np.empty(d, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(sizes)])
        local[order] = np.arange(d) - starts[labels[order]]
        by_comp = np.argsort(comp, kind="stable")
        pos, comp = pos[by_comp], comp[by_comp]
        cuts = np.flatnonzero(np.diff(comp)) + 1
        for part in np.split(np.arange(pos.size), cuts):
            if not part.size:
                continue
            c = int(comp[part[0]])
            n = int(sizes[c])
            p = pos[part]
            r, q = local[rows[p]], local[cols[p]]
            self._parts.append((n, p, r * n + q, q * n + r, q, r))
        self._parts.sort(key=lambda t: -t[0])
        self.blocks = [t[0] for t in self._parts]
        # log-det blocks of n ≤ BATCHED_UPTO nodes, by size: many of one size as one array batch
        # (logdet_small), a few block by block on Python floats (_scalar_blocks). Their values
        # are added to h in the order of the parts (sizes descending), as one block after another.
        if kind == "logdet":
            small = [t for t in self._parts if t[0] <= BATCHED_UPTO]
            self._parts = [t for t in self._parts if t[0] > BATCHED_UPTO]
            scalar_p = []
            for n in sorted({t[0] for t in small}, reverse=True):
                group = [t for t in small if t[0] == n]
                if len(group) >= (BATCH_FROM if batch_from is None else batch_from)[n]:
                    offsets = np.repeat(np.arange(len(group)) * (n * n), [t[1].size for t in group])
                    p = np.concatenate([t[1] for t in group])
                    loc = np.concatenate([t[2] for t in group]) + offsets
                    loc_t = np.concatenate([t[3] for t in group]) + offsets
                    self._batches.append((n, len(group), p, loc, loc_t))
                else:
                    # per block: its entries' (row, column), the positions of their transposes in
                    # the block's row-major inverse
                    cells = [list(zip((t[2] // n).tolist(), (t[2] % n).tolist())) for t in group]
                    self._scalar.append((n, cells, [t[3].tolist() for t in group]))
                    scalar_p += [t[1] for t in group]
                    self._batches.append((n, len(group), None, None, None))
            if scalar_p:
                self._scalar_p = np.concatenate(scalar_p)

    @property
    def small_routes(self) -> dict:
        """How the log-det blocks of each size up to :data:`BATCHED_UPTO` are evaluated: ``{n: "batch"}`` (one
        array batch, :func:`logdet_small`) or ``{n: "one by one"}`` (Python floats, :func:`lu_inverse_small`)."""
        return {n: "batch" if p is not None else "one by one" for n, _, p, _, _ in self._batches}

    def __call__(self, w: np.ndarray) -> tuple[float, np.ndarray]:
        """``(h, ∇h)`` at the entries ``w`` (``(inf, zeros)`` outside the domain)."""
        g = np.zeros(self.size)
        h = 0.0
        for n, p, loc, loc_t, q, r in self._parts:
            wp = w[p]
            A = np.zeros((n, n))
            A.flat[loc] = wp * wp
            if self.kind == "logdet" and n >= SELECTED_FROM:
                # ∂h/∂W_ab = 2 W_ab Z_ba: the entries (b, a) = (q, r) of Z only
                hb, z = logdet_selected(A, self.s, q, r)
                if z is None:
                    return float("inf"), np.zeros(self.size)
                h += hb
                g[p] = 2.0 * z * wp
                continue
            if self.kind == "logdet":
                hb, Z = logdet_core(A, self.s)
            else:
                hb, Z = _expm_core(A)
            if Z is None:
                return float("inf"), np.zeros(self.size)
            h += hb
            g[p] = 2.0 * Z.flat[loc_t] * wp
        if not self._batches:
            return h, g
        by_size = {}
        if self._scalar:
            found = self._scalar_blocks(w)
            if found is None:
                return float("inf"), np.zeros(self.size)
            by_size, g[self._scalar_p] = found
        for n, k, p, loc, loc_t in self._batches:
            if p is None:  # block by block, above
                for x in by_size[n]:
                    h = h + x
                continue
            wp = w[p]
            A = np.zeros(k * n * n)
            A[loc] = wp * wp
            A = A.reshape(k, n, n)
            hb, Z, redo = logdet_small(A, self.s)
            for b in np.flatnonzero(redo).tolist():
                hb[b], Zb = logdet_core(A[b].copy(), self.s)
                if Zb is not None:
                    Z[b] = Zb.ravel()
            if not np.isfinite(hb).all():
                return float("inf"), np.zeros(self.size)
            for x in hb.tolist():  # h + hb[0] + hb[1] + … in this order
                h = h + x
            g[p] = 2.0 * Z.ravel()[loc_t] * wp
        return h, g

    def _scalar_blocks(self, w: np.ndarray):
        """The small blocks that are few of their size, one by one on Python floats
        (:func:`lu_inverse_small`): ``({n: [h_b per block]}, ∇h at their entries)``, or ``None``
        when a block lies outside the domain. The operations, including ``2 Z_ba W_ab`` and the
        logarithms of all pivots in one array call, are those of :func:`logdet_small`."""
        s = self.s
        wp = w[self._scalar_p]
        sq = (wp * wp).tolist()
        diags, zs, order = [], [], []
        e = 0
        for n, cells, cells_t in self._scalar:
            for entries, where_t in zip(cells, cells_t):
                m = len(entries)
                if n == 2:
                    res = lu_inverse_2(s, entries, sq[e : e + m])
                else:
                    a = [[-0.0] * n for _ in range(n)]  # −A: off the diagonal, zeros of sI − A are −0.0
                    for r in range(n):
                        a[r][r] = s
                    for (r, c), x in zip(entries, sq[e : e + m]):
                        a[r][c] = -x + s if r == c else -x
                    res = lu_inverse_small(a, n)
                e += m
                if res is None:  # the LAPACK path decides (see logdet_small)
                    A = np.zeros((n, n))
                    for (r, c), x in zip(entries, sq[e - m : e]):
                        A[r, c] = x
                    hb, Z = logdet_core(A, s)
                    if Z is None:
                        return None
                    order.append((n, None, hb))
                    zs.extend(Z.ravel()[where_t].tolist())
                    continue
                diag, swaps, z = res
                if (swaps + sum(1 for x in diag if x < 0)) % 2:
                    return None
                lo, hi = min(z), max(z)
                if lo < -1e-10 * max(hi, -lo):
                    return None
                order.append((n, len(diags), None))
                diags.extend(diag)
                zs.extend([z[i] for i in where_t])
        logs = np.log(np.abs(np.array(diags))).tolist() if diags else []
        log_s = np.log(s)
        by_size = {n: [] for n, _, _ in self._scalar}
        for n, at, h_lapack in order:
            if at is None:
                by_size[n].append(h_lapack)
                continue
            logsum = logs[at]
            for x in logs[at + 1 : at + n]:
                logsum = logsum + x
            by_size[n].append(max(float(n * log_s) - logsum, 0.0))
        return by_size, [2.0 * z * x for z, x in zip(zs, wp.tolist())]


@contextlib.contextmanager
def single_blas_thread() -> Iterator[None]:
    """Cap BLAS/OpenMP thread pools at one thread inside the block.

    On shared 2-core machines a multi-threaded BLAS made a 20 × 20 ``expm`` 250× slower.
    """
    with threadpool_limits(limits=1):
        yield


@dataclass
class LbfgsResult:
    """What :func:`lbfgs` returns: the point, its value and gradient, iterations, evaluations, and
    whether a stopping test was met (``message`` says which, or why not)."""

    x: np.ndarray
    fun: float
    jac: np.ndarray
    nit: int
    nfev: int
    success: bool
    message: str


def lbfgs(
    fun,
    x0: np.ndarray,
    *,
    ftol: float = 1e-6,
    gtol: float = 1e-10,
    maxiter: int = 500,
    memory: int = 10,
    max_backtracks: int = 40,
) -> LbfgsResult:
    """Minimise ``fun(x) -> (f, ∇f)`` by L-BFGS with a backtracking (Armijo) line search.

    Unlike SciPy's L-BFGS-B, ``fun`` may return ``+inf`` outside its domain (a barrier such as the
    log-determinant acyclicity function): the step is halved until the trial point is inside and
    decreases ``f`` enough. ``x0`` must have a finite value. Stops when the relative decrease of
    one iteration is at most ``ftol`` (``(f_k − f_{k+1}) ≤ ftol · max(|f_k|, |f_{k+1}|, 1)``, the
    test of L-BFGS-B's ``factr``), when ``‖∇f‖_∞ ≤ gtol``, or after ``maxiter`` iterations
    (``success`` False). Curvature pairs with ``sᵀy ≤ 0`` are skipped."""
    x = np.array(x0, dtype=float, copy=True)
    f, g = fun(x)
    nfev = 1
    if not np.isfinite(f):
        return LbfgsResult(x, float(f), g, 0, nfev, False, "the starting point is outside the domain (f = inf)")
    S: list[np.ndarray] = []
    Y: list[np.ndarray] = []
    RHO: list[float] = []
    for it in range(1, maxiter + 1):
        if not x.size or float(np.max(np.abs(g))) <= gtol:
            return LbfgsResult(x, f, g, it - 1, nfev, True, "projected gradient below gtol")
        # two-loop recursion: direction = −H g
        q = g.copy()
        alphas = []
        for s, y, rho in zip(reversed(S), reversed(Y), reversed(RHO)):
            a = rho * float(s @ q)
            alphas.append(a)
            q -= a * y
        if S:
            q *= float(S[-1] @ Y[-1]) / float(Y[-1] @ Y[-1])
        else:
            q /= max(1.0, float(np.linalg.norm(g)))  # first step: at most unit length
        for (s, y, rho), a in zip(zip(S, Y, RHO), reversed(alphas)):
            b = rho * float(y @ q)
            q += (a - b) * s
        direction = -q
        slope = float(g @ direction)
        if not slope < 0:  # not a descent direction: restart from steepest descent
            S.clear(), Y.clear(), RHO.clear()
            direction = -g / max(1.0, float(np.linalg.norm(g)))
            slope = float(g @ direction)
        t = 1.0
        for _ in range(max_backtracks):
            x_new = x + t * direction
            f_new, g_new = fun(x_new)
            nfev += 1
            if np.isfinite(f_new) and f_new <= f + 1e-4 * t * slope:
                break
            if np.isfinite(f_new):
                # minimiser of the quadratic through f, slope and f_new, kept in [0.1 t, 0.5 t]
                denom = 2.0 * (f_new - f - t * slope)
                t_q = -slope * t * t / denom if denom > 0 else 0.5 * t
                t = min(max(t_q, 0.1 * t), 0.5 * t)
            else:
                t *= 0.5
        else:
            return LbfgsResult(x, f, g, it, nfev, False, "line search failed to decrease f")
        s_vec, y_vec = x_new - x, g_new - g
        sy = float(s_vec @ y_vec)
        if sy > 1e-12 * float(np.linalg.norm(s_vec) * np.linalg.norm(y_vec)):
            S.append(s_vec), Y.append(y_vec), RHO.append(1.0 / sy)
            if len(S) > memory:
                S.pop(0), Y.pop(0), RHO.pop(0)
        decrease = f - f_new
        x, f, g = x_new, float(f_new), g_new
        if decrease <= ftol * max(abs(f), abs(f + decrease), 1.0):
            return LbfgsResult(x, f, g, it, nfev, True, "relative reduction of f below ftol")
    return LbfgsResult(x, f, g, maxiter, nfev, False, f"reached maxiter = {maxiter}")
