"""fed-moments' releases: the release list and the clipped, noisy moment matrix a site releases."""

from __future__ import annotations

import numpy as np

from bnsl_cli.privacy.bounding import clamp_abs, clip_factors, row_norms
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.mechanisms import symmetric_gaussian_matrix
from bnsl_cli.privacy.release_plan import dp_fed_bnsl_releases
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind

# ----------------------------------------------------------------------------------------------
# privacy: the release list
# ----------------------------------------------------------------------------------------------


def dp_fed_moments_releases(rho_star: float, *, mean_share: float, moment_share: float, value_bound_given: bool) -> list:
    """DP fed-moments' releases: DP-Fed-BNSL's one-offs, then the moment matrix with the rest of ``rho_star``."""
    out = []
    for r in dp_fed_bnsl_releases(rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given):
        kind = ReleaseKind.MOMENT_MATRIX if r.kind == ReleaseKind.COVARIANCE else r.kind
        out.append(PlannedRelease(kind, r.mechanism, r.multiplier, r.count))
    return out


def dp_fed_moments_builder(*, mean_share, moment_share, value_bound_given, **_):
    """``ρ* -> releases`` of DP fed-moments for the plan's shape."""
    return lambda rho_star: dp_fed_moments_releases(
        rho_star, mean_share=mean_share, moment_share=moment_share, value_bound_given=value_bound_given
    )


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


def private_moment_matrix(Z: np.ndarray, clip: float, multiplier: float, rng, split: int = 1):
    """``Σ_rows z zᵀ`` with rows clipped to ℓ₂ norm ``C = clip·√d``, plus symmetric Gaussian noise
    (replace-one sensitivity ``√2·C²``). Not projected here: the coordinator projects the pooled sum
    once (post-processing), which keeps the noise of P participants from being rectified P times."""
    d = Z.shape[1]
    c_x = clip * float(np.sqrt(d))
    Z = clamp_abs(Z)  # finite whatever arrives; the clip factor below is never 0·inf (bounding)
    Zs = Z * clip_factors(row_norms(Z), c_x)[:, None]
    sens = float(np.sqrt(2.0) * c_x**2)
    std = multiplier * sens  # the noise of the release; with split noise, of the sum of ``split`` sites' shares
    noise = symmetric_gaussian_matrix(d, std / np.sqrt(split), rng)
    return Zs.T @ Zs + noise, PrivacyEvent(ReleaseKind.MOMENT_MATRIX, "gaussian", sens, std, 1, int(split))
