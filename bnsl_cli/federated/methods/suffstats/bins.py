"""fed-suffstats' histogram bins: the fixed, data-independent log-spaced bins of the scale histograms
(values on quarter octaves, pair differences on half octaves) and the linear bins of the centre
histograms, with the counts a site takes of its rows (arrays in, arrays out)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np


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

def value_edges() -> np.ndarray:
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
