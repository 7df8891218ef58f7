"""bnsl_cli.simulate: graphs, weights, SEM data, heterogeneity, determinism."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from bnsl_cli.simulate import (
    check_params,
    heterogeneous_weights,
    node_names,
    random_dag,
    random_weights,
    simulate,
    simulate_sem,
    topological_order,
)


def is_dag(W) -> bool:
    return nx.is_directed_acyclic_graph(nx.DiGraph(np.asarray(W) != 0))


# ---------------------------------------------------------------------------------------------
# graphs


@pytest.mark.parametrize("d, E", [(20, 20), (50, 100), (10, 40)])
def test_er_mean_edge_count_matches_expected(d, E):
    seeds = 400
    counts = np.array([random_dag(d, E, "er", s).sum() for s in range(seeds)])
    p = E / (d * (d - 1) / 2)
    sd_of_mean = math.sqrt(d * (d - 1) / 2 * p * (1 - p) / seeds)
    assert abs(counts.mean() - E) < 5 * sd_of_mean
    # the count is binomial, so its spread must be right too (not a fixed count)
    assert counts.std() > 0.5 * math.sqrt(d * (d - 1) / 2 * p * (1 - p))


@pytest.mark.parametrize("kind", ["er", "sf"])
def test_graphs_are_acyclic_binary_without_self_loops(kind):
    for s in range(30):
        B = random_dag(15, 30, kind, s)
        assert set(np.unique(B)) <= {0, 1}
        assert np.all(np.diag(B) == 0)
        assert is_dag(B)


def test_topological_order_is_random_not_index_order():
    # with a random order, about half the edges point from a higher to a lower index
    B = sum(random_dag(20, 40, "er", s).astype(int) for s in range(100))
    upper, lower = np.triu(B, 1).sum(), np.tril(B, -1).sum()
    assert abs(upper - lower) < 0.15 * (upper + lower)


@pytest.mark.parametrize("d, E", [(30, 30), (30, 60), (50, 150), (10, 5)])
def test_scale_free_edge_count_is_exact(d, E):
    m = max(1, round(E / d))
    expected = sum(min(m, t) for t in range(1, d))
    for s in range(5):
        B = random_dag(d, E, "sf", s)
        assert B.sum() == expected
        assert is_dag(B)


def test_scale_free_has_hubs_compared_with_er():
    def max_degree(B):
        return int((B.sum(0) + B.sum(1)).max())

    sf = np.mean([max_degree(random_dag(200, 200, "sf", s)) for s in range(10)])
    er = np.mean([max_degree(random_dag(200, 200, "er", s)) for s in range(10)])
    assert sf > 1.5 * er


def test_topological_order_generations_and_cycle_detection():
    W = np.zeros((4, 4))
    W[0, 1] = W[1, 2] = W[0, 3] = 1.0
    levels = [sorted(level.tolist()) for level in topological_order(W)]
    assert levels == [[0], [1, 3], [2]]
    W[2, 0] = 1.0
    with pytest.raises(ValueError, match="cycle"):
        topological_order(W)
    with pytest.raises(ValueError, match="cycle"):
        simulate_sem(W, 10, rng=0)


# ---------------------------------------------------------------------------------------------
# weights


def test_weights_on_support_within_range_with_both_signs():
    B = random_dag(40, 200, "er", 0)
    W = random_weights(B, 0.5, 2.0, 1)
    assert np.array_equal(W != 0, B != 0)
    mags = np.abs(W[B != 0])
    assert mags.min() >= 0.5 and mags.max() <= 2.0
    frac_pos = np.mean(W[B != 0] > 0)
    assert 0.35 < frac_pos < 0.65
    # uniform magnitudes: mean close to the midpoint
    assert abs(mags.mean() - 1.25) < 0.15


def test_weight_range_is_respected():
    B = random_dag(20, 60, "er", 3)
    W = random_weights(B, 1.0, 1.5, 4)
    assert np.abs(W[B != 0]).min() >= 1.0 and np.abs(W[B != 0]).max() <= 1.5
    with pytest.raises(ValueError):
        random_weights(B, 2.0, 1.0, 0)


# ---------------------------------------------------------------------------------------------
# SEM data


@pytest.mark.parametrize("noise", ["gaussian", "exponential", "gumbel", "uniform"])
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_noise_has_zero_mean_and_variance_scale_squared(noise, scale):
    n, d = 200_000, 3
    X = simulate_sem(np.zeros((d, d)), n, noise, scale, rng=5)
    sd = scale
    assert np.all(np.abs(X.mean(0)) < 5 * sd / math.sqrt(n))
    np.testing.assert_allclose(X.var(0), scale**2, rtol=0.04)


def test_noise_types_have_their_own_shape():
    n = 100_000

    def skew(kind):
        z = simulate_sem(np.zeros((1, 1)), n, kind, 1.0, rng=2)[:, 0]
        return float(np.mean(z**3)), float(np.abs(z).max())

    s_gauss, _ = skew("gaussian")
    s_exp, _ = skew("exponential")
    s_gum, _ = skew("gumbel")
    _, max_unif = skew("uniform")
    assert abs(s_gauss) < 0.1
    assert abs(s_exp - 2.0) < 0.3  # skewness of Exp(1)
    assert abs(s_gum - 1.1395) < 0.2  # skewness of the Gumbel distribution
    assert max_unif <= math.sqrt(3.0) + 1e-12


def test_data_satisfy_the_sem_equation():
    B = random_dag(12, 20, "er", 7)
    W = random_weights(B, rng=8)
    n = 500
    X = simulate_sem(W, n, "gaussian", 1.0, rng=9)
    N = np.random.default_rng(9).standard_normal((n, 12))
    np.testing.assert_allclose(X - X @ W, N, atol=1e-10)


def test_chain_variances_and_regression_coefficient():
    W = np.zeros((3, 3))
    W[2, 0] = 1.5  # x3 -> x1 (order differs from the index order)
    W[0, 1] = -0.8  # x1 -> x2
    X = simulate_sem(W, 200_000, "gaussian", 1.0, rng=11)
    var = X.var(0)
    np.testing.assert_allclose(var[2], 1.0, rtol=0.03)
    np.testing.assert_allclose(var[0], 1.5**2 + 1.0, rtol=0.03)
    np.testing.assert_allclose(var[1], 0.64 * (1.5**2 + 1.0) + 1.0, rtol=0.03)
    beta = np.cov(X[:, 0], X[:, 1])[0, 1] / var[0]
    assert abs(beta - (-0.8)) < 0.02


# ---------------------------------------------------------------------------------------------
# heterogeneity


def test_heterogeneous_weights_share_support_and_signs():
    B = random_dag(30, 60, "er", 1)
    W = random_weights(B, 0.5, 2.0, 2)
    Ws = heterogeneous_weights(W, 5, rng=3, spread=0.5, low=0.5)
    assert len(Ws) == 5
    for Wp in Ws:
        assert np.array_equal(Wp != 0, W != 0)
        assert np.array_equal(np.sign(Wp), np.sign(W))
        mags = np.abs(Wp[W != 0])
        assert mags.min() >= 0.5
        assert np.all(mags <= np.abs(W[W != 0]) + 0.5 + 1e-12)
    # participants really differ from each other and from the shared weights
    assert not np.allclose(Ws[0], Ws[1])
    assert np.mean(np.abs(Ws[0] - W)[W != 0]) > 0.1


def test_heterogeneous_zero_spread_gives_shared_weights():
    W = random_weights(random_dag(10, 10, "er", 0), rng=1)
    for Wp in heterogeneous_weights(W, 3, rng=2, spread=0.0):
        np.testing.assert_array_equal(Wp, W)


# ---------------------------------------------------------------------------------------------
# simulate(): determinism and shapes


def test_simulate_is_deterministic_and_seed_sensitive():
    a = simulate(15, 15, participants=3, samples=100, seed=42, heterogeneous=True)
    b = simulate(15, 15, participants=3, samples=100, seed=42, heterogeneous=True)
    c = simulate(15, 15, participants=3, samples=100, seed=43, heterogeneous=True)
    np.testing.assert_array_equal(a.W, b.W)
    for x, y in zip(a.shards + a.weights, b.shards + b.weights):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.shards[0], c.shards[0])


def test_streams_are_independent_of_later_choices():
    a = simulate(15, 15, participants=2, samples=100, seed=1)
    b = simulate(15, 15, participants=5, samples=100, seed=1, heterogeneous=True)
    c = simulate(15, 15, participants=5, samples=100, seed=1)
    np.testing.assert_array_equal(a.W, b.W)  # graph and shared weights do not depend on P or heterogeneity
    np.testing.assert_array_equal(a.shards[0], c.shards[0])  # participant 1 does not depend on P
    np.testing.assert_array_equal(a.shards[1], c.shards[1])


def test_simulate_shapes_truths_and_names():
    r = simulate(12, 12, participants=4, samples=50, seed=0, heterogeneous=True, graph_type="sf")
    assert r.names == node_names(12) and r.names[0] == "x01"
    assert len(r.shards) == 4 and all(X.shape == (50, 12) for X in r.shards)
    assert len(r.weights) == 4
    assert is_dag(r.W) and r.n_edges == int(r.B.sum())
    hom = simulate(12, 12, participants=2, samples=50, seed=0)
    assert all(Wp is hom.W for Wp in hom.weights)


def test_unseeded_run_reports_a_seed_that_reproduces_it():
    r = simulate(8, 8, participants=2, samples=20)
    again = simulate(8, 8, participants=2, samples=20, seed=r.seed)
    np.testing.assert_array_equal(r.shards[1], again.shards[1])


def test_node_names_sort():
    assert node_names(9) == tuple(f"x{k}" for k in range(1, 10))
    names = node_names(120)
    assert names[0] == "x001" and list(names) == sorted(names)


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((1, 0), {}, "nodes"),
        ((5, 11), {}, "at most"),
        ((5, -1), {}, "edges"),
        ((5, 3), {"samples": 1}, "samples"),
        ((5, 3), {"participants": 0}, "participants"),
        ((5, 3), {"weight_range": (0.0, 1.0)}, "weight range"),
        ((5, 3), {"weight_range": (2.0, 1.0)}, "weight range"),
        ((5, 3), {"noise": "cauchy"}, "noise"),
        ((5, 3), {"noise_scale": 0.0}, "noise scale"),
        ((5, 3, "ba"), {}, "graph type"),
    ],
)
def test_check_params_rejects(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_params(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# unequal noise, column scales, weak weights


def test_equal_noise_range_draws_exactly_what_a_single_value_draws():
    a = simulate(8, 8, participants=2, samples=50, noise_scale=0.7, seed=5)
    b = simulate(8, 8, participants=2, samples=50, noise_scale=(0.7, 0.7), seed=5)
    for Xa, Xb in zip(a.shards, b.shards):
        assert np.array_equal(Xa, Xb)
    assert a.noise_sds is None and b.noise_sds is None
    assert b.params["noise_scale"] == 0.7


def test_noise_range_gives_per_variable_sds_and_keeps_graph_and_weights():
    base = simulate(10, 10, participants=1, samples=40_000, seed=11)
    sim = simulate(10, 10, participants=1, samples=40_000, noise_scale=(0.5, 2.0), seed=11)
    assert np.array_equal(base.W, sim.W)  # the graph and weights streams are untouched
    sds = sim.noise_sds
    assert sds.shape == (10,) and np.all((sds >= 0.5) & (sds <= 2.0)) and np.ptp(sds) > 0.3
    assert sim.params["noise_sds"] == [float(v) for v in sds]
    X = sim.shards[0]
    resid = X - X @ sim.W  # the noise columns
    assert np.allclose(resid.std(axis=0), sds, rtol=0.03)


def test_column_scale_multiplies_columns_and_rescales_the_truth():
    base = simulate(8, 10, participants=2, samples=30, seed=4)
    sim = simulate(8, 10, participants=2, samples=30, seed=4, column_scale=(1e-3, 1e6))
    s = sim.column_factors
    assert np.all((s >= 1e-3) & (s <= 1e6)) and s.max() / s.min() > 10
    for Xb, Xs in zip(base.shards, sim.shards):
        assert np.allclose(Xs, Xb * s)
    assert np.array_equal(sim.W, base.W)
    assert np.array_equal(sim.W_scaled != 0, sim.W != 0)
    # the SEM holds exactly in the scaled units with the scaled weights
    X = sim.shards[0]
    N_scaled = X - X @ sim.W_scaled
    N = base.shards[0] - base.shards[0] @ base.W
    assert np.allclose(N_scaled, N * s, rtol=1e-9, atol=1e-9 * s.max())


def test_column_scale_is_log_uniform():
    sim = simulate(400, 10, participants=1, samples=2, seed=0, column_scale=(1e-2, 1e2))
    logs = np.log10(sim.column_factors)
    assert abs(logs.mean()) < 0.2 and np.mean(np.abs(logs) < 1) > 0.45  # uniform on [-2, 2]


def test_weak_weight_range_is_honoured():
    sim = simulate(30, 60, participants=1, samples=5, weight_range=(0.2, 1.0), seed=2)
    w = np.abs(sim.W[sim.W != 0])
    assert w.min() >= 0.2 and w.max() <= 1.0 and w.min() < 0.3


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise_scale": (2.0, 1.0)}, "noise scale"),
        ({"noise_scale": (0.0, 1.0)}, "noise scale"),
        ({"column_scale": (0.0, 1.0)}, "column scale"),
        ({"column_scale": (5.0, 1.0)}, "column scale"),
    ],
)
def test_bad_ranges_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        simulate(5, 3, **kwargs)
