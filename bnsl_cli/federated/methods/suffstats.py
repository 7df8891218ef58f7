"""``--method fed-suffstats``: private sufficient statistics in a few sum-shaped releases, then a
structure search that knows their noise (:mod:`bnsl_cli.solvers.suffstats`).

Everything a site sends is a share the coordinator only sums (:class:`ShareReply`, summable under
``bnsl serve --secure-sum`` and in process, see :class:`bnsl_cli.federated.secure_local.SecureLocalFleet`).

Private run (releases of :class:`~bnsl_cli.privacy.releases.ReleaseKind`; docs/privacy.md derives
the sensitivities):

1. ``scale-histogram`` — per column two histograms on fixed, data-independent log-spaced bins:
   of the row values (signed, quarter-octave bins) and of the absolute differences of consecutive
   row pairs (half-octave bins; pairs by row position, so no centre is needed). Replace-one changes
   one count in two bins of each histogram per column: L2 sensitivity ``2√d``. The coordinator fits
   Gaussian shapes (public counts, all bins, least squares): a scale ``s̃_j`` from the pairs and a
   coarse interval for the centre from the values (:func:`coarse_bins`); columns that no fit reads
   fall back to merged quartile bins and are named in the report.
1b. ``centre-histogram`` — per column :data:`CENTRE_BINS` linear bins placed by step 1 (public:
   post-processing) over the coarse interval ± ``CENTRE_MARGIN·s̃``; replace-one moves one count per
   column: L2 sensitivity ``√(2d)``. A fitted normal shape gives the centre ``m̃_j`` to a fraction of a
   standard deviation and the scale (:func:`refine_centre`) — log bins alone are ≈ 19 % of ``|x|``
   wide, so a centre read from them is off by many standard deviations when ``|m| ≫ s``.
2. ``whitened-moments``, ``STAGES`` times — the coordinator broadcasts ``m̃``, ``s̃`` and a lower
   triangular ``L`` (public: post-processing of earlier releases; ``L = I`` first); each site
   releases ``Σ a aᵀ`` over its rows, ``a = [1; L⁻¹ (x − m̃)/s̃]`` clipped to ℓ₂ norm
   ``C = clip·√(d + 1)`` (replace-one sensitivity ``√2·C²``), plus symmetric Gaussian noise. The
   coordinator gets the weighted mean and second moments in the whitened basis, maps them back
   (``L · L⁻ᵀ``, then raw units), runs the noise-aware search, and turns the graph into the next
   stage's ``L``: the Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹``.
   Isotropic noise in a whitened basis enters the moments as ``L N Lᵀ``, nearly proportional to
   the covariance, like sampling noise; its small eigen-directions are no longer swamped. The
   next stage's centre is moved to the released weighted mean. A stage whose clipped weight is
   within 3 noise stds is skipped (the next one uses the last basis that worked, or the same); if
   all are, the run stops with the ε and rows per site that would work (:func:`usable_at`).

The graph of the last stage is the result (``W[i, j]`` is the edge ``i → j``, raw units).

Non-private run: one exchange of mean shares (``Σ x / n``), then one stage with ``m̃`` the pooled
mean, ``s̃ = 1``, ``L = I``, no clip, no noise: the exact pooled moments, the same search with τ = 0.
"""

from __future__ import annotations

import math
import time
from typing import Optional

import numpy as np

from bnsl_cli.dag import finish_graph
from bnsl_cli.errors import NoisyReleaseWarning, PrivacyBudgetError, UnsafeMessageError, warn
from bnsl_cli.federated.messages import (
    CENTRE_ROUND,
    BasisBroadcast,
    CentreRequest,
    FirstRequest,
    MessageKind,
    ShareReply,
    message_kind,
    read_header,
)
from bnsl_cli.federated.outcome import SolverOutcome
from bnsl_cli.federated.reply_limits import NOISE_TAIL, ROUNDING, ROW_VALUE_LIMIT, MeanShares, Rule, psd_message
from bnsl_cli.federated.share_site import ShareSite
from bnsl_cli.privacy.bounding import ABS_MAX, clamp_abs, clamp_rows, clip_factors, row_norms, triangular_solve_bound
from bnsl_cli.privacy.defaults import SUFFSTATS_CENTRE_SHARE, SUFFSTATS_HIST_SHARE, SUFFSTATS_STAGE_SHARES
from bnsl_cli.privacy.ledger import PrivacyEvent, PrivacyLedger
from bnsl_cli.privacy.mechanisms import gaussian_noise, symmetric_gaussian_matrix
from bnsl_cli.privacy.release_plan import covariance_sensitivity, fed_suffstats_releases, spend_of
from bnsl_cli.privacy.releases import GAUSSIAN, ReleaseKind
from bnsl_cli.solvers.suffstats import learn_suffstats
from bnsl_cli.stats import check_scales, from_upper_triangle, standardized, sum_shares, upper_triangle

__all__ = [
    "HIST_SHARE",
    "STAGE_SHARES",
    "STAGES",
    "CLIP",
    "FirstRequest",
    "CentreRequest",
    "BasisBroadcast",
    "CENTRE_BINS",
    "centre_histograms",
    "coarse_bins",
    "refine_centre",
    "centre_histogram_release",
    "usable_at",
    "value_bins",
    "pair_bins",
    "scale_histograms",
    "centre_and_scale",
    "fed_suffstats_releases",
    "SuffstatsSite",
    "make_suffstats_site",
    "drive_suffstats",
    "model_whitening",
    "HistogramShares",
    "WhitenedShares",
    "reply_rules",
]

#: Shares of ρ* spent on the scale and the centre histograms and the shares of the rest for the
#: whitened-moment stages (their calibration: :func:`bnsl_cli.privacy.release_plan.fed_suffstats_releases`).
HIST_SHARE = SUFFSTATS_HIST_SHARE
CENTRE_SHARE = SUFFSTATS_CENTRE_SHARE
STAGE_SHARES = SUFFSTATS_STAGE_SHARES
STAGES = len(STAGE_SHARES)
#: Row clip of the moment releases: ``‖a‖ ≤ CLIP·√(d + 1)`` (about the median norm of a whitened row).
CLIP = 1.0
#: Each value is clamped to ``m̃_j ± STAGE_Z·s̃_j`` before a stage's whitening: a column whose released
#: scale is wrong adds at most ``STAGE_Z²`` to a row's squared norm instead of taking the whole clip
#: (and with it every row's weight); a Gaussian column with a right scale is never touched (10⁻¹⁵ of
#: its rows). 4 scales was tried: it cut heavy tails that carry signal (Sachs, ε = 5, SHD 39 against 34).
STAGE_Z = 8.0
#: Histogram bins: values on quarter-octave bins over ``|x| ∈ [2^-RANGE, 2^RANGE]`` (both signs),
#: pair differences on half-octave bins over the same range; the end bins take everything beyond.
RANGE = 40
_V_STEPS = 4
_P_STEPS = 2
#: Summed bins below this many noise stds are taken as empty.
HIST_Z = 3.0


def value_bins() -> int:
    return 2 * (_V_STEPS * 2 * RANGE + 1) + 1


def pair_bins() -> int:
    return _P_STEPS * 2 * RANGE + 2


