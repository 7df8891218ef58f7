"""The one-off private releases a participant makes before round 1.

Every function returns the released (noisy) value and the :class:`PrivacyEvent` to record; the
caller records it. Neighbouring relation: replace one row of this participant's data.

- :func:`release_range` — a per-column bound on ``|x − c|`` from a noisy histogram of ``|x − c|``
  over fixed, data-independent bins ``(4^(k−1), 4^k]``: each row adds 1 to one bin per column, so
  replacing a row moves at most 2 units per column: L2 sensitivity ``√(2d)``. The bound is the
  ``1 − q`` quantile of the denoised histogram (see the function).
- :func:`release_means` — ``Σ_rows clip(x_j / B_j, −1, 1)`` (columns scaled by the public bound):
  L2 sensitivity ``2√d``; the mean is ``B_j · (noisy sum) / n_p``.
- :func:`release_second_moments` — ``Σ_rows min(((x_j − μ̂_j)/B_j)², 1)``: sensitivity ``√d``;
  ``v̂_j = B_j² · (noisy sum) / n_p``, floored at a small positive value.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from bnsl_cli.errors import PrivacyBudgetError
from bnsl_cli.privacy.bounding import clip_scaled
from bnsl_cli.privacy.ledger import PrivacyEvent
from bnsl_cli.privacy.releases import GAUSSIAN, ReleaseKind
from bnsl_cli.privacy.mechanisms import gaussian_noise

__all__ = [
    "BIN_EDGES",
    "RANGE_BOUND_MAX",
    "means_sensitivity",
    "second_moments_sensitivity",
    "range_counts",
    "release_range",
    "release_means",
    "release_second_moments",
    "RAW_QUANTILE",
    "CENTRED_QUANTILE",
    "private_preprocessing",
    "one_off_multipliers",
]


#: Fixed bin edges for |x|: 4^k, k = −10 … 15 (about 1e-6 … 1e9). Public, data-independent.
#: Coarse bins keep the counts well above the noise at small budgets.
BIN_EDGES = 4.0 ** np.arange(-10, 16).astype(float)
#: The largest bound :func:`release_range` can return (public): the top bin's lower edge ``4^15``
#: times ``4^frac`` with ``frac ≤ 1``. A released mean or second moment is clipped at a bound at most
#: this (the coordinator's reply limits read it: :mod:`bnsl_cli.federated.reply_limits`).
RANGE_BOUND_MAX = float(BIN_EDGES[-1]) * 4.0


def means_sensitivity(d: int) -> float:
    """Replace-one L2 sensitivity of :func:`release_means`' clipped sums over ``d`` columns: ``2√d``."""
    return 2.0 * float(np.sqrt(d))


def second_moments_sensitivity(d: int) -> float:
    """Replace-one L2 sensitivity of :func:`release_second_moments`' clipped sums: ``√d``."""
    return float(np.sqrt(d))


def release_range(X: np.ndarray, centre: np.ndarray, sigma_multiplier: float, rng, *, quantile: float,
                  release: ReleaseKind) -> tuple[np.ndarray, PrivacyEvent]:
    """Noisy per-column upper ``quantile`` of ``|x − centre|`` from a histogram on ``BIN_EDGES``.

    Post-processing of the noisy counts: counts below ``3σ`` are set to 0 (so the noise of the many
    empty bins does not add up), only the contiguous run of kept bins with the largest mass is kept
    (a lone noise spike far from the data cannot set the bound), and the quantile of that mass is
    interpolated geometrically inside its bin. Columns whose whole histogram drowns in noise get
    ``nan``.
    """
    n, d = X.shape
    counts = range_counts(X, centre)
    sens = float(np.sqrt(2.0 * d))
    std = sigma_multiplier * sens
    noisy = counts + gaussian_noise(counts.shape, std, rng)
    kept = np.where(noisy > 3.0 * std, noisy, 0.0)
    for j in range(d):
        kept[j] = _largest_run(kept[j])
    total = kept.sum(axis=1)
    cum = np.cumsum(kept, axis=1)
    lower = np.concatenate([[BIN_EDGES[0] / 4.0], BIN_EDGES])  # lower edge of each bin
    bounds = np.full(d, np.nan)
    for j in np.flatnonzero(total > 0):
        target = (1.0 - quantile) * total[j]
        k = int(np.argmax(cum[j] >= target))
        before = cum[j, k] - kept[j, k]
        frac = (target - before) / kept[j, k]
        bounds[j] = lower[k] * 4.0**frac
    return bounds, PrivacyEvent(release, GAUSSIAN, sens, std, 1)


