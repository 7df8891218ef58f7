"""fed-suffstats' fits of the summed noisy histograms (post-processing): the scale from the pair
differences, a coarse interval for the centre from the values, the centre histograms' bins, and the
centre and scale refined from the centre histograms."""

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


def fit_pair_scale(hp: np.ndarray, noise_std: float, n_pairs: float) -> tuple[np.ndarray, np.ndarray]:
    """``(s̃, ok)``: per column the scale whose expected pair-difference histogram (Gaussian shape,
    ``n_pairs`` pairs: public) is nearest the noisy one in least squares, over a grid of 1/16 octave.
    Every bin counts (no threshold): the noise is spread over all of them and the fit adds up the
    signal of all. ``ok``: the fit explains more than ``HIST_Z² σ²`` of the histogram's square sum and
    the histogram's amplitude along the shape is at least ``AMPLITUDE_MIN`` of ``n_pairs`` (a column
    failing that has the best fit all the same, to be checked against the values)."""
    grid = np.arange(-RANGE, RANGE + _FIT_STEP / 2, _FIT_STEP)
    E = float(n_pairs) * pair_fractions(grid)  # (grid, bins)
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
    edges = value_edges()
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
    edges = value_edges()
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
