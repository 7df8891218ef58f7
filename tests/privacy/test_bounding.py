"""The helpers of ``bnsl_cli/privacy/bounding.py``: honest values pass bit for bit, extreme ones become
finite and bounded, norms and clip factors never overflow into ``inf``/``NaN``."""

import numpy as np

from bnsl_cli.privacy.bounding import (
    ABS_MAX,
    FLOAT32_MAX,
    Z_MAX,
    clamp_rows,
    clip_factors,
    clip_scaled,
    row_norms,
    to_float32_range,
)

F64 = float(np.finfo(np.float64).max)
EXTREMES = [F64, -F64, 1e160, -1e160, 1e39, -1e39, 5e-324, -5e-324, 0.0]


def _mixed(rng, n=2000, d=5):
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-8, 8, d)
    idx = rng.random((n, d)) < 0.05
    X[idx] = rng.choice(EXTREMES, int(idx.sum()))
    return X


def test_clip_scaled_equals_clip_of_the_quotient_bit_for_bit():
    rng = np.random.default_rng(0)
    X = _mixed(rng)
    B = 10.0 ** rng.uniform(-7, 9, X.shape[1])
    with np.errstate(over="ignore"):
        ref = np.clip(X / B[None, :], -1.0, 1.0)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # no exception the run would count
        got = clip_scaled(X, B)
    assert np.array_equal(ref, got)


def test_clamp_rows_keeps_honest_values_and_bounds_the_rest():
    rng = np.random.default_rng(1)
    X = _mixed(rng)
    centre = rng.normal(size=5)
    v = 10.0 ** rng.uniform(-10, 10, 5)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        Y = clamp_rows(X, centre, v)
    L = np.minimum(Z_MAX * np.sqrt(v), ABS_MAX)
    inside = np.abs(X - centre) <= L
    assert np.array_equal(Y[inside], X[inside])  # bit for bit
    assert np.all(np.isfinite(Y)) and np.all(np.abs(Y - centre) <= L * (1 + 1e-15))


def test_row_norms_and_clip_factors_are_finite_for_any_finite_row():
    rng = np.random.default_rng(2)
    Z = _mixed(rng, 500, 6)
    Z[0] = F64
    Z[1] = 1e-310  # squares underflow to 0
    Z[2] = 0.0
    with np.errstate(over="ignore"):
        naive = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    norms = row_norms(Z)
    ok = np.isfinite(naive) & ((naive > 0) | ~np.any(Z != 0, axis=1))
    assert np.array_equal(norms[ok], naive[ok])  # ordinary rows: the same bits
    assert np.all(np.isfinite(norms[1:])) and norms[1] > 0 and norms[2] == 0
    np.testing.assert_allclose(norms[1], 1e-310 * np.sqrt(6), rtol=1e-6)
    f = clip_factors(norms, 3.0)
    assert np.all((f >= 0) & (f <= 1))
    clipped = Z * f[:, None]
    assert not np.isnan(clipped).any()
    assert np.all(row_norms(clipped[1:]) <= 3.0 * (1 + 1e-12))


def test_float32_rounding_never_makes_inf():
    x = np.array([1e39, -1e300, F64, 3.0e38, -1.5, 0.0])
    r = np.empty(x.size, np.float32)
    to_float32_range(x, r)
    assert np.all(np.isfinite(r)) and r[0] == np.float32(FLOAT32_MAX) and r[4] == np.float32(-1.5)
