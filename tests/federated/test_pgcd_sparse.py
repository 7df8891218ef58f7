"""PGCD's sparse products: ``S @ B`` through B's non-zeros and the objective in trace form."""

import numpy as np
import pytest

from bnsl_cli.solvers.pgcd import local_objective, pgcd, smooth_gradient, times_sparse


def _problem(d, density, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(3 * d, d))
    S = X.T @ X / (3 * d)
    B = rng.normal(size=(d, d)) * (rng.random((d, d)) < density)
    np.fill_diagonal(B, 0)
    beta = 0.05 * rng.normal(size=(d, d))
    W = 0.2 * rng.normal(size=(d, d))
    return S, B, beta, W


@pytest.mark.parametrize("d,density", [(8, 0.3), (80, 0.02), (80, 0.5), (150, 0.01), (150, 0.0)])
def test_sparse_product_and_trace_form_equal_the_dense_definitions(d, density):
    S, B, beta, W = _problem(d, density, d)
    np.testing.assert_allclose(times_sparse(S, B), S @ B, rtol=0, atol=1e-12)
    R = np.eye(d) - B
    D = B - W
    rho2, lam = 0.3, 0.05
    dense = 0.5 * np.sum(R * (S @ R)) + np.sum(beta * D) + 0.5 * rho2 * np.sum(D * D) + lam * np.abs(B).sum()
    assert local_objective(S, B, beta, W, rho2, lam) == pytest.approx(dense, rel=1e-12)
    np.testing.assert_allclose(smooth_gradient(S, B, beta, W, rho2), S @ B - S + beta + rho2 * (B - W), atol=1e-12)


def test_pgcd_from_a_sparse_start_keeps_its_gradient_exact():
    S, B, beta, W = _problem(120, 0.01, 3)
    res = pgcd(S, B, beta, W, 0.2, 0.01, max_steps=400, tol=0.0)
    assert res.steps == 400
    np.testing.assert_allclose(res.G, S @ res.B - S + beta + 0.2 * (res.B - W), atol=1e-10)
