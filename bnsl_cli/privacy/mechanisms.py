"""The noise mechanisms of the private learners (vectorised numpy).

* :func:`gumbel_max_select` — the exponential mechanism in Gumbel-max form:
  ``argmax_k (s_k + G_k)``, ``G_k ~ Gumbel(0, b)`` i.i.d., selects ``k`` with probability
  ``exp(s_k / b) / sum_j exp(s_j / b)``. With score sensitivity ``Delta_S`` it costs
  ``Delta_S**2 / (2 b**2)`` zCDP.
* :class:`ColumnwiseSelector` — the same exponential mechanism over a matrix of scores, sampled in
  two Gumbel-max stages (a column by its log-partition, then a row within it). The distribution is
  identical; with per-column bookkeeping a step costs O(d) instead of O(d²) when one column changes.
* :func:`gaussian_noise`, :func:`symmetric_gaussian_matrix` — the Gaussian mechanism; with L2
  sensitivity ``Delta`` and std ``sigma`` it costs ``Delta**2 / (2 sigma**2)`` zCDP.
* :func:`project_psd` — post-processing of a released matrix.
* :func:`make_rng` — the random generator (operating-system entropy unless a seed is given).
* :func:`sample_noise` — the one function that draws DP noise; every mechanism calls it.

Floating-point caveat: the Gaussian and exponential mechanisms are analysed over the reals. Here
the noise is a float64 draw from numpy's PCG64 generator (normal variates by the ziggurat method,
Gumbel by inversion), added to a float64 value. Floating-point samplers do not produce every real
number, and the rounding of ``value + noise`` can in principle reveal information about the value
(Mironov 2012's attack on the Laplace mechanism is the classic example); this implementation
does not use a discrete or snapping sampler, so its guarantees hold for the real-valued
mechanism, not bit for bit for the floating-point one. The sums that enter a mechanism are
accumulated in float64.

None of these functions records anything; the caller records a
:class:`bnsl_cli.privacy.ledger.PrivacyEvent` for every release.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np

from bnsl_cli.stats import project_psd  # noqa: F401 - post-processing of a released matrix, re-exported here

__all__ = [
    "make_rng",
    "sample_noise",
    "gumbel_max_select",
    "ColumnwiseSelector",
    "gaussian_noise",
    "symmetric_gaussian_matrix",
    "isometric_gaussian_matrix",
    "project_psd",
]


def make_rng(seed: Optional[int] = None) -> tuple[np.random.Generator, bool]:
    """``(generator, seeded)``: a PCG64 generator from ``seed``, or from OS entropy when ``seed`` is None.

    ``seeded`` tells the run report whether the noise is reproducible from a user-given seed.
    """
    if seed is None:
        return np.random.default_rng(), False
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.default_rng(int(seed)), True


def sample_noise(rng: np.random.Generator, distribution: str, size=None):
    """Standard noise variates — the only place bnsl draws differential-privacy noise.

    ``distribution`` is ``"normal"`` (N(0, 1), numpy's ziggurat sampler) or ``"gumbel"``
    (Gumbel(0, 1), by inversion ``−log(−log U)``); callers scale them. ``size=None`` gives one
    float. See the module docstring for the floating-point caveat."""
    if distribution == "normal":
        return rng.standard_normal(size)
    if distribution == "gumbel":
        return rng.gumbel(0.0, 1.0, size)
    raise ValueError(f"unknown noise distribution {distribution!r}")


def gumbel_max_select(scores: np.ndarray, scale: float, rng: np.random.Generator) -> int:
    """Flat index of ``argmax(scores + Gumbel(0, scale))`` — the exponential mechanism.

    Entry ``k`` is chosen with probability ``exp(scores[k] / scale) / sum_j exp(scores[j] / scale)``.
    Entries equal to ``-inf`` (a mask, e.g. the diagonal) are never selected. ``scale = 0`` gives the
    plain (non-private) argmax. Use ``np.unravel_index`` for a 2-D position. One Gumbel variate is drawn
    per entry, so the random stream does not depend on the scores.

    Raises ValueError if ``scale < 0``, a score is NaN or ``+inf``, or every entry is masked.
    """
    s = np.asarray(scores, dtype=float).ravel()
    if s.size == 0:
        raise ValueError("cannot select from an empty score array")
    if not scale >= 0:
        raise ValueError(f"the Gumbel scale must be >= 0, got {scale!r}")
    top = s.max()  # NaN propagates through max
    if not top < np.inf:
        raise ValueError("scores must be finite or -inf (masked)")
    if top == -np.inf:
        raise ValueError("every score is masked (-inf); nothing to select")
    if scale == 0:
        return int(np.argmax(s))
    noisy = s + float(scale) * sample_noise(rng, "gumbel", s.shape)
    return int(np.argmax(noisy))


class ColumnwiseSelector:
    """Exponential mechanism over the entries of a ``d × d`` score matrix, kept per column.

    ``select()`` returns ``(i, j)`` with probability ``exp(S_ij / b) / Σ_kl exp(S_kl / b)`` — the
    distribution of :func:`gumbel_max_select` on the flattened matrix — drawn in two Gumbel-max stages:
    column ``j`` with weight ``Z_j = Σ_i exp(S_ij / b)`` (Gumbel-max on ``b·log Z_j``), then row ``i`` with
    weight ``exp(S_ij / b) / Z_j``. Since ``P(i, j) = (Z_j / Z) · (exp(S_ij / b) / Z_j)`` this is exact.
    ``b = 0`` selects the column with the largest maximum, then its argmax (the plain argmax).
    Masked entries are ``-inf``; a column masked whole (e.g. a variable that prior knowledge lets
    have no parent) has weight ``-inf`` and is never chosen; some entry must be unmasked.

    ``set_scores`` installs a whole matrix (O(d²)); ``update_column`` replaces one column (O(d)).
    The score matrix is held by reference: change it only through these two methods.
    """

    def __init__(self, scale: float, rng: np.random.Generator):
        if not scale >= 0:
            raise ValueError(f"the Gumbel scale must be >= 0, got {scale!r}")
        self.scale = float(scale)
        self.rng = rng
        self.S = None
        self._col = None

    def _column_weight(self, s: np.ndarray):
        """``b·log Σ_i exp(s_i / b)`` down axis 0 (a column, or every column of a matrix); the column
        maximum for ``b = 0``. NaN and ``+inf`` propagate through the maximum and are refused there."""
        top = np.max(s, axis=0)
        if not np.all(top < np.inf):  # NaN fails too
            raise ValueError("scores must be finite or -inf (masked)")
        if self.scale == 0:
            return top
        masked = top == -np.inf
        if np.any(masked):  # a column masked whole: weight -inf (never chosen)
            safe = np.where(masked, 0.0, top)
            with np.errstate(invalid="ignore", divide="ignore"):
                w = safe + self.scale * np.log(np.sum(np.exp((s - safe) / self.scale), axis=0))
            return np.where(masked, -np.inf, w)
        return top + self.scale * np.log(np.sum(np.exp((s - top) / self.scale), axis=0))

    def set_scores(self, S: np.ndarray) -> None:
        col = self._column_weight(S)
        if not np.any(col > -np.inf):
            raise ValueError("every score is masked (-inf); nothing to select")
        self.S = S
        self._col = col

    def update_column(self, j: int, column: np.ndarray) -> None:
        self.S[:, j] = column
        self._col[j] = self._column_weight(column)

    def select(self) -> tuple[int, int]:
        j = gumbel_max_select(self._col, self.scale, self.rng)
        i = gumbel_max_select(self.S[:, j], self.scale, self.rng)
        return i, j


def gaussian_noise(
    shape: Optional[Union[int, tuple[int, ...]]],
    std: Union[float, np.ndarray],
    rng: np.random.Generator,
) -> Union[float, np.ndarray]:
    """Draws of ``N(0, std**2)``; ``std`` may be an array (broadcast against ``shape``).

    ``shape=None`` returns a Python float for scalar ``std`` (an array of ``std``'s shape otherwise).
    ``std = 0`` gives zeros.
    """
    sd = np.asarray(std, dtype=float)
    if np.isnan(sd).any() or (sd < 0).any() or np.isinf(sd).any():
        raise ValueError("the Gaussian noise std must be finite and >= 0")
    if shape is None:
        if sd.ndim == 0:
            return float(sample_noise(rng, "normal")) * float(sd)
        return sample_noise(rng, "normal", sd.shape) * sd
    size = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    return sample_noise(rng, "normal", size) * sd


def symmetric_gaussian_matrix(d: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric ``d x d`` noise: the upper triangle (with the diagonal) i.i.d. ``N(0, std**2)``, mirrored.

    ``d (d + 1) / 2`` draws, in row-major order of the upper triangle.
    """
    if int(d) != d or d < 0:
        raise ValueError(f"d must be a non-negative integer, got {d!r}")
    if not (std >= 0 and np.isfinite(std)):
        raise ValueError(f"the Gaussian noise std must be finite and >= 0, got {std!r}")
    d = int(d)
    rows, cols = np.triu_indices(d)
    draws = sample_noise(rng, "normal", rows.size) * float(std)
    out = np.empty((d, d))
    out[rows, cols] = draws
    out[cols, rows] = draws
    return out


def isometric_gaussian_matrix(d: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric ``d x d`` noise of the Gaussian mechanism on the isometric vectorisation of a symmetric
    matrix (the diagonal, and each off-diagonal entry × √2: the vector's L2 norm is the matrix's
    Frobenius norm, so a Frobenius sensitivity is its L2 sensitivity): ``N(0, std²)`` on the diagonal,
    ``N(0, std²/2)`` off it, mirrored. The same ρ as :func:`symmetric_gaussian_matrix` with the same
    ``std`` and sensitivity, half the variance off the diagonal. ``d (d + 1) / 2`` draws, in row-major
    order of the upper triangle."""
    out = symmetric_gaussian_matrix(d, std, rng)
    off = ~np.eye(int(d), dtype=bool)
    out[off] *= math.sqrt(0.5)
    return out
