"""fed-suffstats' fits of the summed noisy histograms (post-processing): the scale from the pair
differences and the values together, a coarse interval for the centre from the values, the centre
histograms' bins, and the centre and scale refined from the centre histograms."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bnsl_cli.federated.methods.suffstats.bins import (
    CENTRE_BINS,
    CENTRE_MARGIN,
    HIST_Z,
    RANGE,
    _P_STEPS,
    centre_bins,
    pair_bins,
    value_bins,
    value_edges,
)


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

def pair_fractions(log2_s: np.ndarray) -> np.ndarray:
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


def pair_gains(hp: np.ndarray, n_pairs: float) -> tuple[np.ndarray, np.ndarray]:
    """``(grid, gain)``: ``log₂ s̃`` on a grid of 1/16 octave over the histograms' range, and per column
    and grid point how much the expected pair-difference histogram of a Gaussian column with that
    scale (``n_pairs`` pairs: public) lowers the noisy histogram's square sum (``Σh² − SSE``: under
    Gaussian noise of std σ, ``2σ²`` times the log-likelihood ratio against no rows at all). Every bin
    counts (no threshold): the noise is spread over all of them and the fit adds up the signal of all."""
    grid = np.arange(-RANGE, RANGE + _FIT_STEP / 2, _FIT_STEP)
    E = float(n_pairs) * pair_fractions(grid)  # (grid, bins)
    EE = np.einsum("gb,gb->g", E, E)[None, :]
    return grid, 2.0 * (np.asarray(hp, float) @ E.T) - EE


#: The joint fit of a column's two scale histograms tries the pairs' best scales: this many local
#: maxima (at least half an octave apart) of the pairs' gain, highest first.
_JOINT_CANDIDATES = 6


def joint_scale(hv: np.ndarray, hp: np.ndarray, noise_std: float, n_values, n_pairs: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(s̃, gain, m)``: per column the scale that explains the value and the pair-difference
    histograms together best (post-processing): the largest sum of the pairs' gain
    (:func:`pair_gains`) and the values' gain at their best centre ``m`` (:func:`_value_gain`) over
    the pairs' :data:`_JOINT_CANDIDATES` best local maxima. Both histograms carry the same noise, so the sum is the
    joint likelihood; read alone, the pairs' best of 1,281 scales is a false one about one column in
    four at ε = 1, d = 50 over 5 × 1,000 rows (benchmarks/RESULTS.md, issue 27). ``gain``: how much
    of the two histograms' square sums the joint fit explains. ``n_values``: one public count, or one
    per column."""
    from scipy.ndimage import maximum_filter1d

    d = hv.shape[0]
    nv = np.broadcast_to(np.asarray(n_values, dtype=float), (d,))
    grid, gain = pair_gains(hp, max(float(n_pairs), 1.0))
    peaks = gain >= maximum_filter1d(gain, size=int(round(1.0 / _FIT_STEP)) + 1, axis=1, mode="nearest")
    s, best, centre = np.ones(d), np.zeros(d), np.zeros(d)
    for j in range(d):
        loc = np.flatnonzero(peaks[j])
        cand = loc[np.argsort(gain[j, loc], kind="stable")[::-1][:_JOINT_CANDIDATES]]
        fits = [_value_gain(hv[j], 2.0 ** grid[c], float(nv[j])) for c in cand]
        total = [gain[j, c] + g for c, (g, _) in zip(cand, fits)]
        k = int(np.argmax(total))
        s[j], best[j], centre[j] = 2.0 ** grid[cand[k]], total[k], fits[k][1]
    return s, best, centre


def _quantile_interval(hv: np.ndarray, noise_std: float, n_values: float) -> Optional[tuple[float, float]]:
    """``(a, b)``: from the lower edge of the bin of the first quartile to the upper edge of the bin of
    the third, read at the finest resolution whose bins rise above the noise (:func:`_denoised`;
    merged bins count with all their width). ``None``: no resolution is usable."""
    h, f = _denoised(hv, noise_std, n_values)
    if h is None:
        return None
    edges = value_edges()
    lo, hi = _quantile_bin(h, 0.25), _quantile_bin(h, 0.75)
    nb = value_bins()
    a = edges[min(lo * f, nb - 1)]
    b = edges[min((hi + 1) * f, nb)]
    return float(a), float(max(b, a))


#: The coarse centre fit tries the middles (and quarter points) of this many value bins where the
#: smoothed histogram is largest, and a linear grid of ``s̃/4`` steps over ``±64 s̃`` around 0.
_FIT_TOP_BINS = 40


