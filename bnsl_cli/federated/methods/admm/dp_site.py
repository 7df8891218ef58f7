"""Private participants: DP-PGCD (DP-Fed-Sparse-BNSL) and the noisy-covariance DP-Fed-BNSL.

Every data-dependent value that leaves these objects goes through a mechanism whose event is
recorded in the participant's own :class:`~bnsl_cli.privacy.ledger.PrivacyLedger`: the one-off
releases (value ranges, column means, second moments; or the covariance), per DP-PGCD step the
coordinate selection (exponential mechanism, Gumbel-max) and the noisy update (Gaussian), and the
polish's second moments. The messages then carry only post-processed values. The noise of every
release is the multiplier of that release in the run plan's release list. ``B[i, j]`` is the edge
``i → j``.

The mechanisms are plain functions with their inputs and releases explicit —
:func:`private_preprocessing`, :func:`dp_pgcd`, :func:`private_polish_moments`,
:func:`private_covariance` — and the participant classes only hold state between rounds.

DP-PGCD, with per-sample gradients ``g_ij(x) = x_i (xᵀB_{:,j} − x_j)`` clipped at ``C_i`` (the
curvature ``M_ij = m̂_i + ρ₂`` depends on the row only, so the clip levels do too):

    Ĝ_ij = (1/n) Σ_rows clip(g_ij(x), C_i) + β_ij + ρ₂ (B_ij − W_ij),        Δ_i = 2 C_i / n
    C_i  = c · √M_i · median_{k≠l} √(v̂_k v̂_l / M_k)       (so C_i = C √(M_i / ΣM))

``v̂`` are the released per-row second moments, ``m̂ = v̂ n_p / n``. Clip levels ``adaptive`` use
``M_i = m̂_i + ρ₂`` (recomputed each round; score sensitivity ``Δ_S = 2C / (n √ΣM)``), ``static``
use ``M_i = m̂_i`` for the levels (no per-round recomputation; ``Δ_S = max_i Δ_i / √(m̂_i + ρ₂)``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.federated.messages import DenseUpdate, SparseEntries, SparseUpdate
from bnsl_cli.federated.methods.admm.site import Participant
from bnsl_cli.privacy.bounding import clamp_rows, clip_factors
from bnsl_cli.solvers.dp_pgcd import ClippedGradients, clip_levels, dp_pgcd  # noqa: F401 - the kernels, importable from here too
from bnsl_cli.privacy.defaults import POLISH_CLIP
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.mechanisms import gaussian_noise, project_psd, symmetric_gaussian_matrix
from bnsl_cli.privacy.one_off import one_off_multipliers, private_preprocessing
from bnsl_cli.privacy.release_plan import covariance_sensitivity
from bnsl_cli.privacy.releases import GAUSSIAN, ReleaseKind

__all__ = [
    "rho2_schedule",
    "private_polish_moments",
    "private_covariance",
    "DPSparseParticipant",
    "DPDenseParticipant",
]

# ----------------------------------------------------------------------------------------------
# DP-PGCD
# ----------------------------------------------------------------------------------------------


def private_polish_moments(
    Xc: np.ndarray, v_hat: np.ndarray, pairs: np.ndarray, clip: float, multiplier: float, n_total: int, rng
) -> tuple[np.ndarray, PrivacyEvent]:
    """Gaussian release of the second moments ``Σ_rows x_a x_b / n`` on the requested flat pairs
    ``a·d + b``, with per-row clipping; returns the noisy values and the release.

    Each row contributes the standardised products ``u_ab = x_a x_b / √(v̂_a v̂_b)`` (``v̂`` the
    released second moments: data-independent scales); the vector ``u`` over the pairs is clipped to
    ℓ₂ norm ``C_r = κ·√|Q|``. Its median norm is about ``√|Q|`` (1.0–1.25 √|Q| on the benchmark
    data), so with κ = 1.5 about a quarter of the rows are shrunk, by a factor of 0.93–0.97 on
    average — nearly a common scale, which the least-squares score ignores. Clipping every
    product at 3 standard deviations instead biased the moments unevenly enough to cost most of
    the polish's gain (d = 200, noise-free: SHD 42 against 17 unclipped; 17–18 with this row
    clipping). Replacing one row moves the summed ``u`` by at most ``2C_r`` in ℓ₂: noise std
    ``σ_pol · 2C_r`` there, i.e. ``σ_pol · 2C_r · √(v̂_a v̂_b)`` on entry ``ab``; the release costs
    ``1/(2σ_pol²)`` zCDP."""
    d = v_hat.size
    a, b = pairs // d, pairs % d
    scale = np.sqrt(v_hat[a] * v_hat[b])
    n_rows = Xc.shape[0]
    # two passes over chunks of pairs (norms, then clipped sums) instead of holding the
    # n_p × |Q| matrix u: recomputing a product is cheaper than 50 MB at d = 200
    chunks = [slice(s, s + 512) for s in range(0, pairs.size, 512)]
    Xc = clamp_rows(Xc, np.zeros(d), v_hat)  # |x_j| ≤ 2⁴⁰√v̂_j: u ≤ 2⁸⁰, its squares finite (bounding)
    sq = np.zeros(n_rows)  # squared ℓ₂ norm of each row's u
    for sl in chunks:
        u = Xc[:, a[sl]] * Xc[:, b[sl]] / scale[sl]
        sq += np.einsum("ij,ij->i", u, u)
    c_row = clip * float(np.sqrt(pairs.size))
    factor = clip_factors(np.sqrt(sq), c_row)
    sums = np.empty(pairs.size)
    for sl in chunks:
        u = Xc[:, a[sl]] * Xc[:, b[sl]] / scale[sl]
        sums[sl] = factor @ u
    sens = 2.0 * c_row
    std = multiplier * sens
    noisy = sums + gaussian_noise(pairs.size, std, rng)
    return noisy * scale / float(n_total), PrivacyEvent(ReleaseKind.POLISH, GAUSSIAN, sens, std, 1)


def private_covariance(Xc: np.ndarray, v_hat: np.ndarray, clip: float, multiplier: float, rng) -> tuple[np.ndarray, PrivacyEvent]:
    """DP-Fed-BNSL's release: ``X_cᵀX_c`` with rows clipped to ℓ₂ norm ``C_x = c·√(Σ_j v̂_j)``,
    symmetric Gaussian noise (sensitivity ``√2·C_x²``), projected to PSD."""
    d = Xc.shape[1]
    c_x = clip * float(np.sqrt(v_hat.sum()))
    Xc = clamp_rows(Xc, np.zeros(d), v_hat)  # finite squares whatever row arrives (bounding)
    norms = np.sqrt((Xc * Xc).sum(axis=1))
    scale = clip_factors(norms, c_x)
    Xs = Xc * scale[:, None]
    sens = covariance_sensitivity(c_x)
    std = multiplier * sens
    noisy = Xs.T @ Xs + symmetric_gaussian_matrix(d, std, rng)
    return project_psd(noisy), PrivacyEvent(ReleaseKind.COVARIANCE, GAUSSIAN, sens, std, 1)


# ----------------------------------------------------------------------------------------------
# the participants (thin holders of state between rounds)
# ----------------------------------------------------------------------------------------------


def rho2_schedule(plan) -> tuple:
    """``(ρ₂ of round 1, growth, cap)``: the plan's public ρ₂ schedule, which every consensus broadcast
    must follow (the coordinator's ``ρ₂ ← min(ρ₂·growth, cap)`` after each round)."""
    pen = plan.penalty
    return float(pen.rho2), float(pen.growth2), float(pen.cap)


class _PrivateHolder(Participant):
    uses_exact_moments = False  # private participants never form the exact second-moment matrix
    private = True  # consensus broadcasts are held to the ranges of participant.consensus_problem

    def _start_ledger(self, pid, X, one_offs, value_bound, rng, label, preprocessed):
        """This participant's own ledger, and its one-off releases (or ones already made, e.g. by the
        standardisation stage): ``(centre, v_hat, events, notes)``; the caller records ``events``."""
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(pid)
        return preprocessed or private_preprocessing(X, one_offs, value_bound, rng, label or f"participant {pid + 1}")

    def _record(self, events) -> None:
        for ev in events:
            self.ledger.record(self.pid, ev)

    def events(self) -> list:
        return self.ledger.events(self.pid)


class DPSparseParticipant(_PrivateHolder):
    """DP-Fed-Sparse-BNSL participant: holds its rows, its noise source, its ledger and the DP-PGCD
    state between rounds; each round runs :func:`dp_pgcd`."""

    def __init__(
        self,
        pid: int,
        X: np.ndarray,
        n_total: int,
        lam: float,
        steps: int,
        *,
        one_offs: dict,
        value_bound: Optional[float],
        gumbel_multiplier: float,
        sigma_multiplier: float,
        rng: np.random.Generator,
        clip: float = 1.5,
        clip_levels: str = "adaptive",
        precision: str = "single",
        polish_multiplier: Optional[float] = None,
        polish_clip: float = POLISH_CLIP,
        label: Optional[str] = None,
        preprocessed: Optional[tuple] = None,
        report_B: bool = False,
        forbidden: Optional[np.ndarray] = None,
        rho2_schedule: Optional[tuple] = None,
    ):
        centre, v_hat, events, notes = self._start_ledger(pid, X, one_offs, value_bound, rng, label, preprocessed)
        X = clamp_rows(X, centre, v_hat)  # every later release sees bounded, finite rows (bounding)
        super().__init__(pid, X, n_total, lam, centre=centre, report_B=report_B, rho2_schedule=rho2_schedule)
        self._record(events)
        self.notes = notes
        self.label = label or f"participant {pid + 1}"
        self.forbidden = forbidden  # prior knowledge: public, from the plan
        self.steps = int(steps)
        self.v_hat = v_hat
        self.m_hat = v_hat * self.n_rows / float(n_total)
        self.clip = float(clip)
        self.clip_mode = clip_levels
        self.gumbel_multiplier = float(gumbel_multiplier)
        self.sigma_multiplier = float(sigma_multiplier)
        self.polish_multiplier = None if polish_multiplier is None else float(polish_multiplier)
        self.polish_clip = float(polish_clip)
        self.polish_released = False  # the budget covers one release
        self.rng = rng
        self.grads = ClippedGradients(self._Xc, precision)

    @classmethod
    def from_plan(cls, plan, pid: int, X: np.ndarray, rng: np.random.Generator, preprocessed=None) -> "DPSparseParticipant":
        pv = plan.privacy
        return cls(
            pid, X, plan.n_total, plan.lam, plan.steps, one_offs=one_off_multipliers(pv), value_bound=pv.value_bound,
            gumbel_multiplier=pv.multiplier(ReleaseKind.SELECTION), sigma_multiplier=pv.multiplier(ReleaseKind.UPDATE),
            rng=rng, clip=pv.clip, clip_levels=pv.clip_levels, polish_multiplier=pv.multiplier(ReleaseKind.POLISH),
            label=plan.participants[pid].label, preprocessed=preprocessed, report_B=plan.personal,
            forbidden=plan.forbidden_mask(), rho2_schedule=rho2_schedule(plan),
        )

    def _second_moments(self, pairs: np.ndarray) -> np.ndarray:
        if self.polish_multiplier is None or self.polish_released:
            raise PrivacyBudgetError(
                f"{self.label}: the polish's second moments were requested, but "
                + ("they were already released once" if self.polish_released else "no budget was calibrated for them")
            )
        self.polish_released = True
        values, ev = private_polish_moments(
            self._Xc, self.v_hat, pairs, self.polish_clip, self.polish_multiplier, self.n_total, self.rng
        )
        self._record([ev])
        return values

    def _local_update(self, rnd: int) -> SparseUpdate:
        # static levels do not depend on ρ₂: equal every round, so dp_pgcd does not recompute the sums
        levels = clip_levels(self.v_hat, self.m_hat, self.rho2, self.clip, self.clip_mode)
        B0 = self.B
        self.B, events = dp_pgcd(
            self.grads, levels, B0, self.beta, self.W, self.rho2, self.lam, self.m_hat, self.steps,
            self.n_total, self.gumbel_multiplier, self.sigma_multiplier, self.rng, forbidden=self.forbidden,
        )
        self._record(events)
        self.steps_taken += self.steps
        r, c = np.nonzero(self.B != B0)
        entries = SparseEntries(r.astype(np.int32), c.astype(np.int32), self.B[r, c].astype(np.float64))
        return SparseUpdate(rnd, self.pid, self.d, entries, None)


class DPDenseParticipant(_PrivateHolder):
    """DP-Fed-BNSL participant: one :func:`private_covariance` release, then the Fed-BNSL
    closed-form updates on it (post-processing)."""

    def __init__(
        self,
        pid: int,
        X: np.ndarray,
        n_total: int,
        *,
        one_offs: dict,
        value_bound: Optional[float],
        sigma_multiplier: float,
        rng: np.random.Generator,
        clip: float = 1.5,
        label: Optional[str] = None,
        preprocessed: Optional[tuple] = None,
        report_B: bool = False,
        rho2_schedule: Optional[tuple] = None,
    ):
        centre, v_hat, events, notes = self._start_ledger(pid, X, one_offs, value_bound, rng, label, preprocessed)
        X = clamp_rows(X, centre, v_hat)  # every later release sees bounded, finite rows (bounding)
        super().__init__(pid, X, n_total, 0.0, centre=centre, report_B=report_B, rho2_schedule=rho2_schedule)
        self._record(events)
        self.notes = notes
        self.label = label or f"participant {pid + 1}"
        S, ev = private_covariance(self._Xc, v_hat, clip, sigma_multiplier, rng)
        self._record([ev])
        self._S = S / float(n_total)

    @classmethod
    def from_plan(cls, plan, pid: int, X: np.ndarray, rng: np.random.Generator, preprocessed=None) -> "DPDenseParticipant":
        pv = plan.privacy
        return cls(
            pid, X, plan.n_total, one_offs=one_off_multipliers(pv), value_bound=pv.value_bound,
            sigma_multiplier=pv.multiplier(ReleaseKind.COVARIANCE), rng=rng, clip=pv.clip,
            label=plan.participants[pid].label, preprocessed=preprocessed, report_B=plan.personal,
            rho2_schedule=rho2_schedule(plan),
        )

    def _second_moments(self, pairs: np.ndarray) -> np.ndarray:
        raise PrivacyBudgetError(f"{self.label}: DP-Fed-BNSL plans no second-moment release for a polish")

    def _local_update(self, rnd: int) -> DenseUpdate:
        A = self._S + self.rho2 * np.eye(self.d)
        self.B = np.linalg.solve(A, self._S - self.beta + self.rho2 * self.W)
        return DenseUpdate(rnd, self.pid, self.d, self.B, None)
