"""The whitened-moment stages add isometric noise: the Gaussian mechanism on the isometric
vectorisation (diagonal, off-diagonal × √2) has the release's Frobenius sensitivity, so an
off-diagonal entry carries half the variance of a diagonal one at the same ρ (issue 27)."""

import numpy as np
import pytest

from bnsl_cli.federated.methods.suffstats.releases import whitened_moments_release
from bnsl_cli.privacy.mechanisms import isometric_gaussian_matrix, symmetric_gaussian_matrix


def _variances(draws: np.ndarray) -> tuple[float, float]:
    d = draws.shape[1]
    var = draws.var(axis=0)
    off = ~np.eye(d, dtype=bool)
    return float(np.mean(np.diag(var))), float(np.mean(var[off]))


def test_isometric_matrix_halves_the_off_diagonal_variance():
    rng = np.random.default_rng(7)
    draws = np.stack([isometric_gaussian_matrix(6, 2.0, rng) for _ in range(6000)])
    diag, off = _variances(draws)
    assert diag == pytest.approx(4.0, rel=0.05)
    assert off == pytest.approx(2.0, rel=0.05)
    assert np.allclose(draws, np.swapaxes(draws, 1, 2))


def test_isometric_matrix_draws_as_many_values_as_the_symmetric_one():
    # the same draws in the same order (the noise stream of a site moves on by d(d + 1)/2 either way)
    a = isometric_gaussian_matrix(5, 1.0, np.random.default_rng(3))
    b = symmetric_gaussian_matrix(5, 1.0, np.random.default_rng(3))
    off = ~np.eye(5, dtype=bool)
    assert np.array_equal(np.diag(a), np.diag(b))
    assert np.allclose(a[off], b[off] * np.sqrt(0.5))


def test_a_stage_release_has_isometric_noise_per_entry():
    # every draw releases the same rows' moments: the spread of each entry is the noise's
    X = np.random.default_rng(1).standard_normal((40, 3))
    centre, scale, L = np.zeros(3), np.ones(3), np.eye(3)
    rng = np.random.default_rng(2)
    draws, events = [], []
    for _ in range(4000):
        M, ev = whitened_moments_release(X, centre, scale, L, 0.5, rng)
        draws.append(M)
        events.append(ev)
    diag, off = _variances(np.stack(draws))
    std = events[0].noise_scale  # the event's std: multiplier × √2·C², the diagonal's
    assert diag == pytest.approx(std**2, rel=0.06)
    assert off == pytest.approx(std**2 / 2.0, rel=0.06)
