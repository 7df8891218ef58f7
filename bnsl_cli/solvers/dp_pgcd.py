"""DP-PGCD kernels (arrays in, arrays out): a participant's clip levels, its per-sample clipped
gradient sums and the private coordinate-descent steps — an exponential-mechanism selection
(Gumbel-max) of one coordinate, then a Gaussian noisy update of it, each step returning the privacy
events it made. The participant around them (messages, ledger, plan) is
:class:`bnsl_cli.federated.methods.admm.dp_site.DPSparseParticipant`.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.privacy.bounding import clamp_abs, to_float32_range
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.mechanisms import ColumnwiseSelector, gaussian_noise
from bnsl_cli.privacy.releases import EXPONENTIAL, GAUSSIAN, ReleaseKind
from bnsl_cli.solvers.pgcd import soft_threshold

__all__ = ["STATE_MAX", "clip_levels", "ClippedGradients", "dp_pgcd"]

#: A participant's weights are held to ``±STATE_MAX`` (a noisy step beyond it stops there): with the
#: broadcast ``W`` and ``ρ₂`` held to public ranges (:func:`bnsl_cli.federated.methods.admm.site.consensus_problem`),
#: every gradient, residual and score DP-PGCD forms from the rows is finite. Honest weights are edge
#: weights in data units, far inside. The bound is applied to the released (noisy) value: post-processing.
STATE_MAX = 2.0**64

#: bytes of products per block of :meth:`ClippedGradients.column` (well inside a 1–2 MB L2 cache)
BLOCK_BYTES = 1 << 19


def clip_levels(v_hat: np.ndarray, m_hat: np.ndarray, rho2: float, clip: float, mode: str) -> np.ndarray:
    """Per-row clip levels ``C_i = c · √M_i · median_{k≠l} √(v̂_k v̂_l / M_k)`` with ``M = m̂ + ρ₂``
    (``adaptive``) or ``M = m̂`` (``static``). Depends on released values only."""
    M = m_hat + (rho2 if mode == "adaptive" else 0.0)
    d = v_hat.size
    ratio = np.sqrt(np.outer(1.0 / M, np.ones(d)) * np.outer(v_hat, v_hat))  # [k, l] = √(v_k v_l / M_k)
    off = ~np.eye(d, dtype=bool)
    med = float(np.median(ratio[off]))
    return clip * np.sqrt(M) * med


class ClippedGradients:
    """The clipped gradient sums ``Σ_rows clip(x_i r_j, C_i)`` (d × d, ``sums``) of centred rows
    ``Xc`` at the current ``B`` (residuals ``r = x B − x``), kept up to date one column at a time.

    The products and the clipping are done in ``precision`` (single by default: half the memory
    traffic; several times faster at d = 200); each column's sum is accumulated in float64.
    Single-precision levels are rounded towards zero, so every clipped term is at most ``C_i`` in
    absolute value exactly.

    ``block_bytes``: the size of one block of products in :meth:`column` (default
    :data:`BLOCK_BYTES`); ``block`` is the resulting number of parents per block (at least one). The
    sums do not depend on it."""

    def __init__(self, Xc: np.ndarray, precision: str = "single", block_bytes: int = BLOCK_BYTES):
        if precision not in ("single", "double"):
            raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
        self.dtype = np.float32 if precision == "single" else np.float64
        # rows of these are columns of the data: X_cᵀ (d × n_p) and the residuals Rᵀ = (X_c B − X_c)ᵀ,
        # so that updating child j touches one contiguous row
        self.XT = np.ascontiguousarray(clamp_abs(Xc).T)  # float32-safe whatever row arrives (bounding)
        self.RT = -self.XT.copy()
        self._XTc = self.XT.astype(self.dtype, copy=False)
        d, n = self.XT.shape
        # parents per block of :meth:`column`: a block's products stay in the L2 cache between the
        # multiply, the clip and the sum (X_c is read once per step; the products no longer make
        # round trips through memory)
        self.block = max(1, min(d, int(block_bytes) // (max(n, 1) * self._XTc.itemsize)))
        self._buf = np.empty((self.block, n), dtype=self.dtype)
        self._r = np.empty(n, dtype=self.dtype)  # one residual row in the working precision
        self.levels: Optional[np.ndarray] = None  # clip levels C_i (float64)
        self.hi = self.lo = None  # ±C_i in the working precision, rounded towards zero (column vectors)
        self._sums_t: Optional[np.ndarray] = None  # row j: the sums of child j (contiguous)

    @property
    def d(self) -> int:
        return self.XT.shape[0]

    @property
    def sums(self) -> Optional[np.ndarray]:
        """The d × d clipped sums, ``[i, j]`` for parent ``i`` of child ``j`` (a read-only view)."""
        if self._sums_t is None:
            return None
        view = self._sums_t.T
        view.flags.writeable = False
        return view

    def set_B(self, B: np.ndarray) -> None:
        """Residuals for a whole new ``B`` (and all sums, when levels are set)."""
        self.RT = np.ascontiguousarray(B.T @ self.XT - self.XT)
        if self.levels is not None:
            self._recompute_all()

    def set_levels(self, C: np.ndarray) -> None:
        """New clip levels; recomputes every sum (O(n_p d²))."""
        self.levels = np.asarray(C, dtype=np.float64).copy()
        hi = self.levels.astype(self.dtype)
        over = hi.astype(np.float64) > self.levels
        hi[over] = np.nextafter(hi[over], self.dtype(0))
        self.hi = hi[:, None].copy()
        self.lo = -self.hi
        self._recompute_all()

    def column(self, j: int) -> np.ndarray:
        """``Σ_rows clip(x_i r_j, C_i)`` for every parent ``i`` of child ``j`` (O(n_p d)), a block of
        parents at a time; each term is ``clip(x_i r_j, ±C_i)`` in the working precision and each sum is
        accumulated in float64, as one whole-matrix pass would."""
        d, k = self.d, self.block
        X, lo, hi = self._XTc, self.lo, self.hi
        r = self._r
        if self.dtype == np.float32:
            to_float32_range(self.RT[j], r)  # rounded to float32 without becoming inf (no inf·0 below)
        else:
            r[...] = self.RT[j]
        out = np.empty(d)
        for s in range(0, d, k):
            e = min(s + k, d)
            b = self._buf[: e - s]
            with np.errstate(over="ignore"):  # a product beyond the range is ±inf, clipped to ±C_i next
                np.multiply(X[s:e], r, out=b)
            np.clip(b, lo[s:e], hi[s:e], out=b)
            np.einsum("ij->i", b, dtype=np.float64, out=out[s:e])  # float64 accumulation (faster than sum)
        return out

    def move(self, m: int, j: int, delta: float) -> np.ndarray:
        """``B[m, j] += delta``: update child ``j``'s residuals and its column of sums; returns that
        column (``sums[:, j]``)."""
        self.RT[j] += delta * self.XT[m]
        col = self._sums_t[j]
        col[...] = self.column(j)
        return col

    def _recompute_all(self) -> None:
        CS = np.empty((self.d, self.d))
        for j in range(self.d):
            CS[j] = self.column(j)
        self._sums_t = CS


def _soft_scalar(x: float, tau: float) -> float:
    """:func:`soft_threshold` of one Python float (the same operations, hence the same value)."""
    sign = 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)
    return sign * max(abs(x) - tau, 0.0)


def dp_pgcd(
    grads: ClippedGradients,
    levels: np.ndarray,
    B: np.ndarray,
    beta: np.ndarray,
    W: np.ndarray,
    rho2: float,
    lam: float,
    m_hat: np.ndarray,
    steps: int,
    n_total: int,
    gumbel_multiplier: float,
    sigma_multiplier: float,
    rng: np.random.Generator,
    forbidden: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, list]:
    """``steps`` DP-PGCD steps from ``B`` (not modified) with clip levels ``levels``; returns the new
    ``B`` and the releases made (:class:`PrivacyEvent` list: one selection event for all steps, one
    update event per row used). ``grads`` must hold the residuals of ``B``; it is left at the new one.

    Each step: select ``(m, j)`` by the exponential mechanism on the scores
    ``S_ij = √M_i |soft(B_ij − Ĝ_ij / M_i, λ/M_i) − B_ij|`` (Gumbel scale ``gumbel_multiplier · Δ_S``),
    then move ``B_mj`` to ``soft(B_mj − (Ĝ_mj + N(0, (sigma_multiplier Δ_m)²)) / M_m, λ/M_m)``.

    ``forbidden`` (prior knowledge, a public d × d bool mask from the plan): those coordinates get
    score −∞ like the diagonal, so the exponential mechanism runs over the allowed coordinates only.
    The set is public and the same for neighbouring data sets, so the score sensitivity Δ_S, the
    Gumbel scale and the ledger events are unchanged."""
    d, n = B.shape[0], float(n_total)
    if grads.levels is None or not np.array_equal(levels, grads.levels):
        grads.set_levels(levels)
    M = m_hat + rho2
    sqrtM = np.sqrt(M)
    delta_row = 2.0 * np.asarray(levels) / n  # sensitivity of Ĝ_ij for row i
    delta_s = float(np.max(delta_row / sqrtM))  # score sensitivity
    b = gumbel_multiplier * delta_s
    sigma_row = sigma_multiplier * delta_row
    B = np.array(B, dtype=float, copy=True)
    G = grads.sums / n + beta + rho2 * (B - W)
    inv_m = (1.0 / M)[:, None]
    thr = (lam / M)[:, None]
    rows_used = np.zeros(d, dtype=np.int64)
    # only column j changes after a step on (·, j), so the exponential mechanism is sampled
    # column-wise in O(d) per step
    score = np.abs(soft_threshold(B - G * inv_m, thr) - B) * sqrtM[:, None]
    np.fill_diagonal(score, -np.inf)
    if forbidden is not None:
        score[forbidden] = -np.inf
        forbidden_t = np.ascontiguousarray(forbidden.T)
    selector = ColumnwiseSelector(b, rng)
    selector.set_scores(score)
    thr_col, inv_col = thr[:, 0], inv_m[:, 0]
    # the loop works on transposed copies (row j = column j: contiguous) and on Python floats for
    # the one coordinate it updates; the arithmetic is that of the whole-matrix expressions above
    Bt, Gt = np.ascontiguousarray(B.T), np.ascontiguousarray(G.T)
    beta_t, W_t = np.ascontiguousarray(beta.T), np.ascontiguousarray(W.T)
    M_list, thr_list, sigma_list = M.tolist(), (lam / M).tolist(), sigma_row.tolist()
    col = np.empty(d)
    for _ in range(steps):
        m, j = selector.select()
        rows_used[m] += 1
        bcol, gcol = Bt[j], Gt[j]
        old = float(bcol[m])
        g = float(gcol[m]) + gaussian_noise(None, sigma_list[m], rng)
        x = old - g / M_list[m]
        new = min(max(_soft_scalar(x, thr_list[m]), -STATE_MAX), STATE_MAX)  # finite whatever W, ρ₂ arrived
        delta = new - old
        if delta != 0.0:
            bcol[m] = new
            sums_j = grads.move(m, j, delta)
            np.add(sums_j / n + beta_t[j], rho2 * (bcol - W_t[j]), out=gcol)
            np.abs(soft_threshold(bcol - gcol * inv_col, thr_col) - bcol, out=col)
            col *= sqrtM
            col[j] = -np.inf
            if forbidden is not None:
                col[forbidden_t[j]] = -np.inf
            selector.update_column(j, col)
    B = np.ascontiguousarray(Bt.T)
    events = [PrivacyEvent(ReleaseKind.SELECTION, EXPONENTIAL, delta_s, b, steps)]
    for m in np.flatnonzero(rows_used):
        events.append(
            PrivacyEvent(ReleaseKind.UPDATE, GAUSSIAN, float(delta_row[m]), float(sigma_row[m]), int(rows_used[m]))
        )
    return B, events


# ----------------------------------------------------------------------------------------------
# the polish's second moments
# ----------------------------------------------------------------------------------------------