def range_counts(X: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The exact histogram (d × 27 counts) of ``|x − centre|`` on ``BIN_EDGES`` that :func:`release_range`
    adds noise to: each row adds 1 to one bin per column (an infinite ``|x − c|`` lands in the top bin)."""
    n, d = X.shape
    A = np.abs(X - centre[None, :])
    idx = np.searchsorted(BIN_EDGES, A, side="left")  # bin k holds edge[k-1] < |x| ≤ edge[k]
    nb = BIN_EDGES.size + 1
    flat = (np.arange(d)[None, :] * nb + idx).ravel()
    return np.bincount(flat, minlength=d * nb).reshape(d, nb).astype(float)


def _largest_run(counts: np.ndarray) -> np.ndarray:
    """Zero every bin outside the contiguous run of non-zero bins with the largest total."""
    nz = counts > 0
    if not nz.any():
        return counts
    edges = np.flatnonzero(np.diff(np.concatenate([[0], nz.astype(int), [0]])))
    starts, ends = edges[::2], edges[1::2]
    best = max(range(starts.size), key=lambda r: counts[starts[r] : ends[r]].sum())
    out = np.zeros_like(counts)
    out[starts[best] : ends[best]] = counts[starts[best] : ends[best]]
    return out


def release_means(X: np.ndarray, bound: np.ndarray, sigma_multiplier: float, rng) -> tuple[np.ndarray, PrivacyEvent]:
    """Noisy column means of ``X`` with values clipped to ``±bound`` (per column)."""
    n, d = X.shape
    sums = clip_scaled(X, bound).sum(axis=0)  # = clip(x/B, ±1), without overflowing x/B
    sens = means_sensitivity(d)
    std = sigma_multiplier * sens
    noisy = sums + gaussian_noise(d, std, rng)
    return bound * noisy / n, PrivacyEvent(ReleaseKind.COLUMN_MEANS, GAUSSIAN, sens, std, 1)


def release_second_moments(Xc: np.ndarray, bound: np.ndarray, sigma_multiplier: float, rng
                           ) -> tuple[np.ndarray, PrivacyEvent]:
    """Noisy per-row second moments ``v̂_j ≈ Σ_rows x_j² / n_p`` of the centred data, each term
    clipped at ``bound_j²``. A noisy sum below its own noise std (or below 1e-9·n_p) is raised to
    that level, so ``v̂`` stays positive (post-processing)."""
    n, d = Xc.shape
    sums = np.minimum(clip_scaled(Xc, bound) ** 2, 1.0).sum(axis=0)  # = min((x/B)², 1), no overflow
    sens = second_moments_sensitivity(d)
    std = sigma_multiplier * sens
    noisy = sums + gaussian_noise(d, std, rng)
    v = bound**2 * np.maximum(noisy, max(std, 1e-9 * n)) / n
    return v, PrivacyEvent(ReleaseKind.SECOND_MOMENTS, GAUSSIAN, sens, std, 1)


# ----------------------------------------------------------------------------------------------
# a participant's one-off releases, in order
# ----------------------------------------------------------------------------------------------


#: Quantiles of |x| (raw, for the mean) and |x − μ̂| (centred, for the second moments) used as bounds.
RAW_QUANTILE = 1e-3
CENTRED_QUANTILE = 1e-2


def _need_bound(label: str, bound: np.ndarray, what: str, noise_std: float, n: int, d: int) -> None:
    """Refuse (exit 5) when a range histogram drowned in its noise, with the numbers that say what
    would work: the noise per bin against the rows, and where to see it at another ε."""
    if np.isnan(bound).any():
        raise PrivacyBudgetError(
            f"{label}: too few rows for a private estimate of the {what} at this ε: the noisy histogram's "
            f"noise is {noise_std:.0f} counts per bin against {n} rows, and a bin is read only above 3 noise stds "
            f"({3.0 * noise_std:.0f} rows in one bin); `bnsl privacy-budget --method fed-sparse --epsilon E --samples {n} "
            f"--nodes {d}` shows the value-range multiplier at another ε (noise = multiplier × √(2d) counts); or pass "
            "--value-bound B (a public bound on |x|), --public-means if the data are centred, or use the --dp "
            "default method (fed-suffstats), which makes no value-range release"
        )


def private_preprocessing(X: np.ndarray, multipliers: dict, value_bound: Optional[float], rng, label: str = "participant"):
    """The one-off releases of a participant, each with the noise multiplier ``multipliers[kind]``
    of the run plan: (without ``value_bound``) raw range, column means (absent: public means, data
    taken as centred), (without ``value_bound``) centred range, second moments.

    Returns ``(centre, v_hat, events, notes)``. Nothing here uses the exact local mean."""
    n, d = X.shape
    given = value_bound is not None
    events = []
    notes = {}

    def bound(values: np.ndarray, kind: ReleaseKind, quantile: float, what: str) -> np.ndarray:
        """The public ``value_bound``, or a noisy range histogram's bound (a recorded release)."""
        if given:
            return np.full(d, float(value_bound))
        b, ev = release_range(values, np.zeros(d), multipliers[kind], rng, quantile=quantile, release=kind)
        events.append(ev)
        _need_bound(label, b, what, ev.noise_scale, n, d)
        return b

    if ReleaseKind.COLUMN_MEANS in multipliers:
        b_raw = bound(X, ReleaseKind.RANGE_RAW, RAW_QUANTILE, "value range")
        centre, ev = release_means(X, b_raw, multipliers[ReleaseKind.COLUMN_MEANS], rng)
        events.append(ev)
        notes["centring"] = "released column means (Gaussian mechanism on clipped values)"
    else:
        centre = np.zeros(d)
        notes["centring"] = "declared public: data taken as centred (--public-means); no release"
    Xc = X - centre[None, :]
    b_c = bound(Xc, ReleaseKind.RANGE_CENTRED, CENTRED_QUANTILE, "spread of the centred values")
    v_hat, ev = release_second_moments(Xc, b_c, multipliers[ReleaseKind.SECOND_MOMENTS], rng)
    events.append(ev)
    return centre, v_hat, events, notes


def one_off_multipliers(privacy) -> dict:
    kinds = (ReleaseKind.RANGE_RAW, ReleaseKind.COLUMN_MEANS, ReleaseKind.RANGE_CENTRED, ReleaseKind.SECOND_MOMENTS)
    return {k: privacy.multiplier(k) for k in kinds if privacy.multiplier(k) is not None}
