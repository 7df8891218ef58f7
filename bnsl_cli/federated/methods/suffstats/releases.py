"""fed-suffstats' releases: their budget shares, the clip, the release list builder, each release's
sensitivity and the noisy releases a site makes of its rows (docs/privacy.md derives the sensitivities)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bnsl_cli.federated.methods.suffstats.bins import centre_histograms, scale_histograms
from bnsl_cli.privacy.bounding import clamp_abs, clamp_rows, clip_factors, row_norms
from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.mechanisms import gaussian_noise, isometric_gaussian_matrix
from bnsl_cli.privacy.release_plan import covariance_sensitivity, multiplier_for_rho
from bnsl_cli.privacy.releases import GAUSSIAN, PlannedRelease, ReleaseKind


#: Share of the zCDP budget ρ* spent on the scale histograms (issue 19); the rest goes to the
#: whitened-moment stages in :data:`STAGE_SHARES` (benchmarks/RESULTS.md "Private learners": 4 stages
#: with shares ∝ 1, 2, 3, 4 beat 2, 3, 5 and 6 stages on the simulated d = 50 networks, 3 seeds).
HIST_SHARE = 0.10
#: Share of ρ* spent on the centre histograms (linear bins in units of the coarse scale, read after
#: the scale histograms). The two histogram releases together keep the 0.1 the scale histograms had
#: alone; the stages' budget is unchanged.
CENTRE_SHARE = 0.05
STAGE_SHARES = (0.1, 0.2, 0.3, 0.4)
STAGES = len(STAGE_SHARES)
#: Row clip of the moment releases: ``‖a‖ ≤ CLIP·√(d + 1)`` (about the median norm of a whitened row).
#: A clip that grows with ε (up to 8, until the noise is a quarter of the rows' sampling error) was
#: measured worse at ε = 1000 on 9 of 15 simulated cases (benchmarks/RESULTS.md, issue 27).
CLIP = 1.0
#: Each value is clamped to ``m̃_j ± STAGE_Z·s̃_j`` before a stage's whitening: a column whose released
#: scale is wrong adds at most ``STAGE_Z²`` to a row's squared norm instead of taking the whole clip
#: (and with it every row's weight); a Gaussian column with a right scale is never touched (10⁻¹⁵ of
#: its rows). 4 scales was tried: it cut heavy tails that carry signal (Sachs, ε = 5, SHD 39 against 34).
STAGE_Z = 8.0

# ----------------------------------------------------------------------------------------------
# the release list
# ----------------------------------------------------------------------------------------------


def planned_releases(rho_star: float, hist_share: Optional[float] = None, stage_shares=None,
                     centre_share: Optional[float] = None) -> list:
    """fed-suffstats' releases for a budget of ``rho_star``: the scale histograms with ``hist_share``
    of it, the centre histograms with ``centre_share``, then one whitened-moment release per stage with
    its share of the rest (defaults: :data:`HIST_SHARE`, :data:`CENTRE_SHARE`, :data:`STAGE_SHARES`)."""
    h = HIST_SHARE if hist_share is None else float(hist_share)
    c = CENTRE_SHARE if centre_share is None else float(centre_share)
    shares = STAGE_SHARES if stage_shares is None else tuple(stage_shares)
    if (not (0 < h < 1) or not (0 < c < 1) or not h + c < 1 or not shares or any(not f > 0 for f in shares)
            or abs(sum(shares) - 1.0) > 1e-9):
        raise PrivacyBudgetError("fed-suffstats: the histogram shares must be > 0 with a sum below 1, and the stage "
                                 "shares be > 0 and sum to 1")
    out = [PlannedRelease(ReleaseKind.SCALE_HISTOGRAM, GAUSSIAN, multiplier_for_rho(h * rho_star), 1),
           PlannedRelease(ReleaseKind.CENTRE_HISTOGRAM, GAUSSIAN, multiplier_for_rho(c * rho_star), 1)]
    out += [PlannedRelease(ReleaseKind.WHITENED_MOMENTS, GAUSSIAN, multiplier_for_rho((1 - h - c) * f * rho_star), 1)
            for f in shares]
    return out


def release_builder(**_):
    """The registry's ``release_builder``: fed-suffstats' releases do not depend on the run's shape."""
    return planned_releases


#: The report's ``privacy.mechanism``.
MECHANISM = (
    f"Gaussian releases of summed statistics: the scale and the centre histograms, then the clipped second moments in {STAGES} "
    "whitened stages; a noise-aware score search on them (post-processing)"
)


def stage_releases(privacy) -> list:
    return [r for r in privacy.releases if r.kind == ReleaseKind.WHITENED_MOMENTS]


def plan_exchanges(plan) -> str:
    """What a fed-suffstats plan runs, for the coordinator's log (the registry's ``plan_exchanges``)."""
    return f"{len(stage_releases(plan.privacy))} stages" if plan.private else "one stage of moments"

def release_sensitivity(kind: ReleaseKind, d: int) -> float:
    """Replace-one L2 sensitivity of one fed-suffstats release over ``d`` columns (docs/privacy.md):
    the scale histograms ``2√d`` (one count moves in two bins of each of two histograms per column),
    the centre histograms ``√(2d)`` (one count moves per column), a whitened-moment stage ``√2·C²`` with
    ``C = CLIP·√(d + 1)`` (rows clipped to ℓ₂ norm ``C``)."""
    if kind == ReleaseKind.SCALE_HISTOGRAM:
        return 2.0 * math.sqrt(d)
    if kind == ReleaseKind.CENTRE_HISTOGRAM:
        return math.sqrt(2.0 * d)
    if kind == ReleaseKind.WHITENED_MOMENTS:
        return covariance_sensitivity(CLIP * math.sqrt(d + 1))
    raise ValueError(f"fed-suffstats makes no {kind} release")


