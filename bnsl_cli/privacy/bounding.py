"""Bounded per-row contributions: the clamps and overflow-safe clip factors every private release uses.

A private participant accepts any finite float64 row. Every release bounds a row's contribution by
clipping (a value to ``±B``, a product to ``±C``, a row vector to an ℓ₂ norm), and the stated
sensitivities assume that the clipped contribution is a finite number of at most that size. In
floating point that needs care: a row of ``1e160`` makes ``x_a·x_b`` (or its square) ``inf``, its norm
``inf``, its clip factor ``C/inf = 0``, and ``0·inf = NaN``; a ``1e39`` is ``inf`` in float32. One such
row would then turn the release into NaN on one data set and not on its neighbour — told apart with
certainty. So, before any arithmetic that can overflow:

* :func:`clamp_rows` clamps every value of a participant's rows to ``ĉ_j ± L_j`` with
  ``L_j = min(Z_MAX·√v̂_j, ABS_MAX)`` — ``ĉ`` and ``v̂`` the participant's released (or declared) centre and
  second moments, so the clamp is a fixed map of one row given released and public values, and every
  sensitivity stays what it is. ``Z_MAX = 2⁴⁰`` standard units is far outside any honest row (a value of
  a data set is at most ``√(n−1)`` of its standard deviations from its mean), so honest data pass
  unchanged, bit for bit; the bound only makes the later arithmetic finite: products of two clamped,
  standardised values are at most ``2⁸⁰``, their squares ``2¹⁶⁰``, and ``ABS_MAX = 2¹⁰⁰`` keeps every value
  well inside float32.
* :func:`clip_scaled` is ``clip(x/B, −1, 1)`` computed as ``clip(x, −B, B)/B`` (the same value, bit for bit,
  without the overflow of ``x/B``), used by the one-off releases, which run before ``ĉ`` and ``v̂`` exist.
* :func:`row_norms` and :func:`clip_factors` compute a row's ℓ₂ norm and its clip factor
  ``min(1, C/‖x‖)`` so that neither is ``inf``/``NaN`` for a finite row: a norm that overflows (or a
  non-zero row whose squares underflow to 0) is recomputed after scaling by the row's largest
  absolute value, and a factor is always in ``[0, 1]``; since the rows are finite, ``factor·row`` is never
  ``0·inf``.
* :func:`to_float32_range` clamps values to the float32 range before they are rounded to float32.
* :func:`triangular_solve_bound` bounds, from public values alone, every value (and every partial sum)
  a forward substitution ``L y = z`` can produce for any ``|z_i| ≤ ζ_i``: a site checks a broadcast
  basis with it before any row is whitened, so that no row can make the whitening overflow (the
  coordinator is not trusted: it could send ``L₁₁ = 4/float64-max``, making ``y₁ = inf`` exactly
  when ``|z₁| > 4``).

None of this releases anything, and none of it changes a value that was within its bound.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "Z_MAX",
    "ABS_MAX",
    "FLOAT32_MAX",
    "centred_limits",
    "clamp_rows",
    "clamp_abs",
    "clip_scaled",
    "row_norms",
    "clip_factors",
    "to_float32_range",
    "triangular_solve_bound",
    "STANDARDISED_MAX",
    "standardised_bound",
]

#: A centred value is clamped at this many released standard units (``√v̂_j``).
Z_MAX = 2.0**40
#: ... and at this absolute value (float32-safe with room for the products DP-PGCD forms).
ABS_MAX = 2.0**100
#: The largest finite float32, as a float64.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def centred_limits(v_hat: np.ndarray, z: float = Z_MAX) -> np.ndarray:
    """``L_j = min(z·√v̂_j, ABS_MAX)`` (``z = Z_MAX`` by default): the largest ``|x_j − ĉ_j|`` a row
    keeps (``v̂`` released)."""
    v = np.asarray(v_hat, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        L = np.minimum(float(z) * np.sqrt(v), ABS_MAX)
    # a non-finite or non-positive v̂ (not produced by the releases) gets the absolute bound
    return np.where(np.isfinite(L) & (L > 0), L, ABS_MAX)


def clamp_rows(X: np.ndarray, centre: np.ndarray, v_hat: np.ndarray, z: float = Z_MAX) -> np.ndarray:
    """``X`` (float64) with every value clamped to ``[ĉ_j − L_j, ĉ_j + L_j]`` (:func:`centred_limits`
    with ``z``).

    Values inside the interval are returned unchanged (bit for bit); ``X − ĉ`` of the result is finite
    and at most ``L_j`` (up to one rounding). NaN is refused (the reader never produces it)."""
    X = np.asarray(X, dtype=np.float64)
    c = np.asarray(centre, dtype=np.float64)
    L = centred_limits(v_hat, z)
    with np.errstate(over="ignore"):
        lo, hi = c - L, c + L
    lo = np.maximum(lo, -np.finfo(np.float64).max)
    hi = np.minimum(hi, np.finfo(np.float64).max)
    out = np.clip(X, lo[None, :], hi[None, :])
    if np.isnan(out).any():
        raise ValueError("a row holds NaN; every value must be a finite number")
    return out


def clamp_abs(X: np.ndarray, limit: float = ABS_MAX) -> np.ndarray:
    """``X`` (float64) clamped to ``±limit`` (values inside are unchanged)."""
    return np.clip(np.asarray(X, dtype=np.float64), -limit, limit)


def clip_scaled(X: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """``clip(X / bound, −1, 1)`` column-wise, computed as ``clip(X, −bound, bound) / bound``.

    The two are equal bit for bit (for ``|x| ≤ B`` the division is the same; beyond, both are ``±1``
    exactly, since rounding is monotone), but this one never overflows (``1e308 / 0.5``)."""
    b = np.asarray(bound, dtype=np.float64)[None, :]
    return np.clip(np.asarray(X, dtype=np.float64), -b, b) / b


def row_norms(Z: np.ndarray) -> np.ndarray:
    """The ℓ₂ norm of every row of ``Z`` (finite entries), never ``inf`` from an overflow of the squares
    nor 0 for a non-zero row whose squares underflow: such rows are recomputed as
    ``m·‖Z/m‖`` with ``m`` the row's largest absolute value. Other rows get ``√Σ z²`` exactly as a
    plain computation would (the same bits)."""
    Z = np.asarray(Z, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    m = np.max(np.abs(Z), axis=1) if Z.shape[1] else np.zeros(Z.shape[0])
    redo = ~np.isfinite(norms) | ((norms == 0) & (m > 0))
    if redo.any():
        Zr, mr = Z[redo], m[redo]
        with np.errstate(over="ignore", under="ignore"):
            scaled = Zr / mr[:, None]
            norms[redo] = mr * np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    return norms


def clip_factors(norms: np.ndarray, limit: float) -> np.ndarray:
    """``min(1, limit/‖x‖)`` for every row norm: in ``[0, 1]``, 1 for a zero row, 0 only for an infinite
    norm (which :func:`row_norms` of a finite row does not give unless the row is near the float64
    maximum, and then ``0·row`` is still 0, not NaN)."""
    n = np.asarray(norms, dtype=np.float64)
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        return np.minimum(1.0, float(limit) / np.maximum(n, 1e-300))


def to_float32_range(values: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Round ``values`` into the float32 array ``out`` after clamping them to ``±FLOAT32_MAX`` (so no
    finite value becomes ``inf``; values in range round exactly as a plain assignment would)."""
    return np.clip(values, -FLOAT32_MAX, FLOAT32_MAX, out=out, casting="same_kind")


