"""Private participants: DP-PGCD (DP-Fed-Sparse-BNSL) and the noisy-covariance DP-Fed-BNSL.

Every data-dependent value that leaves these objects goes through a mechanism whose event is
recorded in the shared :class:`~bnsl_cli.privacy.ledger.PrivacyLedger` under this participant's id:
the one-off releases (value ranges, column means, second moments; or the covariance) and, per
DP-PGCD step, the coordinate selection (exponential mechanism, Gumbel-max) and the noisy update
(Gaussian). The messages then carry only post-processed values: the selected coordinates and their
new values. ``B[i, j]`` is the edge ``i → j``.

DP-PGCD (ALGORITHMS.md §4), with per-sample gradients ``g_ij(x) = x_i (xᵀB_{:,j} − x_j)`` clipped at
``C_i`` (the curvature ``M_ij = m̂_i + ρ₂`` depends on the row only, so the clip levels do too):

    Ĝ_ij = (1/n) Σ_rows clip(g_ij(x), C_i) + β_ij + ρ₂ (B_ij − W_ij),        Δ_i = 2 C_i / n
    C_i  = c · √M_i · median_{k≠l} √(v̂_k v̂_l / M_k)       (so C_i = C √(M_i / ΣM))

``v̂`` are the released per-row second moments, ``m̂ = v̂ n_p / n``. Clip levels ``adaptive`` use
``M_i = m̂_i + ρ₂`` (recomputed each round; score sensitivity ``Δ_S = 2C / (n √ΣM)``), ``static``
use ``M_i = m̂_i`` for the levels (no per-round recomputation; ``Δ_S = max_i Δ_i / √(m̂_i + ρ₂)``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.federated.messages import DenseUpdate, SparseEntries, SparseUpdate
from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.participant import Participant
from bnsl_cli.federated.pgcd import soft_threshold
from bnsl_cli.privacy.calibrate import RELEASE_POLISH, multiplier_for_rho, one_off_releases
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.ledger import EXPONENTIAL, GAUSSIAN, PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.mechanisms import ColumnwiseSelector, gaussian_noise, project_psd, symmetric_gaussian_matrix
from bnsl_cli.privacy.releases import (
    RELEASE_RANGE_CENTRED,
    RELEASE_RANGE_RAW,
    release_means,
    release_range,
    release_second_moments,
)

__all__ = ["OneOffBudget", "private_preprocessing", "DPSparseParticipant", "DPDenseParticipant"]

#: Quantiles of |x| (raw, for the mean) and |x − μ̂| (centred, for the second moments) used as bounds.
RAW_QUANTILE = 1e-3
CENTRED_QUANTILE = 1e-2


class OneOffBudget:
    """zCDP budgets of the one-off releases (``rho_means = 0`` means public means: no release)."""

    def __init__(self, rho_means: float, rho_moments: float, value_bound: Optional[float] = None):
        self.rho_means = float(rho_means)
        self.rho_moments = float(rho_moments)
        self.value_bound = value_bound


def _need_bound(pid: int, bound: np.ndarray, what: str) -> None:
    if np.isnan(bound).any():
        raise PrivacyBudgetError(
            f"participant {pid + 1}: too few rows for a private estimate of the {what} at this ε "
            "(the noisy histogram is all noise); pass --value-bound B (a public bound on |x|), "
            "or --public-means if the data are centred, or raise --epsilon"
        )


def private_preprocessing(pid: int, X: np.ndarray, budget: OneOffBudget, rng, ledger: PrivacyLedger):
    """The one-off releases: (optional) raw range, column means, centred range, second moments,
    with the budget split of :func:`~bnsl_cli.privacy.calibrate.one_off_releases`.

    Returns ``(centre, v_hat, bound_centred, notes)``. Nothing here uses the exact local mean."""
    n, d = X.shape
    given = budget.value_bound is not None
    rho = dict(one_off_releases(budget.rho_means, budget.rho_moments, given))
    notes = {}
    if "column-means" in rho:
        if given:
            b_raw = np.full(d, float(budget.value_bound))
        else:
            b_raw, ev = release_range(
                X, np.zeros(d), multiplier_for_rho(rho[RELEASE_RANGE_RAW]), rng, quantile=RAW_QUANTILE,
                release=RELEASE_RANGE_RAW,
            )
            ledger.record(pid, ev)
            _need_bound(pid, b_raw, "value range")
        centre, ev = release_means(X, b_raw, multiplier_for_rho(rho["column-means"]), rng)
        ledger.record(pid, ev)
        notes["centring"] = "released column means (Gaussian mechanism on clipped values)"
    else:
        centre = np.zeros(d)
        notes["centring"] = "declared public: data taken as centred (--public-means); no release"
    Xc = X - centre[None, :]
    if given:
        b_c = np.full(d, float(budget.value_bound))
    else:
        b_c, ev = release_range(
            Xc, np.zeros(d), multiplier_for_rho(rho[RELEASE_RANGE_CENTRED]), rng, quantile=CENTRED_QUANTILE,
            release=RELEASE_RANGE_CENTRED,
        )
        ledger.record(pid, ev)
        _need_bound(pid, b_c, "spread of the centred values")
    v_hat, ev = release_second_moments(Xc, b_c, multiplier_for_rho(rho["second-moments"]), rng)
    ledger.record(pid, ev)
    return centre, v_hat, b_c, notes


class DPSparseParticipant(Participant):
    """DP-Fed-Sparse-BNSL participant: DP-PGCD with T private steps per round."""

    uses_exact_moments = False  # every gradient goes through clipping and noise

    def __init__(
        self,
        pid: int,
        X: np.ndarray,
        n_total: int,
        lam: float,
        steps: int,
        *,
        gumbel_multiplier: float,
        sigma_multiplier: float,
        budget: OneOffBudget,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        clip: float = 1.5,
        clip_levels: str = "adaptive",
        precision: str = "single",
        polish_multiplier: Optional[float] = None,
        polish_clip: float = POLISH_CLIP,
    ):
        ledger.add_participant(pid)
        centre, v_hat, _, notes = private_preprocessing(pid, X, budget, rng, ledger)
        super().__init__(pid, X, n_total, lam, centre=centre)
        self.notes = notes
        self.steps = int(steps)
        self.v_hat = v_hat
        self.m_hat = v_hat * self.n_rows / float(n_total)
        self.clip = float(clip)
        self.clip_levels = clip_levels
        self.gumbel_multiplier = float(gumbel_multiplier)
        self.sigma_multiplier = float(sigma_multiplier)
        self.polish_multiplier = None if polish_multiplier is None else float(polish_multiplier)
        self.polish_clip = float(polish_clip)
        self._polish_released = False  # the budget covers one release
        self.rng = rng
        self.ledger = ledger
        # rows of these are columns of the data: X_cᵀ (d × n_p) and the per-sample residuals
        # Rᵀ = (X_c B − X_c)ᵀ, so that updating child j touches one contiguous row
        self._XT = np.ascontiguousarray(self._Xc.T)
        self._RT = -self._XT.copy()
        if precision not in ("single", "double"):
            raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
        self.precision = precision
        self._dtype = np.float32 if precision == "single" else np.float64
        self._XTc = self._XT.astype(self._dtype, copy=False)  # the products are formed in this precision
        self._CS = None  # clipped sums Σ_rows clip(x_i r_j, C_i), d × d
        self._C = None  # current clip levels per row i
        self._buf = np.empty_like(self._XTc)
        self._ones = np.ones(self.n_rows, dtype=self._dtype)

    # -- the polish's second moments -------------------------------------------------------------
    def _second_moments(self, pairs: np.ndarray) -> np.ndarray:
        """Gaussian release of the second moments on the requested pairs ``Q``, with per-row clipping.

        Each row contributes the standardised products ``u_ab = x_a x_b / √(v̂_a v̂_b)`` (``v̂`` the
        released second moments: data-independent scales); the vector ``u`` over ``Q`` is clipped to
        ℓ₂ norm ``C_r = κ·√|Q|``. Its median norm is about ``√|Q|`` (1.0–1.25 √|Q| on the benchmark
        data), so with κ = 1.5 about a quarter of the rows are shrunk, by a factor of 0.93–0.97 on
        average — nearly a common scale, which the least-squares score ignores. Clipping every
        product at 3 standard deviations instead biased the moments unevenly enough to cost most of
        the polish's gain (d = 200, noise-free: SHD 42 against 17 unclipped; 17–18 with this row
        clipping). Replacing one row moves the summed ``u`` by at most ``2C_r`` in ℓ₂: noise std
        ``σ_pol · 2C_r`` there, i.e. ``σ_pol · 2C_r · √(v̂_a v̂_b)`` on entry ``ab``; the release costs
        ``1/(2σ_pol²)`` zCDP."""
        if self.polish_multiplier is None or self._polish_released:
            raise PrivacyBudgetError(
                f"participant {self.pid + 1}: the polish's second moments were requested, but "
                + ("they were already released once" if self._polish_released else "no budget was calibrated for them")
            )
        self._polish_released = True
        a, b = pairs // self.d, pairs % self.d
        scale = np.sqrt(self.v_hat[a] * self.v_hat[b])
        # two passes over chunks of pairs (norms, then clipped sums) instead of holding the
        # n_p × |Q| matrix u: recomputing a product is cheaper than 50 MB at d = 200
        chunks = [slice(s, s + 512) for s in range(0, pairs.size, 512)]
        sq = np.zeros(self.n_rows)  # squared ℓ₂ norm of each row's u
        for sl in chunks:
            u = self._Xc[:, a[sl]] * self._Xc[:, b[sl]] / scale[sl]
            sq += np.einsum("ij,ij->i", u, u)
        c_row = self.polish_clip * float(np.sqrt(pairs.size))
        factor = np.minimum(1.0, c_row / np.maximum(np.sqrt(sq), 1e-300))
        sums = np.empty(pairs.size)
        for sl in chunks:
            u = self._Xc[:, a[sl]] * self._Xc[:, b[sl]] / scale[sl]
            sums[sl] = factor @ u
        sens = 2.0 * c_row
        std = self.polish_multiplier * sens
        noisy = sums + gaussian_noise(pairs.size, std, self.rng)
        self.ledger.record(self.pid, PrivacyEvent(RELEASE_POLISH, GAUSSIAN, sens, std, 1))
        return noisy * scale / float(self.n_total)

    # -- clipping ------------------------------------------------------------------------------
    def _clip_levels(self, rho2: float) -> np.ndarray:
        M = self.m_hat + (rho2 if self.clip_levels == "adaptive" else 0.0)
        d = self.d
        ratio = np.sqrt(np.outer(1.0 / M, np.ones(d)) * np.outer(self.v_hat, self.v_hat))  # [k, l] = √(v_k v_l / M_k)
        off = ~np.eye(d, dtype=bool)
        med = float(np.median(ratio[off]))
        return self.clip * np.sqrt(M) * med

    def _clipped_column(self, j: int) -> np.ndarray:
        """``Σ_rows clip(x_i r_j, C_i)`` for every parent ``i`` of child ``j`` (O(n_p d)).

        The products and the clipping are done in ``self.precision`` (single by default: half the
        memory traffic and a single-precision BLAS sum: several times faster at d = 200).
        Single-precision levels are rounded towards zero, so every clipped term is at most ``C_i`` in
        absolute value exactly; the rounding (relative to ``Σ|terms|`` about 1e-7) is orders of
        magnitude below the noise added to these sums."""
        buf = self._buf
        np.multiply(self._XTc, self._RT[j].astype(self._dtype, copy=False), out=buf)
        np.clip(buf, self._Clo, self._Chi, out=buf)
        return (buf @ self._ones).astype(np.float64, copy=False)

    def _recompute_all(self) -> None:
        """All clipped sums (O(n_p d²)), with the clip levels ``self._C``."""
        hi = self._C.astype(self._dtype)
        over = hi.astype(np.float64) > self._C
        hi[over] = np.nextafter(hi[over], self._dtype(0))
        self._Chi = hi[:, None].copy()
        self._Clo = -self._Chi
        CS = np.empty((self.d, self.d))
        for j in range(self.d):
            CS[:, j] = self._clipped_column(j)
        self._CS = CS

    # -- one round -----------------------------------------------------------------------------
    def _local_update(self, rnd: int) -> SparseUpdate:
        d, n = self.d, float(self.n_total)
        rho2 = self.rho2
        M = self.m_hat + rho2
        sqrtM = np.sqrt(M)
        C = self._clip_levels(rho2)
        if self._C is None or self.clip_levels == "adaptive" or not np.array_equal(C, self._C):
            self._C = C
            self._recompute_all()
        delta_row = 2.0 * C / n  # sensitivity of Ĝ_ij for row i
        # score sensitivity Δ_i / √M_i: the same for every row with adaptive levels
        delta_s = float(np.max(delta_row / sqrtM))
        b = self.gumbel_multiplier * delta_s
        sigma_row = self.sigma_multiplier * delta_row
        B, beta, W = self.B, self.beta, self.W
        G = self._CS / n + beta + rho2 * (B - W)
        inv_m = (1.0 / M)[:, None]
        thr = (self.lam / M)[:, None]
        B0 = B.copy()
        rows_used = np.zeros(d, dtype=np.int64)
        # scores S_ij = √M_i |B̃_ij − B_ij|, diagonal masked; only column j changes after a step on
        # (·, j), so the exponential mechanism is sampled column-wise in O(d) per step
        score = np.abs(soft_threshold(B - G * inv_m, thr) - B) * sqrtM[:, None]
        np.fill_diagonal(score, -np.inf)
        selector = ColumnwiseSelector(b, self.rng)
        selector.set_scores(score)
        thr_col, inv_col = thr[:, 0], inv_m[:, 0]
        for _ in range(self.steps):
            m, j = selector.select()
            rows_used[m] += 1
            g = G[m, j] + gaussian_noise(None, sigma_row[m], self.rng)
            new = float(soft_threshold(B[m, j] - g / M[m], self.lam / M[m]))
            delta = new - B[m, j]
            if delta != 0.0:
                B[m, j] = new
                self._RT[j] += delta * self._XT[m]
                self._CS[:, j] = self._clipped_column(j)
                G[:, j] = self._CS[:, j] / n + beta[:, j] + rho2 * (B[:, j] - W[:, j])
                col = np.abs(soft_threshold(B[:, j] - G[:, j] * inv_col, thr_col) - B[:, j]) * sqrtM
                col[j] = -np.inf
                selector.update_column(j, col)
        self.steps_taken += self.steps
        self.ledger.record(self.pid, PrivacyEvent("coordinate-selection", EXPONENTIAL, delta_s, b, self.steps))
        for m in np.flatnonzero(rows_used):
            self.ledger.record(
                self.pid, PrivacyEvent("coordinate-update", GAUSSIAN, float(delta_row[m]), float(sigma_row[m]), int(rows_used[m]))
            )
        r, c = np.nonzero(B != B0)
        entries = SparseEntries(r.astype(np.int32), c.astype(np.int32), B[r, c].astype(np.float64))
        return SparseUpdate(rnd, self.pid, d, entries, None)


class DPDenseParticipant(Participant):
    """DP-Fed-BNSL participant: one Gaussian release of the clipped ``X_cᵀX_c`` (rows clipped to
    ℓ₂ norm ``C_x = c·√(Σ_j v̂_j)``, symmetric noise, sensitivity ``√2·C_x²``), projected to PSD;
    then the Fed-BNSL closed-form updates on it (post-processing)."""

    uses_exact_moments = False

    def __init__(
        self,
        pid: int,
        X: np.ndarray,
        n_total: int,
        *,
        sigma_multiplier: float,
        budget: OneOffBudget,
        rng: np.random.Generator,
        ledger: PrivacyLedger,
        clip: float = 1.5,
    ):
        ledger.add_participant(pid)
        centre, v_hat, _, notes = private_preprocessing(pid, X, budget, rng, ledger)
        super().__init__(pid, X, n_total, 0.0, centre=centre)
        self.notes = notes
        Xc = self._Xc
        c_x = clip * float(np.sqrt(v_hat.sum()))
        norms = np.sqrt((Xc * Xc).sum(axis=1))
        scale = np.minimum(1.0, c_x / np.maximum(norms, 1e-300))
        Xs = Xc * scale[:, None]
        sens = float(np.sqrt(2.0) * c_x**2)
        std = sigma_multiplier * sens
        noisy = Xs.T @ Xs + symmetric_gaussian_matrix(self.d, std, rng)
        ledger.record(pid, PrivacyEvent("covariance", GAUSSIAN, sens, std, 1))
        self._S = project_psd(noisy) / float(n_total)
        self.clip_norm = c_x

    def _local_update(self, rnd: int) -> DenseUpdate:
        A = self._S + self.rho2 * np.eye(self.d)
        self.B = np.linalg.solve(A, self._S - self.beta + self.rho2 * self.W)
        return DenseUpdate(rnd, self.pid, self.d, self.B, None)