def _value_gain(hv: np.ndarray, scale: float, n_values: float, amplitude: bool = False) -> tuple[float, float]:
    """``(gain, m)``: the normal shape ``N(m, scale²)`` with ``n_values`` rows (public) nearest one
    column's noisy value histogram in least squares over all bins, and how much it lowers the square
    sum (``Σh² − SSE``); ``m`` tried at the bins where the smoothed counts are largest and on a grid of
    ``scale/2`` around 0. ``amplitude``: only shapes along which the histogram's amplitude is at least
    :data:`AMPLITUDE_MIN` of their own count (``−inf`` when none is)."""
    from scipy.special import ndtr

    h = np.asarray(hv, float)
    edges = value_edges()
    smooth = np.convolve(h, np.ones(5), mode="same")
    top = np.argsort(smooth)[::-1][:_FIT_TOP_BINS]
    lo_e, hi_e = edges[top], edges[top + 1]
    in_bins = (lo_e[:, None] + (hi_e - lo_e)[:, None] * (np.arange(4)[None, :] + 0.5) / 4.0).ravel()
    m = np.unique(np.concatenate([in_bins, scale * np.arange(-64, 65) / 2.0]))
    with np.errstate(over="ignore", invalid="ignore"):
        cdf = ndtr((edges[1:-1][None, :] - m[:, None]) / scale)
    z = np.zeros((m.size, 1))
    E = float(n_values) * np.diff(np.concatenate([z, cdf, z + 1.0], axis=1), axis=1)
    HE, EE = E @ h, np.einsum("mb,mb->m", E, E)
    gain = 2.0 * HE - EE
    if amplitude:
        gain = np.where(HE >= AMPLITUDE_MIN * EE, gain, -np.inf)
    k = int(np.argmax(gain))
    return float(gain[k]), float(m[k])


def coarse_interval(hv: np.ndarray, scales, noise_std: float, n_values: float
                    ) -> Optional[tuple[float, float, float]]:
    """``(a, b, s)``: an interval of values that holds one column's centre, read from its noisy value
    histogram (post-processing), and the scale it was read with. The normal shape ``N(m, s²)``
    (``n_values`` rows: public; ``s`` one of ``scales``) nearest the histogram (:func:`_value_gain`,
    with the amplitude check); the interval is the value bin holding that ``m`` (the bins'
    resolution) joined with ``m ± CENTRE_MARGIN·s``, never outside the bins the data fill. ``None``
    when no fit explains more than ``HIST_Z² σ²`` of the histogram."""
    edges = value_edges()
    nb = value_bins()
    best = None
    for scale in scales:
        g, mk = _value_gain(hv, scale, n_values, amplitude=True)
        if best is None or g > best[0]:
            best = (g, mk, float(scale))
    if best is None or not best[0] > (HIST_Z * float(noise_std)) ** 2:  # (−inf: no shape of the public size)
        return None
    _, mk, scale = best
    b = int(np.clip(np.searchsorted(edges, mk, side="right") - 1, 0, nb - 1))
    a_ = min(float(edges[b]), mk - CENTRE_MARGIN * scale)
    b_ = max(float(edges[b + 1]), mk + CENTRE_MARGIN * scale)
    return a_, b_, scale

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
    (post-processing): the scale by :func:`joint_scale`, the centre the middle of
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
    (:func:`_interval` at the joint fit's scale, :func:`joint_scale`), with the
    columns whose scale or interval could not be read. ``n_values``: one public count, or one per column."""
    d = hv.shape[0]
    nv = np.broadcast_to(np.asarray(n_values, dtype=float), (d,))
    s, gain, centre = joint_scale(hv, hp, noise_std, nv, n_pairs)
    intervals, defaulted = [], []
    for j in range(d):
        iv = _interval(hv[j], float(s[j]), float(centre[j]) if gain[j] > 0.0 else None, noise_std, float(nv[j]))
        # listed: a joint fit within the noise (HIST_Z² σ²), or a scale other than the joint fit's
        if iv is None or iv[2] != s[j] or not gain[j] > (HIST_Z * float(noise_std)) ** 2:
            defaulted.append(j)
        if iv is not None:
            s[j] = iv[2]
        intervals.append(None if iv is None else iv[:2])
    return intervals, s, defaulted


def _interval(hv: np.ndarray, s: float, mk: Optional[float], noise_std: float, n_values: float
              ) -> Optional[tuple[float, float, float]]:
    """``(a, b, s)``: the coarse interval of one column and its scale. When the joint fit explains
    any of the histograms (the likeliest scale beats no rows at all), ``mk`` is the values' best
    centre at the joint scale ``s`` (:func:`_value_gain`; it counted in the joint likelihood, so it
    is read even where the column's values are not normal). Otherwise (``mk`` None) the values' own
    fit at ``s`` (:func:`coarse_interval`, with its checks), and when that fails too the quartiles'
    bins (:func:`_quantile_interval`, read with merged bins) and a scale of their width / 1.35 (the
    interquartile range of a normal; merged bins make it larger, never smaller: the safe side).
    ``None``: nothing readable."""
    if mk is not None:
        edges = value_edges()
        b = int(np.clip(np.searchsorted(edges, mk, side="right") - 1, 0, value_bins() - 1))
        return min(float(edges[b]), mk - CENTRE_MARGIN * s), max(float(edges[b + 1]), mk + CENTRE_MARGIN * s), s
    iv = coarse_interval(hv, [s], noise_std, n_values)
    if iv is not None:
        return iv
    iv = _quantile_interval(hv, noise_std, n_values)
    if iv is None:
        return None
    return iv[0], iv[1], max((iv[1] - iv[0]) / 1.35, 2.0**-RANGE)


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
