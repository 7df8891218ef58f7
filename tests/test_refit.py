"""Library tests of bnsl_cli.refit: per-participant least squares on a fixed structure."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bnsl_cli.errors import InputDataError
from bnsl_cli.io.graphs import Graph
from bnsl_cli.refit import (
    RankDeficientWarning,
    align_graph,
    normalised_mse,
    refit_participants,
    refit_weights,
)
from bnsl_cli.simulate import simulate, simulate_sem


def _chain():
    # x0 -> x1 -> x2, x0 -> x2 ; W[i, j] = weight of i -> j
    W = np.zeros((4, 4))
    W[0, 1], W[1, 2], W[0, 2], W[2, 3] = 1.5, -0.8, 0.7, 1.1
    return W


def test_recovers_true_weights_with_many_rows():
    W = _chain()
    X = simulate_sem(W, 20000, rng=0) + np.array([5.0, -3.0, 10.0, 1.0])  # offsets: centring must remove them
    W_hat, rv, bad = refit_weights(X, W != 0)
    assert bad == []
    assert np.all(W_hat[W == 0] == 0)
    assert np.max(np.abs(W_hat - W)) < 0.03
    assert np.allclose(rv, 1.0, atol=0.05)  # unit noise variance
    assert normalised_mse(W_hat, W) < 1e-3


def test_ignores_estimate_weights_and_only_uses_the_support():
    W = _chain()
    X = simulate_sem(W, 5000, rng=1)
    a, _, _ = refit_weights(X, W != 0)
    b, _, _ = refit_weights(X, np.where(W != 0, 123.0, 0.0))
    assert np.array_equal(a, b)


def test_matches_ordinary_least_squares_with_intercept():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(50, 3)) + 4.0
    S = np.zeros((3, 3), dtype=bool)
    S[0, 2] = S[1, 2] = True
    W_hat, _, _ = refit_weights(X, S)
    design = np.column_stack([np.ones(50), X[:, 0], X[:, 1]])
    coef = np.linalg.lstsq(design, X[:, 2], rcond=None)[0]
    assert np.allclose(W_hat[[0, 1], 2], coef[1:])


def test_ridge_shrinks_towards_zero_monotonically():
    W = _chain()
    X = simulate_sem(W, 200, rng=3)
    norms = [np.abs(refit_weights(X, W != 0, ridge=r)[0]).sum() for r in (0.0, 0.1, 1.0, 10.0)]
    assert all(a > b for a, b in zip(norms, norms[1:]))
    big = refit_weights(X, W != 0, ridge=1e6)[0]
    assert np.abs(big).max() < 1e-3


def test_ridge_formula_is_scale_free_in_rows():
    # the loss is divided by n, so duplicating every row leaves the ridge fit unchanged
    W = _chain()
    X = simulate_sem(W, 100, rng=4)
    a = refit_weights(X, W != 0, ridge=0.5)[0]
    b = refit_weights(np.vstack([X, X]), W != 0, ridge=0.5)[0]
    assert np.allclose(a, b)


def test_rank_deficient_node_warns_and_uses_min_norm():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3, 6))  # 3 rows, node 5 has 4 parents: singular after centring
    S = np.zeros((6, 6), dtype=bool)
    S[:4, 5] = True
    with pytest.warns(RankDeficientWarning, match="ridge"):
        fits = refit_participants([X], S, [f"v{k}" for k in range(6)])
    assert fits[0].rank_deficient == ("v5",)
    assert np.all(np.isfinite(fits[0].W))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refit_participants([X], S, [f"v{k}" for k in range(6)], ridge=0.1)  # no warning with ridge


def test_each_participant_uses_only_its_own_rows():
    sim = simulate(6, 6, participants=3, samples=4000, heterogeneous=True, spread=0.8, seed=7)
    fits = refit_participants(sim.shards, sim.W, sim.names, truths=sim.weights)
    for p, fit in enumerate(fits):
        alone = refit_weights(sim.shards[p], sim.W != 0)[0]
        assert np.array_equal(fit.W, alone)
        assert fit.mse < 0.01
        # its own truth fits better than any other participant's truth
        others = [normalised_mse(fit.W, sim.weights[q]) for q in range(3) if q != p]
        assert fit.mse < min(others)
        assert fit.participant == p + 1 and fit.rows == 4000 and fit.edges == sim.n_edges


def test_bad_inputs_raise_input_data_error():
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(InputDataError):
        refit_weights(X, np.zeros((4, 4), dtype=bool))
    with pytest.raises(InputDataError):
        refit_weights(X, np.eye(3, dtype=bool))  # self-loop
    with pytest.raises(InputDataError):
        refit_weights(X, np.zeros((3, 3), dtype=bool), ridge=-1)
    with pytest.raises(InputDataError):
        normalised_mse(np.zeros((2, 2)), np.zeros((3, 3)))
    assert normalised_mse(np.ones((2, 2)), np.zeros((2, 2))) is None


def test_align_graph_matches_nodes_by_name():
    g = Graph(np.array([[0, 2.0, 0], [0, 0, 0], [0, 0, 0]]), ("b", "a", "c"))  # b -> a
    W = align_graph(g, ("a", "b", "c"))
    assert W[1, 0] == 2.0 and np.count_nonzero(W) == 1
    with pytest.raises(InputDataError, match="not columns"):
        align_graph(g, ("a", "b", "z"))
    with pytest.raises(InputDataError, match="lacks"):
        align_graph(g, ("a", "b", "c", "d"))
    partial = Graph(np.array([[0, 1.0], [0, 0]]), ("a", "b"), all_nodes_listed=False)
    W = align_graph(partial, ("c", "a", "b"))
    assert W[1, 2] == 1.0 and np.count_nonzero(W) == 1