def triangular_solve_bound(zeta: np.ndarray, L: np.ndarray) -> float:
    """An upper bound on ``max_i |y_i|`` over every solution of ``L y = z`` (``L`` lower triangular,
    positive diagonal) with ``|z_i| ≤ ζ_i``, valid for the floating-point forward substitution in any
    order of summation: ``u_i = (ζ_i + Σ_{j<i} |L_ij| u_j) / L_ii`` (the comparison matrix's solve;
    ``|y_i| ≤ u_i`` by induction), times 2 for the rounding of at most ``d`` terms per row (relative
    ``d²·2⁻⁵³`` compounded over the rows). Every partial sum is then at most ``L_ii·u_i`` in absolute
    value. Reads only ``ζ`` and ``L``; ``inf`` when the bound itself overflows."""
    zeta = np.asarray(zeta, dtype=np.float64)
    A = np.abs(np.asarray(L, dtype=np.float64))
    d = zeta.size
    u = np.empty(d)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i in range(d):
            u[i] = (zeta[i] + float(A[i, :i] @ u[:i])) / A[i, i]
        top = float(np.max(u)) * 2.0 if d else 0.0
    return top if top == top else float("inf")  # NaN (0·inf) counts as unbounded


#: A broadcast mean and scale are accepted for rows clamped by :func:`clamp_rows` only when
#: :func:`standardised_bound` is at most this: ``(x − μ)/σ`` and the products formed from it stay finite.
STANDARDISED_MAX = 2.0**400


def standardised_bound(centre: np.ndarray, v_hat: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> float:
    """The largest ``|x_j − μ_j| / σ_j`` over every row clamped by :func:`clamp_rows` to
    ``ĉ_j ± L_j`` (released ``ĉ``, ``v̂``), with a broadcast ``μ``, ``σ``: ``(|ĉ_j − μ_j| + L_j)/σ_j``
    with a margin for rounding. Reads only released and broadcast values; ``inf`` when it overflows."""
    c = np.asarray(centre, np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        top = (np.abs(c - np.asarray(mean, np.float64)) + centred_limits(v_hat) + 2.0**-51 * np.abs(c)) \
            / np.asarray(sd, np.float64) * (1.0 + 2.0**-40)
        b = float(np.max(top, initial=0.0))
    return b if b == b else float("inf")