def _value_index(x: np.ndarray) -> np.ndarray:
    """Bin of each value: 0 for |x| < 2^-RANGE, ±(1 + k) for |x| in the k-th quarter octave above it."""
    a = np.abs(x)
    with np.errstate(divide="ignore"):
        k = np.floor(_V_STEPS * (np.log2(np.where(a > 0, a, 1.0)) + RANGE))
    k = np.clip(k, 0, _V_STEPS * 2 * RANGE).astype(np.int64)
    idx = np.where(a < 2.0**-RANGE, 0, (k + 1) * np.sign(x).astype(np.int64))
    return idx + (_V_STEPS * 2 * RANGE + 1)


def _value_of_bin(b: np.ndarray) -> np.ndarray:
    """Geometric middle of a value bin (0 for the zero bin)."""
    off = np.asarray(b) - (_V_STEPS * 2 * RANGE + 1)
    k = np.abs(off) - 1
    mag = 2.0 ** ((k + 0.5) / _V_STEPS - RANGE)
    return np.where(off == 0, 0.0, np.sign(off) * mag)


def _pair_index(a: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        k = np.floor(_P_STEPS * (np.log2(np.where(a > 0, a, 1.0)) + RANGE)) + 1
    k = np.where(a < 2.0**-RANGE, 0, k)
    return np.clip(k, 0, pair_bins() - 1).astype(np.int64)


def _pair_value(b: np.ndarray) -> np.ndarray:
    return 2.0 ** ((np.asarray(b) - 1 + 0.5) / _P_STEPS - RANGE)


def scale_histograms(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(values, pairs)``: per column the counts of the rows' values (``d × value_bins()``) and of
    the absolute differences of consecutive row pairs (``d × pair_bins()``)."""
    X = np.asarray(X, float)
    n, d = X.shape
    hv = np.zeros((d, value_bins()))
    iv = _value_index(X)
    for j in range(d):
        hv[j] = np.bincount(iv[:, j], minlength=value_bins())
    m = n // 2
    hp = np.zeros((d, pair_bins()))
    if m:
        ip = _pair_index(np.abs(X[0 : 2 * m : 2] - X[1 : 2 * m : 2]))
        for j in range(d):
            hp[j] = np.bincount(ip[:, j], minlength=pair_bins())
    return hv, hp


def _quantile_bin(h: np.ndarray, q: float) -> Optional[int]:
    tot = h.sum()
    if not tot > 0:
        return None
    return int(np.searchsorted(np.cumsum(h), q * tot))


#: Coarser resolutions tried, in bins merged, when single bins are lost in the noise.
MERGES = (1, 2, 4, 8, 16, 32, 64)


def _denoised(h: np.ndarray, noise_std: float, expected: float) -> tuple[Optional[np.ndarray], int]:
    """``(counts, f)``: the finest merge of ``f`` adjacent bins whose bins above ``HIST_Z`` noise
    stds (of the merged bin) hold at least half of the ``expected`` count, the others set to 0;
    ``(None, 0)`` when no resolution does."""
    for f in MERGES:
        m = -(-h.size // f) * f
        hf = np.concatenate([h, np.zeros(m - h.size)]).reshape(-1, f).sum(axis=1)
        keep = hf > HIST_Z * float(noise_std) * math.sqrt(f)
        if keep.any() and hf[keep].sum() >= 0.5 * expected:
            return np.where(keep, hf, 0.0), f
    return None, 0


def _value_edges() -> np.ndarray:
    """The ``value_bins() + 1`` edges of the value bins, increasing (the open end bins get the next
    quarter-octave edge as their outer edge)."""
    # bin b (0-based) of value_bins(): negative bins K+1 … 1 (b = 0 … K), the zero bin (b = K + 1),
    # positive bins 1 … K+1 (b = K + 2 … 2K + 2), with K = _V_STEPS·2·RANGE. Positive bin k ≥ 1 holds
    # |x| ∈ [2^((k−1)/V − R), 2^(k/V − R)); the last one everything above.
    K = _V_STEPS * 2 * RANGE
    pos = 2.0 ** (np.arange(K + 2) / _V_STEPS - RANGE)  # pos[i]: lower edge of positive bin i + 1
    neg = -pos[::-1]
    # edges: −pos[K+1] … −pos[0], +pos[0] … +pos[K+1]; the zero bin spans (−pos[0], pos[0])
    return np.concatenate([neg, pos])


def _pair_fractions(log2_s: np.ndarray) -> np.ndarray:
    """The expected share of pairs in each pair bin (``len(log2_s) × pair_bins()``) when the column is
    Gaussian with standard deviation ``2^log2_s``: ``|x − x'| ~ |N(0, 2 s²)|``, ``P(|D| < t) = erf(t / 2s)``."""
    from scipy.special import erf

    k = np.arange(pair_bins() + 1)
    edges = np.where(k == 0, 0.0, 2.0 ** ((k - 1.0) / _P_STEPS - RANGE))
    edges[-1] = np.inf
    s = 2.0 ** np.asarray(log2_s, float)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        cdf = erf(edges[None, :] / (2.0 * s))
    cdf[:, -1] = 1.0
    return np.diff(cdf, axis=1)


#: A fitted shape counts only when the histogram's amplitude along it is at least this share of the
#: public count it was drawn with (every fit: scale, coarse centre, centre); 0.75 means the fit explains
#: at least half of its own shape's square sum.
AMPLITUDE_MIN = 0.75
#: The scale fit's grid: log₂ s̃ in steps of 1/16 octave over the histograms' range.
_FIT_STEP = 1.0 / 16.0


def fit_pair_scale(hp: np.ndarray, noise_std: float, n_pairs: float) -> tuple[np.ndarray, np.ndarray]:
    """``(s̃, ok)``: per column the scale whose expected pair-difference histogram (Gaussian shape,
    ``n_pairs`` pairs: public) is nearest the noisy one in least squares, over a grid of 1/16 octave.
    Every bin counts (no threshold): the noise is spread over all of them and the fit adds up the
    signal of all. ``ok``: the fit explains more than ``HIST_Z² σ²`` of the histogram's square sum and
    the histogram's amplitude along the shape is at least ``AMPLITUDE_MIN`` of ``n_pairs`` (a column
    failing that has the best fit all the same, to be checked against the values)."""
    grid = np.arange(-RANGE, RANGE + _FIT_STEP / 2, _FIT_STEP)
    E = float(n_pairs) * _pair_fractions(grid)  # (grid, bins)
    H = np.asarray(hp, float)
    EE = np.einsum("gb,gb->g", E, E)[None, :]
    HE = H @ E.T
    gain = 2.0 * HE - EE  # Σh² − SSE, per column and grid point
    best = np.argmax(gain, axis=1)
    rows = np.arange(H.shape[0])
    # the shape must be there at about its public size: h's amplitude along it at least AMPLITUDE_MIN of
    # n_pairs (noise that happens to look like a far-off shape explains little of that shape's own energy)
    ok = (gain[rows, best] > (HIST_Z * float(noise_std)) ** 2) & (HE[rows, best] >= AMPLITUDE_MIN * EE[0, best])
    return 2.0 ** grid[best], ok


def _quantile_interval(hv: np.ndarray, noise_std: float, n_values: float) -> Optional[tuple[float, float]]:
    """``(a, b)``: from the lower edge of the bin of the first quartile to the upper edge of the bin of
    the third, read at the finest resolution whose bins rise above the noise (:func:`_denoised`;
    merged bins count with all their width). ``None``: no resolution is usable."""
    h, f = _denoised(hv, noise_std, n_values)
    if h is None:
        return None
    edges = _value_edges()
    lo, hi = _quantile_bin(h, 0.25), _quantile_bin(h, 0.75)
    nb = value_bins()
    a = edges[min(lo * f, nb - 1)]
    b = edges[min((hi + 1) * f, nb)]
    return float(a), float(max(b, a))


#: The coarse centre fit tries the middles (and quarter points) of this many value bins where the
#: smoothed histogram is largest, and a linear grid of ``s̃/4`` steps over ``±64 s̃`` around 0.
_FIT_TOP_BINS = 40


def coarse_interval(hv: np.ndarray, scales, noise_std: float, n_values: float
                    ) -> Optional[tuple[float, float, float]]:
    """``(a, b, s)``: an interval of values that holds one column's centre, read from its noisy value
    histogram (post-processing), and the scale it was read with. The normal shape ``N(m, s²)``
    (``n_values`` rows: public; ``s`` one of ``scales``) nearest the histogram in least squares over
    all bins (no threshold; ``m`` tried at the bins where the smoothed counts are largest and on a grid
    of ``s/2`` around 0); the interval is the value bin holding that ``m`` (the bins' resolution)
    joined with ``m ± CENTRE_MARGIN·s``, never outside the bins the data fill. ``None`` when no fit
    explains more than ``HIST_Z² σ²`` of the histogram."""
    from scipy.special import ndtr

    h = np.asarray(hv, float)
    edges = _value_edges()
    nb = value_bins()
    smooth = np.convolve(h, np.ones(5), mode="same")
    top = np.argsort(smooth)[::-1][:_FIT_TOP_BINS]
    lo_e, hi_e = edges[top], edges[top + 1]
    in_bins = (lo_e[:, None] + (hi_e - lo_e)[:, None] * (np.arange(4)[None, :] + 0.5) / 4.0).ravel()
    inner = edges[1:-1]
    best = None
    for scale in scales:
        m = np.unique(np.concatenate([in_bins, scale * np.arange(-64, 65) / 2.0]))
        with np.errstate(over="ignore", invalid="ignore"):
            cdf = ndtr((inner[None, :] - m[:, None]) / scale)
        z = np.zeros((m.size, 1))
        E = float(n_values) * np.diff(np.concatenate([z, cdf, z + 1.0], axis=1), axis=1)
        HE, EE = E @ h, np.einsum("mb,mb->m", E, E)
        gain = np.where(HE >= AMPLITUDE_MIN * EE, 2.0 * HE - EE, -np.inf)
        k = int(np.argmax(gain))
        if best is None or gain[k] > best[0]:
            best = (float(gain[k]), float(m[k]), float(scale))
    if best is None or not best[0] > (HIST_Z * float(noise_std)) ** 2:  # (−inf: no shape of the public size)
        return None
    _, mk, scale = best
    b = int(np.clip(np.searchsorted(edges, mk, side="right") - 1, 0, nb - 1))
    a_ = min(float(edges[b]), mk - CENTRE_MARGIN * scale)
    b_ = max(float(edges[b + 1]), mk + CENTRE_MARGIN * scale)
    return a_, b_, scale


#: Centre histograms: this many linear bins per column (the end bins take everything beyond) ...
CENTRE_BINS = 128
#: ... each at least this many coarse scales wide, spanning the coarse interval and this many coarse
#: scales on each side of it.
CENTRE_MIN_WIDTH = 0.25
CENTRE_MARGIN = 4.0


def centre_bins(interval: Optional[tuple[float, float]], scale: float) -> tuple[float, float]:
    """``(lo, w)``: the centre histogram's bins for one column (post-processing of the scale
    histograms): :data:`CENTRE_BINS` bins of width ``w`` from ``lo``, covering the coarse interval
    ``(a, b)`` widened by ``CENTRE_MARGIN·s̃`` each side, at least ``CENTRE_MIN_WIDTH·s̃`` wide. Without
    an interval: around 0."""
    a, b = (-scale, scale) if interval is None else interval
    span = (b - a) + 2.0 * CENTRE_MARGIN * scale
    w = max(span / CENTRE_BINS, CENTRE_MIN_WIDTH * scale)
    mid = 0.5 * (a + b)
    lo = mid - 0.5 * CENTRE_BINS * w
    if not (math.isfinite(lo) and math.isfinite(w) and w > 0):
        lo, w = -0.5 * CENTRE_BINS, 1.0
    return float(lo), float(w)


def centre_histograms(X: np.ndarray, lo: np.ndarray, width: np.ndarray) -> np.ndarray:
    """Per column the counts of the rows in :data:`CENTRE_BINS` bins of width ``width_j`` from ``lo_j``
    (``d × CENTRE_BINS``); a value below the first bin counts in it, above the last in the last.
    Any finite row lands in exactly one bin per column (the index is clipped before it is rounded)."""
    X = np.asarray(X, float)
    n, d = X.shape
    with np.errstate(over="ignore", invalid="ignore"):
        u = (X - lo[None, :]) / width[None, :]
    u = np.nan_to_num(u, nan=0.0, posinf=CENTRE_BINS, neginf=-1.0)  # (finite rows give no NaN)
    idx = np.floor(np.clip(u, 0.0, CENTRE_BINS - 1.0)).astype(np.int64)
    out = np.zeros((d, CENTRE_BINS))
    for j in range(d):
        out[j] = np.bincount(idx[:, j], minlength=CENTRE_BINS)
    return out


def _normal_fractions(mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
    """Expected share of N(μ, sd²) in each unit-width centre bin (bins at 0, 1, …; open end bins);
    ``mu`` and ``sd`` broadcast to one shape, the bins are the last axis."""
    from scipy.special import ndtr

    e = np.arange(1, CENTRE_BINS, dtype=float)
    cdf = ndtr((e - np.asarray(mu)[..., None]) / np.asarray(sd)[..., None])
    zeros = np.zeros(cdf.shape[:-1] + (1,))
    return np.diff(np.concatenate([zeros, cdf, zeros + 1.0], axis=-1), axis=-1)


def fit_centre(h: np.ndarray, noise_std: float, n_values: float) -> Optional[tuple[float, float]]:
    """``(μ, σ)`` in bin units: the normal shape nearest (least squares, all bins, ``n_values`` rows:
    public) to one column's noisy centre histogram; ``None`` when it explains no more than
    ``HIST_Z² σ_noise²``. First μ over the bin middles with σ from 1/2 to 32 bins (octaves), then μ to
    1/8 bin and σ to 1/4 octave (1/4 to 64 bins) near the best. The coarse scale is not used: a wrong
    one cannot mislead the fit. μ stays inside the bins' span."""
    h = np.asarray(h, float)
    n = float(n_values)

    def gain(mu, sd):
        E = n * _normal_fractions(mu, sd)
        HE, EE = E @ h, np.einsum("...b,...b->...", E, E)
        return np.where(HE >= AMPLITUDE_MIN * EE, 2.0 * HE - EE, -np.inf)

    mus = np.arange(CENTRE_BINS) + 0.5
    sds = 2.0 ** np.arange(-1, 6)
    g = gain(mus[None, :], sds[:, None])
    i, k = np.unravel_index(np.argmax(g), g.shape)
    mu_f = np.clip(mus[k] + np.arange(-12, 13) / 8.0, 0.0, float(CENTRE_BINS))
    sd_f = 2.0 ** (np.arange(-8, 25) / 4.0)
    g2 = gain(mu_f[None, :], sd_f[:, None])
    a, b = np.unravel_index(np.argmax(g2), g2.shape)
    if not g2[a, b] > (HIST_Z * float(noise_std)) ** 2:
        return None
    return float(mu_f[b]), float(sd_f[a])


def centre_and_scale(hv: np.ndarray, hp: np.ndarray, noise_std: float, n_values: Optional[float] = None,
                     n_pairs: Optional[float] = None) -> tuple[np.ndarray, np.ndarray, list]:
    """The coarse centre and scale of every column from the summed noisy scale histograms
    (post-processing): the scale by :func:`fit_pair_scale`, the centre the middle of
    :func:`coarse_interval` (``n_values``, ``n_pairs``: the public counts; by default the noisy
    totals). Returns ``(m̃, s̃, defaulted)``: columns without a usable histogram keep the public
    defaults ``m̃ = 0`` / ``s̃ = 1`` for what could not be read, and are listed. The private run refines
    both with the centre histograms (:func:`refine_centre`)."""
    ev = hv.sum(axis=1) if n_values is None else float(n_values)
    ep = float(np.median(hp.sum(axis=1))) if n_pairs is None else float(n_pairs)
    intervals, s, defaulted = _coarse_intervals(hv, hp, noise_std, ev, ep)
    m = np.array([0.0 if iv is None else 0.5 * (iv[0] + iv[1]) for iv in intervals])
    s = np.where([iv is None for iv in intervals], 1.0, s)
    return m, s, defaulted


def _coarse_intervals(hv: np.ndarray, hp: np.ndarray, noise_std: float, n_values, n_pairs: float
                      ) -> tuple[list, np.ndarray, list]:
    """Per column the coarse interval ``(a, b)`` of its centre (``None``: unreadable) and its scale
    (:func:`_interval` at the pairs' fitted scale; the pairs' scale where no interval), with the
    columns whose scale or interval could not be read. ``n_values``: one public count, or one per column."""
    d = hv.shape[0]
    nv = np.broadcast_to(np.asarray(n_values, dtype=float), (d,))
    s, ok = fit_pair_scale(hp, noise_std, max(float(n_pairs), 1.0))
    intervals, defaulted = [], []
    for j in range(d):
        iv = _interval(hv[j], float(s[j]), bool(ok[j]), noise_std, float(nv[j]))
        if iv is None or iv[2] != s[j]:
            defaulted.append(j)
        if iv is not None:
            s[j] = iv[2]
        intervals.append(None if iv is None else iv[:2])
    return intervals, s, defaulted


def _interval(hv: np.ndarray, s: float, ok: bool, noise_std: float, n_values: float
              ) -> Optional[tuple[float, float, float]]:
    """``(a, b, s)``: the coarse interval of one column and its scale: the values' fit
    :func:`coarse_interval` at the pairs' best scale ``s`` (also when the pair fit failed its own
    checks, ``ok`` false: the values passing theirs at that scale confirm it). When the values do not
    fit it: the quartiles' bins (:func:`_quantile_interval`, read with merged bins) and a scale of
    their width / 1.35 (the interquartile range of a normal; merged bins make it larger, never smaller:
    the safe side), at least ``s`` when the pair fit passed."""
    iv = coarse_interval(hv, [s], noise_std, n_values)
    if iv is not None:
        # (a pair fit that failed its own checks passes when the values fit its scale: both agree)
        return iv
    # the values do not fit the pairs' scale: that scale is not trusted either
    iv = _quantile_interval(hv, noise_std, n_values)
    if iv is None:
        return None
    # never below the pairs' scale when their fit passed (too small a scale is the harmful side)
    return iv[0], iv[1], max((iv[1] - iv[0]) / 1.35, s if ok else 0.0, 2.0**-RANGE)


def coarse_bins(hv: np.ndarray, hp: np.ndarray, noise_std: float, n_values: float, n_pairs: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """``(lo, w, s̃, defaulted)``: the centre histograms' bins of every column (:func:`centre_bins`)
    from the summed scale histograms, with the coarse scale and the columns whose scale or interval
    could not be read (post-processing)."""
    intervals, s, defaulted = _coarse_intervals(hv, hp, noise_std, n_values, n_pairs)
    bins = [centre_bins(iv, float(sj)) for iv, sj in zip(intervals, s)]
    lo = np.array([b[0] for b in bins])
    w = np.array([b[1] for b in bins])
    return lo, w, s, defaulted


def refine_centre(hc: np.ndarray, lo: np.ndarray, w: np.ndarray, s: np.ndarray, noise_std: float,
                  n_values: float) -> tuple[np.ndarray, np.ndarray, list]:
    """``(m̃, s̃, unresolved)``: the centre of every column from its summed noisy centre histogram
    (:func:`fit_centre`, post-processing), in raw units, always inside the histogram's span. The scale
    is the fit's, at least half a bin (below that the bins cannot tell it). A column whose histogram the fit cannot read keeps the middle of its bins and the
    coarse ``s``, at least half a bin, and is listed. Too small a scale is what must not happen: a
    row's whitened value would be large and the stages' clip would shrink the whole row to nothing;
    one too large only blurs the column in the first stage, which the later stages' bases correct."""
    d = hc.shape[0]
    m = lo + 0.5 * CENTRE_BINS * w
    s_out = np.maximum(np.array(s, float), 0.5 * w)
    unresolved = []
    for j in range(d):
        fit = fit_centre(hc[j], noise_std, n_values)
        if fit is None:
            unresolved.append(j)
            continue
        mu, sd = fit
        m[j] = lo[j] + mu * w[j]
        if not 1.0 <= mu <= CENTRE_BINS - 1.0:
            # the rows lie beyond the bins: the coarse interval missed them; the centre is the edge
            # they lie beyond, and the scale wide enough for the first stage to keep their weight
            unresolved.append(j)
            s_out[j] = max(s_out[j], 0.25 * CENTRE_BINS * w[j])
            continue
        s_out[j] = max(sd, 0.5) * w[j]
    return m, s_out, unresolved


# ----------------------------------------------------------------------------------------------
# the release list
# ----------------------------------------------------------------------------------------------


def release_builder(**_):
    """The registry's ``release_builder``: fed-suffstats' releases do not depend on the run's shape."""
    return fed_suffstats_releases


#: The report's ``privacy.mechanism``.
MECHANISM = (
    f"Gaussian releases of summed statistics: the scale and the centre histograms, then the clipped second moments in {STAGES} "
    "whitened stages; a noise-aware score search on them (post-processing)"
)


def _stage_releases(privacy) -> list:
    return [r for r in privacy.releases if r.kind == ReleaseKind.WHITENED_MOMENTS]


# ----------------------------------------------------------------------------------------------
# the broadcast of the basis
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# what a site accepts: checks of a broadcast's contents on public values, before any row is touched
# ----------------------------------------------------------------------------------------------

#: A private site answers a basis broadcast only when its scales lie in this range, its centres and its
#: ``L``'s entries are at most :data:`BASIS_CENTRE_MAX` / :data:`BASIS_ENTRY_MAX` in magnitude, and no
#: finite row can make a whitened value larger than :data:`WHITENED_MAX` (:func:`basis_problem`). The
#: honest coordinator's bases lie far inside: their scales and centres come from the histograms'
#: range ``2^±RANGE`` and the released means, their ``L`` from a model covariance with residual
#: variances floored at the stage's noise.
BASIS_SCALE_RANGE = (2.0**-500, 2.0**500)
BASIS_CENTRE_MAX = 2.0**500
BASIS_ENTRY_MAX = 2.0**400
WHITENED_MAX = 2.0**500


def whitening_bound(centre: np.ndarray, scale: np.ndarray, L: np.ndarray) -> float:
    """The largest ``|y|`` a stage's whitening (:func:`whitened_moments_release`) can produce from any
    finite row, from the broadcast alone (:func:`bnsl_cli.privacy.bounding.triangular_solve_bound`):
    every value is first clamped to ``m̃_j ± min(STAGE_Z·s̃_j, ABS_MAX)``, so ``|z_j| = |x_j − m̃_j| / s̃_j``
    is at most that half-width over ``s̃_j`` plus the rounding of ``m̃_j ± …`` (half an ulp of ``m̃_j``)."""
    centre, scale = np.asarray(centre, float), np.asarray(scale, float)
    with np.errstate(over="ignore", invalid="ignore"):
        half = np.minimum(STAGE_Z * scale, ABS_MAX) * (1.0 + 2.0**-40)
        zeta = (half + 2.0**-51 * np.abs(centre)) / scale * (1.0 + 2.0**-40)
    return triangular_solve_bound(zeta, L)


def basis_problem(msg: BasisBroadcast, d: int, private: bool) -> Optional[str]:
    """Why a site with ``d`` columns must not answer the basis broadcast ``msg`` (``None``: it may),
    read from the message alone. Every run: ``d`` matches, centre, scale and ``L`` are finite, the
    scales positive, ``L`` lower triangular with a positive diagonal. Private runs also: the ranges of
    :data:`BASIS_SCALE_RANGE`, :data:`BASIS_CENTRE_MAX`, :data:`BASIS_ENTRY_MAX`, and
    :func:`whitening_bound` at most :data:`WHITENED_MAX` — so the whitening, the clip and the moments
    are finite for every data set and the release's sensitivity is what the plan says."""
    if msg.d != d:
        return f"a basis broadcast for d = {msg.d}, this site has {d} columns"
    if not all(np.all(np.isfinite(v)) for v in (msg.centre, msg.scale, msg.L)):
        return "a basis broadcast with a value that is not finite"
    if not np.all(msg.scale > 0):
        return "a basis broadcast with a scale that is not positive"
    if np.any(np.triu(msg.L, 1) != 0):
        return "a basis broadcast whose L is not lower triangular"
    diag = np.diag(msg.L)
    if not np.all(diag > 0):
        return "a basis broadcast whose L has a diagonal entry that is not positive"
    if not private:
        return None
    lo, hi = BASIS_SCALE_RANGE
    if not (np.all(msg.scale >= lo) and np.all(msg.scale <= hi)):
        return f"a basis broadcast with a scale outside [2^-500, 2^500] (smallest {msg.scale.min():.3g}, largest {msg.scale.max():.3g})"
    if np.max(np.abs(msg.centre), initial=0.0) > BASIS_CENTRE_MAX:
        return f"a basis broadcast with a centre beyond ±2^500 ({np.max(np.abs(msg.centre)):.3g})"
    if np.max(np.abs(msg.L), initial=0.0) > BASIS_ENTRY_MAX:
        return f"a basis broadcast whose L has an entry beyond ±2^400 ({np.max(np.abs(msg.L)):.3g})"
    bound = whitening_bound(msg.centre, msg.scale, msg.L)
    if not bound <= WHITENED_MAX:
        return (f"a basis broadcast whose whitening could reach {bound:.3g} on a finite row (at most 2^500 = "
                f"{WHITENED_MAX:.3g} is accepted): its L is too close to singular against its off-diagonal entries")
    return None


def centre_request_problem(req: CentreRequest, d: int) -> Optional[str]:
    """Why a private site with ``d`` columns must not answer the centre request ``req`` (``None``: it
    may), read from the message alone: its shape, and bins ``lo_j + k·w_j`` that are finite with
    ``w_j > 0`` (any finite row then lands in exactly one bin per column)."""
    if req.d != d or req.count != d * CENTRE_BINS or req.round != CENTRE_ROUND:
        return f"a centre request that is not for {d} columns of {CENTRE_BINS} bins"
    with np.errstate(over="ignore", invalid="ignore"):
        top = req.lo + CENTRE_BINS * req.width
    if not (np.all(np.isfinite(req.lo)) and np.all(np.isfinite(req.width)) and np.all(req.width > 0)
            and np.all(np.isfinite(top))):
        return "a centre request whose bins are not finite with a positive width"
    return None


def first_request_problem(req: FirstRequest, d: int, private: bool) -> Optional[str]:
    """Why a site with ``d`` columns must not answer the first request ``req`` (its shape)."""
    want = d * (value_bins() + pair_bins()) if private else d
    if req.d != d or req.count != want or req.round != 0:
        return f"a first request for d = {req.d}, {req.count} values, round {req.round} (this site: d = {d}, {want} values, round 0)"
    return None


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


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
    ``multiplier·sensitivity/√split``)."""
    if rel.kind == ReleaseKind.WHITENED_MOMENTS:
        # √2·C² written as C² = CLIP²·(d + 1): the bits the stages' τ has always had (√2·(CLIP·√(d + 1))²
        # can differ in the last one, and the staged search amplifies last bits)
        return rel.multiplier * math.sqrt(2.0) * (CLIP**2 * (d + 1)) * math.sqrt(sites / rel.split)
    return rel.multiplier * release_sensitivity(rel.kind, d) * math.sqrt(sites / rel.split)


def _symmetric_noise(d: int, std: float, rng) -> np.ndarray:
    return symmetric_gaussian_matrix(d, std, rng)


def _whitened_rows(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray) -> np.ndarray:
    """``a = [1; L⁻¹ (x − m̃)/s̃]`` for every row (n × (d + 1))."""
    from scipy.linalg import solve_triangular

    Z = (X - centre[None, :]) / scale[None, :]
    Y = solve_triangular(L, Z.T, lower=True).T
    return np.hstack([np.ones((X.shape[0], 1)), Y])


def whitened_moments_release(X: np.ndarray, centre: np.ndarray, scale: np.ndarray, L: np.ndarray, multiplier: float,
                             rng, split: int = 1):
    """One private stage: ``Σ a aᵀ`` over the rows (each value clamped to ``m̃_j ± STAGE_Z·s̃_j`` first, see
    :mod:`bnsl_cli.privacy.bounding`), each ``a`` clipped to ℓ₂ norm ``C = CLIP·√(d + 1)``, plus symmetric Gaussian noise of std ``multiplier·√2·C²``
    (``/√split``: this site's share under distributed noise). Returns the matrix and its ledger event."""
    d = X.shape[1]
    A = _whitened_rows(clamp_rows(X, centre, scale**2, STAGE_Z), centre, scale, L)  # bounding
    c = CLIP * math.sqrt(d + 1)
    A = clamp_abs(A)  # finite whatever row arrives; the clip factor is never 0·inf (bounding)
    A = A * clip_factors(row_norms(A), c)[:, None]
    sens = release_sensitivity(ReleaseKind.WHITENED_MOMENTS, d)
    std = multiplier * sens
    M = A.T @ A + _symmetric_noise(d + 1, std / math.sqrt(split), rng)
    return M, PrivacyEvent(ReleaseKind.WHITENED_MOMENTS, GAUSSIAN, sens, std, 1, split)


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


class SuffstatsSite(ShareSite):
    """A fed-suffstats participant. Answers a :class:`FirstRequest` (private: its share of the
    scale histograms; non-private: of the column means) and then every :class:`BasisBroadcast` with
    its share of the augmented second moments in that basis, each stage once."""

    def __init__(self, pid: int, X: np.ndarray, *, privacy=None, rng=None, label: Optional[str] = None,
                 n_total: Optional[int] = None):
        self.pid = int(pid)
        self._X = np.asarray(X, dtype=float)
        self.n_rows, self.d = self._X.shape
        self.n_total = int(self.n_rows if n_total is None else n_total)
        self.label = self.who = label or f"participant {pid + 1}"
        self.ledger = PrivacyLedger()
        self.ledger.add_participant(self.pid)
        self.privacy = privacy
        self.rng = rng
        self.compute_s = 0.0
        self.notes: dict = {}
        self.answered: set = set()
        if privacy is not None:
            if rng is None:
                raise PrivacyBudgetError("a private participant needs its own noise source (rng)")
            if (len(_stage_releases(privacy)) != STAGES or privacy.multiplier(ReleaseKind.SCALE_HISTOGRAM) is None
                    or privacy.multiplier(ReleaseKind.CENTRE_HISTOGRAM) is None):
                raise PrivacyBudgetError(f"{self.label}: the plan does not calibrate fed-suffstats' releases")

    def _split(self, rel) -> int:
        return int(rel.split)

    def _refuse_if(self, why: Optional[str]) -> None:
        """Refuse a message whose contents fail a check made on the message alone (before any row is
        touched: the refusal is the same on every data set)."""
        if why is not None:
            raise UnsafeMessageError(f"{self.label} refused {why}")

    def handle(self, data: bytes) -> Optional[bytes]:
        t0 = time.perf_counter()
        kind = message_kind(data)
        if kind == FirstRequest.kind:
            req = FirstRequest.decode(data)
            self._refuse_if(first_request_problem(req, self.d, self.privacy is not None))
            self._once("first")
            if self.privacy is None:
                values = self._X.sum(axis=0) / float(self.n_total)
            else:
                rel = next(r for r in self.privacy.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
                hv, hp = scale_histograms(self._X)
                sens = release_sensitivity(ReleaseKind.SCALE_HISTOGRAM, self.d)
                std = rel.multiplier * sens
                flat = np.concatenate([hv.ravel(), hp.ravel()])
                values = (flat + gaussian_noise(flat.size, std / math.sqrt(self._split(rel)), self.rng)) / float(self.n_total)
                self.ledger.record(self.pid, PrivacyEvent(ReleaseKind.SCALE_HISTOGRAM, GAUSSIAN, sens, std, 1, self._split(rel)))
        elif kind == CentreRequest.kind:
            req = CentreRequest.decode(data)
            if self.privacy is None:
                raise ValueError(f"{self.label}: a centre request in a non-private run")
            if "first" not in self.answered or any(w.startswith("stage") for w in self.answered):
                raise ValueError(f"{self.label}: a centre request comes after the first request and before the stages")
            self._refuse_if(centre_request_problem(req, self.d))
            self._once("centre")
            rel = next(r for r in self.privacy.releases if r.kind == ReleaseKind.CENTRE_HISTOGRAM)
            flat, event = centre_histogram_release(self._X, req.lo, req.width, rel.multiplier, self.rng, self._split(rel))
            values = flat / float(self.n_total)
            self.ledger.record(self.pid, event)
        elif kind == BasisBroadcast.kind:
            msg = BasisBroadcast.decode(data)
            if "first" not in self.answered:
                raise ValueError(f"{self.label}: a basis broadcast before the first request")
            self._refuse_if(basis_problem(msg, self.d, self.privacy is not None))
            self._once(f"stage {msg.round}")
            if self.privacy is None:
                A = _whitened_rows(self._X, msg.centre, msg.scale, msg.L)
                M = A.T @ A
            else:
                stages = _stage_releases(self.privacy)
                if not 1 <= msg.round <= len(stages):
                    raise ValueError(f"{self.label}: stage {msg.round} is not in the plan")
                rel = stages[msg.round - 1]
                M, event = whitened_moments_release(self._X, msg.centre, msg.scale, msg.L, rel.multiplier, self.rng,
                                                    self._split(rel))
                self.ledger.record(self.pid, event)
            values = upper_triangle(M) / float(self.n_total)
            req = msg
        else:
            raise ValueError(f"{self.label}: fed-suffstats answers only a first request and basis broadcasts")
        self.compute_s += time.perf_counter() - t0
        return ShareReply(req.round, self.pid, self.d, values).encode()


def make_suffstats_site(plan, pid: int, X: np.ndarray, rng) -> SuffstatsSite:
    return SuffstatsSite(pid, X, privacy=plan.privacy, rng=rng, label=plan.participants[pid].label, n_total=plan.n_total)


# ----------------------------------------------------------------------------------------------
# the coordinator side
# ----------------------------------------------------------------------------------------------


def model_whitening(G: np.ndarray, W: np.ndarray, floor: float) -> np.ndarray:
    """The lower Cholesky factor of the model covariance ``(I − B)⁻ᵀ diag(R) (I − B)⁻¹`` of the DAG
    weights ``W`` (``B = W``, in the units of ``G``) with residual variances ``R`` read from ``G``,
    floored at ``floor`` (a direction the release could not resolve is not amplified)."""
    d = G.shape[0]
    M = np.eye(d) - W
    R = np.maximum(np.diag(M.T @ G @ M), floor)
    Minv = np.linalg.inv(M)
    S = Minv.T @ (R[:, None] * Minv)
    S = 0.5 * (S + S.T)
    try:
        return np.linalg.cholesky(S)
    except np.linalg.LinAlgError:
        return np.linalg.cholesky(S + floor * np.eye(d))


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
    fr = _pair_fractions(np.arange(0.0, 1.0 / _P_STEPS, 1.0 / 16.0))
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
    last = _stage_releases(pv)[-1]
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
    split = max(int(r.split) for r in _stage_releases(pv))
    secure = (f"; with the secure sum (--noise distributed) it would be about {x / math.sqrt(plan.P):.2g}"
              if split == 1 and plan.P > 1 else "")
    return (f"fed-suffstats: the released moments are too noisy for {d} variables (noise scale {x:.2g} against 1, "
            f"at ε = {pv.epsilon:g} over {plan.n_total} rows): expect many wrong edges, the graph may be farther from "
            f"the truth than the empty graph; "
            f"about ε ≥ {eps:.3g} at these rows, or ≥ {rows} rows per site at this ε, brings it to 1{secure}")


def _sum(raw) -> np.ndarray:
    return sum_shares(ShareReply.decode(r).values for r in raw)


# -- what a site's shares may hold (bnsl_cli.federated.reply_limits) -------------------------------


class HistogramShares(Rule):
    """The limits of a private share of histograms (``(counts + noise) / n``): the scale histograms
    (the answer to the first request: per column :func:`value_bins` counts of the ``n_p`` rows and
    :func:`pair_bins` counts of its ``n_p // 2`` row pairs) or the centre histograms (per column
    :data:`CENTRE_BINS` counts of the rows). A count lies in ``[0, n_p]``, so a value is at most
    ``(n_p + NOISE_TAIL σ) / n`` (σ: the site's noise std of that release); and every row lands in exactly one
    bin of each of its column's histograms, so in the clear each histogram adds up to its rows (or
    pairs) within ``NOISE_TAIL σ √bins``."""

    def __init__(self, kind: ReleaseKind):
        self.kind = kind
        self.what = "scale histograms" if kind == ReleaseKind.SCALE_HISTOGRAM else "centre histograms"

    def _sigma(self, lim) -> Optional[float]:
        rel = lim.release(self.kind)
        return None if rel is None else lim.site_noise(rel, release_sensitivity(self.kind, lim.d))

    def _blocks(self, lim, index) -> list:
        """``(bins per column, what each column's histogram adds up to)`` of each block of the values."""
        n_p = lim.rows[index]
        if self.kind == ReleaseKind.SCALE_HISTOGRAM:
            return [(value_bins(), n_p, "rows"), (pair_bins(), n_p // 2, "row pairs")]
        return [(CENTRE_BINS, n_p, "rows")]

    def limit(self, lim, request, index):
        sigma = self._sigma(lim)
        if sigma is None:
            return None
        return ((lim.rows[index] + NOISE_TAIL * sigma) / lim.n * (1.0 + ROUNDING),
                f"counts of n_p rows plus {NOISE_TAIL:g} noise stds ({sigma:.3g}), over n")

    def consistent(self, lim, request, index, values):
        sigma = self._sigma(lim)
        if sigma is None:
            return None
        off = 0
        for bins, total, of in self._blocks(lim, index):
            block = values[off : off + lim.d * bins].reshape(lim.d, bins) * lim.n
            off += lim.d * bins
            gap = np.abs(block.sum(axis=1) - total)
            tol = NOISE_TAIL * sigma * math.sqrt(bins) * (1.0 + ROUNDING) + ROUNDING * max(total, 1)
            if (gap > tol).any():
                j = int(np.argmax(gap))
                return (f"sent {self.what} whose column {j + 1} adds up to {block[j].sum():.6g} {of}, not its {total} "
                        f"(within {tol:.3g}: the noise of {bins} bins)")
        return None


class WhitenedShares(Rule):
    """The limits of a share of the augmented second moments in a broadcast basis (the answer to a
    :class:`BasisBroadcast`, ``Σ_rows a aᵀ / n`` with ``a = [1; L⁻¹ (x − m̃)/s̃]``, upper triangle).

    Private: each ``a`` clipped to ``C = CLIP·√(d + 1)``, so an entry is at most
    ``(n_p C² + NOISE_TAIL σ) / n`` with σ that stage's noise std. Non-private: values below
    ``ROW_VALUE_LIMIT`` give ``|a_i| ≤ Σ_j |L⁻¹|_ij (ROW_VALUE_LIMIT + |m̃_j|)/s̃_j``; in the clear the
    site's matrix is positive semi-definite, its rows' weight (entry ``(0, 0)``) is exactly ``n_p / n``
    and its first row is ``n_p/n · L⁻¹ (x̄_p − m̃)/s̃`` for its own mean share ``x̄_p``."""

    what = "share of the whitened moments"

    @staticmethod
    def _basis(request):
        msg = BasisBroadcast.decode(request)
        Linv = np.linalg.inv(msg.L)
        return msg, Linv

    def limit(self, lim, request, index):
        n_p = lim.rows[index]
        a, b = np.triu_indices(lim.d + 1)
        if lim.privacy is None:
            msg, Linv = self._basis(request)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                z = (ROW_VALUE_LIMIT + np.abs(msg.centre)) / msg.scale
                top = np.concatenate([[1.0], np.abs(Linv) @ z])
            top = np.where(np.isfinite(top), top, np.inf)
            return (n_p / lim.n * top[a] * top[b] * (1.0 + ROUNDING),
                    f"n_p/n times products of whitened values below {ROW_VALUE_LIMIT:.0e}")
        stages = _stage_releases(lim.privacy)
        k = read_header(request).round
        if not 1 <= k <= len(stages):
            return None
        c2 = CLIP**2 * (lim.d + 1)
        sigma = lim.site_noise(stages[k - 1], release_sensitivity(ReleaseKind.WHITENED_MOMENTS, lim.d))
        return ((n_p * c2 + NOISE_TAIL * sigma) / lim.n * (1.0 + ROUNDING),
                f"n_p rows clipped to C² = {c2:.3g} plus {NOISE_TAIL:g} noise stds ({sigma:.3g}) of stage {k}, over n")

    def consistent(self, lim, request, index, values):
        if lim.privacy is not None:
            return None  # noisy moments
        d1 = lim.d + 1
        a, b = np.triu_indices(d1)
        n_p = lim.rows[index]
        w = values[0]
        if abs(w * lim.n - n_p) > 1e-9 * n_p:
            return (f"sent a share of the whitened moments whose rows' weight (Σ 1 / n) is {w * lim.n:.6g} rows, "
                    f"not its {n_p}")
        diag = {j: float(values[k]) for k, j in enumerate(a) if a[k] == b[k]}
        neg = [j for j, v in diag.items() if v < 0]
        if neg:
            return f"sent a share of the whitened moments with a negative square sum ({diag[neg[0]]:.3g})"
        if lim.site_means is not None:
            msg, Linv = self._basis(request)
            xbar = lim.site_means[index]
            want = n_p / lim.n * (Linv @ ((xbar - msg.centre) / msg.scale))
            got = values[1:d1]  # entries (0, 1 … d)
            tol = ROUNDING * (n_p / lim.n * (np.abs(Linv) @ ((np.abs(xbar) + np.abs(msg.centre)) / msg.scale))
                              + np.sqrt(np.maximum(w * np.array([diag[j] for j in range(1, d1)]), 0.0)))
            off = np.abs(got - want) > tol
            if off.any():
                j = int(np.argmax(np.abs(got - want) - tol))
                return (f"sent a share of the whitened moments whose mean entry {j + 1} ({got[j]:.6g}) contradicts its "
                        f"own share of the column means (which gives {want[j]:.6g})")
        return psd_message(values, a, b, diag, "a share of the whitened moments")


def reply_rules(plan) -> dict:
    """What fed-suffstats' replies may hold (:mod:`bnsl_cli.federated.reply_limits`): private, the scale
    and the centre histograms (:class:`HistogramShares`), non-private the column-mean shares
    (:class:`~bnsl_cli.federated.reply_limits.MeanShares`); the whitened moments of every stage
    (:class:`WhitenedShares`)."""
    first = HistogramShares(ReleaseKind.SCALE_HISTOGRAM) if plan.private else MeanShares()
    return {MessageKind.SUFFSTATS_FIRST: first, MessageKind.SUFFSTATS_CENTRE: HistogramShares(ReleaseKind.CENTRE_HISTOGRAM),
            MessageKind.SUFFSTATS_BASIS: WhitenedShares()}


def drive_suffstats(spec, plan, fleet, progress=None) -> SolverOutcome:
    """Coordinator side of fed-suffstats (see the module docstring)."""
    t_solve = 0.0
    d, n = plan.d, float(plan.n_total)
    fleet.traffic.enter("first")
    first = _sum(fleet.exchange(FirstRequest(0, d, d * (value_bins() + pair_bins()) if plan.private else d).encode()))
    notes: dict = {}
    if plan.private:
        pv = plan.privacy
        rel = next(r for r in pv.releases if r.kind == ReleaseKind.SCALE_HISTOGRAM)
        # the noise of the sum: P shares of std/√split each (split = P − t: more than std when t > 0)
        std_sum = pooled_noise_std(rel, d, plan.P)
        nv = d * value_bins()
        hv, hp = first[:nv].reshape(d, value_bins()) * n, first[nv:].reshape(d, pair_bins()) * n
        n_pairs = float(sum(p.rows // 2 for p in plan.participants))
        lo, width, coarse_scale, defaulted = coarse_bins(hv, hp, std_sum, n, n_pairs)
        # the centre histograms on linear bins placed by the scale histograms (post-processing)
        crel = next(r for r in pv.releases if r.kind == ReleaseKind.CENTRE_HISTOGRAM)
        fleet.traffic.enter("centre")
        raw = fleet.exchange(CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, lo, width).encode())
        hc = _sum(raw).reshape(d, CENTRE_BINS) * n
        c_std = pooled_noise_std(crel, d, plan.P)
        centre, scale, unresolved = refine_centre(hc, lo, width, coarse_scale, c_std, n)
        if defaulted:
            notes["scale_defaulted"] = [plan.names[j] for j in defaulted]
        if unresolved:
            notes["centre_unresolved"] = [plan.names[j] for j in unresolved]
        stages = _stage_releases(pv)
    else:
        centre, scale = first, np.ones(d)
        stages = [None]
    L = np.eye(d)
    L_ok = None
    history = []
    W = np.zeros((d, d))
    for k, rel in enumerate(stages, start=1):
        fleet.traffic.enter(f"stage {k}")
        raw = fleet.exchange(BasisBroadcast(k, d, centre, scale, L).encode())
        t0 = time.perf_counter()
        M = from_upper_triangle(_sum(raw), d + 1) * n
        w0 = M[0, 0]
        std_sum = 0.0 if rel is None else pooled_noise_std(rel, d, plan.P)
        if not (np.all(np.isfinite(M)) and w0 > 3.0 * std_sum and w0 > 0):
            # the rows' weight after the clip is lost in the noise: this basis whitened too hard, or
            # the noise of this stage is too large for the rows (post-processing of released values
            # decides it); back to the last basis that worked, or (none yet) the same basis again
            # with the next stage's larger share
            if L_ok is None and k == len(stages):
                raise PrivacyBudgetError(unusable_message(plan, d))
            history.append({"round": k, "tau": None, "edges": None, "score": None, "weight": float(w0 / n),
                            "note": "the clipped rows' weight is within the noise; "
                                    + ("the previous basis is used next" if L_ok is not None else "the next stage tries again")})
            if L_ok is not None:
                L = L_ok
            continue
        L_ok = L
        ybar = M[0, 1:] / w0
        Cy = M[1:, 1:] / w0 - np.outer(ybar, ybar)
        SL = scale[:, None] * L
        G = SL @ Cy @ SL.T  # raw units
        if rel is None:
            tau, H = 0.0, None
        else:
            tau = std_sum / w0
            H = SL @ SL.T
        sd = np.sqrt(np.maximum(np.diag(G), 0.0))
        mean = centre + scale * (L @ ybar)  # the released weighted mean, raw units
        if plan.standardize:
            # the search on the correlation matrix (quantised: a change of units moves only last bits)
            check_scales(mean, sd, plan.names)
            Gs, sd = standardized(G)
            res = learn_suffstats(Gs, n, tau, H=None if H is None else H / np.outer(sd, sd), knowledge=plan.knowledge)
            W = res.W * sd[None, :] / sd[:, None]  # raw units, for the next basis
        else:
            res = learn_suffstats(G, n, tau, H=H, knowledge=plan.knowledge)
            W = res.W
        history.append({"round": k, "tau": tau, "edges": int(res.E.sum()), "score": res.info.get("score"),
                        "weight": float(w0 / n)})
        if k < len(stages):
            # the next stage's basis: the centre moved to the released weighted mean, the whitening
            # of the model covariance (both post-processing of the releases)
            Gz = L @ Cy @ L.T  # the moments in units of s̃
            Wz = W * scale[:, None] / scale[None, :]
            L_next = model_whitening(0.5 * (Gz + Gz.T), Wz, tau)
            # a basis the sites would refuse (basis_problem: public bounds, far outside honest bases) is
            # not sent: the next stage uses this one again
            why = basis_problem(BasisBroadcast(k + 1, d, mean, scale, L_next), d, plan.private)
            if why is None:
                centre, L = mean, L_next
            else:
                history[-1]["note"] = f"the next basis would be refused by the sites ({why}); this one is used again"
        t_solve += time.perf_counter() - t0
        if progress is not None:
            progress({"round": k, "h": 0.0, "edges": int(res.E.sum())})
    warns = []
    taus = [h["tau"] for h in history if h.get("tau")]
    if plan.private and taus:
        w = noisy_moments_warning(plan, d, taus[-1])
        if w:
            warn([w], NoisyReleaseWarning, warns)
    thr = plan.threshold if plan.threshold_given else 0.0
    if plan.standardize:  # the run reports standardised weights; the standardisation stage maps them back
        W = res.W
    Wf, removed = finish_graph(W, thr, spec.name, plan.names, plan.knowledge)
    summaries = fleet.finish()
    return SolverOutcome(
        W, Wf, summaries,
        rounds=len(stages),
        converged=True,
        timing={"compute_s": t_solve + sum(s["compute_s"] for s in summaries)},
        messages="sum-shaped exchanges only: " + ("the scale histograms, the centre histograms, then the whitened moments "
                                                 "per stage"
                                                 if plan.private else "the column-mean shares, then the moments"),
        warnings=warns,
        final={"h": 0.0},
        history=history,
        removed_for_acyclicity=removed,
        solver_issues=[],
        suffstats={"centre": centre.tolist(), "scale": scale.tolist(), "stages": len(stages), **notes},
        standardize={
            "applied": bool(plan.standardize),
            "source": "the released moments (no extra message" + (", no extra release)" if plan.private else ")"),
            "mean": mean.tolist(),
            "sd": sd.tolist(),
        },
    )