def pooled_noise_std(rel, d: int, sites: int) -> float:
    """The noise std of the sum of ``sites`` shares of the planned release ``rel`` (each share
    ``multiplier·sensitivity/√split``; a whitened-moment stage's on the diagonal)."""
    if rel.kind == ReleaseKind.WHITENED_MOMENTS:
        # √2·C² written as C² = CLIP²·(d + 1): the bits the stages' τ has always had (√2·(CLIP·√(d + 1))²
        # can differ in the last one, and the staged search amplifies last bits)
        return rel.multiplier * math.sqrt(2.0) * (CLIP**2 * (d + 1)) * math.sqrt(sites / rel.split)
    return rel.multiplier * release_sensitivity(rel.kind, d) * math.sqrt(sites / rel.split)


#: A whitened-moment stage's noise is isometric (:func:`~bnsl_cli.privacy.mechanisms.isometric_gaussian_matrix`):
#: an off-diagonal entry's std is this times the diagonal's (:func:`pooled_noise_std`).
OFFDIAGONAL = math.sqrt(0.5)


def offdiagonal_noise_std(rel, d: int, sites: int) -> float:
    """The noise std of an off-diagonal entry of a summed whitened-moment stage: :data:`OFFDIAGONAL`
    times :func:`pooled_noise_std`. A stage's ``τ`` is this over the rows' weight."""
    return pooled_noise_std(rel, d, sites) * OFFDIAGONAL


def _symmetric_noise(d: int, std: float, rng) -> np.ndarray:
    return isometric_gaussian_matrix(d, std, rng)


def whitened_rows(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray) -> np.ndarray:
    """``a = [1; L⁻¹ (x − m̃)/s̃]`` for every row (n × (d + 1))."""
    from scipy.linalg import solve_triangular

    Z = (X - centre[None, :]) / scale[None, :]
    Y = solve_triangular(L, Z.T, lower=True).T
    return np.hstack([np.ones((X.shape[0], 1)), Y])


def whitened_moments_release(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray, multiplier: float,
                             rng, split: int = 1):
    """One private stage: ``Σ a aᵀ`` over the rows (each value clamped to ``m̃_j ± STAGE_Z·s̃_j`` first, see
    :mod:`bnsl_cli.privacy.bounding`), each ``a`` clipped to ℓ₂ norm ``C = CLIP·√(d + 1)``, plus isometric symmetric Gaussian noise of std
    ``multiplier·√2·C²`` on the diagonal and ``1/√2`` of it off the diagonal (the Gaussian mechanism on
    the isometric vectorisation, whose L2 sensitivity is the Frobenius one, ``√2·C²``; ``/√split``:
    this site's share under distributed noise). Returns the matrix and its ledger event."""
    d = X.shape[1]
    A = whitened_rows(clamp_rows(X, centre, scale**2, STAGE_Z), centre, scale, L)  # bounding
    c = CLIP * math.sqrt(d + 1)
    A = clamp_abs(A)  # finite whatever row arrives; the clip factor is never 0·inf (bounding)
    A = A * clip_factors(row_norms(A), c)[:, None]
    sens = release_sensitivity(ReleaseKind.WHITENED_MOMENTS, d)
    std = multiplier * sens
    M = A.T @ A + _symmetric_noise(d + 1, std / math.sqrt(split), rng)
    return M, PrivacyEvent(ReleaseKind.WHITENED_MOMENTS, GAUSSIAN, sens, std, 1, split)


def scale_histogram_release(X: np.ndarray, multiplier: float, rng, split: int = 1):
    """The scale histograms (:func:`~bnsl_cli.federated.methods.suffstats.bins.scale_histograms`) of the
    rows, values then pairs, flattened, plus Gaussian noise of std ``multiplier·2√d`` (``/√split``: this
    site's share). Returns the values and their ledger event."""
    d = X.shape[1]
    hv, hp = scale_histograms(X)
    sens = release_sensitivity(ReleaseKind.SCALE_HISTOGRAM, d)
    std = multiplier * sens
    flat = np.concatenate([hv.ravel(), hp.ravel()])
    return flat + gaussian_noise(flat.size, std / math.sqrt(split), rng), PrivacyEvent(
        ReleaseKind.SCALE_HISTOGRAM, GAUSSIAN, sens, std, 1, split)


def centre_histogram_release(X: np.ndarray, lo: np.ndarray, width: np.ndarray, multiplier: float, rng,
                             split: int = 1):
    """The centre histograms (:func:`centre_histograms`, bins broadcast as ``lo``, ``width``) of the rows,
    flattened, plus Gaussian noise of std ``multiplier·√(2d)`` (``/√split``: this site's share). Replace-one
    moves one count from one bin to another in each column: L2 sensitivity ``√(2d)``. Returns the values
    and their ledger event."""
    d = X.shape[1]
    flat = centre_histograms(X, lo, width).ravel()
    sens = release_sensitivity(ReleaseKind.CENTRE_HISTOGRAM, d)
    std = multiplier * sens
    flat = flat + gaussian_noise(flat.size, std / math.sqrt(split), rng)
    return flat, PrivacyEvent(ReleaseKind.CENTRE_HISTOGRAM, GAUSSIAN, sens, std, 1, split)
