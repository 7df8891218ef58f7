"""The noise-aware structure search (bnsl_cli.solvers.suffstats)."""

import numpy as np
import pytest

from bnsl_cli.simulate import random_dag, random_weights
from bnsl_cli.solvers.suffstats import (
    edge_threshold,
    learn_suffstats,
    noise_aware_search,
    ordered_parents,
    topdown_order,
)


def _population(d: int, seed: int, noise=None):
    rng = np.random.default_rng(seed)
    B = random_dag(d, 2 * d, "er", rng)
    W = random_weights(B, 0.5, 2.0, rng)
    D = np.ones(d) if noise is None else noise
    M = np.linalg.inv(np.eye(d) - W)
    return W, M.T @ np.diag(D**2) @ M  # Cov(x) for x = xW + e


def _sym_noise(d, std, rng):
    N = rng.standard_normal((d, d)) * std
    return np.triu(N) + np.triu(N, 1).T


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exact_moments_equal_noise_give_the_true_dag(seed):
    W, S = _population(15, seed)
    res = learn_suffstats(S, 10_000, 0.0)
    assert np.array_equal(res.E, W != 0)
    assert np.allclose(res.W, W, atol=1e-6)


def test_topdown_order_is_causal_under_equal_noise():
    W, S = _population(12, 4)
    order = topdown_order(S)
    pos = {v: k for k, v in enumerate(order)}
    for i, j in zip(*np.nonzero(W)):
        assert pos[i] < pos[j]
    E = ordered_parents(S, order, 10_000)
    assert np.array_equal(E, W != 0)


def test_pure_noise_gives_no_edges_when_the_noise_is_known():
    """Independent columns, moments with release noise of std τ: the noise-aware search admits
    (almost) nothing; the same search told the moments are exact (τ = 0) admits many edges."""
    d, n, tau = 20, 40_000, 0.01
    aware, blind = [], []
    for seed in range(3):
        G = np.eye(d) + _sym_noise(d, tau, np.random.default_rng(seed))
        aware.append(int(noise_aware_search(G, n, tau)[0].sum()))
        blind.append(int(noise_aware_search(G, n, 0.0)[0].sum()))
    assert sum(aware) <= 1
    assert min(blind) >= 5


def test_noise_metric_scales_with_the_columns():
    """Noise τ·u_a·u_b on columns in units u: every test statistic (of an addition and of keeping a
    parent) is the one of the unit-scaled matrix with noise τ."""
    from bnsl_cli.solvers.suffstats import family_statistics

    d, n, tau = 10, 20_000, 0.02
    W, S = _population(d, 5)
    G = S + _sym_noise(d, tau, np.random.default_rng(0))
    u = np.exp(np.random.default_rng(1).uniform(-3, 3, d))
    Gu = G * np.outer(u, u)
    H = np.diag(u**2)
    for j in range(d):
        for parents in ([], [k for k in range(d) if W[k, j] != 0], [k for k in range(d) if k != j][:4]):
            P = np.asarray(sorted(parents), dtype=int)
            a = family_statistics(G, j, P, n, tau**2)
            b = family_statistics(Gu, j, P, n, tau**2, H)
            assert np.allclose(a[2], b[2], rtol=1e-6, atol=1e-9)
            assert np.allclose(a[3], b[3], rtol=1e-6, atol=1e-9)


def test_search_terminates_and_every_kept_edge_passes_its_test():
    from bnsl_cli.solvers.suffstats import family_statistics

    d, n, tau = 10, 20_000, 0.02
    W, S = _population(d, 5)
    G = S + _sym_noise(d, tau, np.random.default_rng(0))
    E, moves = noise_aware_search(G, n, tau, "node")
    assert len(moves) < 10 * d + 10
    kap = edge_threshold(n, d)
    for j in range(d):
        P = np.flatnonzero(E[:, j])
        if P.size:
            assert np.all(family_statistics(G, j, P, n, tau**2)[3] > kap)


def test_edge_threshold_is_the_extended_bic():
    assert edge_threshold(1000, 10) == pytest.approx(np.log(1000) + 2 * np.log(10))


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        learn_suffstats(np.ones((3, 4)), 10)
    with pytest.raises(ValueError):
        learn_suffstats(np.full((3, 3), np.nan), 10)
    with pytest.raises(ValueError):
        learn_suffstats(np.eye(3), 10, score="other")
