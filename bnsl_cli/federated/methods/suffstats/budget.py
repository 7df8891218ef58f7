"""When fed-suffstats' releases are usable and how noisy they are, from the plan's calibration alone
(the ε and rows per site that work, the last stage's noise scale and its warning)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bnsl_cli.federated.methods.suffstats.bins import _P_STEPS
from bnsl_cli.federated.methods.suffstats.fits import pair_fractions
from bnsl_cli.federated.methods.suffstats.releases import CLIP, pooled_noise_std, stage_releases
from bnsl_cli.privacy.release_plan import fed_suffstats_releases, spend_of
from bnsl_cli.privacy.releases import ReleaseKind


def clipped_weight_fraction(d: int) -> float:
    """The expected share of a row's weight kept by the stages' clip when the basis whitens the data
    (``a = [1; z]``, ``z`` standard normal in ``d`` dimensions, ``‖a‖ ≤ CLIP·√(d + 1)``):
    ``E min(1, C² / (1 + χ²_d))``. A stage is usable when its clipped weight clears 3 noise stds."""
    from scipy import integrate
    from scipy.stats import chi2

    c2 = CLIP**2 * (d + 1)
    t = c2 - 1.0
    below = chi2.cdf(t, d) if t > 0 else 0.0
    above, _ = integrate.quad(lambda x: c2 / (1.0 + x) * chi2.pdf(x, d), max(t, 0.0), np.inf, limit=200)
    return float(below + above)


#: The scale histograms are taken as readable when a Gaussian column's expected pair histogram stands
#: this many noise stds (of the pooled sum) out of the noise (its ℓ₂ norm over the bins).
HIST_SNR = 5.0


def pair_signal(n_pairs: float) -> float:
    """The ℓ₂ norm over the bins of a Gaussian column's expected pair histogram with ``n_pairs`` pairs
    (the mean over the bins' alignment: the same for any scale)."""
    fr = pair_fractions(np.arange(0.0, 1.0 / _P_STEPS, 1.0 / 16.0))
    return float(n_pairs) * float(np.mean(np.sqrt(np.sum(fr**2, axis=1))))


def usable_at(plan, d: int) -> tuple[float, int]:
    """``(ε, rows per site)``: the smallest ε (at this plan's δ, rows and sites) and the fewest rows per
    site (at this ε) with which fed-suffstats' releases are expected to be usable — the scale
    histograms' pair signal (:func:`pair_signal`) ``HIST_SNR`` noise stds above their pooled noise, and
    the last (largest) whitened-moment stage's clipped weight of whitened rows
    (:func:`clipped_weight_fraction`) 3 noise stds above its pooled noise — from the same calibration as
    ``privacy-budget --method fed-suffstats`` (the noise multipliers scale as ``1/√ρ*``)."""
    pv = plan.privacy
    n, P = float(plan.n_total), plan.P
    last = stage_releases(pv)[-1]
    hist = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
    # pooled noise std per unit multiplier
    stage_unit = pooled_noise_std(last, d, P) / last.multiplier
    hist_unit = pooled_noise_std(hist, d, P) / hist.multiplier
    q = clipped_weight_fraction(d)
    p1 = pair_signal(1.0)  # per pair
    # rows: the stage needs q·n ≥ 3·std; the histograms need p1·n/2 ≥ HIST_SNR·std (pairs = rows / 2)
    rows = max(3.0 * last.multiplier * stage_unit / q, 2.0 * HIST_SNR * hist.multiplier * hist_unit / p1) / P
    # ε: the largest multiplier each release may have at these rows, then the ρ* that gives it
    unit = fed_suffstats_releases(1.0)
    m_stage = q * n / (3.0 * stage_unit)
    m_hist = p1 * (n / 2.0) / (HIST_SNR * hist_unit)
    rho_star = max((unit[-1].multiplier / m_stage) ** 2, (unit[0].multiplier / m_hist) ** 2)
    return _epsilon_at(pv, rho_star), int(math.ceil(rows))


def _epsilon_at(pv, rho_star: float) -> float:
    """The ε that fed-suffstats' releases calibrated to ``rho_star`` spend, at the plan's δ, conversion
    and accountant."""
    return float(spend_of(fed_suffstats_releases(rho_star), pv.delta, pv.conversion, pv.accountant)[0])


def unusable_message(plan, d: int) -> str:
    eps, rows = usable_at(plan, d)
    pv = plan.privacy
    return (
        f"fed-suffstats: at ε = {pv.epsilon:g} the released statistics of {plan.n_total} rows over {plan.P} sites "
        f"(d = {d}) are lost in their noise (no whitened-moment stage kept the rows' weight); expected to be usable "
        f"with ε ≥ {eps:.3g} at these rows, or with ≥ {rows} rows per site at this ε "
        "(privacy-budget --method fed-suffstats shows the noise)"
    )


#: The last stage's noise scale ``2·τ·√(d + 1)`` (about the spectral norm of its noise in the whitened
#: basis, where the covariance is near the identity) above which a run warns: on issue 19's grid
#: (d = 20 … 100, 286 private runs) 247 of the 249 runs at or below 1 were below the empty graph's SHD
#: (the other two 1.04 ×); above 1, 21 of 37 had at least 0.9 × it, every run above 2.3 (benchmarks/RESULTS.md).
NOISE_SCALE_WARN = 1.0


def noise_scale(tau: float, d: int) -> float:
    """``2·τ·√(d + 1)``: the last stage's noise against the whitened covariance's unit scale."""
    return 2.0 * float(tau) * math.sqrt(d + 1.0)


def noisy_moments_warning(plan, d: int, tau: float) -> Optional[str]:
    """A one-line warning when the last stage's noise scale (:func:`noise_scale`) is above
    :data:`NOISE_SCALE_WARN`, with the ε (at these rows) and rows per site (at this ε) that bring it
    to 1 — the noise std falls as ``1/√ρ*`` and the row weight grows with the rows — and, for per-site
    noise, the scale with the secure sum (``--noise distributed``)."""
    x = noise_scale(tau, d)
    if not x > NOISE_SCALE_WARN:
        return None
    pv = plan.privacy
    eps = _epsilon_at(pv, pv.rho_target * x * x / NOISE_SCALE_WARN**2)
    rows = int(math.ceil(min(p.rows for p in plan.participants) * x / NOISE_SCALE_WARN))
    split = max(int(r.split) for r in stage_releases(pv))
    secure = (f"; with the secure sum (--noise distributed) it would be about {x / math.sqrt(plan.P):.2g}"
              if split == 1 and plan.P > 1 else "")
    return (f"fed-suffstats: the released moments are too noisy for {d} variables (noise scale {x:.2g} against 1, "
            f"at ε = {pv.epsilon:g} over {plan.n_total} rows): expect many wrong edges, the graph may be farther from "
            f"the truth than the empty graph; "
            f"about ε ≥ {eps:.3g} at these rows, or ≥ {rows} rows per site at this ε, brings it to 1{secure}")
